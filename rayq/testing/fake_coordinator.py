"""The fake cluster's coordinator: the real ``CoordinatorService``, in-process.

Not a copy of the coordinator's logic: the very service the Coordinator actor
delegates to, with ``NoPeers`` (no other actor to find, watch or call), on the
fake's event-loop thread (``LoopThread``, shared with its brokers), so clients call
it synchronously from any thread, an event loop included. Before each call it
learns every fake broker's state, as the brokers' registrations and the
coordinator's death watch would tell it: a routed broker (re-)registers with its
current ``info()``, a stopped one is dropped as lost. With the brokers' ``acl_enable``
it checks the client operations with their ACL rules, as the actor does
(``coordinator_acl``: ``acl_file``, else ``<root>/config/plain_acl.toml``).
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, TypeVar

from rayq.actors.protocol import BrokerInfo
from rayq.actors.protocol.registry import Caller, operations
from rayq.actors.protocol.server_key import ServerKey
from rayq.actors.server.acl import AclService
from rayq.actors.server.coordinator_peers import NoPeers
from rayq.actors.server.coordinator_service import CoordinatorService
from rayq.store.clock import SYSTEM_CLOCK, Clock
from rayq.testing.fake_broker import LoopThread

T = TypeVar("T")

# The operations a client may call (the registry's, nothing else of the service).
CLIENT_OPERATIONS = frozenset(operations("coordinator", Caller.CLIENT))


class FakeCoordinator:
    """A ``CoordinatorService`` on the fake's event loop, called synchronously."""

    def __init__(
        self,
        namespace: str,
        loop: LoopThread,
        server_key: ServerKey,
        clock: Clock = SYSTEM_CLOCK,
        acl: AclService | None = None,
    ) -> None:
        self.service = CoordinatorService(NoPeers(namespace), clock, server_key=server_key, acl=acl)
        self.service.skip_rebuild()  # nothing ran before it
        self._loop = loop

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the fake's loop and wait for its result (or error)."""
        return self._loop.run(coro)

    def call(self, method: str, req: Any, brokers: list[tuple[BrokerInfo, bool]]) -> Any:
        """Client operation ``method`` with ``req``, after learning ``brokers`` (each
        broker's info, and whether it is routed): the reply, or the error raised."""
        if method not in CLIENT_OPERATIONS:
            raise NotImplementedError(f"the coordinator has no client operation {method!r}")
        return self.run(self._call(method, req, brokers))

    async def _call(self, method: str, req: Any, brokers: list[tuple[BrokerInfo, bool]]) -> Any:
        await self._learn(brokers)
        return await getattr(self.service, method)(req)

    async def _learn(self, brokers: list[tuple[BrokerInfo, bool]]) -> None:
        """Register the routed brokers; drop the others as lost (once)."""
        for info, routed in brokers:
            if routed:
                await self.service.registered(info)
            elif info.broker_name not in self.service.lost:
                await self.service.registered(info)
                self.service.remove_broker(info.broker_name)

    async def _close(self) -> None:
        self.service.close()

    def close(self) -> None:
        """Stop the service's background tasks (the fake closes the loop after)."""
        self.run(self._close())
