"""Issue 27 part 3, internal operations closed to clients, in-process (no Ray): every
server operation refuses a call without a proof of the deployment's server key (ACL on
or off), each attack of the issue is refused and changes nothing, and a raw put cannot
forge broker-set properties or msg ids."""

from __future__ import annotations

import asyncio
import time
from typing import Any
from unittest import mock

import msgspec
import pytest

import rayq
from rayq.actors.broker import BrokerActor
from rayq.actors.flusher import FlusherActor
from rayq.actors.protocol import (
    BrokerInfo,
    HaFetch,
    MetadataRequest,
    PullResponse,
    PullStatus,
    QueueData,
    RouteRequest,
    broker_actor_name,
)
from rayq.actors.protocol.registry import Access, Caller, server_key_operations
from rayq.actors.protocol.server_key import Guard, ServerKey, ServerProof
from rayq.store import InnerMessage, UniqIdGenerator
from rayq.store import properties as P
from rayq.store.batch import encode_batch
from rayq.store.errors import InvalidMessageError, PermissionDeniedError
from rayq.testing import FakeCluster, FakeTransport

TOPIC = "orders"
GROUP = "cg"


@pytest.fixture
def cluster(make_cluster: Any) -> FakeCluster:
    found: FakeCluster = make_cluster(topics={TOPIC: 2})
    found.server().tables.consumer_offsets.commit(GROUP, TOPIC, 0, 3)
    with rayq.Producer("pg", transport=FakeTransport(found)) as producer:
        producer.send_batch([rayq.Message(TOPIC, b"secret")] * 5)
    return found


def state(cluster: FakeCluster) -> tuple[Any, ...]:
    """What an attack must not change: offsets, the log's end, the routes."""
    server = cluster.server()
    route = cluster.call_coordinator("route", RouteRequest(topic=TOPIC)).result(5).route
    return (
        server.tables.consumer_offsets.query_all(GROUP, TOPIC),
        server.store.written_offset,
        route,
        sorted(cluster.coordinator.service.table.brokers),
    )


def refused(call: Any) -> str:
    with pytest.raises(PermissionDeniedError) as exc:
        call()
    return str(exc.value)


# ------------------------------------------------------------ every operation
# How each server operation is called in-process: (target, method, args); None: it is an
# actor shell's (tested below with the shell itself).
CALLS: dict[str, tuple[str, tuple[Any, ...]] | None] = {
    "broker.ha_fetch": ("ha_fetch", (HaFetch(broker_id=1, offset=0, epoch=0, max_bytes=1 << 20),)),
    "broker.ha_metadata": ("ha_metadata", (MetadataRequest(broker_id=1),)),
    "broker.sync_metadata": ("sync_metadata", ()),
    "broker.broker_info": ("broker_info", ()),
    "broker.broker_config": ("broker_config", ()),
    "broker.flush_targets": ("flush_targets", ()),
    "hold.deliver": (
        "hold.deliver",
        (
            "token",
            PullResponse(
                status=PullStatus.FOUND, next_offset=9, min_offset=0, max_offset=9, count=1
            ),
        ),
    ),
    "coordinator.register_broker": (
        "coordinator.register_broker",
        (BrokerInfo(broker_name="evil", node_id="n", store_dir="", topics={}),),
    ),
    "coordinator.unregister_broker": ("coordinator.unregister_broker", ("broker-a",)),
    "broker.start_services": None,
    "broker.park": None,
    "broker.shutdown": None,
    "flusher.sync": None,
}


def test_the_server_key_operations_are_the_registrys_internal_ones() -> None:
    """A guard that fails when an operation is added: each SERVER_KEY operation is a
    Caller.SERVER one and has a refusal test here; no client operation needs the key."""
    ops = server_key_operations()
    assert set(ops) == set(CALLS)
    assert all(op.caller is Caller.SERVER and op.access is Access.SERVER_KEY for op in ops.values())


@pytest.mark.parametrize("op", [k for k, v in CALLS.items() if v is not None])
def test_each_server_operation_refuses_a_call_without_proof(cluster: FakeCluster, op: str) -> None:
    entry = CALLS[op]
    assert entry is not None
    method, args = entry
    before = state(cluster)
    for proof in (None, ServerProof(timestamp_ms=int(time.time() * 1000), mac=b"x" * 32)):
        message = refused(lambda p=proof: cluster.call_server("broker-a", method, *args, proof=p))
        assert "server" in message and "proof" in message
    assert state(cluster) == before


def test_a_valid_proof_is_accepted_and_bound_to_its_request(cluster: FakeCluster) -> None:
    """With the key: answered. A proof for another request, actor, time or key: refused."""
    info = cluster.call_server(
        "broker-a", "broker_info", proof=cluster.prove("broker-a", "broker_info")
    )
    assert info.broker_name == "broker-a"
    asked = HaFetch(broker_id=1, offset=0, epoch=0, max_bytes=1 << 20)
    other = HaFetch(broker_id=1, offset=1, epoch=0, max_bytes=1 << 20)
    proof = cluster.prove("broker-a", "ha_fetch", asked)
    assert cluster.call_server("broker-a", "ha_fetch", asked, proof=proof).data
    refused(lambda: cluster.call_server("broker-a", "ha_fetch", other, proof=proof))
    wrong_actor = Guard(cluster.server_key, "broker", broker_actor_name("broker-b"))
    refused(
        lambda: cluster.call_server(
            "broker-a", "ha_fetch", asked, proof=wrong_actor.prove("ha_fetch", asked)
        )
    )
    stranger = Guard(ServerKey.new(), "broker", broker_actor_name("broker-a"))
    refused(
        lambda: cluster.call_server(
            "broker-a", "ha_fetch", asked, proof=stranger.prove("ha_fetch", asked)
        )
    )
    old = ServerKey(cluster.server_key._key, clock=lambda: time.time() - 3600)  # type: ignore[attr-defined]
    stale = Guard(old, "broker", broker_actor_name("broker-a")).prove("ha_fetch", asked)
    assert "away from" in refused(
        lambda: cluster.call_server("broker-a", "ha_fetch", asked, proof=stale)
    )


