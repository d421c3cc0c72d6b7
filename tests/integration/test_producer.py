"""The Producer against real deployments: sends, batches, async coalescing, ordered sends,
bad input, shutdown, an unknown topic without auto-create and brokers that die.

One Ray session for the module (namespace ``rayq-test-producer``); the tests that need
another broker configuration start a second deployment in its own namespace in the
same session, so the main deployment is never broken.
"""

from __future__ import annotations

import os
import tempfile
import time
import uuid
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import ray

import rayq.cluster
from rayq.actors.protocol import (
    CreateTopicRequest,
    MessageQueue,
    PullRequest,
    SendResult,
    SendStatus,
    TopicRequest,
    broker_actor_name,
)
from rayq.actors.protocol.config import BrokerConfig, ClientConfig
from rayq.actors.server.table_files import PERM_ALL
from rayq.errors import (
    BrokerUnavailableError,
    ClosedError,
    ConfigError,
    InvalidGroupError,
    InvalidMessageError,
    InvalidTopicError,
    MessageTooLargeError,
    PermissionDeniedError,
    RayqError,
    TopicNotFoundError,
)
from rayq.producer.producer import Producer
from rayq.store import Message, MessageExt, StoreConfig, decode_records
from rayq.store.message import COMPRESSED_FLAG
from rayq.transport.context import ClientContext
from rayq.transport.ray_actors import RayReply

pytestmark = pytest.mark.integration

NAMESPACE = "rayq-test-producer"
BROKER = "broker-a"
MiB = 1 << 20
# Small preallocated files: the default 1 GiB commit-log segment is too much for tests.
SMALL_STORE = StoreConfig(
    commitlog_segment_size_bytes=32 * MiB,
    cq_entries_per_file=10_000,
    index_hash_slots=20_000,
    index_entries_max=100_000,
)


def small_config(**overrides: Any) -> BrokerConfig:
    return BrokerConfig(store=SMALL_STORE, **overrides)


@pytest.fixture(scope="module")
def store_root() -> Iterator[Path]:
    """A private directory: pytest's basetemp can be pruned by a concurrent pytest run."""
    with tempfile.TemporaryDirectory(prefix=f"{NAMESPACE}-") as root:
        yield Path(root)


@pytest.fixture(scope="module")
def cluster(store_root: Path) -> Iterator[rayq.cluster.Cluster]:
    if ray.is_initialized():
        pytest.skip("Ray is already initialized in this process; this module starts its own")
    try:
        started = rayq.cluster.start(
            store_dir=store_root / "main", namespace=NAMESPACE, config=small_config()
        )
    except BaseException:
        ray.shutdown()
        raise
    try:
        yield started
    finally:
        try:
            started.shutdown()
        finally:
            ray.shutdown()


@pytest.fixture(scope="module")
def producer(cluster: rayq.cluster.Cluster) -> Iterator[Producer]:
    p = Producer("pg-test", namespace=NAMESPACE)
    yield p
    p.shutdown()


@pytest.fixture(scope="module")
def ctx(cluster: rayq.cluster.Cluster) -> ClientContext:
    return ClientContext(namespace=NAMESPACE)


