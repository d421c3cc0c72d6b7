"""The socket data plane without Ray: a real broker endpoint (the fake cluster's) served
by ``WireServer`` as the broker actor starts it (actors/data_plane.py), reached with the
client's ``Connection`` (rayq/transport/direct.py). The clients work through it; a
client without the key, bad frames, unknown operations, silent and non-reading clients,
many connections and a fuzz of random frames each get an error or a closed connection,
and the broker and its store stay intact."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import msgspec
import pytest
import uvloop

import rayq
from rayq.actors import data_plane as dp
from rayq.actors.protocol import (
    DataEndpoint,
    MaxOffsetRequest,
    PullItem,
    PullManyRequest,
    PullResponse,
    TopicRequest,
    to_wire,
)
from rayq.actors.protocol.frames import HEADER, Answer, Call, Challenge, Proof, frame, prove
from rayq.actors.server import wire_server
from rayq.consumer.pull import PullConsumer
from rayq.store.errors import BrokerUnavailableError, InvalidRequestError
from rayq.testing import FakeCluster, FakeTransport, poll_until
from rayq.testing.fake_broker import LoopThread
from rayq.transport.base import BrokerClient
from rayq.transport.direct import Connection, socket_client

TOPIC = "w"


@pytest.fixture
def cluster_options() -> dict[str, Any]:
    return {"topics": {TOPIC: 2}}


class Served:
    """The fake cluster's broker behind a started data plane, on a loop of its own."""

    def __init__(self, cluster: FakeCluster, loop: str = "asyncio") -> None:
        self.cluster = cluster
        self.loop = LoopThread(LOOPS[loop])
        endpoint = cluster.brokers["broker-a"].endpoint
        self.plane = dp.data_plane(endpoint, endpoint.server.config, "node-1", "127.0.0.1")
        self.loop.run(self.plane.server.start("127.0.0.1"))

    def endpoint(self, **changes: Any) -> DataEndpoint:
        return msgspec.structs.replace(self.plane.endpoint(), **changes)

    def connect(self, node: str = "node-1", **changes: Any) -> Connection:
        return Connection("broker-a", self.endpoint(**changes), node)

    def raw(self, rcvbuf: int = 0) -> socket.socket:
        """A TCP socket past the handshake, for frames the client would never send."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        sock.settimeout(10)
        sock.connect(("127.0.0.1", self.plane.server.port))
        challenge = msgspec.msgpack.decode(read_frame(sock), type=Challenge)
        sock.sendall(frame(Proof(prove(self.plane.key, challenge.nonce))))
        read_frame(sock)  # Welcome
        return sock

    def close(self) -> None:
        self.loop.run(self.plane.server.close())
        self.loop.close()


# Ray runs async actors on uvloop when it is installed (rayq depends on it); its
# transports are not asyncio's classes, so the server is tried on both loops.
LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "asyncio": asyncio.new_event_loop,
    "uvloop": uvloop.new_event_loop,
}


@pytest.fixture(params=sorted(LOOPS))
def served(cluster: FakeCluster, request: pytest.FixtureRequest) -> Iterator[Served]:
    s = Served(cluster, request.param)
    yield s
    s.close()


class SocketTransport(FakeTransport):
    """The fake cluster with its broker calls over the data plane."""

    def __init__(self, cluster: FakeCluster, conn: Connection) -> None:
        super().__init__(cluster)
        self.client = socket_client(conn)

    def broker(self, broker_name: str) -> BrokerClient:
        return self.client


def read_frame(sock: socket.socket) -> bytes:
    (size,) = HEADER.unpack(sock.recv(HEADER.size, socket.MSG_WAITALL))
    return sock.recv(size, socket.MSG_WAITALL)


def sink(sock: socket.socket) -> threading.Thread:
    """Read and drop what ``sock`` gets until it closes."""

    def run() -> None:
        with contextlib.suppress(OSError):
            while sock.recv(65536):
                pass

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def closed(sock: socket.socket) -> bool:
    sock.settimeout(10)
    try:
        while sock.recv(65536):
            pass
        return True
    except OSError:
        return True


def ends(served: Served) -> list[int]:
    conn = served.connect()
    client = socket_client(conn)
    try:
        return [
            client.max_offset(MaxOffsetRequest(topic=TOPIC, queue_id=q)).result(10).offset
            for q in range(2)
        ]
    finally:
        conn.close()


def test_clients_send_and_read_over_the_socket_tcp_and_unix(served: Served) -> None:
    for node in ("node-1", "elsewhere"):  # same node: the Unix socket; else TCP
        conn = served.connect(node)
        assert ("/" in conn.where) == (node == "node-1")
        transport = SocketTransport(served.cluster, conn)
        with rayq.Producer("pg", transport=transport) as producer:
            sent = [producer.send(rayq.Message(TOPIC, b"m%d" % i)) for i in range(20)]
            producer.send_batch([rayq.Message(TOPIC, b"b%d" % i) for i in range(50)])
        assert all(r.status.value == "SEND_OK" for r in sent)
        consumer = PullConsumer(
            f"cg-{node}", consume_from=rayq.ConsumeFromWhere.FIRST_OFFSET, transport=transport
        )
        consumer.subscribe(TOPIC)
        consumer.start()
        try:
            got = poll_until(consumer, 70 if node == "node-1" else 140)
        finally:
            consumer.shutdown()
        assert {b"m3", b"b49"} <= {m.body for m in got}
        conn.close()


def test_a_waiting_caller_reads_its_own_answer_and_the_thread_reads_the_rest(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``result`` reads the answer on the caller's thread (no hand-off) while nobody else
    reads; answers waited for otherwise (a callback) are read by the reader thread."""
    settled_by: dict[int, str] = {}
    settle = Connection._settle

    def recording(self: Connection, answer: Any) -> None:
        settled_by[answer.id] = threading.current_thread().name
        settle(self, answer)

    monkeypatch.setattr(Connection, "_settle", recording)
    conn = served.connect()
    client = socket_client(conn)
    req = MaxOffsetRequest(topic=TOPIC, queue_id=0)
    try:
        assert [client.max_offset(req).result(10).offset for _ in range(5)] == [0] * 5
        assert set(settled_by.values()) == {threading.current_thread().name}
        settled_by.clear()
        called = threading.Event()
        client.max_offset(req).add_done_callback(lambda _: called.set())
        assert called.wait(10)
        assert list(settled_by.values()) == [f"rayq-{conn.name}"]  # the reader thread
    finally:
        conn.close()


