"""The broker endpoint's POP operations: check, authorize, serve, and wait for news.

A receive that finds nothing waits up to its ``wait_ms`` for an append to the broker
(``PopWaits``: one event per waiting receive, on its own event loop, set by
``BrokerEndpoint.notify_append`` from whichever thread appended), then reads once more:
a waiting receiver costs no CPU. The reads and leases are pop_processor.py's. On a
SYNC_MASTER (or with SYNC_FLUSH) a receive that leased messages, an ack and a lease
change are answered once their POP log record is as safe as a send
(``replication_wait.log_safe``): a promoted slave knows every lease and ack a client
was told of.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import msgspec

from rayq.actors.protocol import Done, check
from rayq.actors.protocol import pop as p
from rayq.actors.server.broker_server import BrokerServer
from rayq.actors.server.replication_wait import log_safe


class PopWaits:
    """Receives waiting for an append: (their event loop, their event)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()

    def notify(self) -> None:
        if not self._waiting:
            return
        with self._lock:
            waiting = list(self._waiting)
        for loop, event in waiting:
            loop.call_soon_threadsafe(event.set)

    @contextlib.contextmanager
    def watching(self) -> Iterator[asyncio.Event]:
        """An event set by the next append from now on (watch, then read: an append
        during the read is not missed)."""
        entry = (asyncio.get_running_loop(), asyncio.Event())
        with self._lock:
            self._waiting.add(entry)
        try:
            yield entry[1]
        finally:
            with self._lock:
                self._waiting.discard(entry)


class PopEndpoint:
    """``BrokerEndpoint``'s POP methods (it sets ``server`` and ``pop_waits``)."""

    server: BrokerServer
    pop_waits: PopWaits
    peers: Any  # the endpoint's peers: ``flusher`` for log_safe

    async def pop(self, req: p.PopRequest | bytes) -> p.PopResponse:
        """Lease messages to a receiver, waiting up to ``wait_ms`` for some to come."""
        req = check(req, p.PopRequest)
        self.server.authorize("pop", req)
        deadline = time.monotonic() + req.wait_ms / 1000
        acked: p.PopResponse | None = None  # the answer that settled the request's acks
        while True:
            with self.pop_waits.watching() as appended:
                resp = self.server.pop(req)
                if req.acks:  # settled (or refused) once: not again while it waits
                    acked, req = resp, msgspec.structs.replace(req, acks=[])
                    if not resp.count and not resp.ack_error:
                        await log_safe(self.server, self.peers.flusher, "POP ack")
                left = deadline - time.monotonic()
                if not resp.count and left > 0:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(appended.wait(), left)
                    continue
            if resp.count:
                await log_safe(self.server, self.peers.flusher, "lease")
            if acked is not None and acked.ack_error and not resp.ack_error:
                resp = msgspec.structs.replace(resp, ack_error=acked.ack_error)
            return resp

    async def ack(self, req: p.AckRequest | bytes) -> Done:
        req = check(req, p.AckRequest)
        self.server.authorize("ack", req)
        done = self.server.ack(req)
        await log_safe(self.server, self.peers.flusher, "POP ack")
        return done

    async def change_invisibility(
        self, req: p.ChangeInvisibilityRequest | bytes
    ) -> p.ChangeInvisibilityReply:
        req = check(req, p.ChangeInvisibilityRequest)
        self.server.authorize("change_invisibility", req)
        reply = self.server.change_invisibility(req)
        await log_safe(self.server, self.peers.flusher, "lease change")
        return reply


__all__ = ["PopEndpoint", "PopWaits"]
