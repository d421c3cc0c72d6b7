"""Client-side metrics: send latency and errors per topic, receive lag per queue, and
listener time per group, gathered in this process by every producer and consumer.

    rayq_client_send_latency_seconds   histogram  topic     a send call (a batch), retries in
    rayq_client_send_errors            counter    topic     sends that failed, retries spent
    rayq_client_receive_lag_messages   gauge      group, topic, broker, queue_id
                                                            messages left after a pull
    rayq_client_listener_seconds       histogram  group     one call of a push listener

Readable in this process, Ray or not (a process attached with ``rayq.connect`` over
sockets, a web service): ``rayq.client_metrics()`` returns a snapshot of the totals
since the process started. In a Ray driver or worker they also go to Ray's metrics
(declared in actors/protocol/metrics.py, scraped as ``ray_rayq_client_*``), exported by one
daemon thread every ``REPORT_INTERVAL_S``: the hot path never calls Ray. A send adds
to a bucket under a lock (well under a microsecond) and, while exporting, keeps the
sample for the next export; a pull sets one dict entry.
"""

from __future__ import annotations

import bisect
import logging
import sys
import threading
from typing import Any, Final

import msgspec

from rayq.actors.protocol import MessageQueue
from rayq.actors.protocol.metrics import (
    LATENCY_BOUNDARIES,
    LISTENER_BOUNDARIES,
    REPORT_INTERVAL_S,
    SPEC_BY_NAME,
    make_metric,
    record_zero,
)

logger = logging.getLogger(__name__)

SEND_LATENCY: Final[str] = "rayq_client_send_latency_seconds"
SEND_ERRORS: Final[str] = "rayq_client_send_errors"
RECEIVE_LAG: Final[str] = "rayq_client_receive_lag_messages"
LISTENER_TIME: Final[str] = "rayq_client_listener_seconds"
MAX_PENDING_SAMPLES: Final[int] = 100_000  # per key between two exports to Ray


class LatencyHistogram(msgspec.Struct, frozen=True, kw_only=True):
    """Samples counted per bucket: ``counts[i]`` fell at or below ``boundaries[i]`` (and
    above the one before); the last count is above every boundary."""

    boundaries: tuple[float, ...]
    counts: tuple[int, ...]
    count: int
    sum: float

    @property
    def mean(self) -> float:
        return self.sum / self.count if self.count else 0.0

    def quantile(self, q: float) -> float:
        """The upper boundary of the bucket holding the ``q``-quantile (``inf`` past the
        last boundary; 0.0 with no samples), as Prometheus' ``histogram_quantile`` bounds it."""
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"q must be in 0..1, got {q!r}")
        if not self.count:
            return 0.0
        rank = q * self.count
        seen = 0
        for bound, n in zip((*self.boundaries, float("inf")), self.counts, strict=True):
            seen += n
            if seen >= rank and n:
                return bound
        return float("inf")


class ClientMetrics(msgspec.Struct, frozen=True, kw_only=True):
    """What this process's clients measured since it started (``rayq.client_metrics()``)."""

    send_latency_seconds: dict[str, LatencyHistogram]  # by topic
    send_errors: dict[str, int]  # by topic
    receive_lag_messages: dict[str, dict[MessageQueue, int]]  # by group, then queue
    listener_seconds: dict[str, LatencyHistogram]  # by group


class _Buckets:
    """One histogram's running totals, and the samples not yet handed to Ray."""

    __slots__ = ("boundaries", "count", "counts", "pending", "sum")

    def __init__(self, boundaries: tuple[float, ...]) -> None:
        self.boundaries = boundaries
        self.counts = [0] * (len(boundaries) + 1)
        self.count = 0
        self.sum = 0.0
        self.pending: list[float] = []

    def add(self, seconds: float, keep: bool) -> None:
        self.counts[bisect.bisect_left(self.boundaries, seconds)] += 1
        self.count += 1
        self.sum += seconds
        if keep and len(self.pending) < MAX_PENDING_SAMPLES:
            self.pending.append(seconds)

    def snapshot(self) -> LatencyHistogram:
        return LatencyHistogram(
            boundaries=self.boundaries, counts=tuple(self.counts), count=self.count, sum=self.sum
        )