def test_callers_on_many_threads_each_get_their_own_answers(served: Served) -> None:
    """Threads that wait with ``result``, callbacks and ``DirectTransport.wait``-style
    futures share one connection: each call gets its own answer, none is lost."""
    conn = served.connect()
    client = socket_client(conn)
    errors: list[BaseException] = []
    called = threading.Semaphore(0)

    def run(i: int) -> None:
        try:
            for n in range(150):
                if n % 10 == 0:
                    client.max_offset(
                        MaxOffsetRequest(topic=TOPIC, queue_id=i % 2)
                    ).add_done_callback(lambda _: called.release())
                bad = MaxOffsetRequest(topic=f"no-such-topic-{i}", queue_id=0)
                if n % 7 == 0:
                    with pytest.raises(rayq.TopicNotFoundError, match=f"no-such-topic-{i}"):
                        client.max_offset(bad).result(30)
                else:
                    assert (
                        client.max_offset(MaxOffsetRequest(topic=TOPIC, queue_id=1))
                        .result(30)
                        .offset
                        == 0
                    )
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    try:
        assert errors == []
        assert all(called.acquire(timeout=30) for _ in range(8 * 15))  # every callback ran
    finally:
        conn.close()


def test_calls_on_a_connection_the_broker_closed_fail_and_never_hang(served: Served) -> None:
    """The broker ends the connection (its process died, say) while the client's reader
    thread sleeps: the next calls fail with a connection_lost BrokerUnavailableError,
    whether the send or the read finds out, and none hangs."""
    conn = served.connect()  # the Unix socket: a send to a closed peer fails at once
    client = socket_client(conn)
    req = MaxOffsetRequest(topic=TOPIC, queue_id=0)
    assert client.max_offset(req).result(10).offset == 0

    async def close_connections() -> None:
        for conn in list(served.plane.server._connections):
            conn.close()

    served.loop.run(close_connections())
    time.sleep(0.2)
    outcomes: list[BaseException] = []

    def calls() -> None:
        for _ in range(3):
            try:
                client.max_offset(req).result(10)
            except BrokerUnavailableError as exc:
                outcomes.append(exc)

    thread = threading.Thread(target=calls, daemon=True)
    thread.start()
    thread.join(30)
    assert not thread.is_alive(), "a call on a closed connection hung"
    assert len(outcomes) == 3 and all(e.details.get("connection_lost") for e in outcomes[:1])
    assert ends(served) == [0, 0]  # a new connection is served


