"""Push consumers through the public API: rebalance by the coordinator, concurrent and
orderly listeners, broadcasting, and bad input."""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator

import pytest
import ray

import rayq
from rayq import ConsumeFromWhere, ConsumeOrderlyStatus, ConsumeStatus, MessageModel

pytestmark = pytest.mark.integration

NAMESPACE = "rayq-test-push"
BROKER_OVERRIDES = {"message_delay_level": "1s 1s 1s 1s 1s 1s 1s 1s"}  # quick retries


@ray.remote(num_cpus=0)
class Recorder:
    """Collects (consumer, topic, queue id, queue offset, body, reconsume times)."""

    def __init__(self) -> None:
        self.rows: list[tuple] = []
        self.fail: dict[bytes, int] = {}

    def add(self, rows: list[tuple]) -> None:
        self.rows.extend(rows)

    def get(self) -> list[tuple]:
        return list(self.rows)


class Listener:
    """Records every message; bodies in ``fail`` fail that many times first."""

    def __init__(
        self,
        recorder: object,
        name: str,
        fail: dict[bytes, int] | None = None,
        orderly: bool = False,
    ) -> None:
        self.recorder = recorder
        self.name = name
        self.fail = dict(fail or {})
        self.orderly = orderly
        self.lock = threading.Lock()

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        del state["lock"]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.lock = threading.Lock()

    def __call__(self, msgs: list[rayq.MessageExt]) -> object:
        with self.lock:
            failing = [m for m in msgs if self.fail.get(m.body, 0) > 0]
            for m in failing:
                self.fail[m.body] -= 1
        rows = [
            (
                self.name,
                m.topic,
                m.queue_id,
                m.queue_offset,
                m.body,
                m.reconsume_times,
                bool(failing),
            )
            for m in msgs
        ]
        self.recorder.add.remote(rows)  # type: ignore[attr-defined]
        if failing:
            return (
                ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
                if self.orderly
                else ConsumeStatus.RECONSUME_LATER
            )
        return ConsumeOrderlyStatus.SUCCESS if self.orderly else ConsumeStatus.CONSUME_SUCCESS


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def admin(cluster: rayq.Cluster) -> rayq.Admin:
    return rayq.Admin()


@pytest.fixture
def recorder(cluster: rayq.Cluster) -> Iterator[object]:
    rec = Recorder.remote()
    yield rec
    ray.kill(rec)


def wait_for(check: Callable[[], bool], timeout: float = 30.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what or check}")


def consumer(group: str, topic: str, listener: Callable, **options: object) -> rayq.PushConsumer:
    c = rayq.PushConsumer(group, consume_from=ConsumeFromWhere.FIRST_OFFSET, **options)
    c.subscribe(topic)
    c.register_listener(listener, orderly=getattr(listener, "orderly", False))
    c.start()
    return c


def send(topic: str, bodies: list[bytes]) -> None:
    with rayq.Producer(group="pg") as producer:
        for i in range(0, len(bodies), 50):
            producer.send_batch([rayq.Message(topic, b) for b in bodies[i : i + 50]])


def test_three_consumers_share_eight_queues_and_consume_each_message_once(
    admin: rayq.Admin, recorder: object
) -> None:
    topic, group = unique("push"), unique("cg")
    admin.create_topic(topic, queues=8)
    consumers = [consumer(group, topic, Listener(recorder, f"c{i}")) for i in range(3)]
    try:
        wait_for(
            lambda: (
                sum(len([q for q in c.assignment() if q.topic == topic]) for c in consumers) == 8
            ),
            what="assignment",
        )
        sizes = sorted(len([q for q in c.assignment() if q.topic == topic]) for c in consumers)
        assert sizes == [2, 3, 3]
        owned = [q for c in consumers for q in c.assignment() if q.topic == topic]
        assert len(owned) == len(set(owned)) == 8
        bodies = [f"m{i}".encode() for i in range(400)]
        send(topic, bodies)
        wait_for(lambda: len(ray.get(recorder.get.remote())) >= 400, what="400 messages")
        time.sleep(0.5)
        rows = ray.get(recorder.get.remote())
        assert Counter(r[4] for r in rows) == Counter(bodies)
        by_queue = {(r[2]): r[0] for r in rows}
        for name, c in zip(("c0", "c1", "c2"), consumers, strict=True):
            mine = {q.queue_id for q in c.assignment() if q.topic == topic}
            assert {q for q, n in by_queue.items() if n == name} <= mine
    finally:
        for c in consumers:
            c.shutdown()


