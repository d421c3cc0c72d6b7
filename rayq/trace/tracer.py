"""What a traced client calls (RocketMQ's ``SendMessageTraceHookImpl`` and
``ConsumeMessageTraceHookImpl``): ``Tracer.sent`` after a put the broker answered,
``Tracer.consumed`` after a delivery or settlement. Both only hand a record to the
process's dispatcher (dispatcher.py); a send's record is even built there, on the
dispatcher's thread, so the traced send pays for one small object and one append.

``Tracer.open(config, ...)`` is None unless ``config.trace_enable``: callers keep
``tracer: Tracer | None`` and test it, so an untraced client does nothing more.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import msgspec

from rayq.actors.protocol import BatchSendResult, MessageQueue
from rayq.actors.protocol.config import ClientConfig
from rayq.store import InnerMessage
from rayq.store.message import MessageExt
from rayq.trace import dispatcher as D
from rayq.trace.records import ConsumeTrace, SendTrace
from rayq.transport.base import Transport


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class PendingSend:
    """A put's answer, made into a ``SendTrace`` on the dispatcher's thread."""

    __slots__ = ("client_id", "done_ms", "group", "msgs", "queue", "result", "status")

    def __init__(
        self,
        group: str,
        client_id: str,
        msgs: Sequence[InnerMessage],
        queue: MessageQueue,
        result: BatchSendResult | None,
        done_ms: int,
        status: str = "",
    ) -> None:
        self.group, self.client_id, self.msgs, self.queue = group, client_id, msgs, queue
        self.result, self.done_ms, self.status = result, done_ms, status

    def record(self) -> SendTrace:
        msgs, queue, res = self.msgs, self.queue, self.result
        # a transaction's end (no result) happens when it is recorded
        born_ms = (msgs[0].born_timestamp if res is not None else 0) or self.done_ms
        return SendTrace(
            group=self.group,
            client_id=self.client_id,
            topic=queue.topic,
            broker=queue.broker_name,
            queue_id=queue.queue_id,
            born_ms=born_ms,
            cost_ms=max(0, self.done_ms - born_ms),
            status=self.status or (res.status.name if res is not None else ""),
            msg_ids=list(res.msg_ids) if res is not None else [m.uniq_key for m in msgs],
            keys=[m.keys for m in msgs],
            tags=[m.tags for m in msgs],
            queue_offsets=list(res.queue_offsets) if res is not None else [-1] * len(msgs),
        )


class Tracer:
    """One traced client's handle on the process's trace dispatcher."""

    def __init__(self, group: str, client_id: str, dispatcher: D.TraceDispatcher) -> None:
        self.group, self.client_id, self.dispatcher = group, client_id, dispatcher
        self._closed = False

    @classmethod
    def open(
        cls,
        config: ClientConfig,
        group: str,
        client_id: str,
        namespace: str | None = None,
        transport: Transport | None = None,
    ) -> Tracer | None:
        """A tracer for this client, or None when ``config.trace_enable`` is off."""
        if not config.trace_enable:
            return None
        return cls(group, client_id, D.acquire(config, namespace, transport))

    def close(self) -> None:
        """Flush this client's records; the process's last traced client stops the
        dispatcher."""
        if not self._closed:
            self._closed = True
            D.release(self.dispatcher)

    # ------------------------------------------------------------- sends
    def sent(
        self, msgs: Sequence[InnerMessage], queue: MessageQueue, result: BatchSendResult
    ) -> None:
        """A put of ``msgs`` to ``queue`` was answered with ``result``."""
        self.dispatcher.submit(
            PendingSend(self.group, self.client_id, msgs, queue, result, now_ms())
        )

    def ended(self, msg: InnerMessage, msg_id: str, queue: MessageQueue, state: str) -> None:
        """A transaction of ``msg`` (half message ``msg_id``) ended with ``state``."""
        stamped = msg if msg.uniq_key == msg_id else msgspec.structs.replace(msg, uniq_key=msg_id)
        self.dispatcher.submit(
            PendingSend(self.group, self.client_id, [stamped], queue, None, now_ms(), state)
        )

    # ---------------------------------------------------------- consumes
    def consumed(
        self,
        msgs: Sequence[MessageExt],
        status: str,
        started_ms: int,
        cost_ms: int = 0,
        group: str | None = None,
    ) -> None:
        """``msgs`` were delivered or settled (``status``), from ``started_ms`` for
        ``cost_ms``. The record is built now: a message's fields may change later."""
        if not msgs:
            return
        self.dispatcher.submit(
            ConsumeTrace(
                group=group or self.group,
                client_id=self.client_id,
                status=status,
                started_ms=started_ms,
                cost_ms=max(0, cost_ms),
                msg_ids=[m.msg_id for m in msgs],
                topics=[m.topic for m in msgs],
                keys=[" ".join(m.keys) for m in msgs],
                tags=[m.tags for m in msgs],
                brokers=[m.broker_name for m in msgs],
                queue_ids=[m.queue_id for m in msgs],
                queue_offsets=[m.queue_offset for m in msgs],
                reconsume_times=[m.reconsume_times for m in msgs],
            )
        )
