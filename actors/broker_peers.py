"""The broker's peers: ``peer_api``'s interfaces implemented with actor handles, and for
the calls that carry data, the peers' sockets.

Each is found by name (actors/peers.py) on first need and again after a call to it
failed; a missing actor raises ``PeerMissingError``, a call to one that died
``PeerLostError``, so the Ray-free services never see a Ray exception. The answers to
parked pulls go to the hold service's socket, and a slave fetches from its master's
(actors/wire_client.py): their endpoints come from the peers' ``data_endpoint``, and
their server proofs are made here as ``Signed`` makes them for Ray calls.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from rayq.actors.peers import PEER_LOST_ERRORS, Peer
from rayq.actors.protocol import (
    COORDINATOR_NAME,
    BrokerInfo,
    HaChunk,
    HaFetch,
    MetadataReply,
    MetadataRequest,
    PullManyResponse,
    PullResponse,
    broker_actor_name,
    flusher_actor_name,
    hold_actor_name,
    to_wire,
)
from rayq.actors.protocol.config import BrokerConfig
from rayq.actors.protocol.frames import (
    DataEndpoint,
    DataEndpointRequest,
    decode_reply,
    encode_reply,
)
from rayq.actors.protocol.server_key import Guard, ServerKey, Signed
from rayq.actors.server.endpoint import BrokerPeers
from rayq.actors.server.peer_api import PeerLostError, PeerMissingError
from rayq.actors.wire_client import PeerSocket

T = TypeVar("T")


class RayPeer:
    """A peer actor by name; ``handle`` raises PeerMissingError while it is not there.
    Its server operations are signed with ``server_key`` (as the peer ``service``)."""

    service = ""

    def __init__(self, name: str, namespace: str, server_key: ServerKey) -> None:
        self.name = name
        self.peer = Peer(name, namespace)
        self.server_key = server_key
        self.guard = Guard(server_key, self.service, name)
        self.socket = PeerSocket(name, self._endpoint, _node_id())

    async def _endpoint(self) -> DataEndpoint:
        return await self.result(self.handle().data_endpoint.remote(DataEndpointRequest()))

    async def call(self, method: str, *args: bytes | str) -> bytes:
        """``method(*args)`` on the peer's socket, with its server proof; PeerLostError
        (and a fresh endpoint next time) if the connection fails."""
        proof = self.guard.prove(method, *args)
        try:
            return await self.socket.call(method, *args, proof=proof)
        except PeerLostError:
            self.socket.forget()
            self.peer.forget()
            raise

    def handle(self) -> Any:
        handle = self.peer.get()
        if handle is None:
            raise PeerMissingError(f"actor {self.name} is not running")
        return Signed(handle, self.server_key, self.service, self.name)

    async def result(self, ref: Awaitable[T]) -> T:
        """The call's answer; PeerLostError (and a fresh lookup next time) if it died."""
        try:
            return await ref
        except PEER_LOST_ERRORS as exc:
            self.peer.forget()
            raise PeerLostError(f"actor {self.name} is unreachable ({type(exc).__name__})") from exc


class RayFlusher(RayPeer):
    service = "flusher"

    async def sync(self, offset: int) -> int:
        return await self.result(self.handle().sync.remote(offset))

    async def durable(self) -> int:
        return await self.result(self.handle().durable.remote())


class RayHold(RayPeer):
    service = "hold"

    async def deliver(self, token: str, answer: PullResponse | PullManyResponse) -> bool:
        """Over the hold service's socket (a Unix socket: it runs on this node)."""
        body = await self.call("deliver", token, encode_reply(answer))
        return msgspec.msgpack.decode(body, type=bool)

    async def ready(self) -> bool:
        return await self.result(self.handle().ready.remote())


class RayRegistrar(RayPeer):
    service = "coordinator"

    async def register_broker(self, info: BrokerInfo) -> None:
        await self.result(self.handle().register_broker.remote(info))


class RayMaster(RayPeer):
    service = "broker"

    def ha_fetch(self, req: HaFetch) -> Awaitable[HaChunk]:
        """Over the master's socket; the call starts now."""
        return asyncio.ensure_future(self._ha_fetch(req))

    async def _ha_fetch(self, req: HaFetch) -> HaChunk:
        return decode_reply(await self.call("ha_fetch", to_wire(req)), HaChunk)

    async def ha_metadata(self, req: MetadataRequest) -> MetadataReply:
        return decode_reply(await self.call("ha_metadata", to_wire(req)), MetadataReply)


class RayPageReaders:
    """The replica's page readers (actors/page_reader.py), started on the first call."""

    def __init__(self, config: BrokerConfig, store_dir: str, namespace: str, node_id: str):
        self.args = (config, str(Path(store_dir)), namespace, node_id)

    async def start(self) -> None:
        from rayq.actors.page_reader import spawn_page_readers

        readers = spawn_page_readers(*self.args)
        await asyncio.gather(*(r.ready.remote() for r in readers))


def _node_id() -> str:
    import ray

    return str(ray.get_runtime_context().get_node_id()) if ray.is_initialized() else ""


def ray_peers(
    config: BrokerConfig, store_dir: str, namespace: str, node_id: str, server_key: ServerKey
) -> BrokerPeers:
    """The peers of the broker replica ``config`` describes, by name in ``namespace``;
    their server operations signed with ``server_key``."""
    replica, key = config.replica_name, server_key
    return BrokerPeers(
        flusher=RayFlusher(flusher_actor_name(replica), namespace, key),
        hold=RayHold(hold_actor_name(replica), namespace, key),
        registrar=RayRegistrar(COORDINATOR_NAME, namespace, key),
        page_readers=RayPageReaders(config, store_dir, namespace, node_id),
        master=RayMaster(broker_actor_name(config.broker_name), namespace, key),  # a slave's
    )
