"""The PullHold actor: a Ray shell over long polling (actors/server/long_polling.py).

A waiting pull goes to the broker once, with a ``Park`` token; the broker answers it
through ``deliver`` on the next append to one of its queues (two actor hops after the
put: broker -> hold -> consumer), else the caller gets "nothing new" when its suspend
time (capped by ``broker_suspend_max_ms``) runs out. The waiting, the hold table and
the follow-ups are ``HoldService``'s; this shell only adds the Ray calls to its broker
(``RayHoldBroker``) and the actor's scheduling.
"""

from __future__ import annotations

import logging
from typing import Any

import ray

from rayq.actors.data_plane import data_plane
from rayq.actors.handles import deployment_key
from rayq.actors.peers import PEER_LOST_ERRORS, Peer
from rayq.actors.protocol import (
    Park,
    PullManyRequest,
    PullManyResponse,
    PullRequest,
    PullResponse,
    broker_actor_name,
    check,
    from_wire,
    to_wire,
)
from rayq.actors.protocol.config import BrokerConfig
from rayq.actors.protocol.frames import DataEndpoint, DataEndpointRequest
from rayq.actors.protocol.names import hold_actor_name
from rayq.actors.protocol.server_key import Guard, ServerKey, ServerProof
from rayq.actors.server.long_polling import HoldService
from rayq.store.errors import BrokerUnavailableError

logger = logging.getLogger(__name__)


class RayHoldBroker:
    """``HoldBroker`` over the broker actor, found by name on the first pull and again
    after a call to it failed (a restarted or replaced broker needs no re-wiring).
    Requests go as ``to_wire`` bytes; a lost broker's error reaches the caller, who
    retries, as clients do."""

    def __init__(self, config: BrokerConfig, namespace: str) -> None:
        self.replica = config.replica_name
        self.peer = Peer(broker_actor_name(config.replica_name), namespace)

    def _broker(self) -> Any:
        broker = self.peer.get()
        if broker is None:
            raise BrokerUnavailableError(f"broker {self.replica} is not running (yet); retry")
        return broker

    async def _answer(self, ref: Any) -> Any:
        try:
            reply = await ref
        except PEER_LOST_ERRORS:
            self.peer.forget()
            raise
        return from_wire(reply, PullResponse) if type(reply) is bytes else reply

    async def pull(self, req: PullRequest, park: Park | None = None) -> PullResponse:
        wire = (to_wire(req),) if park is None else (to_wire(req), to_wire(park))
        return await self._answer(self._broker().pull.remote(*wire))

    async def pull_many(self, req: PullManyRequest, park: Park | None = None) -> PullManyResponse:
        wire = (to_wire(req),) if park is None else (to_wire(req), to_wire(park))
        return await self._answer(self._broker().pull_many.remote(*wire))


class PullHoldActor:
    """Ray shell over ``HoldService``: ``__init__`` and registry operations only."""

    def __init__(self, config: BrokerConfig, namespace: str, *, server_key: ServerKey) -> None:
        guard = Guard(server_key, "hold", hold_actor_name(config.replica_name))
        self.service = HoldService(RayHoldBroker(config, namespace), config.hold_s, guard)
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
        got = from_wire(answer, PullResponse) if isinstance(answer, bytes) else answer
        return self.service.deliver(token, got, proof)

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
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return (
        ray.remote(PullHoldActor)
        .options(
            name=hold_actor_name(config.replica_name),
            namespace=namespace,
            get_if_exists=True,
            lifetime="detached",
            max_restarts=-1,
            num_cpus=0,
            max_concurrency=10_000,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node_id, soft=False),
        )
        .remote(config, namespace, server_key=server_key or deployment_key())
    )
