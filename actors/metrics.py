"""rayq's metrics, recorded with ``ray.util.metrics`` so that Ray's own Prometheus
export carries them (each node's metrics agent, at ``--metrics-export-port``).

Every metric is declared once, in ``SPECS`` (actors/protocol/metrics.py). Ray's exporter
prefixes each name with ``ray_`` and gives each counter the ``_total`` suffix, so
``rayq_put_messages`` is scraped as ``ray_rayq_put_messages_total``; ``Spec.exported``
is that name and ``EXPORTED_FAMILIES`` lists them all (the dashboard test checks its
queries against it). Ray adds its own labels (``SessionName``, ``NodeAddress``,
``WorkerId``...); ours are few and bounded: broker, topic, group, slave (a broker id),
mode, queue_id. Never a message, key or client id.

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
from typing import Any

from rayq.actors.protocol.metrics import (
    CONSUMER_COUNTERS,
    EXPORTED_FAMILIES,
    LATENCY_BOUNDARIES,
    LISTENER_BOUNDARIES,
    PER_GROUP_COUNTERS,
    PER_TOPIC_COUNTERS,
    RAY_PREFIX,
    REPORT_INTERVAL_S,
    SPEC_BY_NAME,
    SPECS,
    Spec,
    make_metric,
    record_zero,
)
from rayq.store.tally import Tally

_made: dict[str, Any] = {}  # one Ray metric object per name and process


def metric(name: str) -> Any:
    """The Ray metric object for ``name`` (made on first use in this process)."""
    found = _made.get(name)
    if found is not None:
        return found
    from ray.util import metrics as ray_metrics

    made = _made[name] = make_metric(SPEC_BY_NAME[name], ray_metrics)
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
    """The series ``tags`` of the counter ``name`` at 0 (``record_zero``)."""
    record_zero(metric(name), tags)


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


# The declarations, re-exported: what the server actors and tests import from here.
__all__ = [
    "CONSUMER_COUNTERS",
    "EXPORTED_FAMILIES",
    "LATENCY_BOUNDARIES",
    "LISTENER_BOUNDARIES",
    "PER_GROUP_COUNTERS",
    "PER_TOPIC_COUNTERS",
    "RAY_PREFIX",
    "REPORT_INTERVAL_S",
    "SPECS",
    "SPEC_BY_NAME",
    "BrokerMetrics",
    "GaugeSet",
    "Spec",
    "ZeroSeeds",
    "metric",
    "record_tally",
    "zero_counter",
]
