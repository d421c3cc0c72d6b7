"""Orderly consumption as RocketMQ's seeds have it (issue 14), against the in-process
fake cluster, no Ray: unlimited reconsume times by default, the suspend time clamped
to 10 ms .. 30 s, a queue consumed continuously yields after
MAX_TIME_CONSUME_CONTINUOUSLY_S, COMMIT / ROLLBACK with ``auto_commit=False``, and a
queue locked on its broker before its process queue is created.

As in test_consume_service.py, the tests ``open`` the consume service and ``assign``
its queue by hand, as the coordinator would."""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Callable
from typing import Any

import pytest

import rayq
from rayq import testing as kit
from rayq.actors.protocol import (
    LockQueuesRequest,
    MessageQueue,
    QueryOffsetsRequest,
    QueueRef,
)
from rayq.actors.protocol.config import ClientConfig
from rayq.consumer import orderly as consume_orderly
from rayq.consumer.listener import ConsumeOrderlyStatus
from rayq.consumer.orderly import suspend_ms
from rayq.consumer.service import ConsumeService
from rayq.store.message import MessageExt
from rayq.testing import FakeCluster, FakeTransport, until

TOPIC = "ordered"
MQ = MessageQueue(TOPIC, "broker-a", 0)
GROUP = "og"
WAIT_S = 20.0  # generous: what a test waits for, never a figure it checks
S = ConsumeOrderlyStatus


@pytest.fixture
def cluster_options() -> dict[str, Any]:
    return {"topics": {TOPIC: 1}}


def fill(cluster: FakeCluster, n: int) -> None:
    kit.fill_topic(cluster, TOPIC, n)


def service(
    cluster: FakeCluster,
    listener: Callable[..., Any],
    *,
    auto_commit: bool = True,
    max_reconsume_times: int = -1,
    **config: Any,
) -> ConsumeService:
    return kit.consume_service(
        cluster,
        listener,
        group=GROUP,
        topic=TOPIC,
        orderly=True,
        max_reconsume_times=max_reconsume_times,
        auto_commit=auto_commit,
        config=ClientConfig(**config),
    )


def committed(cluster: FakeCluster) -> int:
    got = cluster.server().query_offsets(QueryOffsetsRequest(group=GROUP, topic=TOPIC))
    return got.offsets.get(0, -1)


class Script:
    """An orderly listener answering from ``plan(offset, attempt)``; records each call."""

    def __init__(self, plan: Callable[[int, int], ConsumeOrderlyStatus]) -> None:
        self.plan = plan
        self.seen: list[int] = []
        self.lock = threading.Lock()

    def __call__(self, msgs: list[MessageExt]) -> ConsumeOrderlyStatus:
        (m,) = msgs
        with self.lock:
            attempt = self.seen.count(m.queue_offset)
            self.seen.append(m.queue_offset)
        return self.plan(m.queue_offset, attempt)


def consume(svc: ConsumeService, done: Callable[[], bool], *, commit: bool = True) -> None:
    async def run() -> None:
        await svc.open()
        await svc.assign(1, [MQ])
        await until(done)
        if commit:
            await svc.commit()
        await svc.shutdown()

    asyncio.run(run())


# ------------------------------------------------------------------ reconsume times
def test_orderly_reconsume_times_are_unlimited_by_default(cluster: FakeCluster) -> None:
    """PushConsumer's default max_reconsume_times is RocketMQ's -1 (shown as 16, as the
    API says, but told apart from an explicit 16): an orderly message suspended 20 times
    is consumed a 21st time, never sent to the dead-letter topic."""
    from rayq.consumer.push import DEFAULT_RECONSUME_TIMES

    default = inspect.signature(rayq.PushConsumer).parameters["max_reconsume_times"].default
    assert default == 16 and default is DEFAULT_RECONSUME_TIMES
    fill(cluster, 2)
    script = Script(
        lambda off, n: S.SUCCESS if off != 0 or n >= 20 else S.SUSPEND_CURRENT_QUEUE_A_MOMENT
    )
    svc = service(cluster, script, suspend_current_queue_time_millis=1)
    consume(svc, lambda: svc.consumed == 2)
    assert script.seen == [0] * 21 + [1]
    assert cluster.calls_of("send_back") == []
    assert committed(cluster) == 2


