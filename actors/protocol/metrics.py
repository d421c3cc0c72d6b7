"""Every metric rayq records, declared once: name, kind, help text, labels, buckets.

The contract between the parts that record metrics (the server actors,
actors/metrics.py; the clients, rayq/metrics.py) and what scrapes them (the Grafana
dashboard, the tests). Plain data, no Ray: ``make_metric`` builds a metric object
from a spec with the ``ray.util.metrics`` module its caller imported.
"""

from __future__ import annotations

from typing import Any, Final, Literal

import msgspec

REPORT_INTERVAL_S: Final[float] = 2.0  # how often an actor hands its tally to Ray

RAY_PREFIX: Final[str] = "ray_"  # what Ray's exporter puts before every name

# Seconds. Puts and pulls take about a millisecond through Ray on this machine.
LATENCY_BOUNDARIES: Final[tuple[float, ...]] = (
    0.0005,
    0.001,
    0.002,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
)
LISTENER_BOUNDARIES: Final[tuple[float, ...]] = (
    0.0001,
    0.001,
    0.005,
    0.01,
    0.05,
    0.1,
    0.5,
    1.0,
    5.0,
    15.0,
    60.0,
)

Kind = Literal["counter", "gauge", "histogram"]


class Spec(msgspec.Struct, frozen=True):
    """One metric: its name as recorded, its kind, help text and label names."""

    name: str
    kind: Kind
    help: str
    tags: tuple[str, ...]
    boundaries: tuple[float, ...] = ()

    @property
    def exported(self) -> str:
        """The family name Prometheus scrapes (a histogram adds _bucket/_sum/_count)."""
        suffix = "_total" if self.kind == "counter" else ""
        return f"{RAY_PREFIX}{self.name}{suffix}"


_BT = ("broker", "topic")
SPECS: Final[tuple[Spec, ...]] = (
    Spec("rayq_put_messages", "counter", "Messages appended, per topic.", _BT),
    Spec("rayq_put_bytes", "counter", "Record bytes appended, per topic.", _BT),
    Spec("rayq_pull_messages", "counter", "Messages returned by pulls, per topic.", _BT),
    Spec("rayq_pull_bytes", "counter", "Record bytes returned by pulls, per topic.", _BT),
    Spec(
        "rayq_put_latency_seconds",
        "histogram",
        "Broker time of one put call (a batch), with the sync flush and slave waits.",
        _BT,
        LATENCY_BOUNDARIES,
    ),
    Spec(
        "rayq_pull_latency_seconds",
        "histogram",
        "Broker time of one pull call (read only; a parked pull's wait is not in it).",
        ("broker",),
        LATENCY_BOUNDARIES,
    ),
    Spec(
        "rayq_consumer_lag_messages",
        "gauge",
        "Max offset minus committed offset, summed over the topic's queues on this broker "
        "(RocketMQ exporter's rocketmq_group_diff).",
        ("broker", "group", "topic"),
    ),
    Spec(
        "rayq_retry_messages",
        "counter",
        "Messages sent back to %RETRY%<group>.",
        ("broker", "group"),
    ),
    Spec(
        "rayq_dlq_messages",
        "counter",
        "Messages sent to the dead-letter topic %DLQ%<group>.",
        ("broker", "group"),
    ),
    Spec(
        "rayq_parked_pulls", "gauge", "Pulls parked on the broker waiting for appends.", ("broker",)
    ),
    Spec(
        "rayq_disk_usage_ratio",
        "gauge",
        "Used fraction of the store's file system (writes are refused past disk_warning_ratio).",
        ("broker",),
    ),
    Spec(
        "rayq_replication_lag_bytes",
        "gauge",
        "Commit-log bytes a slave lacks, as its master sees it.",
        ("broker", "slave"),
    ),
    Spec(
        "rayq_replication_lag_seconds",
        "gauge",
        "Age of the oldest record a slave lacks, as its master sees it.",
        ("broker", "slave"),
    ),
    Spec(
        "rayq_flush_latency_seconds",
        "histogram",
        "One flush round (mode=async) or group commit (mode=sync) of the flusher.",
        ("broker", "mode"),
        LATENCY_BOUNDARIES,
    ),
    Spec(
        "rayq_flush_dirty_bytes",
        "gauge",
        "Commit-log bytes written but not yet durable, at the start of a flush round.",
        ("broker",),
    ),
    Spec(
        "rayq_rebalances",
        "counter",
        "Rebalances carried out by the coordinator, per group.",
        ("group",),
    ),
    Spec(
        "rayq_consumed_messages",
        "counter",
        "Messages a push consumer's listener consumed successfully.",
        ("group", "topic"),
    ),
    Spec(
        "rayq_consume_failed_messages",
        "counter",
        "Messages a push consumer's listener failed (sent back or retried).",
        ("group", "topic"),
    ),
    Spec(
        "rayq_listener_latency_seconds",
        "histogram",
        "One call of a push consumer's listener.",
        ("group",),
        LISTENER_BOUNDARIES,
    ),
    # Client side (rayq/metrics.py): recorded by any Ray driver or worker that
    # runs producers or consumers, push consumer actors included.
    Spec(
        "rayq_client_send_latency_seconds",
        "histogram",
        "A producer's send of one batch (one message for send()), its retries included.",
        ("topic",),
        LATENCY_BOUNDARIES,
    ),
    Spec(
        "rayq_client_send_errors",
        "counter",
        "Producer sends that failed once their retries were spent (a batch counts once).",
        ("topic",),
    ),
    Spec(
        "rayq_client_receive_lag_messages",
        "gauge",
        "Messages left in a queue after a consumer's last pull of it (max offset minus "
        "the next offset).",
        ("group", "topic", "broker", "queue_id"),
    ),
    Spec(
        "rayq_client_listener_seconds",
        "histogram",
        "One call of a push consumer's listener, as its client process sees it.",
        ("group",),
        LISTENER_BOUNDARIES,
    ),
)

# A broker's counters per topic and per group (created at 0 for those it knows).
PER_TOPIC_COUNTERS: Final = (
    "rayq_put_messages",
    "rayq_put_bytes",
    "rayq_pull_messages",
    "rayq_pull_bytes",
)
PER_GROUP_COUNTERS: Final = ("rayq_retry_messages", "rayq_dlq_messages")
# A push consumer's counters per subscribed topic.
CONSUMER_COUNTERS: Final = ("rayq_consumed_messages", "rayq_consume_failed_messages")

SPEC_BY_NAME: Final[dict[str, Spec]] = {s.name: s for s in SPECS}
EXPORTED_FAMILIES: Final[frozenset[str]] = frozenset(s.exported for s in SPECS)


def make_metric(spec: Spec, ray_metrics: Any) -> Any:
    """The ``ray.util.metrics`` object for ``spec`` (``ray_metrics``: that module)."""
    if spec.kind == "counter":
        return ray_metrics.Counter(spec.name, spec.help, spec.tags)
    if spec.kind == "gauge":
        return ray_metrics.Gauge(spec.name, spec.help, spec.tags)
    return ray_metrics.Histogram(spec.name, spec.help, list(spec.boundaries), spec.tags)


def record_zero(made: Any, tags: dict[str, str]) -> None:
    """Create the series ``tags`` of the counter ``made`` at 0, so that it is exported
    (and Grafana shows 0, not "No data") before its first event. Ray's ``Counter.inc``
    refuses 0; ``_record`` is what ``inc`` records through (test_metrics.py scrapes it)."""
    record = getattr(made, "_record", None)
    if record is not None:
        record(0, tags)
