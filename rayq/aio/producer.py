"""``rayq.aio.Producer``: the sync ``rayq.Producer``'s logic, with its answers awaited."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from rayq.actors.protocol import MessageQueue, SendResult
from rayq.actors.protocol.config import ClientConfig
from rayq.producer.accumulator import Put
from rayq.producer.batch import prepare_batch
from rayq.producer.producer import Producer as SyncProducer
from rayq.producer.sender import results
from rayq.store import InnerMessage, Message
from rayq.transport.base import Transport


class Producer:
    """Sends messages from asyncio code::

        producer = rayq.aio.Producer(group="pg")
        await producer.start()
        result = await producer.send(rayq.Message("orders", b"body"))
        await producer.shutdown()

    Options as ``rayq.Producer``'s (``send_timeout_ms`` per attempt, ``retries``); the
    same checks, queue choice, batching limits and retry policy apply.
    """

    def __init__(
        self,
        group: str,
        *,
        config: ClientConfig | None = None,
        send_timeout_ms: int = 3000,
        retries: int = 2,
        namespace: str | None = None,
        transport: Transport | None = None,
    ) -> None:
        # the sync producer holds the state and logic both share; nothing of it blocks
        # here but the lookups this class runs in a thread
        self._core = SyncProducer(
            group,
            config=config,
            send_timeout_ms=send_timeout_ms,
            retries=retries,
            namespace=namespace,
            transport=transport,
        )
        self.group = self._core.group
        self.config = self._core.config

    def __repr__(self) -> str:
        return "aio." + repr(self._core)

    async def start(self) -> None:
        """Find the deployment (a Ray lookup, in a thread); the first send does it too."""
        await asyncio.to_thread(self._core.start)

    async def shutdown(self) -> None:
        """Later sends raise ClosedError."""
        self._core.shutdown()

    async def __aenter__(self) -> Producer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    async def send(self, msg: Message) -> SendResult:
        """Send one message; its result once the broker answered."""
        core = self._core
        core._check_open()
        inner = core._prepare(msg)
        return (await self._send([inner]))[0]

    async def send_batch(self, msgs: Sequence[Message]) -> list[SendResult]:
        """Send messages of one topic to one queue in one call; results in input order."""
        core = self._core
        core._check_open()
        return await self._send(prepare_batch(msgs, core.group, core.config, core._ids))

    async def _send(self, inners: list[InnerMessage]) -> list[SendResult]:
        core = self._core
        if core._ctx is None:
            await self.start()
        queue = await self._pick(inners[0].topic)
        put = Put(queue, inners)
        res = await core._sender.send_awaited(put)
        return results(put.queue, res)

    async def _pick(self, topic: str) -> MessageQueue:
        """A queue for ``topic``: its routes from the cache, or looked up in a thread."""
        routes = self._core._routes
        cached = routes.queues.get(topic)
        if cached is None or cached[1] <= time.monotonic():
            await asyncio.to_thread(routes.write_queues, topic)
        return routes.pick(topic)


__all__ = ["Producer"]
