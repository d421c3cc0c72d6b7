"""Clients (producer, pull consumer, admin) against ``rayq.testing``'s in-process fake.

Real ``BrokerServer``s over real stores, a fake coordinator, no Ray.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import rayq
from rayq.actors.protocol import (
    ClientRequest,
    CommitOffsetsRequest,
    ConsumeFromWhere,
    CreateTopicRequest,
    LostBrokersRequest,
    MessageQueue,
    PullItem,
    PullManyRequest,
    PullRequest,
    PullResponse,
    PullStatus,
    TopicRequest,
)
from rayq.actors.protocol.config import ClientConfig
from rayq.admin.admin import Admin
from rayq.consumer.pull import PullConsumer
from rayq.store.codec import decode_records
from rayq.store.errors import (
    BrokerBusyError,
    BrokerUnavailableError,
    InvalidRequestError,
    PermissionDeniedError,
)
from rayq.store.message import MessageExt
from rayq.testing import FakeCluster, FakeReply, FakeTransport, poll_until

TOPIC = "orders"
FAST = ClientConfig(rebalance_interval_ms=1, auto_commit_interval_ms=1_000_000)


@pytest.fixture
def two(tmp_path: Path) -> Iterator[FakeCluster]:
    with FakeCluster(tmp_path, brokers=("broker-a", "broker-b")) as c:
        yield c


def create(cluster: FakeCluster, topic: str = TOPIC, queues: int = 4) -> None:
    Admin(transport=FakeTransport(cluster)).create_topic(topic, queues=queues)


def producer(cluster: FakeCluster, **kwargs: Any) -> rayq.Producer:
    return rayq.Producer("pg", transport=FakeTransport(cluster), **kwargs)


def consumer(
    cluster: FakeCluster,
    consume_from: ConsumeFromWhere = ConsumeFromWhere.FIRST_OFFSET,
    **kwargs: Any,
) -> PullConsumer:
    kwargs.setdefault("config", FAST)
    return PullConsumer("cg", consume_from=consume_from, transport=FakeTransport(cluster), **kwargs)


def stored(cluster: FakeCluster, topic: str = TOPIC) -> list[MessageExt]:
    """Every message of ``topic`` on every broker, read from the stores."""
    out: list[MessageExt] = []
    for name, srv in cluster.servers.items():
        if topic not in srv.tables.topics:
            continue
        for qid in range(srv.tables.topics.get(topic).read_queue_nums):  # type: ignore[union-attr]
            got = srv.store.get_messages("check", topic, qid, 0, 10_000)
            if got.count:
                out.extend(decode_records(got.buffer, broker_name=name))
    return out


def bodies(msgs: list[MessageExt]) -> list[bytes]:
    return [m.body for m in msgs]


# ------------------------------------------------------------------ the fake itself
def test_fake_reply_answers_now_and_calls_back_at_once() -> None:
    seen: list[Any] = []
    reply = FakeReply.of(7)
    reply.add_done_callback(lambda r: seen.append(r.result()))
    assert (reply.done(), reply.result(0), seen) == (True, 7, [7])
    failed = FakeReply.failed(BrokerBusyError("busy"))
    with pytest.raises(BrokerBusyError):
        failed.result()
    pending: FakeReply[int] = FakeReply()
    with pytest.raises(BrokerUnavailableError):
        pending.result(0.01)  # a silent actor: as RayReply after a timeout


def test_held_pull_answers_no_new_msg_at_its_suspend_time(cluster: FakeCluster) -> None:
    create(cluster, queues=1)
    req = PullRequest(group="cg", topic=TOPIC, queue_id=0, queue_offset=0, suspend_ms=100)
    started = time.monotonic()
    reply = FakeTransport(cluster).hold("broker-a").pull(req)
    assert not reply.done()
    assert reply.result(5).status is PullStatus.NO_NEW_MSG
    assert time.monotonic() - started >= 0.09


def test_held_pull_many_answers_when_any_of_its_queues_grows(cluster: FakeCluster) -> None:
    create(cluster, queues=2)
    req = PullManyRequest(
        group="cg", items=[PullItem(TOPIC, 0, 0), PullItem(TOPIC, 1, 0)], suspend_ms=10_000
    )
    transport = FakeTransport(cluster)
    reply = transport.hold("broker-a").pull_many(req)
    assert transport.wait([reply], 0.05) == []
    send_all(cluster, b"wake")
    assert transport.wait([reply], 5) == [reply]
    statuses = sorted(r.status.value for r in reply.result(0).results)
    assert statuses == ["FOUND", "NO_NEW_MSG"]


def test_held_pull_can_be_awaited(cluster: FakeCluster) -> None:
    create(cluster, queues=1)
    req = PullRequest(group="cg", topic=TOPIC, queue_id=0, queue_offset=0, suspend_ms=10_000)
    reply = FakeTransport(cluster).hold("broker-a").pull(req)

    async def main() -> PullResponse:
        threading.Timer(0.05, send_all, args=(cluster, b"x")).start()
        return await reply

    resp = asyncio.run(main())
    assert (resp.status, resp.count) == (PullStatus.FOUND, 1)


def test_cancelled_held_pull_is_no_longer_held(cluster: FakeCluster) -> None:
    create(cluster, queues=1)
    req = PullRequest(group="cg", topic=TOPIC, queue_id=0, queue_offset=0, suspend_ms=10_000)
    reply = FakeTransport(cluster).hold("broker-a").pull(req)
    reply.cancel()
    assert reply.done()
    send_all(cluster, b"x")  # wakes nothing, raises nothing
    with pytest.raises(BrokerUnavailableError):
        reply.result(0)


def test_unknown_broker_is_unavailable(cluster: FakeCluster) -> None:
    with pytest.raises(BrokerUnavailableError):
        FakeTransport(cluster).broker("nobody")


# ------------------------------------------------------------------------- producer
def test_send_send_batch_and_send_async_land_in_the_store(cluster: FakeCluster) -> None:
    with producer(cluster) as p:
        one = p.send(rayq.Message(TOPIC, b"one"))
        batch = p.send_batch([rayq.Message(TOPIC, b"b%d" % i) for i in range(3)])
        late = p.send_async(rayq.Message(TOPIC, b"async")).result(5)
    assert {r.queue.broker_name for r in [one, *batch, late]} == {"broker-a"}
    assert len({r.queue for r in batch}) == 1  # a batch goes to one queue
    assert sorted(bodies(stored(cluster))) == sorted([b"one", b"b0", b"b1", b"b2", b"async"])
    by_id = {m.msg_id: m for m in stored(cluster)}
    assert by_id[one.msg_id].queue_offset == one.queue_offset


def test_busy_broker_send_is_retried_on_the_other_broker(two: FakeCluster) -> None:
    create(two)
    two.fail_next("broker-a", "put", BrokerBusyError)
    two.fail_next("broker-b", "put", BrokerBusyError)
    with producer(two, retries=2) as p:
        result = p.send(rayq.Message(TOPIC, b"x"))
    first, second, third = two.calls_of("put")
    assert first != second  # the retry avoided the broker that was busy
    assert result.queue.broker_name == third
    assert bodies(stored(two)) == [b"x"]


def test_busy_broker_send_async_is_retried(cluster: FakeCluster) -> None:
    create(cluster)
    cluster.fail_next("broker-a", "put", BrokerBusyError, times=2)
    with producer(cluster, retries=2) as p:
        result = p.send_async(rayq.Message(TOPIC, b"x")).result(10)
    assert cluster.calls_of("put") == ["broker-a"] * 3
    assert bodies(stored(cluster)) == [b"x"]
    assert result.queue_offset == 0


def test_retries_run_out_with_the_last_error(cluster: FakeCluster) -> None:
    create(cluster)
    cluster.fail_next("broker-a", "put", BrokerBusyError, times=3)
    with producer(cluster, retries=2) as p, pytest.raises(BrokerBusyError):
        p.send(rayq.Message(TOPIC, b"x"))
    assert len(cluster.calls_of("put")) == 3
    assert stored(cluster) == []


def test_non_retriable_error_is_not_retried(two: FakeCluster) -> None:
    create(two)
    two.fail_next("broker-a", "put", PermissionDeniedError)
    two.fail_next("broker-b", "put", PermissionDeniedError)
    with producer(two, retries=2) as p, pytest.raises(PermissionDeniedError):
        p.send(rayq.Message(TOPIC, b"x"))
    assert len(two.calls_of("put")) == 1
    assert stored(two) == []


def test_sends_avoid_a_stopped_broker(two: FakeCluster) -> None:
    create(two)
    with producer(two) as p:
        before = {p.send(rayq.Message(TOPIC, b"%d" % i)).queue.broker_name for i in range(8)}
        assert before == {"broker-a", "broker-b"}
        two.stop("broker-a")
        n = len(two.calls)
        after = [p.send(rayq.Message(TOPIC, b"after%d" % i)) for i in range(8)]
    assert {r.queue.broker_name for r in after} == {"broker-b"}
    assert [b for b, m in two.calls[n:] if m == "put"].count("broker-a") <= 1
    on_a = two.servers["broker-a"].store
    assert sum(on_a.max_offset(TOPIC, q) for q in range(4)) == 4  # only those sent before


def test_send_orderly_to_a_stopped_broker_raises_without_moving(two: FakeCluster) -> None:
    create(two)
    with producer(two) as p:
        key = next(
            k
            for k in (f"k{i}" for i in range(100))
            if p.send_orderly(rayq.Message(TOPIC, b"warm"), k).queue.broker_name == "broker-a"
        )
        two.stop("broker-a", keep_route=True)  # before the coordinator notices
        n = len(two.calls_of("put"))
        with pytest.raises(BrokerUnavailableError):
            p.send_orderly(rayq.Message(TOPIC, b"ordered"), key)
    # Retried on its own queue (retries + 1 attempts, default 2 + 1), never moved.
    assert two.calls_of("put")[n:] == ["broker-a"] * 3
    assert b"ordered" not in bodies(stored(two))


def test_started_broker_takes_sends_again(two: FakeCluster) -> None:
    create(two)
    two.stop("broker-b")
    lost = FakeTransport(two).coordinator().lost_brokers(LostBrokersRequest(topic=TOPIC))
    assert lost.result().names == ["broker-b"]
    two.start("broker-b")
    brokers = FakeTransport(two).coordinator().brokers(ClientRequest()).result().names
    assert brokers == ["broker-a", "broker-b"]
    with producer(two) as p:
        sent = {p.send(rayq.Message(TOPIC, b"x")).queue.broker_name for _ in range(8)}
    assert sent == {"broker-a", "broker-b"}


# ---------------------------------------------------------------------- pull consumer
def send_all(cluster: FakeCluster, *payloads: bytes) -> list[rayq.SendResult]:
    with producer(cluster) as p:
        return [p.send(rayq.Message(TOPIC, b)) for b in payloads]


def test_first_offset_starts_at_the_oldest_message(cluster: FakeCluster) -> None:
    create(cluster, queues=1)
    send_all(cluster, b"a", b"b", b"c")
    c = consumer(cluster, ConsumeFromWhere.FIRST_OFFSET)
    c.subscribe(TOPIC)
    c.start()
    assert bodies(poll_until(c, 3)) == [b"a", b"b", b"c"]
    c.shutdown()


def test_last_offset_starts_after_what_is_stored(cluster: FakeCluster) -> None:
    create(cluster, queues=1)
    send_all(cluster, b"old1", b"old2")
    c = consumer(cluster, ConsumeFromWhere.LAST_OFFSET)
    c.subscribe(TOPIC)
    c.start()
    assert c.position(MessageQueue(TOPIC, "broker-a", 0)) == 2
    send_all(cluster, b"new")
    assert bodies(poll_until(c, 1)) == [b"new"]
    c.shutdown()


def test_timestamp_starts_at_the_first_message_stored_after_it(cluster: FakeCluster) -> None:
    create(cluster, queues=1)
    send_all(cluster, b"before1", b"before2")
    time.sleep(0.02)
    at = int(time.time() * 1000)
    time.sleep(0.02)
    send_all(cluster, b"after1", b"after2")
    c = consumer(cluster, ConsumeFromWhere.TIMESTAMP, consume_timestamp_ms=at)
    c.subscribe(TOPIC)
    c.start()
    assert bodies(poll_until(c, 2)) == [b"after1", b"after2"]
    c.shutdown()


def test_committed_offset_wins_over_consume_from(cluster: FakeCluster) -> None:
    create(cluster, queues=1)
    send_all(cluster, b"a", b"b", b"c", b"d")
    FakeTransport(cluster).broker("broker-a").commit_offsets(
        CommitOffsetsRequest(group="cg", topic=TOPIC, offsets={0: 2})
    ).result()
    for where in ConsumeFromWhere:
        c = consumer(cluster, where, consume_timestamp_ms=0, auto_commit=False)
        c.subscribe(TOPIC)
        c.start()
        assert bodies(poll_until(c, 2)) == [b"c", b"d"], where
        c.shutdown()


def test_poll_returns_queue_order_and_commit_writes_offsets(cluster: FakeCluster) -> None:
    create(cluster, queues=2)
    payloads = [b"m%d" % i for i in range(10)]
    send_all(cluster, *payloads)
    c = consumer(cluster)
    c.subscribe(TOPIC)
    c.start()
    got = poll_until(c, 10)
    assert sorted(bodies(got)) == sorted(payloads)
    for qid in (0, 1):
        offsets = [m.queue_offset for m in got if m.queue_id == qid]
        assert offsets == sorted(offsets) == list(range(len(offsets)))
    table = cluster.server().tables.consumer_offsets
    assert table.query_all("cg", TOPIC) == {}
    c.commit()
    ends = {q: cluster.server().store.max_offset(TOPIC, q) for q in (0, 1)}
    assert table.query_all("cg", TOPIC) == ends
    assert sum(ends.values()) == 10
    c.shutdown()


def test_pull_consumers_of_a_group_split_queues_and_hand_off_on_shutdown(
    cluster: FakeCluster,
) -> None:
    create(cluster, queues=4)
    first = [b"first%d" % i for i in range(8)]
    send_all(cluster, *first)
    c1, c2 = consumer(cluster), consumer(cluster)
    for c in (c1, c2):
        c.subscribe(TOPIC)
        c.start()
    time.sleep(0.01)  # past rebalance_interval_ms: c1's next poll takes its share
    got1, got2 = [], []
    deadline = time.monotonic() + 10
    while len(got1) + len(got2) < 8 and time.monotonic() < deadline:
        got1 += c1.poll(0.05)
        got2 += c2.poll(0.05)
    assert len(c1.assignment()) == len(c2.assignment()) == 2
    assert not set(c1.assignment()) & set(c2.assignment())
    assert sorted(bodies(got1 + got2)) == sorted(first)  # each message once
    c1_queues = set(c1.assignment())
    c1.shutdown()  # commits its positions and leaves the group
    table = cluster.server().tables.consumer_offsets
    assert {MessageQueue(TOPIC, "broker-a", q) for q in table.query_all("cg", TOPIC)} >= c1_queues
    second = [b"second%d" % i for i in range(8)]
    send_all(cluster, *second)
    time.sleep(0.01)
    got = poll_until(c2, 8)
    assert sorted(bodies(got)) == sorted(second)  # c1's queues from its commit: no loss, no dup
    assert set(c2.assignment()) == {MessageQueue(TOPIC, "broker-a", q) for q in range(4)}
    c2.shutdown()


def test_long_poll_returns_a_message_put_during_the_wait(cluster: FakeCluster) -> None:
    create(cluster, queues=1)
    c = consumer(cluster)
    c.subscribe(TOPIC)
    c.start()
    assert c.poll(0) == []
    sender = threading.Timer(0.3, send_all, args=(cluster, b"late"))
    started = time.monotonic()
    sender.start()
    got = c.poll(10)
    took = time.monotonic() - started
    sender.join()
    assert bodies(got) == [b"late"]
    assert 0.25 <= took < 5
    # parked, not pulled again and again: the one that waited, and the next one, sent
    # as poll returned (it waits for the next message while the caller works)
    assert len(cluster.calls_of("hold.pull")) == 2
    c.shutdown()


def test_pull_of_a_stopped_broker_fails_and_resumes_after_start(cluster: FakeCluster) -> None:
    create(cluster, queues=1)
    send_all(cluster, b"a")
    c = consumer(cluster)
    c.subscribe(TOPIC)
    c.start()
    cluster.stop("broker-a", keep_route=True)
    assert c.poll(0.05) == []
    cluster.start("broker-a")
    mq = MessageQueue(TOPIC, "broker-a", 0)
    c.seek(mq, 0)  # clears the retry delay
    assert bodies(poll_until(c, 1)) == [b"a"]
    c.shutdown()


# ------------------------------------------------------------------------ bad input
BAD_REQUESTS = [
    ("commit_offsets", CommitOffsetsRequest(group="cg", topic=TOPIC, offsets={0: 1.5})),  # type: ignore[dict-item]
    ("commit_offsets", CommitOffsetsRequest(group="cg", topic=TOPIC, offsets={0: -1})),
    ("commit_offsets", CommitOffsetsRequest(group="cg", topic=TOPIC, offsets={-1: 1})),
    ("commit_offsets", CommitOffsetsRequest(group=5, topic=TOPIC, offsets={0: 1})),  # type: ignore[arg-type]
    ("commit_offsets", {"group": "cg", "topic": TOPIC, "offsets": {0: 1}, "bogus": 1}),
    (
        "commit_offsets",
        CommitOffsetsRequest(group="cg", topic=TOPIC, offsets={0: 1}, generation=-2),
    ),
    ("pull", PullRequest(group="cg", topic=TOPIC, queue_id=0, queue_offset=-1)),
    ("pull", PullRequest(group="cg", topic=TOPIC, queue_id=0, queue_offset=0, max_nums=0)),
    (
        "create_topic",
        CreateTopicRequest(topic="other", read_queue_nums=0, write_queue_nums=1, perm=6),
    ),
    (
        "create_topic",
        CreateTopicRequest(topic="other", read_queue_nums=1, write_queue_nums=1, perm=99),
    ),
    ("delete_topic", TopicRequest(topic=TOPIC, client_id="x" * 5000)),
    ("delete_topic", {"topic": TOPIC}),
    ("put", {"topic": TOPIC, "queue_id": 0}),
]


@pytest.mark.parametrize(("method", "request_"), BAD_REQUESTS)
def test_malformed_request_is_refused_and_nothing_is_written(
    cluster: FakeCluster, method: str, request_: Any
) -> None:
    create(cluster, queues=2)
    send_all(cluster, b"a", b"b", b"c")
    broker = FakeTransport(cluster).broker("broker-a")
    broker.commit_offsets(CommitOffsetsRequest(group="cg", topic=TOPIC, offsets={0: 1})).result()
    srv = cluster.server()
    before = (
        {q: srv.store.max_offset(TOPIC, q) for q in (0, 1)},
        srv.tables.consumer_offsets.query_all("cg", TOPIC),
        srv.tables.topics.topics(),
        srv.tables.topics.data_version,
    )
    with pytest.raises(InvalidRequestError):
        getattr(broker, method)(request_).result()
    after = (
        {q: srv.store.max_offset(TOPIC, q) for q in (0, 1)},
        srv.tables.consumer_offsets.query_all("cg", TOPIC),
        srv.tables.topics.topics(),
        srv.tables.topics.data_version,
    )
    assert after == before


def test_malformed_hold_pull_is_refused(cluster: FakeCluster) -> None:
    create(cluster, queues=1)
    req = PullRequest(group="cg", topic=TOPIC, queue_id=0, queue_offset=-1)
    with pytest.raises(InvalidRequestError):
        FakeTransport(cluster).hold("broker-a").pull(req).result()
