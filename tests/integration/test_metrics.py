"""rayq's metrics as Prometheus scrapes them: Ray started with a metrics export port, a
short workload through ``rayq.start`` (a master and one slave), a producer and a push
consumer, then the node's ``/metrics`` endpoint fetched over HTTP and parsed with
prometheus-client's text parser."""

from __future__ import annotations

import socket
import time
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import ray
from prometheus_client.parser import text_string_to_metric_families

import rayq
from rayq.actors.metrics import EXPORTED_FAMILIES, RAY_PREFIX, SPECS, Spec
from rayq.store import StoreConfig

pytestmark = pytest.mark.integration

NAMESPACE = "rayq-test-metrics"
TOPIC = "metered"
GROUP = "metered-cg"
IDLE_TOPIC = "idle"  # created, never used: its counters are exported at 0
IDLE_GROUP = "idle-cg"
BATCHES = 3
PER_BATCH = 40
SENT = BATCHES * PER_BATCH  # one of them is b"fail": retried once, then dead-lettered
BODY = b"m" * 100
EXPORT_WAIT_S = 60.0  # Ray exports every few seconds; actors report every 2 s
STORE = StoreConfig.for_tests(
    disk_max_used_space_ratio=1.0, disk_clean_forcibly_ratio=1.0, disk_warning_ratio=1.0
)

Samples = dict[str, list[tuple[dict[str, str], float]]]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _fail_one(msgs: list[rayq.MessageExt]) -> rayq.ConsumeStatus:
    if any(m.body == b"fail" for m in msgs):
        return rayq.ConsumeStatus.RECONSUME_LATER
    return rayq.ConsumeStatus.CONSUME_SUCCESS