def test_broadcasting_gives_every_consumer_every_message(
    admin: rayq.Admin, recorder: object, tmp_path: object
) -> None:
    topic, group = unique("bc"), unique("cg")
    admin.create_topic(topic, queues=2)
    config = rayq.ClientConfig(offset_store_dir=str(tmp_path))
    consumers = [
        consumer(
            group,
            topic,
            Listener(recorder, f"b{i}"),
            model=MessageModel.BROADCASTING,
            config=rayq.ClientConfig(offset_store_dir=str(tmp_path), instance_name=f"i{i}"),
        )
        for i in range(2)
    ]
    try:
        bodies = [f"b{i}".encode() for i in range(50)]
        send(topic, bodies)
        wait_for(lambda: len(ray.get(recorder.get.remote())) >= 100, what="100 deliveries")
        rows = ray.get(recorder.get.remote())
        for name in ("b0", "b1"):
            assert sorted(r[4] for r in rows if r[0] == name) == sorted(bodies)
    finally:
        for c in consumers:
            c.shutdown()
    files = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("offsets.json"))
    assert files == [f"i0/{group}/offsets.json", f"i1/{group}/offsets.json"]
    assert config.offset_store_dir == str(tmp_path)


def test_consumers_subscribing_differently_in_one_group_get_a_clear_error(
    admin: rayq.Admin, recorder: object
) -> None:
    t1, t2, group = unique("s1"), unique("s2"), unique("cg")
    admin.create_topic(t1, queues=1)
    admin.create_topic(t2, queues=1)
    first = consumer(group, t1, Listener(recorder, "a"))
    try:
        with pytest.raises(rayq.ConfigError, match="must subscribe alike"):
            consumer(group, t2, Listener(recorder, "b"))
        assert len(first.assignment()) == 2  # its topic's queue and its retry queue
    finally:
        first.shutdown()


@pytest.mark.parametrize(
    ("make", "error"),
    [
        (lambda: rayq.PushConsumer("bad group!"), rayq.InvalidGroupError),
        (lambda: rayq.PushConsumer("g", model="CLUSTERING"), rayq.ConfigError),
        (lambda: rayq.PushConsumer("g", max_reconsume_times=-2), rayq.ConfigError),
        (
            lambda: rayq.PushConsumer("g", allocate_strategy=rayq.AllocateStrategy.CONFIG),
            rayq.ConfigError,
        ),
        (lambda: rayq.PushConsumer("g").subscribe("bad topic"), rayq.InvalidTopicError),
        (lambda: rayq.PushConsumer("g").register_listener(42), rayq.ConfigError),
        (
            lambda: rayq.PushConsumer("g").register_listener(lambda m: m, orderly=1),
            rayq.ConfigError,
        ),
        (
            lambda: rayq.PushConsumer("g").register_listener(lambda m: m, auto_commit=False),
            rayq.ConfigError,
        ),
        (lambda: rayq.PushConsumer("g").start(), rayq.ClientError),
    ],
)
def test_bad_input_is_refused_before_anything_starts(
    cluster: rayq.Cluster, make: Callable, error: type[rayq.RayqError]
) -> None:
    with pytest.raises(error):
        make()


