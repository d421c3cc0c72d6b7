"""Micro-batch streaming from a topic, driven from the driver (used by ``rayq.spark.stream``).

Every ``trigger_interval`` seconds a ``StreamingQuery`` runs one batch:

1. **plan** — if the coordinator holds an unfinished plan of this (group, topic),
   that batch is run again with the same ranges and batch id, unless its offsets
   were committed already (then it is only dropped). Otherwise ranges go from the
   group's committed offsets (``starting`` where the group has none) up to the
   queues' ends, at most ``max_messages_per_trigger`` messages in all (shared
   fairly among the queues); the plan is recorded with the coordinator *before*
   the batch runs;
2. **process** — ``run_batch(ranges, batch_id)`` (Spark: read the ranges into a
   DataFrame and call the user's ``process(df, batch_id)``);
3. **commit** — each broker compares-and-sets the group's offsets from the
   values seen at planning to the ranges' ends, and the plan is dropped.

Planning is pipelined: while a batch runs, a planner thread reads the queues' ends
at the next trigger time, so a batch that took longer than the trigger is followed
at once by the next one, its ranges already known (starting where the running batch
ends; recorded with the coordinator only after that batch committed).

A crash at any point loses nothing and re-runs at most the last batch, with
identical ranges: before the commit the plan is still there; after it the
offsets say the batch is done. A commit that finds the offsets moved by someone
else (another query of the group, a reset) stops the query with ``BrokenError``.
``last_progress`` reports the last batch like Spark's ``StreamingQueryProgress``:
``batchId``, ``numInputRows``, ``inputRowsPerSecond``, ``processedRowsPerSecond``,
``durationMs`` (``latestOffset``: planning, ``addBatch``: process, ``commitOffsets``,
``triggerExecution``: all three), ``lag`` (messages left in the queues after the
batch's ranges, as seen at planning) and ``timestamp``; plus the same under the
older snake_case names (``batch_id``, ``num_input_rows``, ``durations_ms``, ``rerun``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import msgspec

from rayq.actors.protocol import (
    CompareAndSetOffsetsRequest,
    FinishStreamPlanRequest,
    RecordStreamPlanRequest,
    StreamPlanRequest,
)
from rayq.actors.protocol.config import ClientConfig
from rayq.connectors.ranges import OffsetRange, QueueKey, check_max, committed_offsets, queue_bounds
from rayq.connectors.ranges import resolve as resolve_spec
from rayq.store.errors import BrokenError, BrokerUnavailableError, ConfigError, RayqError
from rayq.store.names import validate_group, validate_topic
from rayq.transport.context import ClientContext, bind

logger = logging.getLogger(__name__)

RunBatch = Callable[[list[OffsetRange], int], None]
Bounds = dict[QueueKey, tuple[int, int]]


class Plan(msgspec.Struct, frozen=True):
    batch_id: int
    ranges: list[OffsetRange]
    rerun: bool = False
    lag: int = 0


def share(backlogs: dict[Any, int], budget: int) -> dict[Any, int]:
    """Split ``budget`` messages fairly over queues with these backlogs (smallest first)."""
    out = {}
    left, queues = budget, sorted(backlogs, key=lambda k: (backlogs[k], k))
    for i, key in enumerate(queues):
        take = min(backlogs[key], left // (len(queues) - i))
        out[key] = take
        left -= take
    return out


class StreamingQuery:
    """A running micro-batch query; ``stop()``, ``await_termination()``, ``last_progress``."""

    def __init__(
        self,
        topic: str,
        group: str,
        run_batch: RunBatch,
        *,
        trigger_interval: float = 1.0,
        max_messages_per_trigger: int = 100_000,
        starting: object = "latest",
        namespace: str | None = None,
        config: ClientConfig | None = None,
    ) -> None:
        self.topic = validate_topic(topic)
        self.group = validate_group(group)
        if not isinstance(trigger_interval, int | float) or not trigger_interval >= 0:
            raise ConfigError(f"trigger_interval must be seconds >= 0, got {trigger_interval!r}")
        self.trigger_interval = float(trigger_interval)
        self.max_messages_per_trigger = check_max(
            "max_messages_per_trigger", max_messages_per_trigger
        )
        self.starting = starting
        self.run_batch = run_batch
        self.ctx = ClientContext(config, namespace)
        self.ctx.read_queues(self.topic)  # TopicNotFoundError now, not in the thread
        self.last_progress: dict[str, Any] | None = None
        self.recent_progress: list[dict[str, Any]] = []
        self._error: BaseException | None = None
        self._initial: dict[QueueKey, int] = {}
        self._planner: ThreadPoolExecutor | None = None  # set while the loop runs
        self._ahead: Future[Bounds | None] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ----------------------------------------------------------- lifecycle
    def start(self) -> StreamingQuery:
        self._thread = threading.Thread(
            target=self._loop, daemon=True, name=f"rayq-stream-{self.group}-{self.topic}"
        )
        self._thread.start()
        return self

    @property
    def is_active(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self, timeout: float | None = None) -> None:
        """Stop after the batch in progress (its offsets are committed if it succeeds)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def await_termination(self, timeout: float | None = None) -> bool:
        """Wait for the query to end; re-raises what stopped it. False on timeout."""
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                return False
        if self._error is not None:
            raise self._error
        return True

    def exception(self) -> BaseException | None:
        return self._error

    def _loop(self) -> None:
        self._planner = ThreadPoolExecutor(1, thread_name_prefix=f"rayq-plan-{self.group}")
        try:
            while not self._stop.is_set():
                started = time.monotonic()
                ahead, self._ahead = self._ahead, None
                try:
                    bounds = ahead.result() if ahead is not None else None
                    if self._stop.is_set():  # stopped while the planner waited or read
                        break
                    self.run_once(bounds)
                except BrokerUnavailableError as exc:  # planning or commit: try next trigger
                    logger.warning(
                        "streaming query %s/%s: %s; retrying at the next trigger",
                        self.group,
                        self.topic,
                        exc,
                    )
                    self._ahead = None
                if self._ahead is None:  # no batch ran: plan again at the next trigger
                    self._stop.wait(max(0.0, self.trigger_interval - (time.monotonic() - started)))
        except BaseException as exc:  # the query ends; await_termination re-raises it
            logger.error("streaming query %s/%s stopped: %r", self.group, self.topic, exc)
            self._error = exc
        finally:
            self._stop.set()  # wakes a planner waiting for the next trigger
            self._planner.shutdown(wait=False, cancel_futures=True)

    def _bounds_at(self, when: float) -> Bounds | None:
        """The queues' bounds at monotonic time ``when`` (None if stopped before)."""
        if self._stop.wait(max(0.0, when - time.monotonic())):
            return None
        return queue_bounds(self.ctx, self.topic)

    # -------------------------------------------------------------- batches
    def run_once(self, bounds: Bounds | None = None) -> dict[str, Any] | None:
        """Plan, run and commit one batch; its progress (None when there was nothing).
        ``bounds``: the queues' bounds read already (by the planner thread)."""
        t0 = time.monotonic()
        plan = self.plan(bounds)
        t1 = time.monotonic()
        if plan is None:  # nothing new: no batch, but progress (lag 0, planning time)
            self.last_progress = progress(None, t0, t1, t1, t1)
            return None
        if self._planner is not None:  # plan the next batch while this one runs
            self._ahead = self._planner.submit(self._bounds_at, t0 + self.trigger_interval)
        self.run_batch(plan.ranges, plan.batch_id)
        t2 = time.monotonic()
        self.commit(plan)
        t3 = time.monotonic()
        done = progress(plan, t0, t1, t2, t3)
        self.last_progress = done
        self.recent_progress = [*self.recent_progress[-99:], done]
        return done

    def plan(self, bounds: Bounds | None = None) -> Plan | None:
        """The batch to run now: the unfinished one, or a new one (recorded first)."""
        if bounds is None:
            bounds = queue_bounds(self.ctx, self.topic)
        brokers = {b for b, _ in bounds}
        committed = committed_offsets(self.ctx, self.topic, self.group, brokers)
        found = self.ctx.coordinator.stream_plan(self._plan_request()).result(self.ctx.timeout_s)
        if found.batch_id >= 0:
            batch_id = found.batch_id
            ranges = [msgspec.convert(r, OffsetRange) for r in found.ranges]
            state = {committed.get((r.broker, r.queue_id), -1) == r.committed for r in ranges}
            if state == {True}:
                logger.warning(
                    "streaming %s/%s: re-running batch %d with its planned ranges",
                    self.group,
                    self.topic,
                    batch_id,
                )
                lag = sum(
                    max(0, bounds.get((r.broker, r.queue_id), (0, 0))[1] - r.end) for r in ranges
                )
                return Plan(batch_id, ranges, rerun=True, lag=lag)
            if any(committed.get((r.broker, r.queue_id), -1) != r.end for r in ranges):
                logger.warning(
                    "streaming %s/%s: offsets moved since batch %d was planned; planning anew",
                    self.group,
                    self.topic,
                    batch_id,
                )
            self._finish(batch_id)
        return self._new_plan(bounds, committed)

    def _new_plan(self, bounds: Bounds, committed: dict[QueueKey, int]) -> Plan | None:
        """Record and return the next batch: from ``committed`` to the queues' ends."""
        # Where the group has no offsets, ``starting`` is resolved once and kept (else
        # "latest" would move ahead at every trigger until a batch commits).
        new = {k: v for k, v in bounds.items() if k not in self._initial}
        if new:
            self._initial.update(
                resolve_spec(
                    self.ctx, self.topic, self.starting, new, default="latest", what="starting"
                )
            )
        initial = self._initial
        starts = {}
        for key, (lo, hi) in bounds.items():
            c = committed.get(key, -1)
            starts[key] = min(max(c, lo), hi) if c >= 0 else initial[key]
        backlog = {k: bounds[k][1] - starts[k] for k in bounds}
        take = share(backlog, self.max_messages_per_trigger)
        ranges = [
            OffsetRange(k[0], k[1], starts[k], starts[k] + take[k], committed.get(k, -1))
            for k in sorted(bounds)
            if take[k] > 0
        ]
        if not ranges:
            return None
        req = RecordStreamPlanRequest(
            group=self.group, topic=self.topic, ranges=ranges, client_id=self.ctx.client_id
        )
        batch_id = self.ctx.coordinator.record_stream_plan(req).result(self.ctx.timeout_s).batch_id
        return Plan(batch_id, ranges, lag=sum(backlog.values()) - sum(take.values()))

    def _plan_request(self) -> StreamPlanRequest:
        return StreamPlanRequest(group=self.group, topic=self.topic, client_id=self.ctx.client_id)

    def _finish(self, batch_id: int) -> None:
        req = FinishStreamPlanRequest(
            group=self.group, topic=self.topic, batch_id=batch_id, client_id=self.ctx.client_id
        )
        self.ctx.coordinator.finish_stream_plan(req).result(self.ctx.timeout_s)

    def commit(self, plan: Plan) -> None:
        """Compare-and-set the group's offsets to the batch's ends; drop the plan."""
        by_broker: dict[str, tuple[dict[int, int], dict[int, int]]] = {}
        for r in plan.ranges:
            expected, new = by_broker.setdefault(r.broker, ({}, {}))
            expected[r.queue_id], new[r.queue_id] = r.committed, r.end
        ok = self.ctx.broker_calls(
            {
                b: bind(
                    lambda c, r: c.compare_and_set_offsets(r),
                    CompareAndSetOffsetsRequest(
                        group=self.group,
                        topic=self.topic,
                        expected=e,
                        offsets=n,
                        client_id=self.ctx.client_id,
                    ),
                )
                for b, (e, n) in by_broker.items()
            }
        )
        if not all(d.existed for d in ok.values()):
            raise BrokenError(
                f"the offsets of group {self.group!r} on topic {self.topic!r} changed while batch "
                f"{plan.batch_id} ran (another query of the group, or a reset); stopping",
                group=self.group,
                topic=self.topic,
            )
        try:
            self._finish(plan.batch_id)
        except RayqError as exc:  # committed: the next plan sees the batch is done
            logger.warning("could not drop the plan of batch %d: %s", plan.batch_id, exc)


