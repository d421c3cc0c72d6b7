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
from typing import Any

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
        self._writers: set[asyncio.StreamWriter] = set()
        self.port = 0
        self.unix_path = ""

    async def start(self, host: str, unix: bool = True) -> None:
        """Listen on ``host`` (an ephemeral TCP port) and, with ``unix``, on a Unix socket
        in the temporary directory (removing the ones of processes that are gone)."""
        tcp = await asyncio.start_server(self._connection, host, 0, limit=1 << 20)
        self._servers.append(tcp)
        self.port = tcp.sockets[0].getsockname()[1]
        if unix and hasattr(socket, "AF_UNIX"):
            sweep_stale_sockets(tempfile.gettempdir())
            path = os.path.join(
                tempfile.gettempdir(), f"rayq-{os.getpid()}-{os.urandom(4).hex()}.s"
            )
            self._servers.append(
                await asyncio.start_unix_server(self._connection, path, limit=1 << 20)
            )
            self.unix_path = path
        logger.info("data plane on %s:%d and %s", host, self.port, self.unix_path or "-")

    async def close(self) -> None:
        for server in self._servers:
            server.close()
        for writer in list(self._writers):
            writer.close()
        for server in self._servers:
            with contextlib.suppress(Exception):
                await server.wait_closed()
        self._servers.clear()
        if self.unix_path:
            with contextlib.suppress(OSError):
                os.unlink(self.unix_path)

    # ------------------------------------------------------------ connections
    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self._writers) >= self._max_connections:
            logger.warning("data plane: %d connections open; refusing one", len(self._writers))
            writer.close()
            return
        self._writers.add(writer)
        tasks: set[asyncio.Task[None]] = set()
        try:
            if await self._handshake(reader, writer):
                await self._calls(reader, writer, tasks)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client went away
        except Exception:
            logger.exception("data plane: a connection failed")
        finally:
            self._writers.discard(writer)
            for task in tasks:
                task.cancel()
            writer.close()

    async def _handshake(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        nonce = os.urandom(NONCE_BYTES)
        writer.write(frame(Challenge(VERSION, nonce)))
        try:
            body = await asyncio.wait_for(
                _read_frame(reader, HANDSHAKE_MAX_BYTES), HANDSHAKE_TIMEOUT_S
            )
            proof = msgspec.msgpack.decode(body, type=Proof)
        except (TimeoutError, ValueError, msgspec.DecodeError):
            proof = None
        if proof is None or not proven(self._key, nonce, proof.mac):
            logger.warning("data plane: a client without the key was refused")
            return False
        writer.write(frame(Welcome(self.max_frame_bytes)))
        return True

    async def _calls(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        tasks: set[asyncio.Task[None]],
    ) -> None:
        slots = asyncio.Semaphore(self._max_inflight)
        decoder = msgspec.msgpack.Decoder(Call)
        while True:
            try:
                body = await _read_frame(reader, self.max_frame_bytes)
                call = decoder.decode(body)
            except ValueError as exc:  # too long
                logger.warning("data plane: closing a connection: %s", exc)
                return
            except msgspec.DecodeError as exc:
                logger.warning("data plane: closing a connection that sent a bad frame: %s", exc)
                return
            await slots.acquire()  # at most max_inflight answers owed: back-pressure
            task = asyncio.create_task(self._answer(call, writer, slots))
            tasks.add(task)
            task.add_done_callback(tasks.discard)

    async def _answer(
        self, call: Call, writer: asyncio.StreamWriter, slots: asyncio.Semaphore
    ) -> None:
        try:
            if call.op not in self._ops:
                raise InvalidRequestError(
                    f"unknown operation {call.op[:64]!r}: the data plane serves "
                    f"{sorted(self._ops)}",
                    op=call.op[:64],
                )
            result = await self._serve(call.op, call.body)
            answer = Answer(call.id, True, encode_reply(result))
        except RayqError as exc:
            answer = Answer(call.id, False, encode_error(exc))
        except Exception as exc:
            logger.exception("data plane: %s failed", call.op)
            error = BrokerError(f"{call.op} failed in the broker: {type(exc).__name__}: {exc}")
            answer = Answer(call.id, False, encode_error(error))
        try:
            writer.write(frame(answer))
            await writer.drain()
        except ConnectionError:
            pass
        finally:
            slots.release()


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


async def _read_frame(reader: asyncio.StreamReader, limit: int) -> bytes:
    (size,) = HEADER.unpack(await reader.readexactly(HEADER.size))
    if size > limit:
        raise ValueError(f"a frame of {size} bytes is past the limit of {limit}")
    return await reader.readexactly(size)


__all__ = ["WireServer", "sweep_stale_sockets"]