def test_a_listener_that_cannot_be_pickled_is_refused(cluster: rayq.Cluster) -> None:
    lock = threading.Lock()
    c = rayq.PushConsumer("g-pickle")
    with pytest.raises(rayq.ConfigError, match="pickled"):
        c.register_listener(lambda msgs: lock)


def test_calls_after_shutdown_raise_closed_error(admin: rayq.Admin, recorder: object) -> None:
    topic, group = unique("closed"), unique("cg")
    admin.create_topic(topic, queues=1)
    c = consumer(group, topic, Listener(recorder, "x"))
    c.shutdown()
    c.shutdown()
    with pytest.raises(rayq.ClosedError):
        c.subscribe(topic)
    with pytest.raises(rayq.ClosedError):
        c.register_listener(Listener(recorder, "y"))
    with pytest.raises(rayq.ClosedError):
        c.start()
    assert c.stats()["queues"] == []  # the final stats stay readable


def intervals(stats: dict, end: float) -> list[tuple[rayq.MessageQueue, float, float]]:
    """Every (queue, from, to) a consumer owned, the current ones up to ``end``."""
    return list(stats["history"]) + [(q, t, end) for q, t in stats["owned_since"].items()]


def test_join_leave_and_kill_lose_nothing_and_never_share_a_queue(
    admin: rayq.Admin, recorder: object
) -> None:
    """Messages keep flowing while a consumer joins, one shuts down and one is killed:
    every message is consumed, duplicates come only from the killed consumer's
    uncommitted work, and no queue is ever owned by two consumers at once."""
    topic, group = unique("churn"), unique("cg")
    admin.create_topic(topic, queues=4)
    bodies = [f"c{i}".encode() for i in range(1200)]
    stop = threading.Event()

    def produce() -> None:
        with rayq.Producer(group="pg") as producer:
            for i in range(0, len(bodies), 20):
                producer.send_batch([rayq.Message(topic, b) for b in bodies[i : i + 20]])
                time.sleep(0.05)
        stop.set()

    c0 = consumer(group, topic, Listener(recorder, "c0"))
    c1 = consumer(group, topic, Listener(recorder, "c1"))
    sender = threading.Thread(target=produce)
    sender.start()
    spans = []
    try:
        time.sleep(0.5)
        c2 = consumer(group, topic, Listener(recorder, "c2"))
        time.sleep(0.5)
        c1.shutdown()
        spans += intervals(c1.stats(), time.monotonic())  # released before shutdown returns
        time.sleep(0.5)
        c0_stats = c0.stats()
        ray.kill(c0.actor)
        spans += intervals(c0_stats, time.monotonic())
        sender.join()
        wait_for(
            lambda: set(bodies) <= {r[4] for r in ray.get(recorder.get.remote())},
            timeout=60,
            what="every message consumed",
        )
        wait_for(
            lambda: len([q for q in c2.assignment() if q.topic == topic]) == 4,
            what="the survivor owning every queue",
        )
        spans += intervals(c2.stats(), time.monotonic())
    finally:
        stop.wait(30)
        for c in (c0, c1):
            c._closed = True  # already stopped (killed or shut down)
        c2.shutdown()
    rows = ray.get(recorder.get.remote())
    counts = Counter(r[4] for r in rows)
    duplicated = {b for b, n in counts.items() if n > 1}
    assert all(any(r[0] == "c0" for r in rows if r[4] == b) for b in duplicated), duplicated
    by_queue: dict[rayq.MessageQueue, list[tuple[float, float]]] = {}
    for q, start, end in spans:
        if q.topic == topic:
            by_queue.setdefault(q, []).append((start, end))
    for q, owned in by_queue.items():
        owned.sort()
        for (_, end), (start, _) in itertools.pairwise(owned):
            assert end <= start, f"{q} owned by two consumers at once"