@pytest.fixture
def put_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Records the message count of every Broker.put a ClientContext makes."""
    calls: list[int] = []
    original = ClientContext.broker

    def broker(self: ClientContext, name: str) -> Any:
        handle = original(self, name)

        def put(batch: Any) -> Any:
            calls.append(batch.count)
            return handle.put(batch)

        return SimpleNamespace(put=put, pull=handle.pull, topic_stats=handle.topic_stats)

    monkeypatch.setattr(ClientContext, "broker", broker)
    return calls


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def read_queue(
    ctx: ClientContext,
    topic: str,
    queue_id: int,
    offset: int = 0,
    broker: str = BROKER,
    max_nums: int = 1024,
) -> list[MessageExt]:
    """Every stored message of one queue from ``offset`` on, straight from the broker."""
    out: list[MessageExt] = []
    while True:
        req = PullRequest(
            group="producer-test-reader",
            topic=topic,
            queue_id=queue_id,
            queue_offset=offset,
            max_nums=max_nums,
        )
        resp = ctx.broker(broker).pull(req).result(30)
        if resp.count == 0:
            return out
        out += decode_records(resp.buffer, broker_name=broker)
        if len(out) >= max_nums:
            return out[:max_nums]
        offset = resp.next_offset


def read_result(ctx: ClientContext, result: SendResult) -> MessageExt:
    q = result.queue
    return read_queue(ctx, q.topic, q.queue_id, result.queue_offset, q.broker_name, 1)[0]


def queue_sizes(ctx: ClientContext, topic: str, broker: str = BROKER) -> dict[int, int]:
    stats = ctx.broker(broker).topic_stats(TopicRequest(topic=topic)).result(30).queues
    return {s.queue.queue_id: s.max_offset for s in stats}


# ------------------------------------------------------------------ sends
def test_send_returns_send_ok_ids_and_per_queue_offsets_and_reads_back_identical(
    producer: Producer, ctx: ClientContext
) -> None:
    """Round robin over the 4 queues; each message reads back exactly as sent."""
    topic = unique("send")
    sent = [
        Message(
            topic,
            f"body-{i}".encode(),
            tags="TagA",
            keys=[f"k{i}", "common"],
            properties={"color": "red", "n": str(i)},
        )
        for i in range(8)
    ]
    results = [producer.send(m) for m in sent]

    assert {r.status for r in results} == {SendStatus.SEND_OK}
    assert len({r.msg_id for r in results}) == 8
    assert all(len(r.msg_id) == 32 and r.offset_msg_id for r in results)
    by_queue: dict[MessageQueue, list[int]] = {}
    for r in results:
        by_queue.setdefault(r.queue, []).append(r.queue_offset)
    assert sorted(q.queue_id for q in by_queue) == [0, 1, 2, 3]
    assert all(offsets == list(range(len(offsets))) for offsets in by_queue.values())
    for msg, r in zip(sent, results, strict=True):
        got = read_result(ctx, r)
        assert (got.body, got.tags, got.keys) == (msg.body, msg.tags, msg.keys)
        assert got.user_properties() == {**msg.properties, "PGROUP": "pg-test"}
        assert (got.msg_id, got.offset_msg_id, got.queue_id) == (
            r.msg_id,
            r.offset_msg_id,
            r.queue.queue_id,
        )
        assert got.sys_flag & COMPRESSED_FLAG == 0


def test_bodies_over_4_kib_travel_compressed_and_read_back_identical(
    producer: Producer, ctx: ClientContext
) -> None:
    topic = unique("zip")
    big = b"rayq compresses this " * 500  # 10.5 KB, compressible
    exactly_4k = bytes(range(256)) * 16  # at the threshold: not compressed
    noise = os.urandom(10_000)  # incompressible: sent as is
    results = [producer.send(Message(topic, body)) for body in (big, exactly_4k, noise)]
    stored = [read_result(ctx, r) for r in results]
    assert [s.body for s in stored] == [big, exactly_4k, noise]
    assert [bool(s.sys_flag & COMPRESSED_FLAG) for s in stored] == [True, False, False]
    assert stored[0].store_size < len(big) // 4


def test_send_batch_is_one_put_into_one_queue_with_consecutive_offsets(
    producer: Producer, ctx: ClientContext, put_calls: list[int]
) -> None:
    topic = unique("batch")
    sent = [Message(topic, f"b{i:03d}".encode(), keys=[f"k{i}"]) for i in range(100)]
    results = producer.send_batch(sent)
    assert put_calls == [100]
    assert len({r.queue for r in results}) == 1
    first = results[0].queue_offset
    assert [r.queue_offset for r in results] == list(range(first, first + 100))
    stored = read_queue(ctx, topic, results[0].queue.queue_id, first)
    assert [s.body for s in stored] == [m.body for m in sent]
    assert [s.msg_id for s in stored] == [r.msg_id for r in results]


def test_send_async_coalesces_2000_messages_and_stores_each_exactly_once(
    producer: Producer, ctx: ClientContext, put_calls: list[int]
) -> None:
    topic = unique("async")
    bodies = [b"%05d" % i + b"x" * 1019 for i in range(2000)]
    futures = [producer.send_async(Message(topic, body)) for body in bodies]
    results = [f.result(timeout=60) for f in futures]

    assert {r.status for r in results} == {SendStatus.SEND_OK}
    assert len({r.msg_id for r in results}) == 2000
    assert sum(put_calls) == 2000
    assert len(put_calls) <= 1000  # coalesced: far fewer puts than messages
    per_queue = Counter(r.queue.queue_id for r in results)
    # sticky queues: a queue may get nothing, but each queue holds what was sent to it
    assert {q: n for q, n in queue_sizes(ctx, topic).items() if n} == dict(per_queue)
    stored = [m for q in per_queue for m in read_queue(ctx, topic, q, max_nums=4000)]
    assert sorted(m.msg_id for m in stored) == sorted(r.msg_id for r in results)
    assert sorted(m.body for m in stored) == bodies
    for q, count in per_queue.items():
        assert sorted(r.queue_offset for r in results if r.queue.queue_id == q) == list(
            range(count)
        )


def test_send_oneway_stores_messages_and_returns_nothing(
    cluster: rayq.cluster.Cluster, ctx: ClientContext
) -> None:
    topic = unique("oneway")
    p = Producer("pg-oneway", namespace=NAMESPACE)
    assert [p.send_oneway(Message(topic, b"fire")) for _ in range(20)] == [None] * 20
    p.shutdown()  # sends what is still pending
    assert sum(queue_sizes(ctx, topic).values()) == 20


def test_send_orderly_keeps_each_sharding_key_on_one_queue_in_send_order(
    producer: Producer, ctx: ClientContext
) -> None:
    topic = unique("orderly")
    keys = [f"order-{i}" for i in range(6)]
    results: dict[str, list[SendResult]] = {k: [] for k in keys}
    for n in range(10):
        for k in keys:
            msg = Message(topic, f"{k}:{n}".encode())
            results[k].append(producer.send_orderly(msg, sharding_key=k))
    for k, rs in results.items():
        assert {r.queue.queue_id for r in rs} == {zlib.crc32(k.encode()) % 4}  # stable hash
        offsets = [r.queue_offset for r in rs]
        assert offsets == sorted(offsets)
        stored = [
            m
            for m in read_queue(ctx, topic, rs[0].queue.queue_id)
            if m.properties.get("__SHARDINGKEY") == k
        ]
        assert [m.body for m in stored] == [f"{k}:{n}".encode() for n in range(10)]
    assert len({rs[0].queue for rs in results.values()}) > 1


@ray.remote(num_cpus=0)
def _slow_put(handle: Any, batch: Any, delay_s: float) -> Any:
    time.sleep(delay_s)
    return ray.get(handle.put.remote(batch))


def test_puts_that_time_out_are_retried_then_fail_with_broker_unavailable(
    cluster: rayq.cluster.Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every put answers after 2 s; the producer gives each attempt 0.3 s."""

    def slow_broker(self: ClientContext, name: str) -> Any:
        handle = ray.get_actor(broker_actor_name(name), namespace=NAMESPACE)
        return SimpleNamespace(put=lambda batch: RayReply(_slow_put.remote(handle, batch, 2.0)))

    monkeypatch.setattr(ClientContext, "broker", slow_broker)
    p = Producer("pg-impatient", namespace=NAMESPACE, send_timeout_ms=300, retries=1)
    topic = unique("slow")
    with pytest.raises(BrokerUnavailableError, match=f"{topic}.*2 attempt.*in time"):
        p.send(Message(topic, b"x"))
    failed = p.send_async(Message(topic, b"y")).exception(timeout=30)
    assert isinstance(failed, BrokerUnavailableError)
    assert "send_timeout_ms=300" in str(failed)
    p.shutdown()


