"""A server actor's connection to another's socket data plane (actors/data_plane.py), on
its own event loop: the hold service's parked pulls to its broker, the broker's answers
to them, a slave's replication fetches from its master.

``PeerSocket`` asks the peer actor for its endpoint (one Ray call, ``data_endpoint``)
on first use and after the connection failed, connects (the Unix socket when the peer
is on this node, else TCP), proves the key (actors/protocol/frames.py) and then carries
any number of calls at once, answered by id. A call on a connection that fails raises
``PeerLostError`` (the caller treats it as a lost peer, as it does a Ray actor's
death); an error the peer answered is raised as the same ``RayqError``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Awaitable, Callable

import msgspec

from rayq.actors.protocol.frames import (
    HEADER,
    Answer,
    Call,
    Challenge,
    DataEndpoint,
    Proof,
    Welcome,
    decode_error,
    frame,
    prove,
)
from rayq.actors.protocol.server_key import SERVER_OP, ServerArgs, ServerProof
from rayq.actors.server.peer_api import PeerLostError

logger = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 5.0
LIMIT = 1 << 20  # the stream reader's buffer
_encode = msgspec.msgpack.Encoder().encode
_answers = msgspec.msgpack.Decoder(Answer)


class WireClient:
    """One authenticated connection: ``call`` many at once; ``closed`` once it failed.
    ``on_lost`` is called once if the connection fails (the peer closed it or died), not
    when it is closed here."""

    def __init__(
        self,
        where: str,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        on_lost: Callable[[], None] | None = None,
    ):
        self.where = where
        self._on_lost = on_lost
        self._reader, self._writer = reader, writer
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[bytes]] = {}
        self.closed: BaseException | None = None
        self._task = asyncio.get_running_loop().create_task(self._read())

    @classmethod
    async def open(
        cls,
        name: str,
        endpoint: DataEndpoint,
        local_node: str,
        on_lost: Callable[[], None] | None = None,
    ) -> WireClient:
        same_node = bool(endpoint.unix_path) and endpoint.node_id == local_node
        where = f"{name} at " + (
            endpoint.unix_path if same_node else f"{endpoint.host}:{endpoint.port}"
        )
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                if same_node:
                    reader, writer = await asyncio.open_unix_connection(
                        endpoint.unix_path, limit=LIMIT
                    )
                else:
                    reader, writer = await asyncio.open_connection(
                        endpoint.host, endpoint.port, limit=LIMIT
                    )
                try:
                    challenge = msgspec.msgpack.decode(await _frame(reader, 4096), type=Challenge)
                    writer.write(frame(Proof(prove(endpoint.key, challenge.nonce))))
                    msgspec.msgpack.decode(await _frame(reader, 4096), type=Welcome)
                except BaseException:
                    writer.close()
                    raise
        except (OSError, TimeoutError, ValueError, asyncio.IncompleteReadError) as exc:
            raise PeerLostError(f"cannot connect to {where}: {type(exc).__name__}: {exc}") from None
        except msgspec.DecodeError as exc:
            raise PeerLostError(f"{where} refused the handshake: {exc}") from None
        return cls(where, reader, writer, on_lost)

    async def call(self, op: str, body: bytes) -> bytes:
        """``op``'s answer body; its error as the ``RayqError`` it names; PeerLostError
        if the connection fails first."""
        if self.closed is not None:
            raise PeerLostError(f"{self.where}: {self.closed}")
        call_id = next(self._ids)
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._pending[call_id] = future
        try:
            self._writer.write(frame(Call(call_id, op, body)))
            await self._writer.drain()
            return await future
        except (ConnectionError, OSError) as exc:
            self._fail(exc)
            raise PeerLostError(f"{self.where}: the connection failed: {exc}") from None
        finally:
            self._pending.pop(call_id, None)

    def close(self) -> None:
        self._on_lost = None
        self._fail(ConnectionAbortedError("closed"))

    async def _read(self) -> None:
        try:
            while True:
                answer = _answers.decode(await _frame(self._reader, 1 << 62))
                future = self._pending.get(answer.id)
                if future is None or future.done():
                    continue
                if answer.ok:
                    future.set_result(answer.body)
                else:
                    future.set_exception(decode_error(answer.body))
        except (OSError, ValueError, asyncio.IncompleteReadError, msgspec.DecodeError) as exc:
            self._fail(exc)

    def _fail(self, exc: BaseException) -> None:
        if self.closed is None:
            self.closed = exc
            self._writer.close()
            if self._task is not asyncio.current_task():
                self._task.cancel()
            on_lost, self._on_lost = self._on_lost, None
            if on_lost is not None:
                try:
                    on_lost()
                except Exception:
                    logger.exception("%s: handling the lost connection failed", self.where)
        error = PeerLostError(f"{self.where}: the connection failed: {type(exc).__name__}")
        for future in self._pending.values():
            if not future.done():
                future.set_exception(error)


async def _frame(reader: asyncio.StreamReader, limit: int) -> bytes:
    (size,) = HEADER.unpack(await reader.readexactly(HEADER.size))
    if size > limit:
        raise ValueError(f"a frame of {size} bytes is past the limit of {limit}")
    return await reader.readexactly(size)


class PeerSocket:
    """The data plane of one peer actor: ``endpoint()`` asks for its address and key
    (a Ray call), made again after the connection failed (a restarted peer listens
    elsewhere, with a new key). ``on_lost`` is called each time an open connection
    fails."""

    def __init__(
        self,
        name: str,
        endpoint: Callable[[], Awaitable[DataEndpoint]],
        local_node: str,
        on_lost: Callable[[], None] | None = None,
    ) -> None:
        self.name = name
        self._on_lost = on_lost
        self._endpoint = endpoint
        self._local_node = local_node
        self._client: WireClient | None = None
        self._opening: asyncio.Lock | None = None

    async def _connected(self) -> WireClient:
        client = self._client
        if client is not None and client.closed is None:
            return client
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:
            client = self._client
            if client is None or client.closed is not None:
                endpoint = await self._endpoint()
                client = self._client = await WireClient.open(
                    self.name, endpoint, self._local_node, self._on_lost
                )
            return client

    async def call(
        self, method: str, *args: bytes | str, proof: ServerProof | None = None
    ) -> bytes:
        """``method(*args)`` on the peer, as a server call; its answer body."""
        client = await self._connected()
        return await client.call(SERVER_OP + method, _encode(ServerArgs(list(args), proof)))

    def forget(self) -> None:
        """Drop the connection: the next call asks for the endpoint again."""
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):
                client.close()


__all__ = ["PeerSocket", "WireClient"]
