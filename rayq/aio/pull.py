"""``rayq.aio.PullConsumer``: the pull consumer (rayq/consumer/pull.py) for asyncio code.

It is the sync ``PullConsumer``: the same queues, positions, pulls in flight, filters,
rebalance and offsets. What differs is the waiting: a poll awaits its pulls' replies
(each reply's done callback wakes the event loop; no thread waits), commits and
send-backs await the brokers' answers. The control-plane steps a poll takes now and
then (this member's share of a topic on rebalance, the start offsets of new queues),
``start`` and ``subscribe`` look things up in a thread, so the loop never blocks on them.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

from rayq.actors.protocol import ClientRequest, MessageModel, MessageQueue, PullResponse
from rayq.actors.protocol.limits import DEFAULT_MAX_RECONSUME_TIMES
from rayq.consumer import pull as sync_pull
from rayq.service_state import ServiceState
from rayq.store.errors import ClientError, RayqError
from rayq.store.message import MessageExt
from rayq.transport.base import Reply

logger = sync_pull.logger


class PullConsumer(sync_pull.PullConsumer):
    """A pull consumer for asyncio (``rayq.PullConsumer``'s options and semantics)::

        consumer = rayq.aio.PullConsumer("lg", consume_from=ConsumeFromWhere.FIRST_OFFSET)
        consumer.subscribe("orders")
        await consumer.start()
        async for msg in consumer:           # or: msgs = await consumer.poll(timeout=1.0)
            handle(msg)
        await consumer.shutdown()            # commits (auto_commit) and closes

    ``subscribe``, ``assign``, ``seek``, ``pause``, ``resume`` and ``position`` are the
    sync consumer's (``subscribe`` and ``assign`` look the topic up before the loop
    starts); ``start``, ``poll``, ``commit``, ``committed``, ``seek_to_begin``,
    ``seek_to_end``, ``send_back`` and ``shutdown`` are awaited.
    One task at a time may use a consumer, as one thread may use the sync one.
    """

    def __init__(self, group: str, **options: Any) -> None:
        super().__init__(group, **options)
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._buffer: deque[MessageExt] = deque()  # polled, not handed out by ``async for``

    # ---------------------------------------------------------- lifecycle
    async def start(self) -> None:  # type: ignore[override]
        """Find the starting offset of every queue; once only (ClientError after that)."""
        await asyncio.to_thread(super().start)

    async def shutdown(self) -> None:  # type: ignore[override]
        """Commit (with auto_commit), stop the pulls in flight and close; idempotent.
        Messages polled for an ``async for`` and not handed out yet are not committed:
        they come again to the group."""
        if self._closed:
            return
        try:
            if self._auto_commit and self._started:
                await self._commit_quietly_async()
        finally:
            for s in self._queues.values():
                self._cancel(s)
            self._service_state = ServiceState.SHUTDOWN_ALREADY
            self._buffer.clear()
            if self._subscriptions and self.model is MessageModel.CLUSTERING:
                with contextlib.suppress(RayqError, TimeoutError):
                    req = ClientRequest(client_id=self.client_id)
                    left = self._ctx.coordinator.leave_shares(req).wait()
                    await asyncio.wait_for(left, sync_pull.OFFSET_CALL_TIMEOUT_S)
            if self._tracer is not None:
                await asyncio.to_thread(self._close_tracer)

    async def __aenter__(self) -> PullConsumer:
        if self._service_state is ServiceState.CREATE_JUST:
            await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    def __enter__(self) -> PullConsumer:
        raise ClientError("rayq.aio.PullConsumer is used with 'async with', not 'with'")

    # ---------------------------------------------------------- positions
    async def seek_to_begin(self, mq: MessageQueue) -> None:  # type: ignore[override]
        """Read ``mq`` from its oldest stored message (looked up in a thread)."""
        await asyncio.to_thread(super().seek_to_begin, mq)

    async def seek_to_end(self, mq: MessageQueue) -> None:  # type: ignore[override]
        """Read only what arrives in ``mq`` from now on (looked up in a thread)."""
        await asyncio.to_thread(super().seek_to_end, mq)

    # --------------------------------------------------------------- poll
    def __aiter__(self) -> AsyncIterator[MessageExt]:
        return self

    async def __anext__(self) -> MessageExt:
        """The next message, polling (1 s at a time) while there is none; ends once the
        consumer is shut down. A message counts as consumed once it is handed out: the
        next commit covers it."""
        while not self._buffer:
            if self._service_state is not ServiceState.RUNNING:
                raise StopAsyncIteration
            self._buffer.extend(await self._poll(1.0))
        return self._buffer.popleft()

    # ``timeout`` as the sync poll's (and Kafka's): a poll returns early with messages
    async def poll(self, timeout: float = 1.0) -> list[MessageExt]:  # type: ignore[override]  # noqa: ASYNC109
        """Messages that arrived within ``timeout`` seconds ([] if none), in queue order
        per queue; the positions of those queues move past them."""
        if self._buffer:  # what an ``async for`` left polled: handed out first
            self._poll_deadline(timeout)
            out, self._buffer = list(self._buffer), deque()
            return out
        return await self._poll(timeout)

    async def _poll(self, timeout: float) -> list[MessageExt]:  # noqa: ASYNC109
        deadline = self._poll_deadline(timeout)
        if self._auto_commit and time.monotonic() >= self._next_auto_commit:
            await self._commit_quietly_async()
        if self._housekeeping_due():
            await asyncio.to_thread(self._housekeeping)
        messages: list[MessageExt] = []
        while True:
            self._send_pulls()
            for ref in await self._ready(deadline):
                messages.extend(self._take(ref))
            if messages or time.monotonic() >= deadline:
                self._send_pulls()  # as the sync poll: they travel while the caller works
                return messages

    def _sent(self, reply: Reply[PullResponse]) -> None:
        wake, loop = self._wake, self._loop
        if wake is None or loop is None:
            return

        def done(_: object) -> None:
            with contextlib.suppress(RuntimeError):  # the loop has closed
                loop.call_soon_threadsafe(wake.set)

        reply.add_done_callback(done)

    async def _ready(self, deadline: float) -> list[Any]:
        """The replies that are ready: the first ones within the deadline (or a queue's
        retry time, when one comes first)."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop or self._wake is None:
            self._loop, self._wake = loop, asyncio.Event()
            for s in self._queues.values():  # pulls sent before this loop watched them
                if s.inflight is not None:
                    self._sent(s.inflight)
        now = time.monotonic()
        active = [s for s in self._queues.values() if not s.paused]
        wake = min([deadline] + [s.retry_at for s in active if s.retry_at > now])
        replies = [s.inflight for s in active if s.inflight is not None]
        if not replies:
            await asyncio.sleep(max(wake - now, 0.0))
            return []
        self._wake.clear()
        ready = self._ctx.transport.wait(replies, 0.0)
        if ready:
            return ready
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), max(wake - now, 0.0))
        return self._ctx.transport.wait(replies, 0.0)

    # ------------------------------------------------------------ commits
    async def commit(self) -> None:  # type: ignore[override]
        """Write the position of every queue to its broker (one call per broker and
        topic), awaiting the answers."""
        self._check_open()
        moved = self._moved()
        self._committed(moved, *await self._offsets.commit_async(moved))

    async def _commit_quietly_async(self) -> None:
        try:
            await self.commit()
        except RayqError as exc:  # re-delivered after a restart, never lost
            logger.warning("group %s: committing offsets failed: %s", self.group, exc)

    async def committed(self, mq: MessageQueue) -> int:  # type: ignore[override]
        """The group's committed offset of ``mq`` (-1: none), looked up in a thread."""
        return await asyncio.to_thread(super().committed, mq)

    async def send_back(  # type: ignore[override]
        self,
        msgs: list[MessageExt],
        *,
        delay_level: int = 0,
        max_reconsume_times: int = DEFAULT_MAX_RECONSUME_TIMES,
    ) -> list[str]:
        """``rayq.PullConsumer.send_back``, awaiting the brokers' answers."""
        calls, by_broker = self._send_back_calls(msgs, delay_level, max_reconsume_times)
        got = await self._ctx.broker_calls_async(calls, sync_pull.OFFSET_CALL_TIMEOUT_S)
        return sync_pull.send_back_topics(by_broker, got)


__all__ = ["PullConsumer"]
