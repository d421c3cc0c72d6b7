"""What a pull answers at the edges of a queue (RocketMQ's ``getMessage`` statuses as its
``PullMessageProcessor`` maps them), on a real ``BrokerServer`` and through the fake
cluster's hold service (no Ray):

- records removed under the consume queue (MESSAGE_WAS_REMOVING): answered at once
  with the offset past them, never parked;
- a queue with nothing in it (or none at all) at an offset other than 0:
  OFFSET_ILLEGAL, moved to 0; at 0 it waits for news;
- past the end (OFFSET_OVERFLOW_BADLY): moved to the group's committed offset when that
  is inside the queue, else to the min offset when it is 0, else to the max offset;
- on a slave, which may lag its master: nothing is corrected, the pull waits.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rayq.actors.protocol import (
    CommitOffsetsRequest,
    CreateTopicRequest,
    MessageQueue,
    PullRequest,
    PullStatus,
    nothing_new,
)
from rayq.actors.protocol.config import BrokerConfig, BrokerRole, ClientConfig
from rayq.actors.server.broker_server import BrokerServer
from rayq.consumer.pull import PullConsumer
from rayq.store import GetStatus, InnerMessage, StoreConfig
from rayq.store.batch import encode_batch
from rayq.testing import FakeCluster, FakeTransport

TOPIC = "t"
BODY = b"x" * 1000  # 64 KiB test segments: about 60 records each


def append(srv: BrokerServer, queue_id: int, count: int) -> None:
    msgs = [InnerMessage(topic=TOPIC, queue_id=queue_id, body=BODY) for _ in range(count)]
    srv.put(encode_batch(msgs, max_body_bytes=1 << 20, max_properties_bytes=4096))


def request(offset: int, queue_id: int = 0, suspend_ms: int = 15_000) -> PullRequest:
    return PullRequest(
        group="g", topic=TOPIC, queue_id=queue_id, queue_offset=offset, suspend_ms=suspend_ms
    )


@pytest.fixture
def cluster_options() -> dict[str, Any]:
    def setup(c: FakeCluster) -> None:
        c.server().create_topic(
            CreateTopicRequest(topic=TOPIC, read_queue_nums=2, write_queue_nums=2, perm=6)
        )

    return {"setup": setup}


def hold_pull(cluster: FakeCluster, req: PullRequest) -> tuple[bool, object]:
    """A waiting pull through the fake hold service: (answered at once, the answer)."""
    reply = FakeTransport(cluster).hold("broker-a").pull(req)
    answered = reply.done()
    reply.cancel()
    return answered, reply.result(0) if answered else None


# ------------------------------------------------------------------ MESSAGE_WAS_REMOVING
def remove_first_commitlog_segment(srv: BrokerServer) -> int:
    """Fill queue 0 over a few commit-log segments and delete the first one while its
    consume queue still points there (retention's commit-log step done, its consume-queue
    step not yet). Returns the first queue offset whose record is still there."""
    append(srv, 0, 200)
    store = srv.store
    store.commitlog.delete_first_segment()
    live = store.commitlog.min_offset
    assert live > 0
    first_live = next(
        o
        for o in range(200)
        if store.queues[(TOPIC, 0)].entry(o)[0] >= live  # type: ignore[index]
    )
    assert store.get_messages("g", TOPIC, 0, 0).status is GetStatus.MESSAGE_WAS_REMOVING
    return first_live


def test_a_pull_over_removed_records_is_answered_at_once_past_them(
    cluster: FakeCluster,
) -> None:
    first_live = remove_first_commitlog_segment(cluster.server())
    resp = cluster.server().pull(request(0))
    assert (resp.status, resp.count) == (PullStatus.NO_MATCHED_MSG, 0)
    assert 0 < resp.next_offset <= first_live
    assert not nothing_new([resp])  # neither the broker nor the hold service parks it
    answered, held = hold_pull(cluster, request(0))
    assert answered
    assert held == resp


def test_a_pull_consumer_moves_over_removed_records_to_the_live_ones(
    cluster: FakeCluster,
) -> None:
    first_live = remove_first_commitlog_segment(cluster.server())
    mq = MessageQueue(TOPIC, "broker-a", 0)
    consumer = PullConsumer(
        "cg",
        transport=FakeTransport(cluster),
        config=ClientConfig(auto_commit_interval_ms=1_000_000),
    )
    consumer.assign([mq])
    consumer.start()
    try:
        consumer.seek(mq, 0)
        got = []
        for _ in range(50):  # each poll moves past one window: no new message is needed
            got = consumer.poll(0.1)
            if got:
                break
        assert got
        assert got[0].queue_offset == first_live
    finally:
        consumer.shutdown()


# ------------------------------------------------------------------- an empty queue
@pytest.mark.parametrize("queue_id", [0, 1])
def test_an_empty_queue_at_an_offset_other_than_0_is_offset_illegal_moved_to_0(
    cluster: FakeCluster, queue_id: int
) -> None:
    """Queue 1 was never written (no consume queue: NO_MATCHED_LOGIC_QUEUE); queue 0's
    consume queue exists but is empty (NO_MESSAGE_IN_QUEUE)."""
    srv = cluster.server()
    if queue_id == 0:
        (Path(srv.store.root) / "consumequeue" / TOPIC / "0").mkdir(parents=True)
        srv.store._open_queue(TOPIC, 0)
        assert srv.store.get_messages("g", TOPIC, 0, 7).status is GetStatus.NO_MESSAGE_IN_QUEUE
    else:
        assert srv.store.get_messages("g", TOPIC, 1, 7).status is GetStatus.NO_MATCHED_LOGIC_QUEUE
    resp = srv.pull(request(7, queue_id))
    assert (resp.status, resp.next_offset) == (PullStatus.OFFSET_ILLEGAL, 0)
    answered, held = hold_pull(cluster, request(7, queue_id))
    assert answered
    assert held == resp


def test_an_empty_queue_at_offset_0_waits_for_news(cluster: FakeCluster) -> None:
    resp = cluster.server().pull(request(0, 1))
    assert (resp.status, resp.next_offset) == (PullStatus.NO_NEW_MSG, 0)
    answered, _ = hold_pull(cluster, request(0, 1))
    assert not answered  # parked


# ------------------------------------------------------------------ past the end
def test_past_the_end_of_a_whole_queue_moves_to_its_start(cluster: FakeCluster) -> None:
    append(cluster.server(), 0, 5)
    resp = cluster.server().pull(request(50))
    assert (resp.status, resp.next_offset) == (PullStatus.OFFSET_ILLEGAL, 0)
    assert (resp.min_offset, resp.max_offset) == (0, 5)


def test_past_the_end_of_a_whole_queue_moves_to_the_groups_committed_offset_inside_it(
    cluster: FakeCluster,
) -> None:
    """A consumer ahead of a log a crash made shorter (it read records that were lost)
    resumes at its group's committed offset, not at 0: starting over would deliver
    again everything the group had settled."""
    srv = cluster.server()
    append(srv, 0, 5)
    srv.commit_offsets(CommitOffsetsRequest(group="g", topic=TOPIC, offsets={0: 3}))
    resp = srv.pull(request(7))
    assert (resp.status, resp.next_offset) == (PullStatus.OFFSET_ILLEGAL, 3)
    srv.commit_offsets(CommitOffsetsRequest(group="g", topic=TOPIC, offsets={0: 9}))
    resp = srv.pull(request(12))  # committed past the end too: the queue's start
    assert (resp.status, resp.next_offset) == (PullStatus.OFFSET_ILLEGAL, 0)


def test_past_the_end_of_a_trimmed_queue_moves_to_its_end(cluster: FakeCluster) -> None:
    srv = cluster.server()
    remove_first_commitlog_segment(srv)
    srv.store.queues[(TOPIC, 0)].correct_min_offset(srv.store.commitlog.min_offset)
    lo, hi = srv.store.min_offset(TOPIC, 0), srv.store.max_offset(TOPIC, 0)
    assert 0 < lo < hi
    resp = srv.pull(request(hi + 10))
    assert (resp.status, resp.next_offset) == (PullStatus.OFFSET_ILLEGAL, hi)


# ------------------------------------------------------------------------- a slave
def test_a_slave_moves_nothing_backwards(tmp_path: Path) -> None:
    """A slave may lag its master: a pull past its end, and one at an offset of a queue
    it has nothing of yet, wait there (no correction: moving a consumer that read up to
    50 on the master to the slave's end, 5, would redeliver 5..50 later)."""
    store = StoreConfig.for_tests()
    master = BrokerServer(BrokerConfig(store=store), str(tmp_path / "m"))
    slave = BrokerServer(
        BrokerConfig(store=store, broker_id=1, broker_role=BrokerRole.SLAVE), str(tmp_path / "s")
    )
    try:
        master.create_topic(
            CreateTopicRequest(topic=TOPIC, read_queue_nums=2, write_queue_nums=2, perm=6)
        )
        append(master, 0, 5)
        assert slave.slave is not None and master.master is not None
        while (chunk := master.master.fetch(slave.slave.request(), 0)) is not None:
            slave.slave.apply(chunk)
        sync = slave.metadata_request()
        slave.apply_metadata(sync, master.ha_metadata(sync))
        past = slave.pull(request(50))
        assert (past.status, past.next_offset) == (PullStatus.NO_NEW_MSG, 50)
        empty = slave.pull(request(7, queue_id=1))
        assert (empty.status, empty.next_offset) == (PullStatus.NO_NEW_MSG, 7)
        assert master.pull(request(50)).next_offset == 0  # the master: from the start
    finally:
        master.close()
        slave.close()
