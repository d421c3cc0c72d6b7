"""Calling the user's listener: statuses, batching, and what an exception means.

A concurrent listener is ``fn(list[MessageExt]) -> ConsumeStatus``; it may also
return ``(ConsumeStatus.CONSUME_SUCCESS, ack_index)``: messages up to and including
``ack_index`` succeeded, the rest are sent back (RocketMQ's ``ackIndex``). An
orderly listener returns a ``ConsumeOrderlyStatus``. An exception, ``None`` or
anything else counts as RECONSUME_LATER (or SUSPEND_CURRENT_QUEUE_A_MOMENT) and is
logged; it never reaches the consumer actor. Each listener call's time goes to the
runner's ``timings`` tally, when it has one (the consumer actor reports it), and to
the client metrics of its group (rayq/metrics.py); with message trace on, each call's
messages are traced with its answer, start and time.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable
from typing import Any

from rayq.metrics import RECORDER
from rayq.store.message import MessageExt
from rayq.store.tally import Tally
from rayq.trace.tracer import Tracer, now_ms

logger = logging.getLogger(__name__)


class ConsumeStatus(enum.Enum):
    CONSUME_SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"


class ConsumeOrderlyStatus(enum.Enum):
    """SUCCESS and SUSPEND_CURRENT_QUEUE_A_MOMENT; with ``auto_commit=False`` also
    COMMIT (commit everything consumed so far) and ROLLBACK (consume everything since
    the last commit again), deprecated in RocketMQ but supported."""

    SUCCESS = "SUCCESS"
    SUSPEND_CURRENT_QUEUE_A_MOMENT = "SUSPEND_CURRENT_QUEUE_A_MOMENT"
    COMMIT = "COMMIT"
    ROLLBACK = "ROLLBACK"


class ListenerRunner:
    """Runs the listener in a pool thread on slices of ``batch_max`` messages; with a
    ``tracer``, each call's messages are traced with its status, start and time."""

    def __init__(
        self,
        listener: Callable[..., Any],
        orderly: bool,
        batch_max: int,
        timings: Tally | None = None,
        group: str = "",
        tracer: Tracer | None = None,
    ) -> None:
        self.listener = listener
        self.orderly = orderly
        self.batch_max = batch_max
        self.timings = timings
        self.group = group  # its calls' times go to the client metrics too, if set
        self.tracer = tracer

    def _call(self, msgs: list[MessageExt]) -> tuple[Any, BaseException | None, int, int]:
        """The listener on ``msgs``, timed: (its result, or None and the exception it
        raised, when it began in ms since the epoch, how long it took in ms)."""
        began_ms = now_ms() if self.tracer is not None else 0
        started = time.perf_counter()
        result: Any = None
        error: BaseException | None = None
        try:
            result = self.listener(msgs)
        except Exception as exc:
            error = exc
        took_s = time.perf_counter() - started
        if self.timings is not None:
            self.timings.observe((), took_s)
        if self.group:
            RECORDER.listened(self.group, took_s)
        return result, error, began_ms, round(took_s * 1000)

    def _trace(self, msgs: list[MessageExt], status: str, began_ms: int, cost_ms: int) -> None:
        if self.tracer is not None and msgs:
            self.tracer.consumed(msgs, status, began_ms, cost_ms)

    def run_concurrently(self, msgs: list[MessageExt]) -> list[MessageExt]:
        """Consume ``msgs``; the ones that failed."""
        failed: list[MessageExt] = []
        n = self.batch_max
        for i in range(0, len(msgs), n):
            batch = msgs[i : i + n]
            result, error, began_ms, cost_ms = self._call(batch)
            ok, status = self._verdict(batch, result, error)
            self._trace(ok, ConsumeStatus.CONSUME_SUCCESS.value, began_ms, cost_ms)
            self._trace(batch[len(ok) :], status, began_ms, cost_ms)
            failed.extend(batch[len(ok) :])
        return failed

    def _verdict(
        self, batch: list[MessageExt], result: Any, error: BaseException | None
    ) -> tuple[list[MessageExt], str]:
        """What a concurrent listener's answer means: (the messages that succeeded, a
        prefix of ``batch``; the status of the others)."""
        later = ConsumeStatus.RECONSUME_LATER.value
        if error is not None:
            logger.error(
                "listener raised on %d messages; they will be consumed again",
                len(batch),
                exc_info=error,
            )
            return [], "EXCEPTION"
        if result is ConsumeStatus.CONSUME_SUCCESS:
            return batch, later
        if (
            isinstance(result, tuple)
            and len(result) == 2
            and result[0] is ConsumeStatus.CONSUME_SUCCESS
            and isinstance(result[1], int)
        ):
            return batch[: max(result[1] + 1, 0)], later
        if result is not ConsumeStatus.RECONSUME_LATER:
            logger.warning(
                "listener returned %r, not a ConsumeStatus; treated as RECONSUME_LATER", result
            )
        return [], later

    def run_orderly(self, msgs: list[MessageExt]) -> bool:
        """Consume ``msgs`` in order; True on SUCCESS (or COMMIT)."""
        status = self.consume_orderly(msgs)
        return status in (ConsumeOrderlyStatus.SUCCESS, ConsumeOrderlyStatus.COMMIT)

    def consume_orderly(self, msgs: list[MessageExt]) -> ConsumeOrderlyStatus:
        """Consume ``msgs`` in order; what the listener returned (an exception or anything
        that is not a ConsumeOrderlyStatus: SUSPEND_CURRENT_QUEUE_A_MOMENT)."""
        suspend = ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
        result, error, began_ms, cost_ms = self._call(msgs)
        if error is not None:
            logger.error("orderly listener raised; suspending the queue a moment", exc_info=error)
            self._trace(msgs, "EXCEPTION", began_ms, cost_ms)
            return suspend
        if not isinstance(result, ConsumeOrderlyStatus):
            logger.warning(
                "orderly listener returned %r, not a ConsumeOrderlyStatus; treated "
                "as SUSPEND_CURRENT_QUEUE_A_MOMENT",
                result,
            )
            result = suspend
        self._trace(msgs, result.value, began_ms, cost_ms)
        return result
