"""rayq's metrics, recorded with ``ray.util.metrics`` so that Ray's own Prometheus
export carries them (each node's metrics agent, at ``--metrics-export-port``).

Every metric is declared once, in ``SPECS``. Ray's exporter prefixes each name with
``ray_`` and gives each counter the ``_total`` suffix, so ``rayq_put_messages`` is
scraped as ``ray_rayq_put_messages_total``; ``Spec.exported`` is that name and
``EXPORTED_FAMILIES`` lists them all (the dashboard test checks its queries against
it). Ray adds its own labels (``SessionName``, ``NodeAddress``, ``WorkerId``...); ours
are few and bounded: broker, topic, group, slave (a broker id), mode, queue_id. Never
a message, key or client id.

The hot paths (a put, a pull, a listener call) only add to a ``Tally``
(store/tally.py): a dict lookup, no Ray call. The broker's and consumer's
metrics timers (every ``REPORT_INTERVAL_S``) and the flusher's rounds drain it into
the counters and histograms and set the gauges (lag, parked pulls, disk,
replication, dirty bytes) from the server objects they hold. The coordinator counts
its rebalances directly (a few a minute at most).

    broker      rayq_put_*, rayq_pull_*, rayq_consumer_lag_messages, rayq_retry_messages,
                rayq_dlq_messages, rayq_parked_pulls, rayq_disk_usage_ratio,
                rayq_replication_lag_*                                (actors/broker.py)
    flusher     rayq_flush_latency_seconds, rayq_flush_dirty_bytes    (actors/flusher.py)
    coordinator rayq_rebalances                                       (actors/coordinator.py)
    consumer    rayq_consumed_messages, rayq_consume_failed_messages,
                rayq_listener_latency_seconds                         (actors/consumer.py)
    clients     rayq_client_send_latency_seconds, rayq_client_send_errors,
                rayq_client_receive_lag_messages,
                rayq_client_listener_seconds                          (rayq/metrics.py)

Every counter whose labels are known exists from the start at 0 (``zero_counter``):
a broker's per topic and group for those it holds (at start and as they appear), a
push consumer's per subscribed topic, a client's send errors per topic it sends to.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final, Literal

import msgspec

from rayq.store.tally import Tally

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

_made: dict[str, Any] = {}  # one Ray metric object per name and process


def metric(name: str) -> Any:
    """The Ray metric object for ``name`` (made on first use in this process)."""
    found = _made.get(name)
    if found is not None:
        return found
    from ray.util import metrics as ray_metrics

    spec = SPEC_BY_NAME[name]
    made: ray_metrics.Metric
    if spec.kind == "counter":
        made = ray_metrics.Counter(spec.name, spec.help, spec.tags)
    elif spec.kind == "gauge":
        made = ray_metrics.Gauge(spec.name, spec.help, spec.tags)
    else:
        made = ray_metrics.Histogram(spec.name, spec.help, list(spec.boundaries), spec.tags)
    _made[name] = made
    return made


def record_tally(
    tally: Tally, fixed: dict[str, str], counters: tuple[str, ...], histogram: str = ""
) -> None:
    """Hand what ``tally`` gathered to Ray: each key's totals to ``counters`` (in order:
    the i-th amount of ``Tally.count`` goes to the i-th counter; a zero is skipped),
    each sample to ``histogram``. A key's labels are ``fixed`` plus the remaining tag
    keys of the metric, in order, from the key."""
    counts, samples = tally.drain()
    for key, totals in counts.items():
        for name, amount in zip(counters, totals, strict=True):
            if amount > 0:
                metric(name).inc(amount, _tags(name, fixed, key))
    if samples and histogram:
        hist = metric(histogram)
        for key, values in samples.items():
            tags = _tags(histogram, fixed, key)
            for value in values:
                hist.observe(value, tags)


def zero_counter(name: str, tags: dict[str, str]) -> None:
    """Create the series ``tags`` of the counter ``name`` at 0, so that it is exported (and
    Grafana shows 0, not "No data") before its first event. Ray's ``Counter.inc`` refuses
    0; ``_record`` is what ``inc`` records through (checked by test_metrics.py)."""
    record = getattr(metric(name), "_record", None)
    if record is not None:
        record(0, tags)


class ZeroSeeds:
    """The counter series created at 0 so far by one actor: each (counter, labels) once."""

    def __init__(self, fixed: dict[str, str]) -> None:
        self.fixed = fixed
        self._done: set[tuple[str, tuple[str, ...]]] = set()

    def seed(self, counters: tuple[str, ...], keys: Iterable[tuple[str, ...]]) -> None:
        """``counters`` at 0 for each label key (the labels after ``fixed``, in order)."""
        for key in keys:
            for name in counters:
                if (name, key) not in self._done:
                    zero_counter(name, _tags(name, self.fixed, key))
                    self._done.add((name, key))


def _tags(name: str, fixed: dict[str, str], key: tuple[str, ...]) -> dict[str, str]:
    rest = [t for t in SPEC_BY_NAME[name].tags if t not in fixed]
    return {**fixed, **dict(zip(rest, key, strict=False))}


class GaugeSet:
    """One gauge whose label sets come and go (a group's lag, a slave's lag): a label
    set that was reported before and is gone now is set to 0 once, not left at its
    last value."""

    def __init__(self, name: str, fixed: dict[str, str]) -> None:
        self.name = name
        self.fixed = fixed
        self._last: set[tuple[str, ...]] = set()

    def set_all(self, values: dict[tuple[str, ...], float]) -> None:
        gauge = metric(self.name)
        for key in self._last - values.keys():
            gauge.set(0, _tags(self.name, self.fixed, key))
        for key, value in values.items():
            gauge.set(value, _tags(self.name, self.fixed, key))
        self._last = set(values)


class BrokerMetrics:
    """A broker's tallies (filled by its put, pull and send-back calls) and gauges,
    reported by its metrics timer."""

    def __init__(self, broker: str) -> None:
        self.fixed = {"broker": broker}
        self.puts = Tally()  # (topic,): messages, bytes; latency samples
        self.pulls = Tally()  # (topic,): messages, bytes; () latency samples
        self.send_backs = Tally()  # (group,): retried, dead-lettered
        self.lags = GaugeSet("rayq_consumer_lag_messages", self.fixed)
        self.replica_bytes = GaugeSet("rayq_replication_lag_bytes", self.fixed)
        self.replica_seconds = GaugeSet("rayq_replication_lag_seconds", self.fixed)
        self.zeros = ZeroSeeds(self.fixed)

    def report(
        self,
        *,
        lags: dict[tuple[str, str], int],
        parked: int,
        disk_ratio: float,
        replicas: dict[str, tuple[int, float]],
        topics: Iterable[str] = (),
        groups: Iterable[str] = (),
    ) -> None:
        """Drain the tallies into Ray; set the gauges. ``replicas``: slave id ->
        (lag in bytes, lag in seconds). The counters of the ``topics`` and ``groups`` the
        broker knows are created at 0 first (once each)."""
        self.zeros.seed(PER_TOPIC_COUNTERS, ((t,) for t in topics))
        self.zeros.seed(PER_GROUP_COUNTERS, ((g,) for g in groups))
        record_tally(
            self.puts,
            self.fixed,
            ("rayq_put_messages", "rayq_put_bytes"),
            "rayq_put_latency_seconds",
        )
        record_tally(
            self.pulls,
            self.fixed,
            ("rayq_pull_messages", "rayq_pull_bytes"),
            "rayq_pull_latency_seconds",
        )
        record_tally(self.send_backs, self.fixed, ("rayq_retry_messages", "rayq_dlq_messages"))
        self.lags.set_all({key: float(lag) for key, lag in lags.items()})
        metric("rayq_parked_pulls").set(parked, self.fixed)
        metric("rayq_disk_usage_ratio").set(disk_ratio, self.fixed)
        self.replica_bytes.set_all({(s,): float(b) for s, (b, _) in replicas.items()})
        self.replica_seconds.set_all({(s,): sec for s, (_, sec) in replicas.items()})
