"""The client side of the socket data plane (actors/protocol/frames.py), without Ray:
``Connection`` (one authenticated socket, many calls in flight, answered by
correlation id), ``SocketReply`` and ``socket_client``, and ``SocketTransport``, what
both socket transports share: a connection per (service, replica), kept and shared by
every client of the process, made anew after it failed.

A ``SocketTransport`` learns where a replica listens (``endpoint``) and which replica
serves a broker (``replica_of``) from its subclass: ``DirectTransport`` asks Ray
(rayq/transport/direct.py), ``RemoteTransport`` asks a deployment's bootstrap endpoint
(rayq/transport/remote.py). A call that waits for its answer reads it off the socket
itself while no other thread is reading; otherwise the connection's reader thread
reads (callbacks, asyncio, ``wait``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import os
import select
import socket
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, cast

import msgspec

from rayq.actors.protocol import DataEndpoint, to_wire
from rayq.actors.protocol.frames import (
    HEADER,
    Answer,
    Call,
    Challenge,
    Proof,
    Welcome,
    decode_error,
    decode_reply,
    frame,
    prove,
)
from rayq.store.errors import BrokerUnavailableError, InvalidRequestError
from rayq.transport.base import BrokerClient, CoordinatorClient, HoldClient, Reply, _Client

CONNECT_TIMEOUT_S = 5.0
T = TypeVar("T")


class SocketReply(Reply[T]):
    """The answer to one call on a connection: a future of its body, decoded on use.
    ``result`` reads the answer off the socket itself when nobody else is reading;
    every other way of waiting asks the connection's reader thread to."""

    __slots__ = ("conn", "future", "reply_type")

    def __init__(
        self, conn: Connection, future: concurrent.futures.Future[bytes], reply_type: type | None
    ) -> None:
        self.conn = conn
        self.future = future
        self.reply_type = reply_type

    def _decoded(self, body: bytes) -> T:
        if self.reply_type is None or self.reply_type is bytes:
            return body  # type: ignore[return-value]
        decoded: T = decode_reply(body, self.reply_type)
        return decoded

    def result(self, timeout_s: float | None = None) -> T:
        try:
            return self._decoded(self.conn.wait_for(self.future, timeout_s))
        except concurrent.futures.TimeoutError:
            raise BrokerUnavailableError(
                f"{self.conn.where} did not answer in {timeout_s} s", address=self.conn.where
            ) from None

    async def wait(self) -> T:
        self.conn.want_reader()
        return self._decoded(await asyncio.wrap_future(self.future))

    def done(self) -> bool:
        self.conn.want_reader()
        return self.future.done()

    def cancel(self) -> None:
        self.future.cancel()  # the answer, when it comes, is read and dropped
        self.conn.want_reader()

    def add_done_callback(self, callback: Callable[[Reply[T]], None]) -> None:
        self.conn.want_reader()
        self.future.add_done_callback(lambda _: callback(self))


