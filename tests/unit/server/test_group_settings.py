"""Subscription-group settings the broker honours (issue 14), against the in-process
fake cluster, no Ray: ``retry_max_times`` when a send-back gives no limit,
``consume_broadcast_enable`` refusing broadcasting consumers, and ``retry_queue_nums``
(the retry topic's queue count; 0 drops failed messages, logged)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import rayq
from rayq import testing as kit
from rayq.actors.protocol import (
    MessageModel,
    MessageQueue,
    PullItem,
    PullManyRequest,
    ScheduleStatsRequest,
    SendBackItem,
    SendBackRequest,
)
from rayq.actors.protocol.config import ClientConfig
from rayq.consumer.listener import ConsumeStatus
from rayq.consumer.service import ConsumeService
from rayq.store.errors import PermissionDeniedError
from rayq.store.names import dlq_topic, retry_topic
from rayq.testing import FakeCluster, FakeTransport, until

TOPIC = "t"
MQ = MessageQueue(TOPIC, "broker-a", 0)
GROUP = "sg"
WAIT_S = 20.0  # generous: what a test waits for, never a figure it checks


@pytest.fixture
def cluster_options() -> dict[str, Any]:
    return {"topics": {TOPIC: 1}}


def admin(cluster: FakeCluster) -> rayq.Admin:
    return rayq.Admin(transport=FakeTransport(cluster))


def fill(cluster: FakeCluster, n: int) -> None:
    kit.fill_topic(cluster, TOPIC, n)


def service(
    cluster: FakeCluster, listener: Callable[..., Any], model: MessageModel, tmp_path: Path
) -> ConsumeService:
    return kit.consume_service(
        cluster,
        listener,
        group=GROUP,
        topic=TOPIC,
        model=model,
        config=ClientConfig(offset_store_dir=str(tmp_path / "offsets")),
    )


def messages_in(cluster: FakeCluster, topic: str) -> int:
    srv = cluster.server()
    cfg = srv.tables.topics.get(topic)
    if cfg is None:
        return 0
    return sum(srv.store.max_offset(topic, q) for q in range(cfg.write_queue_nums))


def scheduled(cluster: FakeCluster) -> int:
    """Messages waiting in the delay levels (send-backs on their way to retry)."""
    stats = cluster.server().schedule_stats(ScheduleStatsRequest())
    return sum(top - nxt for nxt, top in stats.levels.values())


def fail_everything(cluster: FakeCluster, tmp_path: Path) -> None:
    """A push consumer whose listener fails the one message of TOPIC (no limit of its own)."""
    svc = service(
        cluster, lambda msgs: ConsumeStatus.RECONSUME_LATER, MessageModel.CLUSTERING, tmp_path
    )

    async def run() -> None:
        await svc.open()
        await svc.assign(1, [MQ])
        await until(lambda: bool(cluster.calls_of("send_back")) and not svc.queues[MQ].count)
        await svc.shutdown()

    asyncio.run(run())


def test_the_groups_retry_max_times_applies_when_the_consumer_gives_no_limit(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    """retry_max_times=0: the first failure goes to the dead-letter topic, not to retry."""
    assert SendBackRequest(group=GROUP, items=[SendBackItem(0)]).max_reconsume_times == -1
    admin(cluster).create_group(GROUP, retry_max_times=0)
    fill(cluster, 1)
    fail_everything(cluster, tmp_path)
    assert messages_in(cluster, dlq_topic(GROUP)) == 1
    assert scheduled(cluster) == 0


def test_retry_queue_nums_sets_the_retry_topics_queues(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    admin(cluster).create_group(GROUP, retry_queue_nums=4)
    fill(cluster, 1)
    fail_everything(cluster, tmp_path)
    cfg = cluster.server().tables.topics.get(retry_topic(GROUP))
    assert cfg is not None
    assert (cfg.read_queue_nums, cfg.write_queue_nums) == (4, 4)
    assert scheduled(cluster) == 1  # waiting for its retry


def test_retry_queue_nums_zero_drops_failed_messages_with_a_log(
    cluster: FakeCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    admin(cluster).create_group(GROUP, retry_queue_nums=0)
    fill(cluster, 1)
    with caplog.at_level(logging.WARNING):
        fail_everything(cluster, tmp_path)
    assert "retry_queue_nums 0" in caplog.text
    assert scheduled(cluster) == 0
    assert messages_in(cluster, dlq_topic(GROUP)) == 0


def test_a_group_without_broadcast_refuses_broadcasting_consumers(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    """consume_broadcast_enable=False: a broadcasting consumer fails to start, naming the
    setting, and a broadcasting pull is refused; clustering consumers go on."""
    admin(cluster).create_group(GROUP, consume_broadcast_enable=False)
    svc = service(
        cluster, lambda msgs: ConsumeStatus.CONSUME_SUCCESS, MessageModel.BROADCASTING, tmp_path
    )
    with pytest.raises(PermissionDeniedError, match="consume_broadcast_enable"):
        asyncio.run(svc.open())
    svc.pool.shutdown()
    pull = PullManyRequest(
        group=GROUP, items=[PullItem(TOPIC, 0, 0)], suspend_ms=0, broadcasting=True
    )
    broker = FakeTransport(cluster).broker("broker-a")
    with pytest.raises(PermissionDeniedError, match="broadcasting"):
        broker.pull_many(pull).result(WAIT_S)
    clustering = PullManyRequest(group=GROUP, items=[PullItem(TOPIC, 0, 0)], suspend_ms=0)
    assert broker.pull_many(clustering).result(WAIT_S).results
