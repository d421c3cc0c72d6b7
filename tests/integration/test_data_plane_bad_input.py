"""The data-plane sockets of the real broker and hold-service actors as a new door:
a client without the key, frames that are oversized, malformed, truncated or name an
unknown operation, a client that never answers the challenge, one that stops reading,
a thousand connections at once and a fuzz of 10,000 random frames. Each gets an error
reply or a closed connection; no actor process dies, nothing is written to the store,
and the messages stored before read back the same. (tests/unit/server/test_wire_server.py
covers the same without Ray, in more detail.)"""

from __future__ import annotations

import contextlib
import os
import random
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest
import ray

import rayq
from rayq.actors import data_plane as dp
from rayq.actors.protocol import (
    COORDINATOR_NAME,
    DataEndpointRequest,
    MaxOffsetRequest,
    broker_actor_name,
    hold_actor_name,
    to_wire,
)
from rayq.actors.protocol.frames import (
    HEADER,
    Answer,
    Call,
    Challenge,
    DataEndpoint,
    Proof,
    decode_error,
    frame,
    prove,
)
from rayq.testing import hostile, poll_until
from rayq.transport.direct import Connection, socket_client
from rayq.transport.ray_actors import RayTransport

pytestmark = pytest.mark.integration

NAMESPACE = "test-socket-bad-input"
TOPIC = "Sock"
GROUP = "cg-sock"
SERVICES = ("broker", "hold")
KEPT = [b"kept-%d" % i for i in range(10)]
LAST = 1 << 40  # the id of the call that ends a fuzz


def endpoint(service: str) -> DataEndpoint:
    """The service's endpoint, asked through its actor as a client asks for it."""
    transport = RayTransport(NAMESPACE)
    client = transport.broker("broker-a") if service == "broker" else transport.hold("broker-a")
    return client.data_endpoint(DataEndpointRequest()).result(30)


def read_frame(sock: socket.socket) -> bytes:
    (size,) = HEADER.unpack(sock.recv(HEADER.size, socket.MSG_WAITALL))
    return sock.recv(size, socket.MSG_WAITALL)