def test_orderly_consumption_keeps_send_order_per_key_through_failures_and_a_rebalance(
    admin: rayq.Admin, recorder: object
) -> None:
    """Each key's messages are consumed in send order, although some fail (SUSPEND, retried
    locally) and a second consumer joins half way."""
    topic, group = unique("ord"), unique("cg")
    admin.create_topic(topic, queues=4)
    keys = [f"k{i}" for i in range(8)]
    fail = {b"k1:3": 2, b"k5:10": 1, b"k6:0": 1}
    first = consumer(group, topic, Listener(recorder, "o0", fail, orderly=True))
    second = None
    try:

        def k1_3_consumed() -> bool:  # failed twice, then consumed (reconsume times 2)
            return any(r[4] == b"k1:3" and not r[6] for r in ray.get(recorder.get.remote()))

        with rayq.Producer(group="pg") as producer:
            for seq in range(30):
                if seq == 15:
                    # The second consumer joins once k1:3's local retries are over: a queue
                    # that moves while its message is suspended is consumed again by the new
                    # owner from reconsume times 0 (as in RocketMQ), which the count of local
                    # retries checked below does not cover.
                    wait_for(k1_3_consumed, timeout=60, what="k1:3 consumed after 2 retries")
                    second = consumer(group, topic, Listener(recorder, "o1", fail, orderly=True))
                for key in keys:
                    producer.send_orderly(
                        rayq.Message(topic, f"{key}:{seq}".encode()), sharding_key=key
                    )

        def done() -> list[tuple]:
            return [r for r in ray.get(recorder.get.remote()) if not r[6]]

        wait_for(lambda: len(done()) >= 240, timeout=60, what="240 ordered messages")
        assert second is not None and second.assignment()
        per_key: dict[str, list[int]] = {}
        for row in done():
            key, seq = row[4].decode().split(":")
            per_key.setdefault(key, []).append(int(seq))
        assert per_key == {k: list(range(30)) for k in keys}
        retried = [r for r in ray.get(recorder.get.remote()) if r[4] == b"k1:3"]
        assert [r[5] for r in retried] == [0, 1, 2]  # reconsume times counted locally
    finally:
        first.shutdown()
        if second is not None:
            second.shutdown()


def test_the_broker_refuses_commits_of_an_older_generation_and_leases_queue_locks(
    admin: rayq.Admin,
) -> None:
    from rayq.actors.protocol import (
        CommitOffsetsRequest,
        LockQueuesReply,
        LockQueuesRequest,
        QueryOffsetsRequest,
        QueueRef,
    )
    from rayq.transport.context import ClientContext

    topic, group = unique("fence"), unique("cg")
    admin.create_topic(topic, queues=2)
    broker = ClientContext().broker("broker-a")

    def commit(offsets: dict[int, int], generation: int) -> list[int]:
        req = CommitOffsetsRequest(group=group, topic=topic, offsets=offsets, generation=generation)
        return broker.commit_offsets(req).result(30).stale

    assert commit({0: 5, 1: 5}, 200) == []
    assert commit({0: 3}, 100) == [0]  # a stale owner cannot move the offset back
    assert commit({0: 7}, 300) == []

    def lock(client: str, *queues: int, unlock: bool = False) -> LockQueuesReply:
        req = LockQueuesRequest(
            group=group, client_id=client, queues=[QueueRef(topic, q) for q in queues]
        )
        return (broker.unlock_queues if unlock else broker.lock_queues)(req).result(30)

    offsets = broker.query_offsets(QueryOffsetsRequest(group=group, topic=topic)).result(30)
    assert offsets.offsets == {0: 7, 1: 5}
    got = lock("a", 0, 1).locked
    assert [(g.topic, g.queue_id) for g in got] == [(topic, 0), (topic, 1)]
    assert lock("b", 0).locked == []
    assert lock("a", 0, unlock=True).released == 1
    assert [(g.topic, g.queue_id) for g in lock("b", 0).locked] == [(topic, 0)]


