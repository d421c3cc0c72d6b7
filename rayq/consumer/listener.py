"""Calling the user's listener: statuses, batching, and what an exception means.

A concurrent listener is ``fn(list[MessageExt]) -> ConsumeStatus``; it may also
return ``(ConsumeStatus.CONSUME_SUCCESS, ack_index)``: messages up to and including
``ack_index`` succeeded, the rest are sent back (RocketMQ's ``ackIndex``). An
orderly listener returns a ``ConsumeOrderlyStatus``. An exception, ``None`` or
anything else counts as RECONSUME_LATER (or SUSPEND_CURRENT_QUEUE_A_MOMENT) and is
logged; it never reaches the consumer actor. Each listener call's time goes to the
runner's ``timings`` tally, when it has one (the consumer actor reports it), and to
the client metrics of its group (rayq/metrics.py).
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
    """Runs the listener in a pool thread on slices of ``batch_max`` messages."""

    def __init__(
        self,
        listener: Callable[..., Any],
        orderly: bool,
        batch_max: int,
        timings: Tally | None = None,
        group: str = "",
    ) -> None:
        self.listener = listener
        self.orderly = orderly
        self.batch_max = batch_max
        self.timings = timings
        self.group = group  # its calls' times go to the client metrics too, if set

    def _call(self, msgs: list[MessageExt]) -> Any:
        """The listener on ``msgs``, timed."""
        if self.timings is None and not self.group:
            return self.listener(msgs)
        started = time.perf_counter()
        try:
            return self.listener(msgs)
        finally:
            took = time.perf_counter() - started
            if self.timings is not None:
                self.timings.observe((), took)
            if self.group:
                RECORDER.listened(self.group, took)

    def run_concurrently(self, msgs: list[MessageExt]) -> list[MessageExt]:
        """Consume ``msgs``; the ones that failed."""
        failed: list[MessageExt] = []
        n = self.batch_max
        for i in range(0, len(msgs), n):
            batch = msgs[i : i + n]
            try:
                result = self._call(batch)
            except Exception:
                logger.exception(
                    "listener raised on %d messages; they will be consumed again", len(batch)
                )
                failed.extend(batch)
                continue
            if result is ConsumeStatus.CONSUME_SUCCESS:
                continue
            if (
                isinstance(result, tuple)
                and len(result) == 2
                and result[0] is ConsumeStatus.CONSUME_SUCCESS
                and isinstance(result[1], int)
            ):
                failed.extend(batch[max(result[1] + 1, 0) :])
                continue
            if result is not ConsumeStatus.RECONSUME_LATER:
                logger.warning(
                    "listener returned %r, not a ConsumeStatus; treated as RECONSUME_LATER", result
                )
            failed.extend(batch)
        return failed

    def run_orderly(self, msgs: list[MessageExt]) -> bool:
        """Consume ``msgs`` in order; True on SUCCESS (or COMMIT)."""
        status = self.consume_orderly(msgs)
        return status in (ConsumeOrderlyStatus.SUCCESS, ConsumeOrderlyStatus.COMMIT)

    def consume_orderly(self, msgs: list[MessageExt]) -> ConsumeOrderlyStatus:
        """Consume ``msgs`` in order; what the listener returned (an exception or anything
        that is not a ConsumeOrderlyStatus: SUSPEND_CURRENT_QUEUE_A_MOMENT)."""
        suspend = ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
        try:
            result = self._call(msgs)
        except Exception:
            logger.exception("orderly listener raised; suspending the queue a moment")
            return suspend
        if not isinstance(result, ConsumeOrderlyStatus):
            logger.warning(
                "orderly listener returned %r, not a ConsumeOrderlyStatus; treated "
                "as SUSPEND_CURRENT_QUEUE_A_MOMENT",
                result,
            )
            return suspend
        return result
