"""The push consumer's service (rayq/consumer/service.py) against the in-process fake
cluster, no Ray: how it pulls (rounds through the hold service or straight from the
broker, how much a round asks for under flow control), how a pulled batch goes to the
listener and is acked, committed and retried. Group membership is left out: the tests
``open`` the service and ``assign`` its queues by hand, as the coordinator would."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import rayq
from rayq.actors.protocol import (
    ConsumeFromWhere,
    MessageModel,
    MessageQueue,
    PullManyRequest,
    QueryOffsetsRequest,
    ScheduleStatsRequest,
)
from rayq.actors.protocol.config import ClientConfig
from rayq.actors.server.allocation import AllocateStrategy
from rayq.consumer import pull_loop
from rayq.consumer import service as consume_service
from rayq.consumer.listener import ConsumeOrderlyStatus, ConsumeStatus
from rayq.consumer.service import ConsumeService
from rayq.store.errors import BrokerUnavailableError
from rayq.store.message import MessageExt
from rayq.store.names import retry_topic
from rayq.testing import FakeCluster, FakeTransport, until
from rayq.testing.fake import FakeReply

TOPICS = ("a", "b")
QUEUES = {t: MessageQueue(t, "broker-a", 0) for t in TOPICS}
GROUP = "cg"
WAIT_S = 10.0  # generous: what a test waits for, never a figure it checks


class SpyTransport(FakeTransport):
    """Records every pull round: (``"broker"`` or ``"hold"``, its PullManyRequest)."""

    def __init__(self, cluster: FakeCluster) -> None:
        super().__init__(cluster)
        self.rounds: list[tuple[str, PullManyRequest]] = []

    def broker(self, broker_name: str) -> Any:
        client = super().broker(broker_name)
        return _Spied(client, "broker", self.rounds)

    def hold(self, broker_name: str) -> Any:
        client = super().hold(broker_name)
        return _Spied(client, "hold", self.rounds)


class _Spied:
    def __init__(self, client: Any, kind: str, rounds: list) -> None:
        self._client, self._kind, self._rounds = client, kind, rounds

    def pull_many(self, req: PullManyRequest) -> Any:
        self._rounds.append((self._kind, req))
        return self._client.pull_many(req)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


class Gate:
    """A listener that records what it gets and blocks while the gate is closed."""

    def __init__(self, result: Callable[[list[MessageExt]], Any] | None = None) -> None:
        self.open = threading.Event()
        self.open.set()
        self.calls: list[list[int]] = []
        self.threads: set[str] = set()
        self.result = result
        self.lock = threading.Lock()

    def __call__(self, msgs: list[MessageExt]) -> Any:
        self.open.wait(WAIT_S)
        with self.lock:
            self.calls.append([m.queue_offset for m in msgs])
            self.threads.add(threading.current_thread().name)
        return self.result(msgs) if self.result else ConsumeStatus.CONSUME_SUCCESS

    @property
    def offsets(self) -> list[int]:
        with self.lock:
            return [o for call in self.calls for o in call]


@pytest.fixture
def cluster_options() -> dict[str, Any]:
    return {"topics": dict.fromkeys(TOPICS, 1)}


def fill(cluster: FakeCluster, topic: str, n: int, body: bytes = b"x" * 100) -> None:
    with rayq.Producer("pg", transport=FakeTransport(cluster)) as producer:
        for start in range(0, n, 100):
            producer.send_batch([rayq.Message(topic, body)] * min(100, n - start))


def service(
    transport: FakeTransport, listener: Callable[..., Any], orderly: bool = False, **config: Any
) -> ConsumeService:
    return ConsumeService(
        group=GROUP,
        client_id="c1",
        subscriptions=dict.fromkeys(TOPICS, "*"),
        listener=listener,
        orderly=orderly,
        model=MessageModel.CLUSTERING,
        consume_from=ConsumeFromWhere.FIRST_OFFSET,
        consume_timestamp_ms=0,
        max_reconsume_times=16,
        strategy=AllocateStrategy.AVERAGELY,
        allocation=[],
        config=ClientConfig(**config),
        namespace="rayq-fake",
        transport=transport,
    )


async def started(svc: ConsumeService) -> None:
    """Open the service and give it the queues of TOPICS and its retry queue."""
    await svc.open()
    await svc.assign(1, [*QUEUES.values(), MessageQueue(retry_topic(GROUP), "broker-a", 0)])


def committed(cluster: FakeCluster, topic: str) -> int:
    got = cluster.server().query_offsets(QueryOffsetsRequest(group=GROUP, topic=topic))
    return dict(got.offsets).get(0, -1)


def rounds_of(transport: SpyTransport, kind: str) -> list[PullManyRequest]:
    return [req for k, req in transport.rounds if k == kind]


# ------------------------------------------------------------------- pull rounds
def test_a_backlog_is_pulled_in_rounds_as_large_as_flow_control_allows(
    cluster: FakeCluster,
) -> None:
    """With a backlog, a round from the broker asks for the room every queue has left
    under pull_threshold_for_queue, not pull_batch_size: the queue fills up to the
    threshold and no further while the listener is stuck; once it goes on, the queue
    is pulled again at once (not after the hold time of the round the others wait in)
    and every message is consumed once and committed."""
    fill(cluster, "a", 1000)
    gate = Gate()
    gate.open.clear()
    transport = SpyTransport(cluster)
    svc = service(transport, gate, pull_batch_size=4, pull_threshold_for_queue=100)
    pq_a = None

    async def run() -> None:
        nonlocal pq_a
        await started(svc)
        pq_a = svc.queues[QUEUES["a"]]
        await until(lambda: pq_a.next_pull >= 100 and rounds_of(transport, "hold")[-1:] != [])
        await asyncio.sleep(0.2)  # nothing more may be pulled while the listener is stuck
        assert pq_a.count <= 100
        gate.open.set()
        await until(lambda: svc.consumed == 1000)
        await svc.commit()
        await svc.shutdown()

    asyncio.run(run())
    assert sorted(gate.offsets) == list(range(1000))
    assert committed(cluster, "a") == 1000
    direct = rounds_of(transport, "broker")
    assert max(r.max_nums for r in direct) > 4  # larger than pull_batch_size
    assert all(r.max_nums == 4 for r in rounds_of(transport, "hold"))


def test_a_round_that_brought_messages_is_followed_by_one_from_the_broker(
    cluster: FakeCluster,
) -> None:
    """Messages just came: the next round reads the broker directly (more may be there
    already, one call instead of hold + broker); when it finds nothing, the round after
    it waits at the hold service again."""
    gate = Gate()
    transport = SpyTransport(cluster)
    svc = service(transport, gate)

    async def run() -> None:
        await started(svc)
        await until(lambda: len(transport.rounds) == 1)
        fill(cluster, "b", 1)
        await until(lambda: svc.consumed == 1 and len(transport.rounds) >= 3)
        await svc.shutdown()

    asyncio.run(run())
    kinds = [(k, r.suspend_ms > 0) for k, r in transport.rounds[:3]]
    assert kinds == [("hold", True), ("broker", False), ("hold", True)]


class LosingTransport(FakeTransport):
    """Its first ``lost`` hold rounds are never answered (a call Ray drops when the hold
    service or its broker is killed with the pull in flight); then, while ``unsendable``
    is set, no round can be sent at all (looking the broker's actors up raises it)."""

    def __init__(self, cluster: FakeCluster, lost: int = 1) -> None:
        super().__init__(cluster)
        self.lost = lost
        self.unsendable: Exception | None = None
        self.hold_rounds = 0

    def _lookup(self, broker_name: str) -> None:
        if self.unsendable is not None:
            raise self.unsendable

    def broker(self, broker_name: str) -> Any:
        self._lookup(broker_name)
        return super().broker(broker_name)

    def hold(self, broker_name: str) -> Any:
        self._lookup(broker_name)
        return _Losing(super().hold(broker_name), self)


class _Losing:
    def __init__(self, client: Any, transport: LosingTransport) -> None:
        self._client, self._transport = client, transport

    def pull_many(self, req: PullManyRequest) -> Any:
        self._transport.hold_rounds += 1
        if self._transport.lost > 0:
            self._transport.lost -= 1
            return FakeReply()  # never answered
        return self._client.pull_many(req)


def test_a_round_that_is_never_answered_is_given_up_and_pulled_again(
    cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hold round whose answer never comes (a call lost with a killed hold service or
    broker) must not stop the broker's pull loop for good: past its suspend time plus
    PULL_STALE_GRACE_S it is given up and the queues are pulled again."""
    monkeypatch.setattr(pull_loop, "PULL_STALE_GRACE_S", 0.2)
    gate = Gate()
    transport = LosingTransport(cluster)
    svc = service(transport, gate, broker_suspend_max_ms=200)

    async def run() -> None:
        await started(svc)
        await until(lambda: transport.hold_rounds == 1)  # the lost one
        fill(cluster, "a", 5)
        await until(lambda: svc.consumed == 5, WAIT_S)
        await svc.shutdown()

    asyncio.run(run())
    assert sorted(gate.offsets) == list(range(5))


@pytest.mark.parametrize(
    "error",
    [
        BrokerUnavailableError("actor rayq-broker-broker-a is not running"),
        RuntimeError("GCS lookup timed out"),  # an error nobody foresaw
    ],
    ids=["restarting", "unforeseen"],
)
def test_a_round_that_cannot_be_sent_is_sent_again_after_a_pause(
    cluster: FakeCluster, error: Exception
) -> None:
    """The broker's actors cannot be looked up for a while (restarting), or the lookup
    fails in a way nobody foresaw (not a RayqError: logged): the pull loop pauses and
    tries again instead of ending, leaving every queue of the broker unpulled for good
    (the 30-minute soak, seed 27), and consumes once they are back."""
    gate = Gate()
    transport = LosingTransport(cluster, lost=0)
    svc = service(transport, gate, pull_time_delay_when_exception_ms=50)

    async def run() -> None:
        await started(svc)
        await until(lambda: transport.hold_rounds >= 1)
        transport.unsendable = error
        fill(cluster, "a", 5)  # answers the held round: the next one cannot be sent
        await until(lambda: svc.consumed == 5, WAIT_S)
        await asyncio.sleep(0.2)
        transport.unsendable = None
        fill(cluster, "a", 5)
        await until(lambda: svc.consumed == 10, WAIT_S)
        await svc.shutdown()

    asyncio.run(run())
    assert sorted(gate.offsets) == list(range(10))


def test_a_revoke_whose_commit_fails_still_releases_the_queues(cluster: FakeCluster) -> None:
    """The coordinator revokes the queues while their broker cannot be looked up (its
    node is gone): the commit fails, but the queues are released all the same, so when
    they are assigned again they are consumed again. (They were left half-revoked, not
    pulled and never taken on again: the 30-minute soak, seed 27.)"""
    gate = Gate()
    transport = LosingTransport(cluster, lost=0)
    svc = service(transport, gate, pull_time_delay_when_exception_ms=50)
    owned = [*QUEUES.values(), MessageQueue(retry_topic(GROUP), "broker-a", 0)]

    async def run() -> None:
        await started(svc)
        fill(cluster, "a", 5)
        await until(lambda: svc.consumed == 5, WAIT_S)
        transport.unsendable = BrokerUnavailableError("its node is gone")
        await svc.revoke(svc.generation + 1, owned)
        assert not svc.queues
        transport.unsendable = None
        await svc.assign(svc.generation + 2, owned)
        fill(cluster, "a", 5)
        # the first five come again unless a timed commit ran before the revoke
        await until(lambda: set(gate.offsets) >= set(range(10)), WAIT_S)
        await svc.shutdown()

    asyncio.run(run())
    assert sorted(set(gate.offsets)) == list(range(10))


def test_offsets_a_broker_lost_are_committed_again_after_its_failure(
    cluster: FakeCluster,
) -> None:
    """A broker killed between two writes of its offsets comes back with older ones.
    The consumer's pulls to it failed meanwhile, so it commits its queues' offsets again
    even though they did not change (RocketMQ uploads every offset on a timer), and an
    idle queue is not consumed again from the older offset at the next rebalance."""
    gate = Gate()
    svc = service(FakeTransport(cluster), gate, pull_time_delay_when_exception_ms=50)

    async def run() -> None:
        await started(svc)
        fill(cluster, "a", 5)
        await until(lambda: svc.consumed == 5, WAIT_S)
        await svc.commit()
        await until(lambda: committed(cluster, "a") == 5)
        # what a restart that recovered offsets written before the last commit leaves
        cluster.server().tables.consumer_offsets.commit_many(GROUP, "a", {0: 2})
        cluster.fail_next("broker-a", "hold.pull_many", BrokerUnavailableError, times=2)
        cluster.restart()  # the held round fails: the pull loop pauses and goes on
        await until(lambda: committed(cluster, "a") == 5, WAIT_S)
        await svc.shutdown()

    asyncio.run(run())
    assert sorted(gate.offsets) == list(range(5))


# ------------------------------------------------------------- listener hand-off
def test_a_pulled_batch_is_one_pool_task_acked_in_slices_and_failures_go_back(
    cluster: FakeCluster,
) -> None:
    """The listener sees slices of consume_message_batch_max_size, several slices in
    one pool task; the messages after each slice's ack index are sent back (retried
    through %RETRY%), the rest count as consumed, and the commit covers all of them."""
    fill(cluster, "a", 200)
    gate = Gate(result=lambda msgs: (ConsumeStatus.CONSUME_SUCCESS, 6))  # 7 of each 10 ok
    sent_back: list[int] = []
    svc = service(SpyTransport(cluster), gate, consume_message_batch_max_size=10, consume_thread=1)
    submits = 0

    async def run() -> None:
        nonlocal submits
        await started(svc)
        submit = svc.pool.submit

        def counting(*args: Any) -> Any:
            nonlocal submits
            submits += 1
            return submit(*args)

        svc.pool.submit = counting  # type: ignore[method-assign]
        back = svc._send_back

        async def recording(msgs: list[MessageExt], **kw: Any) -> list[MessageExt]:
            sent_back.extend(m.queue_offset for m in msgs)
            return await back(msgs, **kw)

        svc._send_back = recording  # type: ignore[method-assign]
        await until(lambda: len(gate.offsets) == 200 and svc.queues[QUEUES["a"]].count == 0)
        await svc.commit()
        await svc.shutdown()

    asyncio.run(run())
    assert all(1 <= len(call) <= 10 for call in gate.calls)
    assert submits < len(gate.calls)  # slices share pool tasks
    assert sorted(sent_back) == sorted(o for call in gate.calls for o in call[7:])
    assert svc.consumed == 200 - len(sent_back) > 0
    assert committed(cluster, "a") == 200
    retried = cluster.server().schedule_stats(ScheduleStatsRequest())
    assert sum(top - nxt for nxt, top in retried.levels.values()) == len(sent_back)


def test_messages_whose_send_back_failed_are_consumed_again_here(
    cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failed message that cannot be sent back stays held (the commit stops below it)
    and goes to the listener again, with its reconsume times counted."""
    monkeypatch.setattr(consume_service, "SEND_BACK_RETRY_S", 0.05)
    fill(cluster, "a", 5)
    seen: list[tuple[int, int]] = []

    def listener(msgs: list[MessageExt]) -> ConsumeStatus:
        seen.extend((m.queue_offset, m.reconsume_times) for m in msgs)
        bad = any(m.queue_offset == 2 and m.reconsume_times == 0 for m in msgs)
        return ConsumeStatus.RECONSUME_LATER if bad else ConsumeStatus.CONSUME_SUCCESS

    cluster.fail_next("broker-a", "send_back", BrokerUnavailableError)
    svc = service(FakeTransport(cluster), listener)

    async def run() -> None:
        await started(svc)
        await until(lambda: svc.consumed == 5)
        await svc.commit()
        await svc.shutdown()

    asyncio.run(run())
    assert sorted(seen) == [(0, 0), (1, 0), (2, 0), (2, 1), (3, 0), (4, 0)]
    assert committed(cluster, "a") == 5


def test_orderly_consumption_of_large_rounds_keeps_queue_order(cluster: FakeCluster) -> None:
    """Rounds of up to pull_threshold_for_queue messages go to an orderly listener in
    queue order, batch by batch, and the queue never holds more than the threshold
    (plus at most one pull_batch_size, as in RocketMQ)."""
    fill(cluster, "a", 600)
    seen: list[int] = []

    def listener(msgs: list[MessageExt]) -> ConsumeOrderlyStatus:
        seen.extend(m.queue_offset for m in msgs)
        return ConsumeOrderlyStatus.SUCCESS

    svc = service(
        FakeTransport(cluster),
        listener,
        orderly=True,
        pull_threshold_for_queue=100,
        consume_message_batch_max_size=7,
    )
    peak = 0

    async def run() -> None:
        nonlocal peak
        await started(svc)
        pq = svc.queues[QUEUES["a"]]
        deadline = time.monotonic() + WAIT_S
        while svc.consumed < 600 and time.monotonic() < deadline:
            peak = max(peak, pq.count)
            await asyncio.sleep(0)
        await svc.commit()
        await svc.shutdown()

    asyncio.run(run())
    assert seen == list(range(600))
    assert peak <= 100 + svc.config.pull_batch_size
    assert committed(cluster, "a") == 600