def test_queue_selection_round_robins_and_avoids_faulty_brokers() -> None:
    """White box, no Ray: slow or failed brokers are skipped while another one is left."""
    routes = Producer("pg-pick")._routes  # the producer's QueueSelector (produce_routes.py)
    queues = [MessageQueue("t", b, q) for b in ("a", "b") for q in range(2)]
    routes.queues["t"] = (queues, float("inf"))
    assert Counter(routes.pick("t") for _ in range(8)) == {q: 2 for q in queues}
    routes.faults.record("a", latency_s=1.5)  # slower than 1 s: avoided for a while
    assert {routes.pick("t").broker_name for _ in range(8)} == {"b"}
    assert routes.pick("t", avoid={"b"}).broker_name == "a"  # a is all that is left
    routes.faults.fail("b")  # every broker avoided: still picks one rather than fail
    assert {routes.pick("t").broker_name for _ in range(8)} <= {"a", "b"}


# -------------------------------------------------------------- bad input
T = "good-topic"
BAD_MESSAGES: list[tuple[str, Any, type[RayqError]]] = [
    ("not a Message", {"topic": T, "body": b"x"}, InvalidMessageError),
    ("bytes instead of a Message", b"x", InvalidMessageError),
    ("topic with a space", Message("bad topic", b"x"), InvalidTopicError),
    ("path in topic", Message("../etc", b"x"), InvalidTopicError),
    ("empty topic", Message("", b"x"), InvalidTopicError),
    ("topic of 128 chars", Message("t" * 128, b"x"), InvalidTopicError),
    ("topic not a str", Message(42, b"x"), InvalidTopicError),  # type: ignore[arg-type]
    ("empty body", Message(T, b""), InvalidMessageError),
    ("str body", Message(T, "text"), InvalidMessageError),  # type: ignore[arg-type]
    ("body over 4 MiB", Message(T, bytes(4 * MiB + 1)), MessageTooLargeError),
    ("tags not a str", Message(T, b"x", tags=5), InvalidMessageError),  # type: ignore[arg-type]
    ("tags with ||", Message(T, b"x", tags="a||b"), InvalidMessageError),
    ("tags with \\x01", Message(T, b"x", tags="a\x01"), InvalidMessageError),
    ("keys not a list", Message(T, b"x", keys=5), InvalidMessageError),  # type: ignore[arg-type]
    ("key with a space", Message(T, b"x", keys=["a b"]), InvalidMessageError),
    ("empty key", Message(T, b"x", keys=[""]), InvalidMessageError),
    ("key not a str", Message(T, b"x", keys=[1]), InvalidMessageError),  # type: ignore[list-item]
    ("properties not a dict", Message(T, b"x", properties=[("a", "b")]), InvalidMessageError),  # type: ignore[arg-type]
    ("property value not a str", Message(T, b"x", properties={"a": 1}), InvalidMessageError),  # type: ignore[dict-item]
    ("property with \\x02", Message(T, b"x", properties={"a": "b\x02"}), InvalidMessageError),
    ("reserved TAGS", Message(T, b"x", properties={"TAGS": "x"}), InvalidMessageError),
    ("reserved KEYS", Message(T, b"x", properties={"KEYS": "x"}), InvalidMessageError),
    ("reserved UNIQ_KEY", Message(T, b"x", properties={"UNIQ_KEY": "x"}), InvalidMessageError),
    (
        "properties over 32 KiB",
        Message(T, b"x", properties={"big": "x" * 40_000}),
        MessageTooLargeError,
    ),
    ("delay level 19", Message(T, b"x", delay_level=19), InvalidMessageError),
    ("delay level -1", Message(T, b"x", delay_level=-1), InvalidMessageError),
    ("delay level as str", Message(T, b"x", delay_level="3"), InvalidMessageError),  # type: ignore[arg-type]
    (
        "deliver 4 days ahead",
        Message(T, b"x", deliver_at_ms=int(time.time() * 1000) + 4 * 86_400_000),
        InvalidMessageError,
    ),
    ("deliver_at_ms negative", Message(T, b"x", deliver_at_ms=-1), InvalidMessageError),
    (
        "delay and deliver_at_ms",
        Message(T, b"x", delay_level=2, deliver_at_ms=int(time.time() * 1000)),
        InvalidMessageError,
    ),
    ("flag over 32 bits", Message(T, b"x", flag=2**31), InvalidMessageError),
    ("system topic TBW102", Message("TBW102", b"x"), PermissionDeniedError),
    ("schedule topic", Message("SCHEDULE_TOPIC_XXXX", b"x"), PermissionDeniedError),
    ("rmq_sys_ topic", Message("rmq_sys_x", b"x"), PermissionDeniedError),
    ("retry topic", Message("%RETRY%pg-test", b"x"), PermissionDeniedError),
    ("dead-letter topic", Message("%DLQ%pg-test", b"x"), PermissionDeniedError),
    *[
        (f"reserved {name}", Message(T, b"x", properties={name: "forged"}), InvalidMessageError)
        for name in (
            "RETRY_TOPIC",
            "ORIGIN_MESSAGE_ID",
            "DLQ_ORIGIN_TOPIC",
            "DLQ_ORIGIN_MESSAGE_ID",
            "REAL_TOPIC",
            "REAL_QID",
            "WAIT",
            "MAX_RECONSUME_TIMES",
            "RECONSUME_TIME",
        )
    ],
]


