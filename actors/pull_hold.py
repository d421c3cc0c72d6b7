"""The PullHold actor: a Ray shell over long polling (actors/server/long_polling.py).

A waiting pull goes to the broker once, with a ``Park`` token; the broker answers it
through ``deliver`` on the next append to one of its queues (two hops after the put:
broker -> hold over their node's Unix socket, hold -> consumer over the consumer's
transport), else the caller gets "nothing new" when its suspend time (capped by
``broker_suspend_max_ms``) runs out. The waiting, the hold table and
the follow-ups are ``HoldService``'s; this shell only adds the calls to its broker
(``RayHoldBroker``: over the broker's socket) and the actor's scheduling.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import ray

from rayq.actors.data_plane import data_plane
from rayq.actors.handles import deployment_key
from rayq.actors.peers import PEER_LOST_ERRORS, Peer
from rayq.actors.placement import server_actor_options
from rayq.actors.protocol import (
    Park,
    PullManyRequest,
    PullManyResponse,
    PullRequest,
    PullResponse,
    broker_actor_name,
    check,
    to_wire,
)
from rayq.actors.protocol.config import BrokerConfig
from rayq.actors.protocol.frames import DataEndpoint, DataEndpointRequest, decode_reply
from rayq.actors.protocol.names import hold_actor_name
from rayq.actors.protocol.server_key import Guard, ServerKey, ServerProof
from rayq.actors.server.long_polling import HoldService
from rayq.actors.server.peer_api import PeerLostError, PeerMissingError
from rayq.actors.wire_client import PeerSocket
from rayq.store.errors import BrokerUnavailableError

logger = logging.getLogger(__name__)


class RayHoldBroker:
    """``HoldBroker`` over the broker's socket (a Unix socket: they share a node). Its
    endpoint comes from the broker actor, found by name on the first pull and again
    after the connection failed (a restarted or replaced broker needs no re-wiring). A
    lost broker is a ``BrokerUnavailableError`` to the caller, who retries, as clients
    do."""

    def __init__(
        self, config: BrokerConfig, namespace: str, on_lost: Callable[[], None] | None = None
    ) -> None:
        self.replica = config.replica_name
        self.peer = Peer(broker_actor_name(config.replica_name), namespace)
        in_ray = ray.is_initialized()
        node_id = str(ray.get_runtime_context().get_node_id()) if in_ray else ""
        self.socket = PeerSocket(f"broker {self.replica}", self._endpoint, node_id, on_lost)

    async def _endpoint(self) -> DataEndpoint:
        broker = self.peer.get()
        if broker is None:
            raise PeerMissingError(f"broker {self.replica} is not running (yet)")
        try:
            endpoint: DataEndpoint = await broker.data_endpoint.remote(DataEndpointRequest())
        except PEER_LOST_ERRORS as exc:
            raise PeerLostError(f"broker {self.replica}: {type(exc).__name__}") from None
        return endpoint

    async def _call(self, method: str, *args: bytes) -> bytes:
        try:
            return await self.socket.call(method, *args)
        except PeerLostError as exc:
            self.socket.forget()
            self.peer.forget()
            raise BrokerUnavailableError(f"{exc}; retry", broker=self.replica) from None

    async def pull(self, req: PullRequest, park: Park | None = None) -> PullResponse:
        wire = (to_wire(req),) if park is None else (to_wire(req), to_wire(park))
        return decode_reply(await self._call("pull", *wire), PullResponse)

    async def pull_many(self, req: PullManyRequest, park: Park | None = None) -> PullManyResponse:
        wire = (to_wire(req),) if park is None else (to_wire(req), to_wire(park))
        return decode_reply(await self._call("pull_many", *wire), PullManyResponse)


class PullHoldActor:
    """Ray shell over ``HoldService``: ``__init__`` and registry operations only."""

    def __init__(self, config: BrokerConfig, namespace: str, *, server_key: ServerKey) -> None:
        guard = Guard(server_key, "hold", hold_actor_name(config.replica_name))
        # The broker's socket closing (it died or restarts) ends every pull parked there.
        broker = RayHoldBroker(config, namespace, on_lost=lambda: self.service.broker_lost())
        self.service = HoldService(broker, config.hold_s, guard)
        # Its socket, once it runs as an actor (a unit test may build the shell in-process).
        in_ray = ray.is_initialized()
        node_id = ray.get_runtime_context().get_node_id() if in_ray else ""
        host = ray.util.get_node_ip_address() if in_ray else "127.0.0.1"
        self.wire = data_plane(self, config, node_id, host, service="hold")
        if in_ray:
            self.wire.start()

    async def data_endpoint(self, req: DataEndpointRequest | bytes) -> DataEndpoint:
        """Where this hold service's socket listens (consumers park pulls there)."""
        return await self.wire.answer(req)

    async def deliver(
        self,
        token: str,
        answer: PullResponse | PullManyResponse | bytes,
        proof: ServerProof | None = None,
    ) -> bool:
        """The broker's answer to a parked pull (internal: broker -> hold service, with
        its proof of the server key); True if a caller was waiting for it (the broker
        then parks that caller's next pull)."""
        return self.service.deliver(token, answer, proof)

    async def pull(self, req: PullRequest | bytes) -> PullResponse | bytes:
        """Pull, waiting up to the suspend time (answered in bytes if asked in bytes)."""
        resp = await self.service.pull(check(req, PullRequest))
        return to_wire(resp) if type(req) is bytes else resp

    async def pull_many(self, req: PullManyRequest | bytes) -> PullManyResponse:
        """``pull`` for several queues of the broker (long_polling.HoldService)."""
        return await self.service.pull_many(check(req, PullManyRequest))

    async def ready(self) -> bool:
        return True


def spawn_hold(
    config: BrokerConfig, namespace: str, node_id: str, *, server_key: ServerKey | None = None
) -> Any:
    """Start (or get) a replica's hold service, holding ``server_key`` (default: this
    process's, ``deployment_key()``: the coordinator's)."""
    name = hold_actor_name(config.replica_name)
    options = server_actor_options(name, namespace, node_id, max_concurrency=10_000)
    return (
        ray.remote(PullHoldActor)
        .options(**options)
        .remote(config, namespace, server_key=server_key or deployment_key())
    )