class Connection:
    """One authenticated socket to a replica's data plane, shared by all calls to it."""

    def __init__(
        self,
        name: str,
        endpoint: DataEndpoint,
        local_node: str,
        *,
        timeout_s: float = CONNECT_TIMEOUT_S,
    ) -> None:
        self.name = name
        self.max_frame_bytes = endpoint.max_frame_bytes
        same_node = bool(endpoint.unix_path) and endpoint.node_id == local_node
        if same_node and os.path.exists(endpoint.unix_path):
            self.where = f"broker {name} at {endpoint.unix_path}"
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            address: Any = endpoint.unix_path
        else:
            self.where = f"broker {name} at {endpoint.host}:{endpoint.port}"
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            address = (endpoint.host, endpoint.port)
        stage = "connect"  # then "challenge" (is it a rayq endpoint?), "proof" (the key)
        try:
            sock.settimeout(timeout_s)
            sock.connect(address)
            stage = "challenge"
            challenge = msgspec.msgpack.decode(_read_frame(sock, 4096), type=Challenge)
            sock.sendall(frame(Proof(prove(endpoint.key, challenge.nonce))))
            stage = "proof"
            msgspec.msgpack.decode(_read_frame(sock, 4096), type=Welcome)
            sock.settimeout(None)
        except (OSError, ValueError, msgspec.DecodeError) as exc:
            sock.close()
            raise BrokerUnavailableError(
                f"cannot connect to the data plane of {self.where}: {type(exc).__name__}: "
                f"{exc or 'closed during the handshake'}",
                address=self.where,
                stage=stage,
                reason=f"{type(exc).__name__}: {exc or 'closed during the handshake'}",
            ) from None
        self._sock = sock
        self._poll = select.poll()
        self._poll.register(sock, select.POLLIN)
        self._ids = itertools.count(1)
        self._pending: dict[int, concurrent.futures.Future[bytes]] = {}
        self._lock = threading.Lock()
        self._decoder = msgspec.msgpack.Decoder(Answer)
        self._inbox = bytearray()  # what was read off the socket past the last whole answer
        # Whoever holds ``_reading`` reads answers off the socket and settles their futures:
        # a caller waiting in ``wait_for`` with nobody else reading (no thread hand-off),
        # else the reader thread, woken through ``_wanted`` by anyone who releases the
        # socket while answers are owed, or who waits in another way (callbacks, asyncio,
        # ``DirectTransport.wait``).
        self._reading = threading.Lock()
        self._wanted = threading.Event()
        self.closed: BaseException | None = None
        self.client: _Client | None = None  # the typed client over it (DirectTransport)
        self._reader = threading.Thread(target=self._read, name=f"rayq-{name}", daemon=True)
        self._reader.start()

    def call(self, op: str, body: bytes, *, own: bool = False) -> concurrent.futures.Future[bytes]:
        """Send one call. Its answer settles the future: read by the reader thread, or,
        with ``own``, by the caller's ``wait_for`` (which asks the thread if it cannot)."""
        call_id = next(self._ids)
        data = frame(Call(call_id, op, body))
        if len(data) - HEADER.size > self.max_frame_bytes:
            raise InvalidRequestError(
                f"a {op} of {len(data)} bytes is past the broker's frame limit of "
                f"{self.max_frame_bytes}: send smaller batches",
                limit=self.max_frame_bytes,
            )
        future: concurrent.futures.Future[bytes] = concurrent.futures.Future()
        failed: OSError | None = None
        with self._lock:
            if self.closed is not None:
                raise BrokerUnavailableError(f"{self.where}: {self.closed}", address=self.where)
            self._pending[call_id] = future
            try:
                self._sock.sendall(data)
            except OSError as exc:
                self._pending.pop(call_id, None)
                failed = exc
        if failed is not None:  # _fail takes the lock: not while it is held
            self._fail(failed)
            raise BrokerUnavailableError(
                f"{self.where}: the connection failed: {failed}",
                address=self.where,
                connection_lost=True,
            )
        if not own:
            self._wanted.set()
        return future

    def want_reader(self) -> None:
        """The reader thread reads while answers are owed (cheap when it already does)."""
        self._wanted.set()

    def wait_for(self, future: concurrent.futures.Future[bytes], timeout_s: float | None) -> bytes:
        """``future``'s body: read off the socket by this caller while nobody else reads
        (answers to other calls settle theirs on the way), else by whoever does."""
        if not future.done() and self._reading.acquire(blocking=False):
            deadline = None if timeout_s is None else time.monotonic() + timeout_s
            try:
                while not future.done() and self.closed is None:
                    if not self._whole():
                        left = None if deadline is None else deadline - time.monotonic()
                        if left is not None and left <= 0:
                            break
                        ms = None if left is None else max(1, int(left * 1000))
                        if not self._poll.poll(ms):
                            continue
                    self._settle_next()
            except (OSError, ValueError, msgspec.DecodeError) as exc:
                self._fail(exc)
            finally:
                self._reading.release()
                if self._pending:
                    self._wanted.set()  # answers still owed to others: the thread reads on
            return future.result(0)  # settled, or TimeoutError
        if not future.done():
            self._wanted.set()
        return future.result(timeout_s)

    def close(self) -> None:
        self._fail(ConnectionAbortedError("closed by the client"))

    def _read(self) -> None:
        """The reader thread: while asked to, reads answers for as long as any is owed."""
        try:
            while self.closed is None:
                self._wanted.wait()
                self._wanted.clear()
                with self._reading:
                    while self._pending and self.closed is None:
                        self._settle_next()
                if self._pending:
                    self._wanted.set()  # a call came as the socket was let go: read on
        except (OSError, ValueError, msgspec.DecodeError) as exc:
            self._fail(exc)

    def _whole(self) -> bool:
        """Whether the inbox holds a whole answer (read by an earlier ``recv``)."""
        have = len(self._inbox)
        return have >= HEADER.size and have >= HEADER.size + HEADER.unpack_from(self._inbox)[0]

    def _settle_next(self) -> None:
        """Read the next answer (blocking until it is whole) and settle its future. One
        ``recv`` takes whatever has come, so a small answer costs one system call and
        answers that came together are settled from the inbox without another."""
        inbox = self._inbox
        while True:
            have = len(inbox)
            if have >= HEADER.size:
                end = HEADER.size + HEADER.unpack_from(inbox)[0]
                if have >= end:
                    with memoryview(inbox) as view, view[HEADER.size : end] as body:
                        answer = self._decoder.decode(body)
                    del inbox[:end]
                    self._settle(answer)
                    return
                want = end - have
            else:
                want = HEADER.size - have
            chunk = self._sock.recv(max(want, RECV_BYTES))
            if not chunk:
                raise ConnectionResetError("the broker closed the connection")
            if not inbox and len(chunk) >= HEADER.size:  # an answer alone in one read
                end = HEADER.size + HEADER.unpack_from(chunk)[0]
                if len(chunk) == end:
                    with memoryview(chunk) as view, view[HEADER.size :] as body:
                        answer = self._decoder.decode(body)
                    self._settle(answer)
                    return
            inbox += chunk

    def _settle(self, answer: Answer) -> None:
        with self._lock:
            future = self._pending.pop(answer.id, None)
        if future is None or future.cancelled():
            return
        if answer.ok:
            future.set_result(answer.body)
        else:
            future.set_exception(decode_error(answer.body))

    def _fail(self, exc: BaseException) -> None:
        with self._lock:
            if self.closed is None:
                self.closed = exc
                with contextlib.suppress(OSError):
                    self._sock.shutdown(socket.SHUT_RDWR)
                self._sock.close()
            pending, self._pending = self._pending, {}
        self._wanted.set()  # the reader thread ends
        error = BrokerUnavailableError(
            f"{self.where}: the connection failed: {type(exc).__name__}: {exc or 'closed'}",
            address=self.where,
            connection_lost=True,  # ClientContext.broker_calls sends such calls once more
        )
        for future in pending.values():
            if not future.done():
                future.set_exception(error)


