"""The socket data plane's server, without Ray: ``WireServer`` serves a replica's client
operations over TCP and a Unix socket from the broker's own event loop, through the
same ``BrokerEndpoint`` methods (check, ACL, serve) as the Ray actor calls.

Frames and the handshake are in actors/protocol/frames.py. Per connection: the
challenge is answered within ``HANDSHAKE_TIMEOUT_S`` or the connection is closed; then
calls run concurrently, up to ``max_inflight`` per connection. A connection with that
many unanswered (a client that stops reading its answers) is not read from until some
are written out, so what one client holds of the broker's memory is bounded (at most
``max_inflight`` answers and one frame of ``max_frame_bytes``) and TCP pushes back on
it. A frame that cannot be read as a call (too long, not msgpack, no id) closes its
connection; a call that fails is answered with its error. No frame reaches the store
before the endpoint has checked it.
"""

from __future__ import annotations

import asyncio
import contextlib
import glob
import logging
import os
import socket
import tempfile
from collections.abc import Awaitable, Callable, Collection
from typing import Any, cast

import msgspec

from rayq.actors.protocol.frames import (
    HANDSHAKE_MAX_BYTES,
    HEADER,
    NONCE_BYTES,
    VERSION,
    Answer,
    Call,
    Challenge,
    Proof,
    Welcome,
    encode_error,
    encode_reply,
    frame,
    proven,
)
from rayq.store.errors import BrokerError, InvalidRequestError, RayqError

logger = logging.getLogger(__name__)

HANDSHAKE_TIMEOUT_S = 10.0
MAX_INFLIGHT = 64  # calls of one connection being served at once
MAX_CONNECTIONS = 4096  # more are closed at once
Serve = Callable[[str, bytes], Awaitable[Any]]