def progress(plan: Plan | None, t0: float, t1: float, t2: float, t3: float) -> dict[str, Any]:
    """A batch's progress (``plan`` None: no batch) from its times (monotonic seconds:
    start, planned, processed, committed), in Spark's names and in rayq's older ones."""

    def ms(a: float, b: float) -> float:
        return round((b - a) * 1000, 1)

    rows = sum(r.count for r in plan.ranges) if plan is not None else 0
    total = t3 - t0
    now_ms = time.time_ns() // 1_000_000
    durations = {
        "plan": ms(t0, t1),
        "process": ms(t1, t2),
        "commit": ms(t2, t3),
        "total": ms(t0, t3),
    }
    return {
        "batchId": plan.batch_id if plan is not None else None,
        "numInputRows": rows,
        "inputRowsPerSecond": round(rows / total, 1) if total > 0 else 0.0,
        "processedRowsPerSecond": round(rows / (t2 - t1), 1) if t2 > t1 else 0.0,
        "durationMs": {
            "latestOffset": durations["plan"],
            "addBatch": durations["process"],
            "commitOffsets": durations["commit"],
            "triggerExecution": durations["total"],
        },
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now_ms / 1000))
        + f".{now_ms % 1000:03d}Z",
        "lag": plan.lag if plan is not None else 0,
        "batch_id": plan.batch_id if plan is not None else None,
        "num_input_rows": rows,
        "rerun": plan.rerun if plan is not None else False,
        "timestamp_ms": now_ms,
        "durations_ms": durations,
    }


__all__ = ["StreamingQuery", "progress", "share"]
