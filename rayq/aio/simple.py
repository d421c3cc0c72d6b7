"""``rayq.aio.SimpleConsumer``: POP consumption from asyncio code, over the sync
consumer's receive plan and requests (rayq/consumer/simple.py)."""

from __future__ import annotations

import contextlib
import logging
from collections import deque
from collections.abc import AsyncIterator, Iterable
from typing import Any

from rayq.actors.protocol.pop import AckRequest
from rayq.consumer.simple import (
    ACK,
    CHANGE_INVISIBLE_DURATION,
    NACK,
    PopConsumerCore,
    Received,
    check_max_messages,
    duration_ms,
    handle_of,
)
from rayq.service_state import ServiceState
from rayq.store.errors import BrokerUnavailableError, RayqError
from rayq.trace.tracer import now_ms
from rayq.transport.context import CALL_TIMEOUT_S

logger = logging.getLogger(__name__)


class ReceivedMessage(Received):
    """What ``rayq.aio.SimpleConsumer`` receives: ``await msg.ack()``, ``await
    msg.nack()``, ``await msg.change_invisible_duration(seconds)``."""

    __slots__ = ()

    async def ack(self) -> None:
        await self._settler().ack(self)

    async def nack(self, delay: float = 0.0) -> None:
        await self._settler().nack(self, delay)

    async def change_invisible_duration(self, duration: float) -> None:
        await self._settler().change_invisible_duration(self, duration)


class SimpleConsumer(PopConsumerCore):
    """A POP consumer for asyncio (``rayq.SimpleConsumer``'s options and semantics)::

        consumer = rayq.aio.SimpleConsumer(group="workers")
        consumer.subscribe("jobs")
        await consumer.start()
        async for msg in consumer:          # receive(32, invisible_duration) in a loop
            await handle(msg)
            await msg.ack()

    ``subscribe`` looks the topic up (a control-plane call) before the loop starts.
    """

    received_class = ReceivedMessage

    def __init__(self, group: str, *, invisible_duration: float = 30.0, **options: object) -> None:
        super().__init__(group, **options)  # type: ignore[arg-type]
        duration_ms(invisible_duration, "invisible_duration", 1)
        self.invisible_duration = invisible_duration
        self._buffer: deque[ReceivedMessage] = deque()  # received for ``async for``

    async def start(self) -> None:
        self._start()

    async def shutdown(self) -> None:
        """Stop; an ``async for`` over the consumer ends. Messages it received and did
        not hand out yet are released (delivered again at once, to any consumer);
        those handed out and not settled come again when their leases end."""
        if self._service_state is ServiceState.RUNNING:
            left, self._buffer = list(self._buffer), deque()
            for msg in left:
                with contextlib.suppress(RayqError):
                    await self.nack(msg)
            if self._deferred:
                try:
                    await self.flush_acks()
                except RayqError as exc:  # those messages come again: at least once
                    logger.warning("deferred acks not sent at shutdown: %s", exc)
        self._shutdown()

    async def __aenter__(self) -> SimpleConsumer:
        if self._service_state is ServiceState.CREATE_JUST:
            await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    def __aiter__(self) -> AsyncIterator[ReceivedMessage]:
        return self

    async def __anext__(self) -> ReceivedMessage:
        """The next message: from the last receive of 32 (leased for the consumer's
        ``invisible_duration``), else a new receive; ends once the consumer is shut down.
        Leaving the loop keeps the rest for the next ``async for`` or ``receive``."""
        while not self._buffer:
            if self._service_state is not ServiceState.RUNNING:
                raise StopAsyncIteration
            self._buffer.extend(await self._receive(32, self.invisible_duration))
        return self._buffer.popleft()

    async def receive(
        self, max_messages: int = 32, invisible_duration: float = 30.0
    ) -> list[ReceivedMessage]:
        """``rayq.SimpleConsumer.receive``, awaited: the same calls in the same order.
        Messages an ``async for`` left received and not handed out come first (their
        leases as they were taken)."""
        if self._buffer:
            self._check_running()
            check_max_messages(max_messages)
            return [self._buffer.popleft() for _ in range(min(max_messages, len(self._buffer)))]
        return await self._receive(max_messages, invisible_duration)

    async def _receive(self, max_messages: int, invisible_duration: float) -> list[ReceivedMessage]:
        plan = self._receive_plan(max_messages, invisible_duration)
        try:
            topic, broker, req = next(plan)
            while True:
                try:
                    got = await self._ctx.broker_calls_async(
                        {broker: lambda c, r=req: c.pop(r)},  # type: ignore[misc]
                        CALL_TIMEOUT_S + req.wait_ms / 1000,
                    )
                except BrokerUnavailableError as exc:
                    topic, broker, req = plan.throw(exc)
                    continue
                topic, broker, req = plan.send(got[broker])
        except StopIteration as done:
            received: list[ReceivedMessage] = done.value
        for topic, _, handles in self._strays:
            await self.ack_handles(handles, topic)
        return received

    async def ack(self, msg: Received) -> None:
        """Settle ``msg`` (InvalidReceiptHandleError if it is not in flight any more)."""
        self._check_open()
        began_ms = now_ms()
        await self.ack_handles([handle_of(msg)], msg.topic)
        self._traced([msg], ACK, began_ms)

    async def ack_handles(self, receipt_handles: list[str], topic: str) -> None:
        """Settle several messages of one broker at once: all, or none with the reason."""
        self._check_open()
        broker, req = self._ack_request(topic, receipt_handles)
        await self._ctx.broker_calls_async({broker: lambda c: c.ack(req)})

    async def ack_many(self, msgs: Iterable[Received], *, defer: bool = False) -> None:
        """Settle many messages with one call per broker (per broker: all or none); with
        ``defer``, on the next receive from each broker (``rayq.SimpleConsumer.ack_many``)."""
        self._check_open()
        msgs, began_ms = list(msgs), now_ms()
        if defer:
            full = self._defer(msgs)
            if full:
                await self._send_acks(self._flush_requests(full))
            self._traced(msgs, ACK, began_ms)
            return
        await self._send_acks(self._ack_many_requests(msgs))
        self._traced(msgs, ACK, began_ms)

    async def flush_acks(self) -> None:
        """Send the deferred acks now (one call per broker and topic)."""
        self._check_open()
        await self._send_acks(self._flush_requests())

    async def _send_acks(self, requests: dict[Any, AckRequest]) -> None:
        if requests:
            calls = {k: lambda c, r=r: c.ack(r) for k, r in requests.items()}
            await self._ctx.broker_calls_async(calls)

    async def change_invisible_duration(self, msg: Received, duration: float) -> None:
        """Make ``msg`` invisible for ``duration`` seconds from now, under a new handle."""
        self._check_open()
        await self._change(msg, duration_ms(duration, "invisible duration", 1), False)

    async def nack(self, msg: Received, delay: float = 0.0) -> None:
        """Give ``msg`` up: delivered again after ``delay`` seconds (at once with 0)."""
        self._check_open()
        await self._change(msg, duration_ms(delay, "nack delay", 0), True)

    async def _change(self, msg: Received, invisible_ms: int, release: bool) -> None:
        broker, req = self._change_request(msg, invisible_ms, release)
        began_ms = now_ms()
        got = await self._ctx.broker_calls_async({broker: lambda c: c.change_invisibility(req)})
        msg.receipt_handle = got[broker].handles[0]
        self._traced([msg], NACK if release else CHANGE_INVISIBLE_DURATION, began_ms)


__all__ = ["ReceivedMessage", "SimpleConsumer"]