def test_the_key_never_shows() -> None:
    key = ServerKey.new()
    raw = key._key  # type: ignore[attr-defined]
    for text in (repr(key), str(key), repr(Guard(key, "broker", "b"))):
        assert raw.hex() not in text


# ------------------------------------------------------------ the attacks
def test_ha_metadata_without_proof_moves_no_offset(cluster: FakeCluster) -> None:
    before = state(cluster)
    evil = MetadataRequest(broker_id=1, offsets={f"{TOPIC}@{GROUP}": {0: 10**6}})
    refused(lambda: cluster.call_server("broker-a", "ha_metadata", evil))
    assert state(cluster) == before


def test_ha_fetch_without_proof_returns_no_log(cluster: FakeCluster) -> None:
    req = HaFetch(broker_id=1, offset=0, epoch=0, max_bytes=1 << 30)
    assert "server proof" in refused(lambda: cluster.call_server("broker-a", "ha_fetch", req))


def test_unregister_and_a_fake_registration_change_no_route(cluster: FakeCluster) -> None:
    before = state(cluster)
    refused(lambda: cluster.call_server("", "coordinator.unregister_broker", "broker-a"))
    fake = QueueData(broker_name="evil", read_queue_nums=8, write_queue_nums=8, perm=6)
    info = BrokerInfo(broker_name="evil", node_id="n", store_dir="", topics={TOPIC: fake})
    refused(lambda: cluster.call_server("", "coordinator.register_broker", info))
    assert state(cluster) == before
    assert "evil" not in cluster.coordinator.service.table.brokers


def test_a_stranger_cannot_shut_down_park_or_restart_a_broker() -> None:
    """The broker actor's own operations (shutdown, park, start_services) check the proof
    before they touch the runtime; with it, they run."""
    key = ServerKey.new()
    actor = object.__new__(BrokerActor)
    actor.endpoint = mock.Mock(guard=Guard(key, "broker", broker_actor_name("broker-a")))
    actor.runtime = mock.AsyncMock()
    actor.startup = mock.Mock()
    for method in ("shutdown", "park", "start_services"):
        refused(lambda m=method: asyncio.run(getattr(actor, m)()))
    assert actor.runtime.method_calls == []
    asyncio.run(actor.park(actor.endpoint.guard.prove("park")))
    assert [c[0] for c in actor.runtime.method_calls] == ["park"]


def test_a_stranger_cannot_make_the_flusher_sync() -> None:
    """flusher.sync(offset past the log) would keep the flusher syncing: refused."""
    actor = object.__new__(FlusherActor)
    actor.guard = Guard(ServerKey.new(), "flusher", "rayq-flusher-broker-a")
    actor.service = mock.AsyncMock()
    refused(lambda: asyncio.run(actor.sync(10**18)))
    assert actor.service.method_calls == []
    asyncio.run(actor.sync(7, actor.guard.prove("sync", 7)))
    assert actor.service.sync.await_args.args == (7,)


# ------------------------------------------------------------ raw puts
def raw_batch(props: dict[str, str] | None = None, n: int = 3) -> Any:
    ids = UniqIdGenerator()
    msgs = [
        InnerMessage(
            topic=TOPIC,
            queue_id=0,
            body=b"b",
            tags="t",
            uniq_key=ids.next_id(),
            properties=dict(props or {}),
        )
        for _ in range(n)
    ]
    return encode_batch(msgs, max_body_bytes=1 << 20, max_properties_bytes=32767)


@pytest.mark.parametrize(
    "name", [P.RETRY_TOPIC, P.ORIGIN_MESSAGE_ID, P.DLQ_ORIGIN_TOPIC, P.REAL_TOPIC, P.WAIT]
)
def test_a_raw_put_with_a_property_only_the_broker_sets_is_refused(
    cluster: FakeCluster, name: str
) -> None:
    before = state(cluster)
    reply = FakeTransport(cluster).broker("broker-a").put(raw_batch({name: "forged"}))
    with pytest.raises(InvalidMessageError, match=f"property '{name}'"):
        reply.result(5)
    assert state(cluster) == before


def test_a_raw_put_whose_msg_ids_do_not_name_its_records_is_refused(cluster: FakeCluster) -> None:
    before = state(cluster)
    client = FakeTransport(cluster).broker("broker-a")
    batch = raw_batch()
    for ids in (list(reversed(batch.msg_ids)), ["0" * 32] * 3, [*batch.msg_ids[:2], "x"]):
        with pytest.raises(InvalidMessageError, match="msg_ids are not its records"):
            client.put(msgspec.structs.replace(batch, msg_ids=ids)).result(5)
    assert state(cluster) == before
    assert client.put(batch).result(5).msg_ids == batch.msg_ids  # as encoded: stored
