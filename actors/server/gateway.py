"""A deployment's bootstrap endpoint: how a process outside Ray reaches it
(``rayq.connect("rayq://host:port", key=...)``), as Kafka's ``bootstrap.servers``
and RocketMQ's name server do.

The coordinator serves it on a socket of its own (``WireServer``: the data plane's
frames and handshake, actors/protocol/frames.py) with the deployment key, the one
``rayq.start`` keeps in ``<store dir>/rayq.key``. A client that proves the key may call:

* every client operation of the coordinator (routes, brokers, groups; the same
  ``CoordinatorService`` methods as the Ray calls, ACL checks included);
* ``endpoint`` (``EndpointRequest``): where a broker replica's data plane, or its hold
  service's, listens and its key, asked of that actor through Ray by ``lookup``. The
  client then connects to the broker directly, as ``DirectTransport`` does inside Ray.

The deployment key is the gate to the sockets, as membership of the Ray cluster is
inside it (``data_endpoint`` hands a broker's key to any driver); with ACL on, every
operation on them is still checked against the caller's signed credentials, so
``endpoint`` itself asks for none. Without the deployment key nothing is served (the
handshake closes the connection).
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from rayq.actors.protocol import DataEndpoint, EndpointRequest
from rayq.actors.protocol.registry import Caller, operations
from rayq.actors.protocol.wire import check
from rayq.actors.server.coordinator_service import CoordinatorService
from rayq.actors.server.wire_server import WireServer

logger = logging.getLogger(__name__)

ENDPOINT_OP = "endpoint"
# Coordinator requests are small; a routes request for many topics is the largest.
MAX_FRAME_BYTES = 16 << 20
Lookup = Callable[[str, str], Awaitable[DataEndpoint]]  # (replica, service) -> endpoint


def gateway_operations() -> list[str]:
    """What a client may call on the bootstrap endpoint."""
    ops = operations("coordinator")
    return sorted([n for n, op in ops.items() if op.caller is Caller.CLIENT] + [ENDPOINT_OP])


class Gateway:
    """The bootstrap endpoint of the deployment ``service`` coordinates."""

    def __init__(self, service: CoordinatorService, lookup: Lookup, key: bytes) -> None:
        self.service = service
        self.lookup = lookup
        self.server = WireServer(
            self.serve, gateway_operations(), key, max_frame_bytes=MAX_FRAME_BYTES
        )
        self.host = ""

    async def serve(self, op: str, body: bytes) -> Any:
        if op == ENDPOINT_OP:
            req = check(body, EndpointRequest)
            return await self.lookup(req.replica, req.service)
        method: Callable[[bytes], Awaitable[Any]] = getattr(self.service, op)
        return await method(body)

    async def start(self, host: str, port: int) -> None:
        """Listen on ``host``:``port``; on a free port instead when ``port`` is taken."""
        self.host = host
        try:
            await self.server.start(host, unix=False, port=port)
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE or port == 0:
                raise
            logger.warning("bootstrap port %d on %s is taken: listening on a free one", port, host)
            await self.server.start(host, unix=False, port=0)
        logger.info("bootstrap endpoint on rayq://%s:%d", host, self.server.port)

    @property
    def url(self) -> str:
        return f"rayq://{self.host}:{self.server.port}" if self.server.port else ""

    async def close(self) -> None:
        await self.server.close()


__all__ = ["ENDPOINT_OP", "Gateway", "gateway_operations"]
