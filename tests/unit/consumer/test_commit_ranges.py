"""Commits that never stall behind a slow message (issue 14), against the in-process
fake cluster, no Ray: a push consumer commits, with its offset, the ranges past it
that are done already; the next owner of the queue consumes only the rest. Commits
ride on the pulls, so a separate commit call is needed only when no pull goes out.

As in test_consume_service.py, the tests ``open`` the consume service and ``assign``
its queues by hand, as the coordinator would; "killing" a consumer is leaving its
event loop without ``shutdown`` (nothing more is committed), as a dead actor does."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import rayq
from rayq import testing as kit
from rayq.actors.protocol import (
    CommitOffsetsRequest,
    MessageQueue,
    QueryOffsetsRequest,
)
from rayq.actors.protocol.config import ClientConfig
from rayq.consumer.listener import ConsumeStatus
from rayq.consumer.process_queue import ProcessQueue
from rayq.consumer.service import ConsumeService
from rayq.store.errors import InvalidOffsetError
from rayq.store.message import MessageExt
from rayq.testing import FakeCluster, FakeTransport, pulled, until

TOPIC = "a"
MQ = MessageQueue(TOPIC, "broker-a", 0)
GROUP = "cg"
WAIT_S = 30.0  # generous: what a test waits for, never a figure it checks


@pytest.fixture
def cluster_options() -> dict[str, Any]:
    return {"topics": {TOPIC: 1}}


def fill(cluster: FakeCluster, n: int) -> None:
    kit.fill_topic(cluster, TOPIC, n, b"x" * 100)


def service(
    cluster: FakeCluster, client_id: str, listener: Callable[..., Any], **config: Any
) -> ConsumeService:
    return kit.consume_service(
        cluster,
        listener,
        group=GROUP,
        topic=TOPIC,
        client_id=client_id,
        max_reconsume_times=16,
        config=ClientConfig(**config),
    )


def committed(cluster: FakeCluster) -> tuple[int, list[tuple[int, int]]]:
    got = cluster.server().query_offsets(QueryOffsetsRequest(group=GROUP, topic=TOPIC))
    return got.offsets.get(0, -1), [tuple(r) for r in got.acked.get(0, [])]  # type: ignore[misc]


class Recorder:
    """A listener that records the offsets it gets; ``stuck`` blocks until released."""

    def __init__(self, stuck: int = -1) -> None:
        self.stuck = stuck
        self.release = threading.Event()
        self.seen: list[int] = []
        self.lock = threading.Lock()

    def __call__(self, msgs: list[MessageExt]) -> ConsumeStatus:
        with self.lock:
            self.seen.extend(m.queue_offset for m in msgs)
        if any(m.queue_offset == self.stuck for m in msgs):
            self.release.wait(WAIT_S)
        return ConsumeStatus.CONSUME_SUCCESS


# ------------------------------------------------------------------ the headline
def test_after_a_crash_only_the_messages_in_flight_come_again_not_all_after_a_slow_one(
    cluster: FakeCluster,
) -> None:
    """Given one message (offset 5) asleep in the listener while the other 10,000 of the
    queue are consumed, and the consumer killed after its commit timer fired: a new
    consumer of the group gets again only what the dead one still held (the slow
    message and the few stuck behind it in its pool task), not the 9,995 after it."""
    total = 10_001
    fill(cluster, total)
    first = Recorder(stuck=5)
    svc = service(
        cluster, "c1", first, pull_threshold_for_queue=32, consume_concurrently_max_span=2 * total
    )
    held_at_kill: set[int] = set()

    async def run_and_die() -> None:
        await svc.open()
        await svc.assign(1, [MQ])
        pq = svc.queues[MQ]
        await until(lambda: pq.next_pull == total and svc.consumed + pq.count == total)
        # and no answer left on its way (a last empty one may still be): done up to the end
        await until(lambda: bool(pq.commit_state()[1]) and pq.commit_state()[1][-1][1] == total)
        await svc.commit()  # the consumer actor's commit timer
        held_at_kill.update(pq.msgs)
        # leaving asyncio.run cancels every task: a kill, no shutdown, no last commit

    try:
        asyncio.run(run_and_die())
    finally:
        first.release.set()
        svc.pool.shutdown(wait=False)
    offset, acked = committed(cluster)
    assert offset in held_at_kill  # the pool task holding the slow message began there
    assert offset <= 5
    assert acked and acked[-1][1] == total

    second = Recorder()
    svc2 = service(cluster, "c2", second)

    async def take_over() -> None:
        await svc2.open()
        await svc2.assign(2, [MQ])
        pq = svc2.queues[MQ]
        await until(lambda: pq.next_pull >= total and pq.count == 0)
        await svc2.shutdown()

    asyncio.run(take_over())
    assert 5 in second.seen
    assert set(second.seen) <= held_at_kill
    assert len(second.seen) == len(set(second.seen)) <= 32
    assert committed(cluster) == (total, [])


def test_the_commit_keeps_the_ranges_done_past_a_message_still_held() -> None:
    """Held 3 and 7 of 0..9: the commit is offset 3 with [4, 7) and [8, 10) done."""
    pq = ProcessQueue()
    pq.put([pulled(i, topic=TOPIC) for i in range(10)], next_pull=10)
    pq.remove([0, 1, 2, 4, 5, 6, 8, 9])
    assert pq.commit_state() == (3, [(4, 7), (8, 10)])
    pq.remove([3])
    assert pq.commit_state() == (7, [(8, 10)])
    pq.remove([7])
    assert pq.commit_state() == (10, [])


def test_a_queue_taken_over_skips_what_its_last_owner_committed_as_done() -> None:
    """Ranges done before are neither held nor pulled again; the commit keeps them until
    the offset passes them."""
    pq = ProcessQueue()
    pq.next_pull = 3
    pq.set_skip([(4, 6), (8, 20)])
    held = pq.put([pulled(i, topic=TOPIC) for i in range(3, 10)], next_pull=10)
    assert [m.queue_offset for m in held] == [3, 6, 7]
    assert pq.commit_state() == (3, [(4, 6), (8, 20)])
    assert pq.pull_from() == 20
    pq.remove([3, 6, 7])
    assert pq.commit_state() == (20, [])


def test_an_answer_not_put_yet_is_not_committed_as_done() -> None:
    """Records of a pull answer still being decoded are neither held nor done: the
    commit stays below them."""
    pq = ProcessQueue()
    pq.next_pull = 0
    pq.arriving(records=10, size_bytes=100, next_pull=10)
    assert pq.commit_state() == (0, [])
    pq.put([pulled(i, topic=TOPIC) for i in range(10)], next_pull=10)
    pq.remove(range(10))
    assert pq.commit_state() == (10, [])


@pytest.mark.parametrize(
    "acked",
    [
        {0: [(5, 7)]},  # starts at the offset, not past it
        {0: [(8, 7)]},  # ends before it starts
        {0: [(7, 9), (6, 10)]},  # overlaps the previous one
        {1: [(7, 9)]},  # a queue the request does not commit
    ],
)
def test_malformed_acked_ranges_are_refused_and_change_nothing(
    cluster: FakeCluster, acked: dict[int, list[tuple[int, int]]]
) -> None:
    """Through the broker's boundary: an InvalidOffsetError naming the range, and the
    group's committed offset and ranges stay as they were."""
    broker = FakeTransport(cluster).broker("broker-a")
    broker.commit_offsets(
        CommitOffsetsRequest(group=GROUP, topic=TOPIC, offsets={0: 2}, acked={0: [(3, 4)]})
    ).result(WAIT_S)
    with pytest.raises(InvalidOffsetError, match="acked range"):
        broker.commit_offsets(
            CommitOffsetsRequest(group=GROUP, topic=TOPIC, offsets={0: 5}, acked=acked)
        ).result(WAIT_S)
    assert committed(cluster) == (2, [(3, 4)])