def test_the_suspend_time_is_clamped_to_the_rocketmq_bounds(
    cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An hour's suspend is cut to SUSPEND_MAX_MS (30 s; 50 ms here), and 1 ms is 10 ms."""
    assert (suspend_ms(1), suspend_ms(1_000), suspend_ms(3_600_000)) == (10, 1_000, 30_000)
    monkeypatch.setattr(consume_orderly, "SUSPEND_MAX_MS", 50)
    fill(cluster, 1)
    script = Script(lambda off, n: S.SUCCESS if n else S.SUSPEND_CURRENT_QUEUE_A_MOMENT)
    svc = service(cluster, script, suspend_current_queue_time_millis=3_600_000)
    consume(svc, lambda: svc.consumed == 1)
    assert script.seen == [0, 0]


# ------------------------------------------------------------ consuming continuously
def test_a_queue_consumed_continuously_yields_and_checks_its_lock_again(
    cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past MAX_TIME_CONSUME_CONTINUOUSLY_S (0 here: after every batch) the queue's loop
    yields and locks the queue on the broker again before it goes on, in order."""
    monkeypatch.setattr(consume_orderly, "MAX_TIME_CONSUME_CONTINUOUSLY_S", 0.0)
    fill(cluster, 10)
    script = Script(lambda off, n: S.SUCCESS)
    svc = service(cluster, script)
    consume(svc, lambda: svc.consumed == 10)
    assert script.seen == list(range(10))
    assert len(cluster.calls_of("lock_queues")) >= 10


# ---------------------------------------------------------------- commit by hand
def test_commit_and_rollback_work_with_auto_commit_off(cluster: FakeCluster) -> None:
    """With auto_commit=False, SUCCESS only acknowledges: ROLLBACK consumes everything
    since the last commit again, COMMIT commits everything so far, and what came after
    the last COMMIT is not committed."""
    fill(cluster, 6)

    def plan(off: int, n: int) -> ConsumeOrderlyStatus:
        if off == 2 and n == 0:
            return S.ROLLBACK
        return S.COMMIT if off == 3 else S.SUCCESS

    script = Script(plan)
    svc = service(cluster, script, auto_commit=False, suspend_current_queue_time_millis=10)
    consume(svc, lambda: len(script.seen) == 9)
    assert script.seen == [0, 1, 2, 0, 1, 2, 3, 4, 5]
    assert svc.consumed == 4
    assert committed(cluster) == 4


def test_commit_and_rollback_count_as_success_with_auto_commit_on(cluster: FakeCluster) -> None:
    fill(cluster, 3)
    script = Script(lambda off, n: S.ROLLBACK if off == 1 else S.COMMIT)
    svc = service(cluster, script)
    consume(svc, lambda: svc.consumed == 3)
    assert script.seen == [0, 1, 2]
    assert committed(cluster) == 3


# ---------------------------------------------------------------- lock first
def test_a_queue_is_locked_before_its_process_queue_is_created(cluster: FakeCluster) -> None:
    """A queue assigned while another consumer holds its broker lock is neither held nor
    pulled; once the lock is free, the consumer takes it on (it tries again every
    LOCK_RETRY_S) and consumes it."""
    fill(cluster, 3)
    broker = FakeTransport(cluster).broker("broker-a")
    lock = LockQueuesRequest(group=GROUP, client_id="other", queues=[QueueRef(TOPIC, 0)])
    assert broker.lock_queues(lock).result(WAIT_S).locked
    script = Script(lambda off, n: S.SUCCESS)
    svc = service(cluster, script)

    async def run() -> None:
        await svc.open()
        await svc.assign(1, [MQ])
        assert MQ not in svc.queues
        await svc.renew_locks()  # still locked by "other"
        assert MQ not in svc.queues
        assert cluster.calls_of("pull_many") == cluster.calls_of("hold.pull_many") == []
        broker.unlock_queues(lock).result(WAIT_S)
        await until(lambda: svc.consumed == 3)
        await svc.commit()
        await svc.shutdown()

    asyncio.run(run())
    assert script.seen == [0, 1, 2]
    assert committed(cluster) == 3
