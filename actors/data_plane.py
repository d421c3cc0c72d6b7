"""A broker replica's socket data plane (actors/server/wire_server.py) as its actor
shell starts it: the client operations of the registry, served by the same endpoint
methods as the Ray calls, and the key and addresses ``data_endpoint`` hands out."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from rayq.actors.protocol.frames import KEY_BYTES, DataEndpoint
from rayq.actors.protocol.registry import Caller, operations
from rayq.actors.server.endpoint import BrokerEndpoint
from rayq.actors.server.wire_server import WireServer

MiB = 1 << 20
# Beside the endpoint's own checks: these are served by the actor shell, not the socket.
NOT_ON_THE_SOCKET = frozenset({"data_endpoint"})


@dataclass
class DataPlane:
    server: WireServer
    key: bytes
    host: str
    node_id: str

    def endpoint(self) -> DataEndpoint:
        return DataEndpoint(
            host=self.host,
            port=self.server.port,
            unix_path=self.server.unix_path,
            node_id=self.node_id,
            key=self.key,
            max_frame_bytes=self.server.max_frame_bytes,
        )


def client_operations() -> list[str]:
    ops = operations("broker")
    return sorted(
        name
        for name, op in ops.items()
        if op.caller is Caller.CLIENT and name not in NOT_ON_THE_SOCKET
    )


def max_frame_bytes(endpoint: BrokerEndpoint) -> int:
    """A frame may carry a batch of up to four of the largest messages (plus room)."""
    store = endpoint.server.config.store
    return 4 * (store.max_message_size_bytes + store.max_properties_size_bytes) + MiB


def data_plane(endpoint: BrokerEndpoint, node_id: str, host: str) -> DataPlane:
    """The data plane of ``endpoint``'s replica on ``host``, with a fresh key (not
    started)."""

    async def serve(op: str, body: bytes) -> Any:
        return await getattr(endpoint, op)(body)

    key = os.urandom(KEY_BYTES)
    server = WireServer(serve, client_operations(), key, max_frame_bytes=max_frame_bytes(endpoint))
    return DataPlane(server=server, key=key, host=host, node_id=node_id)
