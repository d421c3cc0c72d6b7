"""A push consumer's flow control per queue (issue 14), against the in-process fake
cluster, no Ray: with its listener stuck, a queue holds at most about
``pull_threshold_for_queue`` messages, ``pull_threshold_size_for_queue_mib`` of bodies
and, for concurrent listeners, a span of ``consume_concurrently_max_span`` offsets past
its oldest message in flight (each may go over by less than one ``pull_batch_size``,
as in RocketMQ); once the listener goes on, everything is consumed."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest

from rayq import testing as kit
from rayq.actors.protocol import MessageQueue
from rayq.actors.protocol.config import ClientConfig
from rayq.consumer.listener import ConsumeStatus
from rayq.consumer.service import ConsumeService
from rayq.store.message import MessageExt
from rayq.testing import FakeCluster, until

TOPIC = "flow"
MQ = MessageQueue(TOPIC, "broker-a", 0)
WAIT_S = 20.0  # generous: what a test waits for, never a figure it checks
SETTLE_S = 0.3  # after the queue filled up: time for pulls that should not come
BATCH = 8  # pull_batch_size


@pytest.fixture
def cluster_options() -> dict[str, Any]:
    return {"topics": {TOPIC: 1}}


def fill(cluster: FakeCluster, n: int, body: bytes) -> None:
    kit.fill_topic(cluster, TOPIC, n, body, batch=10)


class Stuck:
    """Blocks on the messages ``blocks(offset)`` picks until ``go`` is set."""

    def __init__(self, blocks: Callable[[int], bool]) -> None:
        self.blocks = blocks
        self.go = threading.Event()
        self.done: set[int] = set()
        self.lock = threading.Lock()

    def __call__(self, msgs: list[MessageExt]) -> ConsumeStatus:
        if any(self.blocks(m.queue_offset) for m in msgs):
            self.go.wait(WAIT_S)
        with self.lock:
            self.done.update(m.queue_offset for m in msgs)
        return ConsumeStatus.CONSUME_SUCCESS


def service(cluster: FakeCluster, listener: Callable[..., Any], **config: Any) -> ConsumeService:
    return kit.consume_service(
        cluster,
        listener,
        group="fg",
        topic=TOPIC,
        config=ClientConfig(pull_batch_size=BATCH, **config),
    )


def held_back(
    cluster: FakeCluster,
    total: int,
    body: bytes,
    listener: Stuck,
    full: Callable[[Any], bool],
    **config: Any,
) -> dict[str, int]:
    """Fill ``total`` messages, consume with ``listener`` stuck until ``full(pq)``
    and a while after; the queue's peak count, bytes and pulled span then. Then let the
    listener go and check that everything is consumed."""
    fill(cluster, total, body)
    svc = service(cluster, listener, **config)
    peak: dict[str, int] = {}

    async def run() -> None:
        await svc.open()
        await svc.assign(1, [MQ])
        pq = svc.queues[MQ]
        await until(lambda: full(pq))
        await asyncio.sleep(SETTLE_S)
        first = pq.first_offset() or 0
        peak.update(count=pq.count, bytes=pq.bytes, span=pq.next_pull - first)
        listener.go.set()
        await until(lambda: len(listener.done) == total)
        await svc.shutdown()

    try:
        asyncio.run(run())
    finally:
        listener.go.set()
    return peak


def test_a_queue_holds_about_pull_threshold_for_queue_messages(cluster: FakeCluster) -> None:
    peak = held_back(
        cluster,
        400,
        b"x",
        Stuck(lambda off: True),
        lambda pq: pq.count >= 50,
        pull_threshold_for_queue=50,
    )
    assert 50 <= peak["count"] < 50 + BATCH


def test_a_queue_holds_about_pull_threshold_size_of_bodies(cluster: FakeCluster) -> None:
    mib = 1024 * 1024
    body = b"x" * (64 * 1024)
    peak = held_back(
        cluster,
        100,
        body,
        Stuck(lambda off: True),
        lambda pq: pq.bytes >= mib,
        pull_threshold_size_for_queue_mib=1,
    )
    assert mib <= peak["bytes"] < mib + BATCH * len(body)


def test_a_concurrent_queue_pulls_at_most_the_span_past_a_slow_message(
    cluster: FakeCluster,
) -> None:
    """Offset 0 is stuck while the rest is consumed: pulls stop about
    consume_concurrently_max_span past it (not at the count threshold: the rest is done)."""
    peak = held_back(
        cluster,
        1000,
        b"x",
        Stuck(lambda off: off == 0),
        lambda pq: pq.next_pull >= 100,
        consume_concurrently_max_span=100,
        consume_message_batch_max_size=1,
        consume_thread=4,
    )
    assert 100 <= peak["span"] <= 100 + BATCH