def test_errors_come_back_as_the_same_rayq_errors(served: Served) -> None:
    first = served.connect()
    client = socket_client(first)
    with pytest.raises(rayq.TopicNotFoundError):
        client.topic_stats(TopicRequest(topic="nope")).result(10)
    with pytest.raises(InvalidRequestError):  # unknown to the client: refused before sending
        client.max_offset(TopicRequest(topic=TOPIC))  # type: ignore[arg-type]
    conn = served.connect()
    with pytest.raises(InvalidRequestError, match="unknown operation"):
        conn.call("shutdown", b"").result(10)
    with pytest.raises(InvalidRequestError, match="malformed"):
        conn.call("put", b"\xc1garbage").result(10)
    assert ends(served) == [0, 0]
    assert client.max_offset(MaxOffsetRequest(topic=TOPIC, queue_id=1)).result(10).offset == 0
    first.close()
    conn.close()


def test_a_pull_of_many_queues_answers_each_with_its_records_or_its_error(
    served: Served,
) -> None:
    transport = SocketTransport(served.cluster, served.connect())
    with rayq.Producer("pg", transport=transport) as producer:
        producer.send_batch([rayq.Message(TOPIC, b"x%d" % i) for i in range(4)])
    items = [PullItem(TOPIC, q, 0) for q in (0, 1, 7)]  # queue 7 does not exist
    got = transport.client.pull_many(PullManyRequest(group="g", items=items)).result(10)
    first, second, third = got.results
    assert isinstance(first, PullResponse) and isinstance(second, PullResponse)
    assert first.count + second.count == 4
    assert isinstance(third, rayq.InvalidOffsetError) and "queue 7" in str(third)


def test_a_client_without_the_key_is_refused(served: Served) -> None:
    with pytest.raises(BrokerUnavailableError, match="cannot connect"):
        served.connect(key=os.urandom(32))
    with pytest.raises(BrokerUnavailableError, match="cannot connect"):
        served.connect("elsewhere", port=1)  # nothing listens there: the address, the reason
    assert ends(served) == [0, 0]


def test_bad_frames_close_their_connection_and_nothing_else(served: Served) -> None:
    conn = served.connect()
    good = socket_client(conn)
    for bad in (
        HEADER.pack(1 << 31) + b"x",  # past the frame limit
        HEADER.pack(5) + b"\xff\xff\xff\xff\xff",  # not msgpack
        HEADER.pack(3) + b"\x93\x01\x02",  # msgpack, not a call
    ):
        sock = served.raw()
        sock.sendall(bad)
        assert closed(sock)
        sock.close()
    truncated = served.raw()
    truncated.sendall(HEADER.pack(100) + b"short")
    truncated.close()
    assert good.max_offset(MaxOffsetRequest(topic=TOPIC, queue_id=0)).result(10).offset == 0
    conn.close()