def test_failed_messages_are_retried_through_the_retry_topic_then_dead_lettered(
    admin: rayq.Admin, recorder: object
) -> None:
    """RECONSUME_LATER sends a message back: it comes again (original topic restored,
    reconsume times counted) until it succeeds, or lands in %DLQ%<group> after
    max_reconsume_times."""
    topic, group = unique("retry"), unique("cg")
    admin.create_topic(topic, queues=2)
    fail = {b"flaky": 2, b"poison": 100}
    c = consumer(group, topic, Listener(recorder, "r", fail), max_reconsume_times=2)
    try:
        send(topic, [b"ok", b"flaky", b"poison"])

        def seen(body: bytes) -> list[tuple]:
            return [r for r in ray.get(recorder.get.remote()) if r[4] == body]

        wait_for(lambda: len(seen(b"flaky")) == 3, timeout=60, what="flaky retried twice")
        assert [(r[1], r[5]) for r in seen(b"flaky")] == [(topic, 0), (topic, 1), (topic, 2)]
        assert len(seen(b"ok")) == 1
        wait_for(lambda: len(seen(b"poison")) == 3, timeout=60, what="poison retried")
        dlq = f"%DLQ%{group}"
        wait_for(lambda: dlq in admin.topics(), timeout=30, what="the dead-letter topic")
        with rayq.PullConsumer(
            unique("dlq-reader"), consume_from=ConsumeFromWhere.FIRST_OFFSET
        ) as reader:
            reader.subscribe(dlq)
            reader.start()
            got: list[rayq.MessageExt] = []
            deadline = time.monotonic() + 30
            while not got and time.monotonic() < deadline:
                got = reader.poll(timeout=1.0)
        assert [m.body for m in got] == [b"poison"]
        assert got[0].properties["DLQ_ORIGIN_TOPIC"] == topic
        time.sleep(1.5)
        assert len(seen(b"poison")) == 3  # dead letters are not consumed again
    finally:
        c.shutdown()


class Slow:
    """Hangs on the first delivery of b"slow"; records every call."""

    def __init__(self, recorder: object) -> None:
        self.recorder = recorder
        self.hung = False

    def __call__(self, msgs: list[rayq.MessageExt]) -> ConsumeStatus:
        self.recorder.add.remote(
            [
                (
                    "s",
                    m.topic,
                    m.queue_id,
                    m.queue_offset,
                    m.body,  # type: ignore[attr-defined]
                    m.reconsume_times,
                    False,
                )
                for m in msgs
            ]
        )
        if msgs[0].body == b"slow" and not self.hung:
            self.hung = True
            time.sleep(4.0)
        return ConsumeStatus.CONSUME_SUCCESS


def test_a_message_stuck_in_the_listener_past_consume_timeout_is_sent_back(
    admin: rayq.Admin, recorder: object
) -> None:
    topic, group = unique("stuck"), unique("cg")
    admin.create_topic(topic, queues=1)
    config = rayq.ClientConfig(consume_timeout_ms=1000)
    c = consumer(group, topic, Slow(recorder), config=config)
    try:
        send(topic, [b"slow", b"after"])

        def slow_calls() -> list[tuple]:
            return [r for r in ray.get(recorder.get.remote()) if r[4] == b"slow"]

        wait_for(lambda: len(slow_calls()) == 2, timeout=30, what="the stuck message again")
        assert [r[5] for r in slow_calls()] == [0, 1]
        wait_for(
            lambda: any(
                p.queue.topic == topic and p.committed_offset == 2
                for p in admin.consumer_progress(group)
            ),
            timeout=30,
            what="the offset past the stuck message",
        )
    finally:
        c.shutdown()


class Sluggish:
    """Records every message after a short pause per call (a listener slower than pulls)."""

    def __init__(self, recorder: object) -> None:
        self.recorder = recorder

    def __call__(self, msgs: list[rayq.MessageExt]) -> ConsumeStatus:
        time.sleep(0.02)
        self.recorder.add.remote(
            [
                (
                    "f",
                    m.topic,
                    m.queue_id,
                    m.queue_offset,
                    m.body,  # type: ignore[attr-defined]
                    m.reconsume_times,
                    False,
                )
                for m in msgs
            ]
        )
        return ConsumeStatus.CONSUME_SUCCESS