def test_acked_ranges_survive_a_broker_restart_and_older_files_still_load(
    tmp_path: Path,
) -> None:
    with FakeCluster(tmp_path) as c:
        rayq.Admin(transport=FakeTransport(c)).create_topic(TOPIC, queues=1)
        req = CommitOffsetsRequest(group=GROUP, topic=TOPIC, offsets={0: 2}, acked={0: [(3, 9)]})
        c.server().commit_offsets(req)
    with FakeCluster(tmp_path) as c:
        assert committed(c) == (2, [(3, 9)])
    path = tmp_path / "broker-a" / "config" / "consumerOffset.json"
    path.write_text('{"offset_table": {"a@cg": {"0": 4}}}')  # as written before acked_table
    path.with_name(path.name + ".bak").unlink(missing_ok=True)
    with FakeCluster(tmp_path) as c:
        assert committed(c) == (4, [])


# --------------------------------------------------------------- commit in pull
def test_commits_ride_on_the_pulls_without_a_separate_commit_call(cluster: FakeCluster) -> None:
    """While pulls go out, they carry the consumer's commits (RocketMQ's commit-offset
    flag): the broker's offset moves with no commit_offsets call at all; the commit
    timer sends only what no pull took since."""
    fill(cluster, 200)
    rec = Recorder()
    svc = service(cluster, "c1", rec, pull_threshold_for_queue=10, pull_batch_size=4)

    async def run() -> None:
        await svc.open()
        await svc.assign(1, [MQ])
        await until(lambda: svc.consumed == 200)
        fill(cluster, 1)  # the held pull returns; the next one carries the commit
        await until(lambda: committed(cluster)[0] >= 200)
        assert cluster.calls_of("commit_offsets") == []
        await until(lambda: svc.consumed == 201)
        await svc.commit()  # the timer: at most the last message's commit is left
        await svc.commit()  # nothing changed since: no call
        await svc.shutdown()

    asyncio.run(run())
    assert len(cluster.calls_of("commit_offsets")) <= 1
    assert committed(cluster) == (201, [])


def test_a_damaged_acked_range_is_dropped_on_load_and_the_offsets_kept(tmp_path: Path) -> None:
    """A file whose acked ranges are wrong (one below its offset) and no good .bak: the
    offsets are salvaged, the bad ranges dropped (their messages only come again)."""
    with FakeCluster(tmp_path) as c:
        rayq.Admin(transport=FakeTransport(c)).create_topic(TOPIC, queues=1)
    path = tmp_path / "broker-a" / "config" / "consumerOffset.json"
    path.write_text(
        '{"offset_table": {"a@cg": {"0": 4, "1": 7}},'
        ' "acked_table": {"a@cg": {"0": [[2, 3]], "1": [[9, 12]]}}}'
    )
    path.with_name(path.name + ".bak").unlink(missing_ok=True)
    with FakeCluster(tmp_path) as c:
        assert committed(c) == (4, [])
        got = c.server().query_offsets(QueryOffsetsRequest(group=GROUP, topic=TOPIC))
        assert got.offsets == {0: 4, 1: 7}
        assert got.acked == {1: [(9, 12)]}