def _scrape(port: int) -> tuple[set[str], Samples]:
    """The metric families on the endpoint (a counter under its ``_total`` name, as
    scraped) and every rayq sample by name."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
    families: set[str] = set()
    samples: Samples = {}
    for family in text_string_to_metric_families(text.decode()):
        if "rayq" not in family.name:
            continue
        families.add(family.name + ("_total" if family.type == "counter" else ""))
        for s in family.samples:
            samples.setdefault(s.name, []).append((s.labels, s.value))
    return families, samples


def _value(samples: Samples, name: str, **labels: str) -> float | None:
    """The sum over the series of ``name`` with ``labels`` (None: no such series)."""
    found = [v for got, v in samples.get(name, []) if labels.items() <= got.items()]
    return sum(found) if found else None


@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[], Any]]:
    """Ray with a metrics export port, rayq (one master, one slave) and the workload;
    yields the scrape function. Ray is always shut down."""
    if ray.is_initialized():
        pytest.skip("Ray is already initialized in this process; this module starts its own")
    port = _free_port()
    ray.init(
        address="local",
        num_cpus=2,
        namespace=NAMESPACE,
        log_to_driver=False,
        include_dashboard=False,
        _metrics_export_port=port,
    )
    try:
        config = rayq.BrokerConfig(store=STORE, message_delay_level="1s 1s 1s 1s 1s 1s")
        cluster = rayq.start(
            tmp_path_factory.mktemp("store"), namespace=NAMESPACE, config=config, slaves=1
        )
        try:
            consumer = _workload()
            try:  # the consumer stays up: its last report must reach Ray before it goes
                yield lambda: _scrape(port)
            finally:
                consumer.shutdown()
        finally:
            cluster.shutdown()
    finally:
        ray.shutdown()


def _workload() -> rayq.PushConsumer:
    admin = rayq.Admin()
    admin.create_topic(TOPIC, queues=2)
    admin.create_topic(IDLE_TOPIC, queues=1)
    admin.create_group(IDLE_GROUP)
    consumer = rayq.PushConsumer(
        GROUP, consume_from=rayq.ConsumeFromWhere.FIRST_OFFSET, max_reconsume_times=1
    )
    consumer.subscribe(TOPIC)
    consumer.register_listener(_fail_one)
    consumer.start()
    with rayq.Producer("metered-pg") as producer:
        for b in range(BATCHES):
            bodies = [BODY] * PER_BATCH
            if b == 0:
                bodies[0] = b"fail"
            producer.send_batch([rayq.Message(TOPIC, body) for body in bodies])
    return consumer


# With what was sent: (sample name, labels, expected value or a check).
EXPECTED: list[tuple[str, dict[str, str], Callable[[float], bool]]] = [
    ("ray_rayq_put_messages_total", {"topic": TOPIC, "broker": "broker-a"}, lambda v: v == SENT),
    ("ray_rayq_put_bytes_total", {"topic": TOPIC}, lambda v: v >= (SENT - 1) * len(BODY)),
    ("ray_rayq_put_latency_seconds_count", {"topic": TOPIC}, lambda v: v == BATCHES),
    ("ray_rayq_pull_messages_total", {"topic": TOPIC}, lambda v: v >= SENT),
    ("ray_rayq_pull_bytes_total", {"topic": TOPIC}, lambda v: v > 0),
    ("ray_rayq_pull_latency_seconds_count", {}, lambda v: v >= 1),
    ("ray_rayq_consumed_messages_total", {"group": GROUP, "topic": TOPIC}, lambda v: v == SENT - 1),
    ("ray_rayq_consume_failed_messages_total", {"group": GROUP}, lambda v: v == 2),
    ("ray_rayq_listener_latency_seconds_count", {"group": GROUP}, lambda v: v >= 1),
    ("ray_rayq_retry_messages_total", {"group": GROUP}, lambda v: v == 1),
    ("ray_rayq_dlq_messages_total", {"group": GROUP}, lambda v: v == 1),
    ("ray_rayq_consumer_lag_messages", {"group": GROUP, "topic": TOPIC}, lambda v: v == 0),
    ("ray_rayq_rebalances_total", {"group": GROUP}, lambda v: v >= 1),
    ("ray_rayq_parked_pulls", {"broker": "broker-a"}, lambda v: v >= 0),
    ("ray_rayq_disk_usage_ratio", {"broker": "broker-a"}, lambda v: 0 < v <= 1),
    ("ray_rayq_flush_dirty_bytes", {"broker": "broker-a"}, lambda v: v >= 0),
    ("ray_rayq_flush_latency_seconds_count", {"mode": "async"}, lambda v: v >= 1),
    ("ray_rayq_replication_lag_bytes", {"broker": "broker-a", "slave": "1"}, lambda v: v >= 0),
    ("ray_rayq_replication_lag_seconds", {"broker": "broker-a", "slave": "1"}, lambda v: v >= 0),
    # counters exported at 0 before their first event
    ("ray_rayq_put_messages_total", {"topic": IDLE_TOPIC}, lambda v: v == 0),
    ("ray_rayq_pull_bytes_total", {"topic": IDLE_TOPIC}, lambda v: v == 0),
    ("ray_rayq_retry_messages_total", {"group": IDLE_GROUP}, lambda v: v == 0),
    ("ray_rayq_dlq_messages_total", {"group": IDLE_GROUP}, lambda v: v == 0),
    # client side: this driver's producer, the push consumer actor's pulls and listener
    ("ray_rayq_client_send_latency_seconds_count", {"topic": TOPIC}, lambda v: v == BATCHES),
    ("ray_rayq_client_send_errors_total", {"topic": TOPIC}, lambda v: v == 0),
    (
        "ray_rayq_client_receive_lag_messages",
        {"group": GROUP, "topic": TOPIC, "queue_id": "0"},
        lambda v: v == 0,
    ),
    ("ray_rayq_client_listener_seconds_count", {"group": GROUP}, lambda v: v >= 1),
]


def _misses(samples: Samples) -> list[str]:
    out = []
    for name, labels, ok in EXPECTED:
        value = _value(samples, name, **labels)
        if value is None or not ok(value):
            out.append(f"{name}{labels} = {value}")
    return out


def test_every_rayq_metric_family_is_exported_with_the_counts_sent(scraped) -> None:
    """Given 120 messages sent (one failing twice) and consumed, when /metrics is
    scraped, expect every family of actors/metrics.py (the clients' too), counts equal
    to what was sent, and the counters of an idle topic and group at 0."""
    deadline = time.monotonic() + EXPORT_WAIT_S
    while True:
        families, samples = scraped()
        missing = sorted(EXPORTED_FAMILIES - families)
        wrong = _misses(samples)
        if not missing and not wrong:
            break
        if time.monotonic() > deadline:
            pytest.fail(
                f"after {EXPORT_WAIT_S:.0f} s: families missing {missing}; values off {wrong}"
            )
        time.sleep(2.0)


def test_series_carry_only_their_declared_labels(scraped) -> None:
    """Each rayq series has exactly its metric's declared labels (bounded: broker, topic,
    group, slave, mode; never a message or client id), besides Ray's own (capitalized:
    Component, NodeAddress, SessionName, WorkerId...; otel_scope_*) and ``le``."""
    _, samples = scraped()
    assert samples
    for name, series in samples.items():
        spec = _spec_of(name)
        for labels, _ in series:
            ours = {k for k in labels if not k[0].isupper() and not k.startswith("otel_")}
            assert ours - {"le"} == set(spec.tags), (name, labels)


def _spec_of(sample: str) -> Spec:
    for spec in SPECS:
        base = f"{RAY_PREFIX}{spec.name}"
        if sample == spec.exported or sample.removeprefix(base) in ("_bucket", "_sum", "_count"):
            return spec
    raise AssertionError(f"{sample} is not declared in actors/metrics.py")