def test_silent_and_non_reading_clients_hold_nobody_up(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(wire_server, "HANDSHAKE_TIMEOUT_S", 0.5)
    silent = socket.create_connection(("127.0.0.1", served.plane.server.port), timeout=10)
    read_frame(silent)  # the challenge; no answer
    assert closed(silent)
    silent.close()
    stuck = served.raw(rcvbuf=4096)  # many calls, never reads an answer
    call = frame(Call(1, "max_offset", to_wire(MaxOffsetRequest(topic=TOPIC, queue_id=0))))
    stuck.setblocking(False)
    sent = 0
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            sent += stuck.send(call * 64)
        except BlockingIOError:
            break  # the broker stopped reading it: TCP pushes back
    assert time.monotonic() < deadline, "the broker kept reading a client that reads nothing"
    assert ends(served) == [0, 0]  # others are served meanwhile
    stuck.close()


def test_a_thousand_connections_are_served(served: Served) -> None:
    conns = [served.connect(node="elsewhere") for _ in range(1000)]
    replies = [
        socket_client(c).max_offset(MaxOffsetRequest(topic=TOPIC, queue_id=0)) for c in conns
    ]
    assert {r.result(30).offset for r in replies} == {0}
    for c in conns:
        c.close()


def test_a_fuzz_of_random_frames_changes_nothing(served: Served) -> None:
    transport = SocketTransport(served.cluster, served.connect())
    with rayq.Producer("pg", transport=transport) as producer:
        producer.send_batch([rayq.Message(TOPIC, b"keep%d" % i) for i in range(10)])
    before = ends(served)
    rng = random.Random(28)
    ops = [*dp.client_operations(), "shutdown", "ha_fetch", "x" * 70]
    sock = served.raw()
    sink(sock)
    sent = 0
    while sent < 10_000:
        kind = rng.random()
        if kind < 0.95:  # a call with a random body
            body = rng.randbytes(rng.randint(0, 200))
            data = frame(Call(sent, rng.choice(ops), body))
        else:  # random bytes as a frame: closes the connection
            data = HEADER.pack(n := rng.randint(0, 64)) + rng.randbytes(n)
        with contextlib.suppress(OSError):
            sock.sendall(data)
        sent += 1
        if kind >= 0.95:
            sock.close()
            sock = served.raw()
            sink(sock)
    sock.close()
    assert ends(served) == before
    consumer = PullConsumer(
        "cg-fuzz", consume_from=rayq.ConsumeFromWhere.FIRST_OFFSET, transport=transport
    )
    consumer.subscribe(TOPIC)
    consumer.start()
    try:
        bodies = sorted(m.body for m in poll_until(consumer, 10))
    finally:
        consumer.shutdown()
    assert bodies == sorted(b"keep%d" % i for i in range(10))


def test_the_sockets_of_processes_that_are_gone_are_removed(tmp_path: Any) -> None:
    """A killed broker leaves its Unix socket behind; the next data plane on the node
    removes it, and leaves a live process's socket and other files alone."""
    import subprocess
    import sys

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # reaped: its pid names no process now
    stale = tmp_path / f"rayq-{gone.pid}-0badf00d.s"
    live = tmp_path / f"rayq-{os.getpid()}-600dcafe.s"
    other = tmp_path / "rayq-notapid-1.s"
    for path in (stale, live, other):
        path.write_bytes(b"")
    assert wire_server.sweep_stale_sockets(str(tmp_path)) == 1
    assert not stale.exists() and live.exists() and other.exists()


@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_calls_sent_at_once_run_at_most_max_inflight_at_a_time(loop: str) -> None:
    """A client that writes many calls in one go gets them all answered, but the server
    runs at most ``max_inflight`` of them at once: the rest wait, unread, in its buffer."""
    running, most = 0, 0
    gate = asyncio.Event()  # set on the server's loop

    async def slow(op: str, body: bytes) -> bytes:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await gate.wait()
        running -= 1
        return body

    key = os.urandom(32)
    server = wire_server.WireServer(slow, ["echo"], key, max_frame_bytes=1 << 20, max_inflight=4)
    thread = LoopThread(LOOPS[loop])
    thread.run(server.start("127.0.0.1", unix=False))
    try:
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        challenge = msgspec.msgpack.decode(read_frame(sock), type=Challenge)
        sock.sendall(frame(Proof(prove(key, challenge.nonce))))
        read_frame(sock)  # Welcome
        sock.sendall(b"".join(frame(Call(i, "echo", b"%d" % i)) for i in range(50)))
        time.sleep(0.5)
        assert most == 4
        thread.loop.call_soon_threadsafe(gate.set)
        answers = [msgspec.msgpack.decode(read_frame(sock), type=Answer) for _ in range(50)]
        assert sorted(a.id for a in answers) == list(range(50))
        assert all(a.ok and a.body == b"%d" % a.id for a in answers)
        assert most == 4
        sock.close()
    finally:
        thread.loop.call_soon_threadsafe(gate.set)
        thread.run(server.close())
        thread.close()