class WireServer:
    """Serves ``ops`` (operation names) by ``serve(op, body)`` to clients that prove
    they hold ``key``."""

    def __init__(
        self,
        serve: Serve,
        ops: Collection[str],
        key: bytes,
        *,
        max_frame_bytes: int,
        max_inflight: int = MAX_INFLIGHT,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        self._serve = serve
        self._ops = frozenset(ops)
        self._key = key
        self.max_frame_bytes = max_frame_bytes
        self._max_inflight = max_inflight
        self._max_connections = max_connections
        self._servers: list[asyncio.AbstractServer] = []
        self._connections: set[_Connection] = set()
        self.port = 0
        self.unix_path = ""

    async def start(self, host: str, unix: bool = True, port: int = 0) -> None:
        """Listen on ``host`` (TCP ``port``, 0: an ephemeral one) and, with ``unix``, on a
        Unix socket in the temporary directory (removing the ones of processes that are
        gone)."""
        loop = asyncio.get_running_loop()
        tcp = await loop.create_server(self._protocol, host, port)
        self._servers.append(tcp)
        self.port = tcp.sockets[0].getsockname()[1]
        if unix and hasattr(socket, "AF_UNIX"):
            sweep_stale_sockets(tempfile.gettempdir())
            path = os.path.join(
                tempfile.gettempdir(), f"rayq-{os.getpid()}-{os.urandom(4).hex()}.s"
            )
            self._servers.append(await loop.create_unix_server(self._protocol, path))
            self.unix_path = path
        logger.info("data plane on %s:%d and %s", host, self.port, self.unix_path or "-")

    async def close(self) -> None:
        for server in self._servers:
            server.close()
        for conn in list(self._connections):
            conn.close()
        for server in self._servers:
            with contextlib.suppress(Exception):
                await server.wait_closed()
        self._servers.clear()
        if self.unix_path:
            with contextlib.suppress(OSError):
                os.unlink(self.unix_path)

    def _protocol(self) -> _Connection:
        return _Connection(self)

    def unknown(self, op: str) -> InvalidRequestError:
        return InvalidRequestError(
            f"unknown operation {op[:64]!r}: the data plane serves {sorted(self._ops)}",
            op=op[:64],
        )


class _Connection(asyncio.Protocol):
    """One client's connection: frames are cut from what arrives (``data_received``), the
    handshake first, then each call is served by a task of its own and answered by id.

    Back-pressure: with ``max_inflight`` calls unanswered the transport stops reading
    (the kernel's buffers fill and TCP pushes back on the client), and a call whose
    answer finds the transport's write buffer full waits until it drains."""

    def __init__(self, server: WireServer) -> None:
        self._server = server
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._nonce = b""
        self._proven = False
        self._closed = False
        self._limit = HANDSHAKE_MAX_BYTES  # of the next frame
        self._decoder = msgspec.msgpack.Decoder(Call)
        self._inflight = 0
        self._paused_reading = False
        self._writable: asyncio.Future[None] | None = None  # set while writing is paused
        self._tasks: set[asyncio.Task[None]] = set()
        self._timer: asyncio.TimerHandle | None = None

    # -------------------------------------------------------------- the transport's side
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, but have its methods
        self._transport = transport = cast(asyncio.Transport, transport)
        server = self._server
        if len(server._connections) >= server._max_connections:
            logger.warning(
                "data plane: %d connections open; refusing one", len(server._connections)
            )
            self._closed = True
            transport.close()
            return
        server._connections.add(self)
        self._nonce = os.urandom(NONCE_BYTES)
        transport.write(frame(Challenge(VERSION, self._nonce)))
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(HANDSHAKE_TIMEOUT_S, self._handshake_timed_out)

    def data_received(self, data: bytes) -> None:
        if self._closed:
            return
        if not self._buffer:  # the common case: whole frames in one read, cut without a copy
            with memoryview(data) as view:
                at = self._cut(view)
                if at < len(view):
                    self._buffer += view[at:]
            return
        self._buffer += data
        self._cut_buffer()

    def _cut_buffer(self) -> None:
        """Serve the whole frames the buffer holds (none while the first is not whole)."""
        buffer = self._buffer
        if len(buffer) >= HEADER.size:
            (size,) = HEADER.unpack_from(buffer)
            if size <= self._limit and len(buffer) < HEADER.size + size:
                return
        with memoryview(buffer) as view:
            at = self._cut(view)
        del buffer[:at]

    def _cut(self, view: memoryview) -> int:
        """Serve the whole frames at the start of ``view``, while fewer than
        ``max_inflight`` calls are unanswered; how many bytes they took (the rest is
        kept for later)."""
        at, end = 0, len(view)
        most = self._server._max_inflight
        while end - at >= HEADER.size and not self._closed and self._inflight < most:
            (size,) = HEADER.unpack_from(view, at)
            if size > self._limit:
                self._refuse(f"a frame of {size} bytes is past the limit of {self._limit}")
                return end
            if end - at - HEADER.size < size:
                break
            body = view[at + HEADER.size : at + HEADER.size + size]
            at += HEADER.size + size
            try:
                self._frame(body)
            finally:
                body.release()  # the buffer may be cut only once no view of it is left
        return at

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self._server._connections.discard(self)
        if self._timer is not None:
            self._timer.cancel()
        for task in self._tasks:
            task.cancel()
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)

    def pause_writing(self) -> None:
        if self._writable is None or self._writable.done():
            self._writable = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)

    def close(self) -> None:
        self._closed = True
        if self._transport is not None:
            self._transport.close()

    # -------------------------------------------------------------------- frames
    def _frame(self, body: memoryview) -> None:
        if not self._proven:
            self._handshake(body)
            return
        try:
            call = self._decoder.decode(body)
        except msgspec.DecodeError as exc:
            self._refuse(f"a bad frame: {exc}")
            return
        self._inflight += 1
        if self._inflight >= self._server._max_inflight and not self._paused_reading:
            self._paused_reading = True  # at most max_inflight answers owed
            assert self._transport is not None
            self._transport.pause_reading()
        task = asyncio.get_running_loop().create_task(self._answer(call))
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _handshake(self, body: memoryview) -> None:
        if self._timer is not None:
            self._timer.cancel()
        try:
            proof = msgspec.msgpack.decode(body, type=Proof)
        except msgspec.DecodeError:
            proof = None
        if proof is None or not proven(self._server._key, self._nonce, proof.mac):
            logger.warning("data plane: a client without the key was refused")
            self.close()
            return
        self._proven = True
        self._limit = self._server.max_frame_bytes
        assert self._transport is not None
        self._transport.write(frame(Welcome(self._server.max_frame_bytes)))

    def _handshake_timed_out(self) -> None:
        if not self._proven:
            logger.warning("data plane: a client without the key was refused")
            self.close()

    def _refuse(self, why: str) -> None:
        logger.warning("data plane: closing a connection: %s", why)
        self.close()

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._inflight -= 1
        if self._closed or not self._paused_reading:
            return
        if self._buffer:  # calls that came while max_inflight were unanswered
            self._cut_buffer()
        if self._inflight < self._server._max_inflight and not self._closed:
            self._paused_reading = False
            assert self._transport is not None
            self._transport.resume_reading()

    async def _answer(self, call: Call) -> None:
        server = self._server
        try:
            if call.op not in server._ops:
                raise server.unknown(call.op)
            result = await server._serve(call.op, call.body)
            answer = Answer(call.id, True, encode_reply(result))
        except RayqError as exc:
            answer = Answer(call.id, False, encode_error(exc))
        except Exception as exc:
            logger.exception("data plane: %s failed", call.op)
            error = BrokerError(f"{call.op} failed in the broker: {type(exc).__name__}: {exc}")
            answer = Answer(call.id, False, encode_error(error))
        if self._writable is not None and not self._writable.done():
            await self._writable  # the client reads its answers slower than they come
        if not self._closed and self._transport is not None:
            self._transport.write(frame(answer))


def sweep_stale_sockets(directory: str) -> int:
    """Remove the Unix sockets (``rayq-<pid>-<random>.s``) of data planes whose process
    is gone: a killed broker cannot remove its own. Returns how many were removed."""
    removed = 0
    for path in glob.glob(os.path.join(directory, "rayq-*-*.s")):
        pid = os.path.basename(path).split("-")[1]
        if not pid.isdigit() or _alive(int(pid)):
            continue
        with contextlib.suppress(OSError):
            os.unlink(path)
            removed += 1
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


__all__ = ["WireServer", "sweep_stale_sockets"]
