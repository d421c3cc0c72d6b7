"""Calls between server actors on the socket data plane, without Ray: the fake cluster's
broker endpoint served by ``WireServer`` as the broker actor starts it
(actors/data_plane.py), called through ``PeerSocket`` (actors/wire_client.py) as its
hold service and its slaves call it. A parked pull and a replication fetch work; a call
without its server proof, with the wrong arguments or with arguments that cannot be read
is refused with a clear error, and the connection and the broker go on."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import pytest

import rayq
from rayq.actors import data_plane as dp
from rayq.actors.protocol import (
    HaChunk,
    HaFetch,
    Park,
    PullItem,
    PullManyRequest,
    PullManyResponse,
    PullRequest,
    PullResponse,
    PullStatus,
    broker_actor_name,
    hold_actor_name,
    to_wire,
)
from rayq.actors.protocol.frames import decode_reply, encode_reply
from rayq.actors.protocol.server_key import SERVER_OP, Guard, ServerKey
from rayq.actors.server.long_polling import HoldService
from rayq.actors.wire_client import PeerSocket, WireClient
from rayq.store.errors import InvalidRequestError, PermissionDeniedError
from rayq.testing import FakeCluster, FakeTransport
from rayq.testing.fake_broker import LoopThread

TOPIC = "s"


@pytest.fixture
def cluster_options() -> dict[str, Any]:
    return {"topics": {TOPIC: 1}}


@pytest.fixture
def served(cluster: FakeCluster) -> Any:
    loop = LoopThread()
    endpoint = cluster.brokers["broker-a"].endpoint
    plane = dp.data_plane(endpoint, endpoint.server.config, "node-1", "127.0.0.1")
    loop.run(plane.server.start("127.0.0.1"))

    async def where() -> Any:
        return plane.endpoint()

    sock = PeerSocket("broker broker-a", where, "node-1")
    try:
        yield loop, sock
    finally:
        loop.run(_forget(sock))
        loop.run(plane.server.close())
        loop.close()


async def _forget(sock: PeerSocket) -> None:
    sock.forget()


def send(cluster: FakeCluster, n: int) -> None:
    with rayq.Producer("pg", transport=FakeTransport(cluster)) as producer:
        for i in range(n):
            producer.send(rayq.Message(TOPIC, f"m{i}".encode()))


def test_a_parked_pull_is_answered_through_the_hold_service_after_an_append(
    cluster: FakeCluster, served: Any
) -> None:
    """The hold service's pull with its Park goes over the socket and finds nothing:
    parked. The next append answers it through the hold service's ``deliver``."""
    loop, sock = served
    hold = cluster.brokers["broker-a"].hold
    req = PullManyRequest(
        group="g", client_id="c", max_nums=32, suspend_ms=20_000, items=[PullItem(TOPIC, 0, 0)]
    )

    async def park() -> tuple[PullManyResponse, Any]:
        token = hold.table.expect(req)
        body = await sock.call(
            "pull_many", to_wire(req), to_wire(Park(token=token, hold_ms=20_000))
        )
        return decode_reply(body, PullManyResponse), token

    first, token = loop.run(park())
    assert first.results[0].status is PullStatus.NO_NEW_MSG
    send(cluster, 3)

    async def answer() -> Any:
        return await hold.table.wait(token, 10.0)

    got = loop.run(answer())
    assert isinstance(got, PullManyResponse)
    assert got.results[0].status is PullStatus.FOUND and got.results[0].count >= 1


def test_replication_needs_the_server_proof_on_the_socket_too(
    cluster: FakeCluster, served: Any
) -> None:
    loop, sock = served
    send(cluster, 2)
    fetch = to_wire(HaFetch(broker_id=1, offset=0, epoch=0, max_bytes=1 << 20))
    with pytest.raises(PermissionDeniedError, match="server proof"):
        loop.run(sock.call("ha_fetch", fetch))
    stranger = Guard(ServerKey.new(), "broker", broker_actor_name("broker-a"))
    with pytest.raises(PermissionDeniedError, match="bad server proof"):
        loop.run(sock.call("ha_fetch", fetch, proof=stranger.prove("ha_fetch", fetch)))
    proof = cluster.prove("broker-a", "ha_fetch", fetch)
    chunk = decode_reply(loop.run(sock.call("ha_fetch", fetch, proof=proof)), HaChunk)
    assert chunk.offset == 0 and len(chunk.data) == cluster.server().store.written_offset