RECV_BYTES = 1 << 16  # what one recv asks for at least


def _read_frame(sock: socket.socket, limit: int) -> bytes:
    (size,) = HEADER.unpack(_read_exactly(sock, HEADER.size))
    if size > limit:
        raise ValueError(f"a frame of {size} bytes is past the limit of {limit}")
    return _read_exactly(sock, size)


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if not k:
            raise ConnectionResetError("the broker closed the connection")
        got += k
    return bytes(buf)


class SocketTransport:
    """Broker calls and parked pulls over the data plane: one connection per (service,
    replica), shared by every client of the process. Subclasses say where replicas
    listen and which one serves a broker, and give the coordinator's client."""

    namespace: str
    local_node = ""  # the node this process runs on ("": not a Ray node: TCP only)

    def __init__(self) -> None:
        self._conns: dict[tuple[str, str], Connection] = {}  # (service, replica) -> open one
        self._lock = threading.Lock()

    # ----------------------------------------------- what subclasses give
    def replica_of(self, broker_name: str) -> str:
        """The replica serving ``broker_name`` now (the master, or a slave while it is
        lost), cached until ``forget``."""
        raise NotImplementedError

    def endpoint(self, service: str, replica: str) -> DataEndpoint:
        """Where ``replica``'s ``service`` ("broker" or "hold") listens, and its key."""
        raise NotImplementedError

    def coordinator(self) -> CoordinatorClient:
        raise NotImplementedError

    def forget(self, broker_name: str) -> None:
        """Ask again which replica serves ``broker_name`` at the next call. Its
        connection stays while it is open (other calls share it); one that failed is
        replaced with a new endpoint (a restarted broker has new addresses and key)."""
        raise NotImplementedError

    # ----------------------------------------------------------- the calls
    def broker(self, broker_name: str) -> BrokerClient:
        return cast(BrokerClient, self._connection("broker", broker_name).client)

    def hold(self, broker_name: str) -> HoldClient:
        """The hold service's socket: parked pulls wait there, using no client CPU."""
        return cast(HoldClient, self._connection("hold", broker_name).client)

    def _connection(self, service: str, broker_name: str) -> Connection:
        replica = self.replica_of(broker_name)
        key = (service, replica)
        conn = self._conns.get(key)
        if conn is not None and conn.closed is None:
            return conn
        with self._lock:
            conn = self._conns.get(key)
            if conn is None or conn.closed is not None:
                try:
                    conn = self._connect(service, replica)
                except BrokerUnavailableError:
                    # The replica may be gone for good (its node was removed; a failover
                    # made a new actor of that name): once more with the replica that
                    # serves the broker now. The transport is shared by the process's
                    # clients, so a replica left stale would fail every later client too.
                    self.forget(broker_name)
                    replica = self.replica_of(broker_name)
                    try:
                        conn = self._connect(service, replica)
                    except BrokerUnavailableError:
                        self.forget(broker_name)
                        raise
                    key = (service, replica)
                self._conns[key] = conn
            return conn

    def _connect(self, service: str, replica: str) -> Connection:
        endpoint = self.endpoint(service, replica)
        name = replica if service == "broker" else f"{replica} (hold)"
        conn = Connection(name, endpoint, self.local_node)
        conn.client = socket_client(conn, BrokerClient if service == "broker" else HoldClient)
        return conn

    def wait(self, replies: Sequence[Reply[Any]], timeout_s: float) -> list[Reply[Any]]:
        """The replies that are ready: the first within ``timeout_s``, then every other
        that is ready too."""
        futures = {_future_of(r): r for r in replies}
        if not futures:
            return []
        done, _ = concurrent.futures.wait(
            futures, timeout=max(timeout_s, 0.0), return_when=concurrent.futures.FIRST_COMPLETED
        )
        return [r for f, r in futures.items() if f.done()] if done else []

    def close(self) -> None:
        with self._lock:
            found, self._conns = list(self._conns.values()), {}
        for conn in found:
            conn.close()