@pytest.mark.parametrize(
    ("msg", "error"),
    [(m, e) for _, m, e in BAD_MESSAGES],
    ids=[name for name, _, _ in BAD_MESSAGES],
)
def test_bad_messages_raise_client_errors_before_any_put(
    producer: Producer, put_calls: list[int], msg: Any, error: type[RayqError]
) -> None:
    sends: list[Callable[[], Any]] = [
        lambda: producer.send(msg),
        lambda: producer.send_async(msg),
        lambda: producer.send_oneway(msg),
        lambda: producer.send_batch([msg]),
        lambda: producer.send_orderly(msg, sharding_key="k"),
    ]
    for send in sends:
        with pytest.raises(error):
            send()
    assert put_calls == []


def test_too_large_errors_name_the_size_and_the_limit(producer: Producer) -> None:
    with pytest.raises(MessageTooLargeError, match=f"{4 * MiB + 1} bytes.*{4 * MiB}") as info:
        producer.send(Message(T, bytes(4 * MiB + 1)))
    assert (info.value.details["value"], info.value.details["limit"]) == (4 * MiB + 1, 4 * MiB)


def test_bad_batches_raise_before_any_put(
    cluster: rayq.cluster.Cluster, producer: Producer, put_calls: list[int]
) -> None:
    with pytest.raises(InvalidMessageError, match="one topic"):
        producer.send_batch([Message("topic-a", b"x"), Message("topic-b", b"y")])
    for empty in ([], (), None, Message(T, b"x")):
        with pytest.raises(InvalidMessageError):
            producer.send_batch(empty)  # type: ignore[arg-type]
    with pytest.raises(MessageTooLargeError, match="batch_max_bytes"):
        producer.send_batch([Message(T, os.urandom(MiB)) for _ in range(5)])
    tight = Producer("pg-tight", namespace=NAMESPACE, config=ClientConfig(batch_max_bytes=10_000))
    with pytest.raises(MessageTooLargeError, match="batch_max_bytes"):  # bodies fit, records not
        tight.send_batch([Message(T, os.urandom(900)) for _ in range(10)])
    tight.shutdown()
    for key in ("", 5, None, "a\x02b"):
        with pytest.raises(InvalidMessageError, match="sharding_key"):
            producer.send_orderly(Message(T, b"x"), sharding_key=key)  # type: ignore[arg-type]
    assert put_calls == []