@pytest.mark.parametrize(
    ("op", "body", "error"),
    [
        ("pull", [], "takes 1..2 arguments, got 0"),
        ("pull", [b"\x93junk", b"", b""], "takes 1..2 arguments, got 3"),
        ("pull", [b"\xc1"], "PullRequest"),
        ("ha_metadata", [b"x", b"y"], "takes 1..1 arguments"),
    ],
)
def test_bad_server_calls_get_a_clear_error_and_the_connection_goes_on(
    cluster: FakeCluster, served: Any, op: str, body: list[bytes], error: str
) -> None:
    loop, sock = served
    with pytest.raises(InvalidRequestError, match=error):
        loop.run(sock.call(op, *body))
    send(cluster, 1)
    req = to_wire(PullRequest(group="g", topic=TOPIC, queue_id=0, queue_offset=0, max_nums=8))
    got = decode_reply(loop.run(sock.call("pull", req)), PullResponse)
    assert got.status is PullStatus.FOUND and got.count == 1


def test_server_arguments_that_cannot_be_read_are_refused(
    cluster: FakeCluster, served: Any
) -> None:
    loop, sock = served

    async def raw(op: str, body: bytes) -> bytes:
        client: WireClient = await sock._connected()
        return await client.call(op, body)

    with pytest.raises(InvalidRequestError, match="cannot be read"):
        loop.run(raw(SERVER_OP + "pull", b"\x92\x01"))
    with pytest.raises(InvalidRequestError, match="unknown operation"):
        loop.run(raw(SERVER_OP + "shutdown", msgspec.msgpack.encode([[]])))
    assert cluster.server().store.written_offset == 0


def test_the_hold_service_reads_an_answer_in_bytes_as_its_request_asks(
    cluster: FakeCluster,
) -> None:
    """``deliver`` over the socket carries ``encode_reply`` bytes: the hold service reads
    them as the reply to the request the token was given for, after the proof; bytes
    that are no such reply are refused, and a token nobody waits for is ignored."""
    key = cluster.server_key
    guard = Guard(key, "hold", hold_actor_name("broker-a"))
    service = HoldService(cluster.brokers["broker-a"].hold.broker, lambda ms: 1.0, guard)
    req = PullManyRequest(group="g", client_id="c", items=[PullItem(TOPIC, 0, 0)])
    resp = PullManyResponse(
        results=[
            PullResponse(status=PullStatus.NO_NEW_MSG, next_offset=4, min_offset=0, max_offset=4)
        ]
    )

    async def run() -> None:
        token = service.table.expect(req)
        body = encode_reply(resp)
        with pytest.raises(PermissionDeniedError):
            service.deliver(token, body)
        bad = b"\x01\x02"
        with pytest.raises(InvalidRequestError, match="PullManyResponse"):
            service.deliver(token, bad, guard.prove("deliver", token, bad))
        assert not service.deliver("nobody", body, guard.prove("deliver", "nobody", body))
        waiting = asyncio.ensure_future(service.table.wait(token, 5.0))
        await asyncio.sleep(0)
        assert service.deliver(token, body, guard.prove("deliver", token, body))
        got = await waiting
        assert got.results[0].next_offset == 4

    asyncio.run(run())


def test_a_peer_socket_tells_when_its_peer_closes_the_connection(cluster: FakeCluster) -> None:
    """``PeerSocket``'s ``on_lost`` runs once when the peer's end closes (the broker
    died: the hold service lets its parked pulls go on), not when it is closed here."""
    loop = LoopThread()
    endpoint = cluster.brokers["broker-a"].endpoint
    lost: list[str] = []

    async def run() -> tuple[int, int]:
        plane = dp.data_plane(endpoint, endpoint.server.config, "node-1", "127.0.0.1")
        await plane.server.start("127.0.0.1")

        async def where() -> Any:
            return plane.endpoint()

        mine = PeerSocket("broker broker-a", where, "node-1", lambda: lost.append("mine"))
        theirs = PeerSocket("broker broker-a", where, "node-1", lambda: lost.append("theirs"))
        for sock in (mine, theirs):
            await sock._connected()
        mine.forget()  # closed here: nothing to tell
        await asyncio.sleep(0.05)
        before = len(lost)
        await plane.server.close()  # the peer's end closes
        for _ in range(100):
            if lost:
                break
            await asyncio.sleep(0.02)
        return before, len(lost)

    try:
        before, after = loop.run(run())
    finally:
        loop.close()
    assert (before, after) == (0, 1) and lost == ["theirs"]