class Recorder:
    """The process's client metrics (one instance, ``RECORDER``); thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sends: dict[str, _Buckets] = {}
        self._errors: dict[str, int] = {}
        self._lags: dict[tuple[str, MessageQueue], int] = {}
        self._listeners: dict[str, _Buckets] = {}
        self._exported_errors: dict[str, int] = {}
        self._exported_lags: dict[tuple[str, MessageQueue], int] = {}
        self._exporter: threading.Thread | None = None
        self._stop = threading.Event()

    # ------------------------------------------------------------ hot path
    def sent(self, topic: str, seconds: float) -> None:
        keep = self._exporting()
        with self._lock:
            found = self._sends.get(topic)
            if found is None:
                found = self._sends[topic] = _Buckets(LATENCY_BOUNDARIES)
                self._errors.setdefault(topic, 0)
            found.add(seconds, keep)

    def send_failed(self, topic: str) -> None:
        self._exporting()
        with self._lock:
            self._errors[topic] = self._errors.get(topic, 0) + 1

    def lag(self, group: str, queue: MessageQueue, messages: int) -> None:
        self._exporting()
        self._lags[(group, queue)] = max(messages, 0)  # one dict store: atomic

    def drop_lag(self, group: str, queue: MessageQueue) -> None:
        """The consumer no longer reads ``queue`` (revoked, dropped): its lag goes (to
        Ray as 0, once)."""
        self._lags.pop((group, queue), None)

    def listened(self, group: str, seconds: float) -> None:
        keep = self._exporting()
        with self._lock:
            found = self._listeners.get(group)
            if found is None:
                found = self._listeners[group] = _Buckets(LISTENER_BOUNDARIES)
            found.add(seconds, keep)

    # ------------------------------------------------------------ reading
    def snapshot(self) -> ClientMetrics:
        with self._lock:
            lags: dict[str, dict[MessageQueue, int]] = {}
            for (group, queue), value in list(self._lags.items()):
                lags.setdefault(group, {})[queue] = value
            return ClientMetrics(
                send_latency_seconds={t: b.snapshot() for t, b in self._sends.items()},
                send_errors=dict(self._errors),
                receive_lag_messages=lags,
                listener_seconds={g: b.snapshot() for g, b in self._listeners.items()},
            )

    # ------------------------------------------------------------ Ray
    def _exporting(self) -> bool:
        """True while this process hands its metrics to Ray (a driver or worker); starts
        the exporter thread the first time Ray is found initialized."""
        if self._exporter is not None:
            return True
        ray = sys.modules.get("ray")  # never imported here: a socket-only process has none
        if ray is None or not getattr(ray, "is_initialized", bool)():
            return False
        with self._lock:
            if self._exporter is None:
                thread = threading.Thread(
                    target=self._export_loop, name="rayq-metrics", daemon=True
                )
                self._exporter = thread
                thread.start()
        return True

    def _export_loop(self) -> None:
        while not self._stop.wait(REPORT_INTERVAL_S):
            ray = sys.modules.get("ray")
            if ray is None or not ray.is_initialized():  # between two Ray sessions
                self._between_sessions()
                continue
            try:
                self.export()
            except Exception:  # metrics must never stop a client; the next round tries
                logger.exception("client metrics: export to Ray failed")

    def _between_sessions(self) -> None:
        """Ray was shut down: drop the samples kept for it and its metric objects; a
        later session gets new ones, and every series again from 0."""
        with self._lock:
            for buckets in [*self._sends.values(), *self._listeners.values()]:
                buckets.pending = []
        _made.clear()
        self._exported_errors = {}
        self._exported_lags = {}

    def export(self) -> None:
        """Hand what gathered since the last export to Ray's metrics."""
        with self._lock:
            sends = {t: _take(b) for t, b in self._sends.items()}
            listens = {g: _take(b) for g, b in self._listeners.items()}
            errors = dict(self._errors)
        lags = dict(self._lags)
        for topic, samples in sends.items():
            _observe(SEND_LATENCY, {"topic": topic}, samples)
        for group, samples in listens.items():
            _observe(LISTENER_TIME, {"group": group}, samples)
        for topic, total in errors.items():
            before = self._exported_errors.get(topic)
            if before is None:
                zero_counter(SEND_ERRORS, {"topic": topic})  # exported at 0 from the start
            if total > (before or 0):
                metric(SEND_ERRORS).inc(total - (before or 0), {"topic": topic})
            self._exported_errors[topic] = total
        self._export_lags(lags)

    def _export_lags(self, lags: dict[tuple[str, MessageQueue], int]) -> None:
        """Set the lags that changed; a queue no longer read here goes to 0, once."""
        if not lags and not self._exported_lags:
            return
        gauge = metric(RECEIVE_LAG)
        for key in self._exported_lags.keys() - lags.keys():
            gauge.set(0, _lag_tags(*key))
        for key, value in lags.items():
            if self._exported_lags.get(key) != value:
                gauge.set(value, _lag_tags(*key))
        self._exported_lags = lags

    def close(self) -> None:
        """Stop the exporter thread (tests)."""
        self._stop.set()
        if self._exporter is not None:
            self._exporter.join(timeout=REPORT_INTERVAL_S * 2)


_made: dict[str, Any] = {}  # one Ray metric object per name and process


def metric(name: str) -> Any:
    """The Ray metric object of the client metric ``name`` (made on first use)."""
    found = _made.get(name)
    if found is None:
        from ray.util import metrics as ray_metrics

        found = _made[name] = make_metric(SPEC_BY_NAME[name], ray_metrics)
    return found


def zero_counter(name: str, tags: dict[str, str]) -> None:
    record_zero(metric(name), tags)


def _take(buckets: _Buckets) -> list[float]:
    samples, buckets.pending = buckets.pending, []
    return samples


def _observe(name: str, tags: dict[str, str], samples: list[float]) -> None:
    if samples:
        histogram = metric(name)
        for value in samples:
            histogram.observe(value, tags)


def _lag_tags(group: str, queue: MessageQueue) -> dict[str, str]:
    return {
        "group": group,
        "topic": queue.topic,
        "broker": queue.broker_name,
        "queue_id": str(queue.queue_id),
    }


RECORDER: Final[Recorder] = Recorder()


def client_metrics() -> ClientMetrics:
    """What this process's producers and consumers measured since it started: send
    latency and errors per topic, the lag after the last pull per queue, listener time
    per group. Works with or without Ray; see ``rayq.client_metrics`` in the guide."""
    return RECORDER.snapshot()


__all__ = ["ClientMetrics", "LatencyHistogram", "client_metrics"]