def test_bad_producer_settings_raise_at_construction() -> None:
    with pytest.raises(InvalidGroupError):
        Producer("bad group!")
    with pytest.raises(InvalidGroupError):
        Producer("")
    with pytest.raises(ConfigError):
        Producer("pg", config={"retries": 1})  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        Producer("pg", retries=-1)
    with pytest.raises(ConfigError):
        Producer("pg", send_timeout_ms=0)


def test_the_broker_still_works_after_bad_input(producer: Producer, ctx: ClientContext) -> None:
    topic = unique("after-bad")
    for bad in (Message(topic, b""), Message(topic, b"x", properties={"TAGS": "t"})):
        with pytest.raises(InvalidMessageError):
            producer.send(bad)
    result = producer.send(Message(topic, b"fine"))
    assert result.status is SendStatus.SEND_OK
    assert read_result(ctx, result).body == b"fine"


# -------------------------------------------------------------- lifecycle
def test_shutdown_sends_pending_async_messages_then_calls_raise_closed(
    cluster: rayq.cluster.Cluster, ctx: ClientContext
) -> None:
    topic = unique("closing")
    p = Producer("pg-closing", namespace=NAMESPACE)
    p.start()
    p.start()  # idempotent
    futures = [p.send_async(Message(topic, b"x")) for _ in range(300)]
    p.shutdown()
    assert all(f.done() and f.result().status is SendStatus.SEND_OK for f in futures)
    assert sum(queue_sizes(ctx, topic).values()) == 300
    msg = Message(topic, b"late")
    calls: list[Callable[[], Any]] = [
        lambda: p.send(msg),
        lambda: p.send_async(msg),
        lambda: p.send_oneway(msg),
        lambda: p.send_batch([msg]),
        lambda: p.send_orderly(msg, "k"),
        p.start,
    ]
    for late in calls:
        with pytest.raises(ClosedError, match="shut down"):
            late()
    p.shutdown()  # a second shutdown is a no-op