def raw(ep: DataEndpoint, key: bytes | None = None, rcvbuf: int = 0) -> socket.socket:
    """A TCP socket past the handshake (with ``key``: a proof made with that key)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(30)
    sock.connect((ep.host, ep.port))
    challenge = msgspec.msgpack.decode(read_frame(sock), type=Challenge)
    sock.sendall(frame(Proof(prove(key or ep.key, challenge.nonce))))
    if key is None:
        read_frame(sock)  # Welcome
    return sock


def closed(sock: socket.socket) -> bool:
    """Whether the server closes ``sock`` (reading and dropping what it still sends)."""
    sock.settimeout(30)
    with contextlib.suppress(OSError):
        while sock.recv(65536):
            pass
    sock.close()
    return True


def answers(sock: socket.socket) -> threading.Event:
    """Read the answers ``sock`` gets until it closes; the event is set by the answer
    to the call numbered LAST (every frame before it was read by then)."""
    last = threading.Event()

    def run() -> None:
        with contextlib.suppress(Exception):
            while True:
                if msgspec.msgpack.decode(read_frame(sock), type=Answer).id == LAST:
                    last.set()

    threading.Thread(target=run, daemon=True).start()
    return last


def pids() -> dict[str, int]:
    """The process of each server actor: a death (and Ray's restart) changes it."""
    names = [broker_actor_name("broker-a"), hold_actor_name("broker-a"), COORDINATOR_NAME]
    found = {}
    for name in names:
        actor = ray.get_actor(name, namespace=NAMESPACE)
        found[name] = ray.get(actor.__ray_call__.remote(lambda _self: os.getpid()), timeout=30)
    return found


def read_back() -> list[bytes]:
    consumer = rayq.PullConsumer(
        f"{GROUP}-{os.urandom(4).hex()}",
        namespace=NAMESPACE,
        consume_from=rayq.ConsumeFromWhere.FIRST_OFFSET,
    )
    consumer.subscribe(TOPIC)
    consumer.start()
    try:
        return sorted(m.body for m in poll_until(consumer, len(KEPT), timeout_s=60))
    finally:
        consumer.shutdown()


@pytest.fixture(scope="module")
def deployed(cluster: rayq.Cluster) -> Iterator[dict[str, Any]]:
    """The deployment with KEPT stored, and what must not change."""
    rayq.Admin(namespace=NAMESPACE).create_topic(TOPIC, queues=2)
    with rayq.Producer("pg-sock", namespace=NAMESPACE) as producer:
        producer.send_batch([rayq.Message(TOPIC, body) for body in KEPT])
    yield {"pids": pids(), "snapshot": hostile.snapshot(NAMESPACE, [TOPIC], [GROUP])}


def unchanged(deployed: dict[str, Any]) -> None:
    assert pids() == deployed["pids"], "a server actor's process died"
    after = hostile.snapshot(NAMESPACE, [TOPIC], [GROUP])
    assert hostile.changed(deployed["snapshot"], after) == []


@pytest.mark.parametrize("service", SERVICES)
def test_no_key_bad_frames_and_unknown_operations_get_an_error_or_a_closed_connection(
    deployed: dict[str, Any], service: str
) -> None:
    ep = endpoint(service)
    assert closed(raw(ep, key=os.urandom(32)))  # the wrong key: closed after the proof
    for bad in (
        HEADER.pack(ep.max_frame_bytes + 1) + b"x",  # past the frame limit
        HEADER.pack(5) + b"\xff\xff\xff\xff\xff",  # not msgpack
        HEADER.pack(3) + b"\x93\x01\x02",  # msgpack, not a call
    ):
        sock = raw(ep)
        sock.sendall(bad)
        assert closed(sock)
    truncated = raw(ep)
    truncated.sendall(HEADER.pack(100) + b"short")
    truncated.close()
    sock = raw(ep)
    for op in ("no_such_op", "shutdown", "ha_fetch"):  # unknown, and Ray-only operations
        sock.sendall(frame(Call(7, op, b"")))
        answer = msgspec.msgpack.decode(read_frame(sock), type=Answer)
        assert answer.id == 7 and not answer.ok
        assert isinstance(decode_error(answer.body), rayq.InvalidRequestError)
    sock.close()
    unchanged(deployed)


def test_silent_and_non_reading_clients_hold_nobody_up(deployed: dict[str, Any]) -> None:
    ep = endpoint("broker")
    silent = socket.create_connection((ep.host, ep.port), timeout=30)
    read_frame(silent)  # the challenge, never answered: closed after the handshake timeout
    stuck = raw(ep, rcvbuf=4096)
    call = frame(Call(1, "max_offset", to_wire(MaxOffsetRequest(topic=TOPIC, queue_id=0))))
    stuck.setblocking(False)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            stuck.send(call * 64)
        except BlockingIOError:
            break  # the broker stopped reading a client that reads nothing: TCP pushes back
    assert time.monotonic() < deadline, "the broker kept reading a client that reads nothing"
    unchanged(deployed)  # others are served meanwhile
    assert closed(silent)
    stuck.close()


def test_a_thousand_connections_are_served_or_refused_cleanly(deployed: dict[str, Any]) -> None:
    ep = endpoint("broker")
    conns, refused = [], 0
    for _ in range(1000):
        try:
            conns.append(Connection("broker-a", ep, "another-node"))  # over TCP
        except rayq.BrokerUnavailableError:
            refused += 1
    try:
        req = MaxOffsetRequest(topic=TOPIC, queue_id=0)
        replies = [socket_client(c).max_offset(req) for c in conns]
        end = deployed["snapshot"].queue_ends[("broker-a", TOPIC, 0)]
        assert {r.result(60).offset for r in replies} == {end}
        assert len(conns) + refused == 1000 and conns
    finally:
        for c in conns:
            c.close()
    unchanged(deployed)


def test_a_fuzz_of_random_frames_kills_nothing_and_changes_nothing(
    deployed: dict[str, Any],
) -> None:
    rng = random.Random(28)
    for service in SERVICES:
        ep = endpoint(service)
        ops = [*dp.client_operations(service), "shutdown", "ha_fetch", "x" * 70]
        sock = raw(ep)
        last = answers(sock)
        for sent in range(10_000 if service == "broker" else 2_000):
            if rng.random() < 0.95:  # a call with a random body
                data = frame(Call(sent, rng.choice(ops), rng.randbytes(rng.randint(0, 200))))
                with contextlib.suppress(OSError):
                    sock.sendall(data)
                continue
            n = rng.randint(0, 64)  # random bytes as a frame: closes the connection
            with contextlib.suppress(OSError):
                sock.sendall(HEADER.pack(n) + rng.randbytes(n))
            assert closed(sock)
            sock = raw(ep)
            last = answers(sock)
        sock.sendall(frame(Call(LAST, "no_such_op", b"")))
        assert last.wait(60), "the fuzz's last call was never answered"
        sock.close()
    unchanged(deployed)
    assert read_back() == sorted(KEPT)
