"""Consumers across a failover that cut records they had read (Kafka's KIP-320), against
the in-process fake cluster (no Ray): the broker's log loses its last records and goes
on in a new epoch with new ones at the same offsets. A consumer's next pull carries the
epoch it read in; it is moved back to where that epoch ended and gets the new records,
neither skipping them (its offset lies inside the new log) nor starting the queue over."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

import rayq
from rayq import testing as kit
from rayq.actors.protocol import ConsumeFromWhere, MessageModel, MessageQueue
from rayq.actors.protocol.config import ClientConfig
from rayq.consumer.listener import ConsumeStatus
from rayq.consumer.pull import PullConsumer
from rayq.store.message import MessageExt
from rayq.testing import FakeCluster, FakeTransport, poll_until, until

TOPIC = "t"
MQ = MessageQueue(TOPIC, "broker-a", 0)


@pytest.fixture
def cluster_options() -> dict[str, Any]:
    return {"topics": {TOPIC: 1}}


def send(cluster: FakeCluster, prefix: str, n: int) -> int:
    """``n`` messages to queue 0; the commit-log offset after them."""
    with rayq.Producer("pg", transport=FakeTransport(cluster)) as producer:
        for i in range(n):
            producer.send(rayq.Message(TOPIC, f"{prefix}{i}".encode()))
    return cluster.server().store.written_offset


def cut_and_refill(cluster: FakeCluster, kept: int) -> None:
    """Fail over keeping the log up to ``kept``, then write ``new0``..``new5``."""
    cluster.fail_over(cut_to=kept)
    send(cluster, "new", 6)


def test_a_pull_consumer_reads_the_new_records_where_the_cut_began(
    cluster: FakeCluster,
) -> None:
    kept = send(cluster, "old", 6)
    send(cluster, "lost", 4)
    c = PullConsumer(
        "cg",
        consume_from=ConsumeFromWhere.FIRST_OFFSET,
        transport=FakeTransport(cluster),
        config=ClientConfig(auto_commit_interval_ms=1_000_000),
    )
    c.subscribe(TOPIC)
    c.start()
    try:
        first = poll_until(c, 10)
        assert [m.body for m in first][-1] == b"lost3"
        cut_and_refill(cluster, kept)  # offsets 6..11 now hold new0..new5
        after = poll_until(c, 6)
        assert [(m.queue_offset, m.body) for m in after] == [
            (6 + i, f"new{i}".encode()) for i in range(6)
        ]
    finally:
        c.shutdown()


class Listener:
    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.lock = threading.Lock()

    def __call__(self, msgs: list[MessageExt]) -> object:
        with self.lock:
            self.bodies.extend(m.body for m in msgs)
        return ConsumeStatus.CONSUME_SUCCESS


def test_a_push_consumer_is_moved_back_and_gets_the_new_records(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    kept = send(cluster, "old", 6)
    send(cluster, "lost", 4)
    listener = Listener()
    svc = kit.consume_service(
        cluster,
        listener,
        group="cg",
        topic=TOPIC,
        orderly=False,
        model=MessageModel.CLUSTERING,
        consume_from=ConsumeFromWhere.FIRST_OFFSET,
        max_reconsume_times=16,
        config=ClientConfig(offset_store_dir=str(tmp_path)),
    )

    async def run() -> list[bytes]:
        await svc.open()
        await svc.assign(1, [MQ])
        await until(lambda: len(listener.bodies) >= 10)
        cut_and_refill(cluster, kept)
        await until(lambda: MQ not in svc.queues)  # moved back: dropped, the offset committed
        await svc.assign(2, [MQ])  # the next rebalance
        await until(lambda: len(listener.bodies) >= 16)
        await svc.shutdown()
        return listener.bodies

    bodies = asyncio.run(run())
    assert bodies[10:] == [f"new{i}".encode() for i in range(6)]