def test_context_manager_starts_and_shuts_down(cluster: rayq.cluster.Cluster) -> None:
    with Producer("pg-with", namespace=NAMESPACE) as p:
        assert p.send(Message(unique("with"), b"x")).status is SendStatus.SEND_OK
    with pytest.raises(ClosedError):
        p.send(Message(unique("with"), b"x"))


def test_no_deployment_in_the_namespace_is_broker_unavailable(
    cluster: rayq.cluster.Cluster,
) -> None:
    p = Producer("pg-nowhere", namespace="rayq-test-producer-nothing-here")
    with pytest.raises(InvalidMessageError):  # bad input is still found first
        p.send(Message(T, b""))
    with pytest.raises(BrokerUnavailableError, match="no rayq deployment"):
        p.send(Message(T, b"x"))
    p.shutdown()


# ------------------------------------------ other deployments, same Ray session
@pytest.fixture
def deployment(cluster: rayq.cluster.Cluster, store_root: Path) -> Iterator[Callable[..., Any]]:
    """Starts more deployments (each in its own namespace) and stops them afterwards."""
    started: list[rayq.cluster.Cluster] = []

    def start(suffix: str, **kwargs: Any) -> rayq.cluster.Cluster:
        started.append(
            rayq.cluster.start(
                store_dir=store_root / suffix, namespace=f"{NAMESPACE}-{suffix}", **kwargs
            )
        )
        return started[-1]

    yield start
    for c in started:
        c.shutdown()


def test_unknown_topic_without_auto_create_is_not_found_until_created(
    deployment: Callable[..., Any], put_calls: list[int]
) -> None:
    strict = deployment("strict", config=small_config(auto_create_topic_enable=False))
    topic = unique("strict")
    p = Producer("pg-strict", namespace=strict.namespace)
    with pytest.raises(TopicNotFoundError, match=topic):
        p.send(Message(topic, b"x"))
    assert put_calls == [1]  # not retried
    assert isinstance(p.send_async(Message(topic, b"x")).exception(timeout=30), TopicNotFoundError)

    broker = ray.get_actor(broker_actor_name(BROKER), namespace=strict.namespace)
    req = CreateTopicRequest(topic=topic, read_queue_nums=2, write_queue_nums=2, perm=PERM_ALL)
    ray.get(broker.create_topic.remote(req), timeout=30)
    results = [p.send(Message(topic, b"x")) for _ in range(4)]
    results += [p.send_async(Message(topic, b"y")).result(timeout=30) for _ in range(4)]
    assert {r.queue.queue_id for r in results} == {0, 1}
    p.shutdown()


def test_killed_brokers_are_avoided_then_sends_fail_with_broker_unavailable(
    deployment: Callable[..., Any], kill_for_good: Callable[[Any], None]
) -> None:
    dead = deployment("dead", brokers=2, config=small_config())
    topic = unique("dying")
    p = Producer("pg-dying", namespace=dead.namespace)
    warm = [p.send(Message(topic, b"warm")) for _ in range(8)]
    assert {r.queue.broker_name for r in warm} == {"broker-a-0", "broker-a-1"}

    kill_for_good(ray.get_actor(broker_actor_name("broker-a-0"), namespace=dead.namespace))
    # the other broker takes over, even mid-retry
    moved = [p.send(Message(topic, b"moved")) for _ in range(8)]
    moved += [f.result(timeout=30) for f in [p.send_async(Message(topic, b"a")) for _ in range(50)]]
    assert {r.queue.broker_name for r in moved} == {"broker-a-1"}

    kill_for_good(ray.get_actor(broker_actor_name("broker-a-1"), namespace=dead.namespace))
    with pytest.raises(BrokerUnavailableError, match=f"{topic}.*3 attempt"):
        p.send(Message(topic, b"lost"))
    failed = p.send_async(Message(topic, b"lost")).exception(timeout=60)
    assert isinstance(failed, BrokerUnavailableError)
    with pytest.raises(BrokerUnavailableError):
        p.send_orderly(Message(topic, b"lost"), sharding_key="k")
    p.shutdown()
