"""A push consumer's pull answered OFFSET_ILLEGAL (rayq/consumer/pull_loop.py), against the
in-process fake cluster (no Ray): as RocketMQ's ``DefaultMQPushConsumerImpl``, the
queue's process queue is dropped, the offset the broker corrected to is committed, and
the queue is removed until the next rebalance assigns it again, from that offset.
Group membership is left out: the test assigns queues by hand, as the coordinator
would (its safety rebalance assigns a member's queues again)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

import rayq
from rayq import testing as kit
from rayq.actors.protocol import (
    CommitOffsetsRequest,
    ConsumeFromWhere,
    MessageModel,
    MessageQueue,
    QueryOffsetsRequest,
)
from rayq.actors.protocol.config import ClientConfig
from rayq.consumer.listener import ConsumeOrderlyStatus, ConsumeStatus
from rayq.consumer.service import ConsumeService
from rayq.store.message import MessageExt
from rayq.testing import FakeCluster, FakeTransport, until

TOPIC = "a"
MQ = MessageQueue(TOPIC, "broker-a", 0)
GROUP = "cg"


def send_five(c: FakeCluster) -> None:
    with rayq.Producer("pg", transport=FakeTransport(c)) as producer:
        producer.send_batch([rayq.Message(TOPIC, b"m%d" % i) for i in range(5)])


@pytest.fixture
def cluster_options() -> dict[str, Any]:
    return {"topics": {TOPIC: 1}, "setup": send_five}


class Listener:
    def __init__(self, orderly: bool) -> None:
        self.orderly = orderly
        self.offsets: list[int] = []
        self.lock = threading.Lock()

    def __call__(self, msgs: list[MessageExt]) -> object:
        with self.lock:
            self.offsets.extend(m.queue_offset for m in msgs)
        return ConsumeOrderlyStatus.SUCCESS if self.orderly else ConsumeStatus.CONSUME_SUCCESS


def service(
    cluster: FakeCluster, listener: Listener, model: MessageModel, offsets_dir: Path
) -> ConsumeService:
    return kit.consume_service(
        cluster,
        listener,
        group=GROUP,
        topic=TOPIC,
        orderly=listener.orderly,
        model=model,
        consume_from=ConsumeFromWhere.LAST_OFFSET,
        max_reconsume_times=16,
        config=ClientConfig(offset_store_dir=str(offsets_dir)),
    )


def broker_committed(cluster: FakeCluster) -> int:
    got = cluster.server().query_offsets(QueryOffsetsRequest(group=GROUP, topic=TOPIC))
    return dict(got.offsets).get(0, -1)


@pytest.mark.parametrize("orderly", [False, True])
def test_offset_illegal_drops_the_queue_commits_the_correction_and_rebalance_restarts_it(
    cluster: FakeCluster, tmp_path: Path, orderly: bool
) -> None:
    """The group's committed offset (50) is past the end of a queue holding 0..4 (min 0):
    the pull is OFFSET_ILLEGAL corrected to 0. The queue leaves the consumer with 0
    committed; assigned again, it is consumed from 0."""
    cluster.server().commit_offsets(CommitOffsetsRequest(group=GROUP, topic=TOPIC, offsets={0: 50}))
    listener = Listener(orderly)
    svc = service(cluster, listener, MessageModel.CLUSTERING, tmp_path)

    async def run() -> tuple[list[int], list[int]]:
        await svc.open()
        await svc.assign(1, [MQ])
        await until(lambda: MQ not in svc.queues)
        before = list(listener.offsets)
        assert broker_committed(cluster) == 0
        await svc.assign(2, [MQ])  # the next rebalance
        await until(lambda: len(listener.offsets) >= 5)
        await svc.shutdown()
        return before, listener.offsets

    before, after = asyncio.run(run())
    assert before == []  # nothing was consumed from the illegal offset
    assert sorted(after) == [0, 1, 2, 3, 4]
    assert broker_committed(cluster) == 5
    assert [h[0] for h in svc.history] == [MQ, MQ]  # dropped once, revoked at shutdown


def test_a_broadcasting_consumer_saves_the_correction_in_its_offsets_file(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    """The same with local offsets: the corrected offset is what the file holds."""
    listener = Listener(orderly=False)
    svc = service(cluster, listener, MessageModel.BROADCASTING, tmp_path)

    async def run() -> dict[MessageQueue, int]:
        await svc.open()
        svc.offsets.update(MQ, 50)
        await svc.offsets.persist(None, 0)  # a saved offset past the end
        await svc.assign(1, [MQ])
        await until(lambda: MQ not in svc.queues)
        saved = await svc.offsets.read([MQ])
        await svc.shutdown()
        return saved

    assert asyncio.run(run()) == {MQ: 0}
    assert listener.offsets == []