def test_a_queue_held_back_by_flow_control_is_pulled_again_once_its_listener_makes_room(
    admin: rayq.Admin, recorder: object
) -> None:
    """A backlog far over pull_threshold_for_queue: the queue fills up to the threshold,
    then waits while the consumer's other queue (its retry queue) waits at the hold
    service; each time the listener makes room, the held pull is cancelled and the queue
    pulled again, so the backlog drains at the listener's pace (were it left to wait for
    the held pull, every refill would take broker_suspend_max_ms, 15 s)."""
    topic, group = unique("flow"), unique("cg")
    admin.create_topic(topic, queues=1)
    bodies = [f"f{i}".encode() for i in range(300)]
    send(topic, bodies)
    config = rayq.ClientConfig(pull_threshold_for_queue=20, pull_batch_size=4)
    c = consumer(group, topic, Sluggish(recorder), config=config)
    try:
        wait_for(lambda: len(ray.get(recorder.get.remote())) >= 300, what="300 messages")
        rows = ray.get(recorder.get.remote())
        assert Counter(r[4] for r in rows) == Counter(bodies)
    finally:
        c.shutdown()


class StuckOn(Listener):
    """Records every message; the call holding ``stuck`` never returns (until killed)."""

    def __init__(self, recorder: object, name: str, stuck: bytes) -> None:
        super().__init__(recorder, name)
        self.stuck = stuck

    def __call__(self, msgs: list[rayq.MessageExt]) -> object:
        result = super().__call__(msgs)
        if any(m.body == self.stuck for m in msgs):
            time.sleep(3600)
        return result


def test_a_killed_consumer_stuck_on_one_message_redelivers_only_what_it_had_in_flight(
    admin: rayq.Admin, recorder: object
) -> None:
    """One message sleeps in the listener while the other 2,000 are consumed; the
    Consumer actor is killed once its commit (with the ranges done past the slow
    message) reached the broker; a new consumer of the group gets again only what
    the dead one had in flight, not the 1,995 messages after the slow one."""
    from rayq.actors.protocol import QueryOffsetsRequest
    from rayq.transport.context import ClientContext

    topic, group = unique("stuck"), unique("cg")
    admin.create_topic(topic, queues=1)
    bodies = [f"s{i}".encode() for i in range(2001)]
    send(topic, bodies)
    broker = ClientContext().broker("broker-a")

    def committed() -> tuple[int, list]:
        got = broker.query_offsets(QueryOffsetsRequest(group=group, topic=topic)).result(30)
        return got.offsets.get(0, -1), got.acked.get(0, [])

    config = rayq.ClientConfig(auto_commit_interval_ms=200, consume_message_batch_max_size=16)
    first = consumer(group, topic, StuckOn(recorder, "first", b"s5"), config=config)
    try:
        wait_for(
            lambda: {r[4] for r in ray.get(recorder.get.remote())} == set(bodies),
            what="every message in the listener once",
        )
        wait_for(
            lambda: committed()[1][-1:] and committed()[1][-1][1] == 2001,
            what="the ranges done past the slow message committed",
        )
    finally:
        ray.kill(first.actor)
        first._closed = True  # killed: nothing to shut down
    offset, _ = committed()
    in_flight = {r[4] for r in ray.get(recorder.get.remote()) if r[3] >= offset}
    second = consumer(group, topic, Listener(recorder, "second"), config=config)
    try:
        wait_for(lambda: committed() == (2001, []), what="the new consumer done")
    finally:
        second.shutdown()
    again = [r[4] for r in ray.get(recorder.get.remote()) if r[0] == "second"]
    assert b"s5" in again
    assert len(again) == len(set(again)) <= 32  # at most the first pull (pull_batch_size)
    assert offset <= 5
    assert set(again) <= in_flight
