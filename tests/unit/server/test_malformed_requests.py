"""Inputs that used to end in a non-rayq exception (issue 27's list) get a clear
RayqError and leave the store, the offsets and the routes as they were: a put whose
batch came as a Python object with wrong field types or columns that do not line up,
a slave's metadata sync with a malformed offset key, a registration that is not a
BrokerInfo, and a start timestamp past int64."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from rayq.actors.protocol import ConsumeFromWhere, MetadataRequest
from rayq.actors.protocol.server_key import ServerKey
from rayq.actors.server.coordinator_peers import NoPeers
from rayq.actors.server.coordinator_service import CoordinatorService
from rayq.consumer.start_offsets import check_start_options
from rayq.producer.producer import Producer
from rayq.store import EncodedBatch, Message
from rayq.store.errors import ConfigError, InvalidRequestError
from rayq.testing import FakeCluster, FakeTransport

TOPIC = "t"


@pytest.fixture
def cluster_options() -> dict[str, Any]:
    return {"topics": {TOPIC: 1}}


def _good_batch(cluster: FakeCluster) -> EncodedBatch:
    """A real producer's batch, captured on its way to the broker."""
    sent: list[EncodedBatch] = []
    transport = FakeTransport(cluster)
    original = cluster.call_broker

    def spy(broker: str, method: str, arg: Any) -> Any:
        if method == "put":
            sent.append(arg)
        return original(broker, method, arg)

    cluster.call_broker = spy  # type: ignore[method-assign]
    try:
        with Producer("pg", transport=transport) as producer:
            producer.send(Message(TOPIC, b"one"))
    finally:
        cluster.call_broker = original  # type: ignore[method-assign]
    [batch] = sent
    return batch


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        ({"records": None}, "records must be bytes"),
        ({"sizes": b"\x01\x00\x00"}, "sizes must be bytes of 4-byte items"),
        ({"sizes": None}, "sizes must be bytes of 4-byte items"),
        ({"tags_codes": b"\x00" * 7}, "tags_codes must be bytes of 8-byte items"),
        ({"msg_ids": ["a", "b"]}, "1 records but 2 msg_ids"),
        ({"msg_ids": [1]}, "msg_ids must be a list of str"),
        ({"count": "1"}, "must be ints"),
        ({"topic": ["t"]}, "topic and producer_id must be str"),
    ],
)
def test_a_malformed_put_is_refused_and_stores_nothing(
    cluster: FakeCluster, changes: dict[str, Any], why: str
) -> None:
    good = _good_batch(cluster)
    server = cluster.server("broker-a")
    before = server.store.max_offset(TOPIC, 0)
    bad = EncodedBatch(**{**{f: getattr(good, f) for f in good.__struct_fields__}, **changes})

    with pytest.raises(InvalidRequestError, match=why):
        cluster.call_broker("broker-a", "put", bad).result(10)

    assert server.store.max_offset(TOPIC, 0) == before
    cluster.call_broker("broker-a", "put", good).result(10)  # the broker still serves
    assert server.store.max_offset(TOPIC, 0) == before + 1


def test_a_metadata_sync_with_a_key_without_at_is_refused_and_merges_nothing(
    cluster: FakeCluster,
) -> None:
    server = cluster.server("broker-a")
    good_key = f"{TOPIC}@cg"
    req = MetadataRequest(broker_id=1, offsets={good_key: {0: 5}, "no-separator": {0: 7}})

    with pytest.raises(InvalidRequestError, match="no-separator"):
        server.ha_metadata(req)

    assert server.tables.consumer_offsets.query_all("cg", TOPIC) == {}
    server.ha_metadata(MetadataRequest(broker_id=1, offsets={good_key: {0: 5}}))
    assert server.tables.consumer_offsets.query_all("cg", TOPIC) == {0: 5}  # merges when good


@pytest.mark.parametrize("info", [{"broker_name": "fake"}, None, "broker-a"])
def test_a_registration_that_is_not_a_broker_info_is_refused(info: object) -> None:
    async def register() -> None:
        service = CoordinatorService(NoPeers("ns"), server_key=ServerKey.new())
        service.skip_rebuild()
        try:  # a proof of the key for it: past the guard, refused by the check
            proof = service.guard.prove("register_broker", info)
            with pytest.raises(InvalidRequestError, match="expected a BrokerInfo"):
                await service.register_broker(info, proof)  # type: ignore[arg-type]
            assert service.table.brokers == {}
        finally:
            service.close()

    asyncio.run(register())


@pytest.mark.parametrize("timestamp_ms", [2**63, 2**64, -1])
def test_a_start_timestamp_outside_int64_milliseconds_is_a_config_error(
    timestamp_ms: int,
) -> None:
    with pytest.raises(ConfigError, match="consume_timestamp_ms must be an int from 0"):
        check_start_options(ConsumeFromWhere.TIMESTAMP, timestamp_ms, None, None)
    assert check_start_options(ConsumeFromWhere.TIMESTAMP, 2**63 - 1, None, None) == 2**63 - 1