C = TypeVar("C", bound=_Client)


def socket_client(conn: Connection, client: type[C] = BrokerClient) -> C:  # type: ignore[assignment]
    """A typed client (a broker's, its hold service's, or the coordinator's through a
    bootstrap endpoint) over ``conn``: each request as ``to_wire`` bytes."""
    requests, replies = client.request_types(), client.reply_types()

    def invoke(method: str, *args: Any) -> Reply[Any]:
        if len(args) != 1 or type(args[0]) is not requests.get(method):
            got = ", ".join(type(a).__name__ for a in args)
            want = getattr(requests.get(method), "__name__", "?")
            raise InvalidRequestError(f"{method} takes one {want}, got ({got})", op=method)
        future = conn.call(method, to_wire(args[0]), own=True)
        return SocketReply(conn, future, replies.get(method))

    return client(invoke)


def _future_of(reply: Reply[Any]) -> concurrent.futures.Future[Any]:
    if isinstance(reply, SocketReply):
        reply.conn.want_reader()
        return reply.future
    future: concurrent.futures.Future[Any] = reply.future()  # type: ignore[attr-defined]
    return future  # a RayReply (DirectTransport's coordinator calls)


__all__ = [
    "CONNECT_TIMEOUT_S",
    "Connection",
    "SocketReply",
    "SocketTransport",
    "socket_client",
]
