"""A replica's socket data plane (actors/server/wire_server.py) as its actor shells start
it: the broker's client operations of the registry, served by the same endpoint methods
as its Ray calls, and its hold service's pulls (long polling) on a socket of its own;
and the key and addresses ``data_endpoint`` hands out.

The calls between the replica's server actors that carry data go over these sockets
too (``SERVER_OPS``, as ``server:<operation>`` with a ``ServerArgs`` body): the hold
service's parked pulls to its broker and the broker's answers to them (a Unix socket
on their node), and a slave's replication fetches from its master. The callee checks
their arguments and server proofs exactly as over Ray."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import msgspec

from rayq.actors.protocol.config import BrokerConfig, ClientConfig
from rayq.actors.protocol.frames import KEY_BYTES, DataEndpoint, DataEndpointRequest
from rayq.actors.protocol.registry import Caller, operations
from rayq.actors.protocol.server_key import SERVER_OP, ServerArgs
from rayq.actors.protocol.wire import check
from rayq.actors.server.wire_server import MAX_INFLIGHT, WireServer
from rayq.store.errors import BrokerUnavailableError, InvalidRequestError

MiB = 1 << 20
# Served by the actor shell over Ray only: where the socket is.
NOT_ON_THE_SOCKET = frozenset({"data_endpoint"})
# Parked pulls wait on the hold service's socket: as many as its actor takes at once.
HOLD_INFLIGHT = 10_000
# Server operations with data, served on the socket too: the hold service's pulls (with
# their Park) and a slave's replication on the broker's; the broker's answers to parked
# pulls on the hold service's.
# Each with how many arguments it takes (at least, at most), its proof aside.
SERVER_OPS: dict[str, dict[str, tuple[int, int]]] = {
    "broker": {"pull": (1, 2), "pull_many": (1, 2), "ha_fetch": (1, 1), "ha_metadata": (1, 1)},
    "hold": {"deliver": (2, 2)},
}
_server_args = msgspec.msgpack.Decoder(ServerArgs)


@dataclass
class DataPlane:
    server: WireServer
    key: bytes
    host: str
    node_id: str
    # Done once it listens. A thread-safe future: Ray may run ``data_endpoint`` on another
    # event loop than the one ``__init__`` started the listening on (a task of another
    # loop cannot be awaited while it is pending).
    started: concurrent.futures.Future[None] | None = None

    def start(self) -> None:
        """Listen, in the background of the running event loop (an actor's)."""
        started: concurrent.futures.Future[None] = concurrent.futures.Future()
        task = asyncio.get_running_loop().create_task(self.server.start(self.host))
        task.add_done_callback(lambda done: _settle(done, started))
        self.started = started

    async def answer(self, req: DataEndpointRequest | bytes) -> DataEndpoint:
        """``data_endpoint``: the addresses and key, once it listens."""
        check(req, DataEndpointRequest)
        if self.started is None:
            raise BrokerUnavailableError("this actor's data plane is not started")
        await asyncio.wrap_future(self.started)
        return self.endpoint()

    def endpoint(self) -> DataEndpoint:
        return DataEndpoint(
            host=self.host,
            port=self.server.port,
            unix_path=self.server.unix_path,
            node_id=self.node_id,
            key=self.key,
            max_frame_bytes=self.server.max_frame_bytes,
        )


def _settle(done: asyncio.Task[None], started: concurrent.futures.Future[None]) -> None:
    """What the listening task came to, on the thread-safe future."""
    if done.cancelled():
        started.cancel()
    elif (exc := done.exception()) is not None:
        started.set_exception(exc)
    else:
        started.set_result(None)


def client_operations(service: str = "broker") -> list[str]:
    """The operations a client may call on ``service``'s socket."""
    return sorted(
        name
        for name, op in operations(service).items()
        if op.caller is Caller.CLIENT and name not in NOT_ON_THE_SOCKET
    )


def max_frame_bytes(config: BrokerConfig) -> int:
    """A frame may carry a batch of up to four of the largest messages, and at least
    twice a producer's default batch (``ClientConfig.batch_max_bytes``: a broker that
    takes only small messages still takes a producer's batches of many), plus room."""
    store = config.store
    largest = 4 * (store.max_message_size_bytes + store.max_properties_size_bytes)
    return max(largest, 2 * ClientConfig().batch_max_bytes) + MiB


def data_plane(
    target: object, config: BrokerConfig, node_id: str, host: str, service: str = "broker"
) -> DataPlane:
    """The data plane of ``service`` on ``host`` (not started), with a fresh key: each
    operation is ``target``'s method of that name, given the request's bytes."""
    methods: dict[str, Callable[..., Coroutine[Any, Any, Any]]] = {
        op: getattr(target, op) for op in client_operations(service)
    }
    arity = {SERVER_OP + op: n for op, n in SERVER_OPS.get(service, {}).items()}
    internal = {op: getattr(target, op[len(SERVER_OP) :]) for op in arity}

    async def serve(op: str, body: bytes) -> Any:
        method = methods.get(op)
        if method is not None:
            return await method(body)
        try:
            call = _server_args.decode(body)
        except msgspec.DecodeError as exc:
            raise InvalidRequestError(f"{op}: its arguments cannot be read: {exc}", op=op) from None
        least, most = arity[op]
        if not least <= len(call.args) <= most:
            raise InvalidRequestError(
                f"{op} takes {least}..{most} arguments, got {len(call.args)}", op=op
            )
        if call.proof is None:
            return await internal[op](*call.args)
        return await internal[op](*call.args, proof=call.proof)

    key = os.urandom(KEY_BYTES)
    server = WireServer(
        serve,
        [*methods, *internal],
        key,
        max_frame_bytes=max_frame_bytes(config),
        max_inflight=HOLD_INFLIGHT if service == "hold" else MAX_INFLIGHT,
    )
    return DataPlane(server=server, key=key, host=host, node_id=node_id)
