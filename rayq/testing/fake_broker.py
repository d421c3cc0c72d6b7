"""The fake cluster's brokers: the real ``BrokerEndpoint`` and long polling, in-process.

``FakeBroker`` wires one ``BrokerServer`` into a real ``BrokerEndpoint`` and a real
``HoldService`` (actors/server/long_polling.py), with in-process peers: a flusher that
reports every offset durable at once, a hold service reached by a direct call, no
coordinator (the fake computes routes from ``info()``), no page readers, no master.
Their async methods run on one event-loop thread (``LoopThread``) shared by the
fake's brokers; the fake's calls wait for them from the caller's thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from rayq.actors.protocol import (
    BrokerInfo,
    HaChunk,
    HaFetch,
    MetadataReply,
    MetadataRequest,
    Park,
    PullManyRequest,
    PullManyResponse,
    PullRequest,
    PullResponse,
)
from rayq.actors.protocol.names import hold_actor_name
from rayq.actors.protocol.server_key import Guard, ServerKey
from rayq.actors.server.broker_server import BrokerServer
from rayq.actors.server.endpoint import BrokerEndpoint, BrokerPeers
from rayq.actors.server.long_polling import HoldService
from rayq.actors.server.peer_api import PeerMissingError
from rayq.store.tally import Tally

T = TypeVar("T")


class LoopThread:
    """An asyncio event loop on a daemon thread, for the fake's brokers."""

    def __init__(
        self, new_loop: Callable[[], asyncio.AbstractEventLoop] = asyncio.new_event_loop
    ) -> None:
        self.loop = new_loop()  # uvloop.new_event_loop: the loop Ray gives actors
        self.thread = threading.Thread(target=self.loop.run_forever, name="rayq-fake", daemon=True)
        self.thread.start()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the loop and wait for its result (never from the loop itself)."""
        assert threading.current_thread() is not self.thread, "a fake call from its loop"
        return self.submit(coro).result()

    def close(self) -> None:
        """Cancel what still runs (held pulls, deliveries), then stop the loop."""
        with contextlib.suppress(concurrent.futures.TimeoutError):
            self.submit(_cancel_all()).result(timeout=5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)
        if not self.thread.is_alive():
            self.loop.close()


async def _cancel_all() -> None:
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


class _Tallies:
    def __init__(self) -> None:
        self.puts = Tally()
        self.pulls = Tally()
        self.send_backs = Tally()


class _Flusher:
    """No flusher: every offset is durable at once (never FLUSH_DISK_TIMEOUT)."""

    name = "fake-flusher"

    async def sync(self, offset: int) -> int:
        return offset

    async def durable(self) -> int:
        return -1


class _Hold:
    """The hold service, called directly (set once both sides exist), with the broker's
    proof of the server key as the broker actor's calls carry it."""

    name = "fake-hold"

    def __init__(self, guard: Guard) -> None:
        self.service: HoldService | None = None
        self.guard = guard

    async def deliver(self, token: str, answer: PullResponse | PullManyResponse) -> bool:
        if self.service is None:
            return False
        return self.service.deliver(token, answer, self.guard.prove("deliver", token, answer))

    async def ready(self) -> bool:
        return True


class _Nobody:
    """The peers the fake has none of: the coordinator, page readers and a master."""

    async def register_broker(self, info: BrokerInfo) -> None:
        """Routes are computed from ``info()`` on every call: nothing to register."""

    async def start(self) -> None:
        """No page readers to start."""

    def ha_fetch(self, req: HaFetch) -> asyncio.Future[HaChunk]:
        raise PeerMissingError("the fake cluster has no master")

    async def ha_metadata(self, req: MetadataRequest) -> MetadataReply:
        raise PeerMissingError("the fake cluster has no master")


class _HoldBroker:
    """The endpoint, as its hold service calls it."""

    def __init__(self, endpoint: BrokerEndpoint) -> None:
        self.endpoint = endpoint

    async def pull(self, req: PullRequest, park: Park | None = None) -> PullResponse:
        resp = await self.endpoint.pull(req, park)
        assert isinstance(resp, PullResponse)
        return resp

    async def pull_many(self, req: PullManyRequest, park: Park | None = None) -> PullManyResponse:
        return await self.endpoint.pull_many(req, park)


class FakeBroker:
    """One broker of the fake cluster: its server, endpoint and hold service."""

    def __init__(self, server: BrokerServer, server_key: ServerKey) -> None:
        self.server = server
        guard = Guard(server_key, "hold", hold_actor_name(server.config.replica_name))
        hold, nobody = _Hold(guard), _Nobody()
        peers = BrokerPeers(
            flusher=_Flusher(), hold=hold, registrar=nobody, page_readers=nobody, master=nobody
        )
        self.endpoint = BrokerEndpoint(server, peers, _Tallies(), server_key)
        self.hold = HoldService(_HoldBroker(self.endpoint), server.config.hold_s, guard)
        hold.service = self.hold


__all__ = ["FakeBroker", "LoopThread"]
