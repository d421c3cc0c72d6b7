"""Idempotent produce through Ray: duplicates of (producer id, sequence) are dropped,
also after the broker is killed and restarted (snapshot plus commit-log replay)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import msgspec
import pytest
import ray

import rayq
from rayq.actors.protocol import MaxOffsetRequest, broker_actor_name
from rayq.actors.server.dedupe import sequence_properties
from rayq.cluster import Cluster
from rayq.store import InnerMessage, encode_batch
from rayq.store.errors import InvalidMessageError
from rayq.transport.context import ClientContext

T = TypeVar("T")

pytestmark = pytest.mark.integration
NAMESPACE = "rayq-test-idempotent"


@pytest.fixture(scope="module")
def ctx(cluster: Cluster) -> ClientContext:
    rayq.Admin(namespace=NAMESPACE).create_topic("idem", queues=2)
    return ClientContext(namespace=NAMESPACE)


def batch(pid: str, first: int, n: int, queue_id: int = 0):  # type: ignore[no-untyped-def]
    props = sequence_properties(pid, first, first + n - 1)
    msgs = [
        InnerMessage(
            topic="idem",
            queue_id=queue_id,
            body=f"m{first + i}".encode(),
            uniq_key=f"{pid}-{first + i}",
            properties=props,
        )
        for i in range(n)
    ]
    encoded = encode_batch(msgs, max_body_bytes=4096, max_properties_bytes=4096)
    return msgspec.structs.replace(encoded, producer_id=pid, first_sequence=first)


def put(ctx: ClientContext, b) -> list[int]:  # type: ignore[no-untyped-def]
    return ctx.broker("broker-a").put(b).result(30).queue_offsets


def max_offset(ctx: ClientContext, queue_id: int) -> int:
    req = MaxOffsetRequest(topic="idem", queue_id=queue_id)
    return ctx.broker("broker-a").max_offset(req).result(30).offset


def test_a_resent_batch_is_dropped(ctx: ClientContext) -> None:
    first = put(ctx, batch("p1", 0, 5))
    assert put(ctx, batch("p1", 0, 5)) == first  # the latest batch: the original answer
    assert put(ctx, batch("p1", 5, 5)) == [o + 5 for o in first]
    assert put(ctx, batch("p1", 0, 5)) == [-1] * 5  # an older duplicate: offsets unknown
    assert max_offset(ctx, 0) == 10
    with pytest.raises(InvalidMessageError, match="overlap"):
        put(ctx, batch("p1", 8, 4))
    with pytest.raises(rayq.BrokerBusyError, match="out of order"):  # retriable
        put(ctx, batch("p1", 20, 2))
    assert put(ctx, batch("p1", 10, 2)) == [10, 11]
    assert put(ctx, batch("p2", 0, 5)) == list(range(12, 17))  # another producer


def test_duplicates_are_dropped_after_a_broker_restart(
    ctx: ClientContext, retried: Callable[[Callable[[], T]], T], restart: Callable[[Any], None]
) -> None:
    put(ctx, batch("r1", 0, 3, queue_id=1))
    put(ctx, batch("r1", 3, 3, queue_id=1))
    restart(ray.get_actor(broker_actor_name("broker-a"), namespace=NAMESPACE))
    deadline = time.monotonic() + 60
    while True:  # until the restarted broker answers (the old one answers from its cache)
        got = retried(lambda: put(ctx, batch("r1", 3, 3, queue_id=1)))
        assert got in ([3, 4, 5], [-1] * 3)  # never appended again
        if got == [-1] * 3:
            break
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert put(ctx, batch("r1", 0, 3, queue_id=1)) == [-1] * 3
    assert max_offset(ctx, 1) == 6
    assert put(ctx, batch("r1", 6, 1, queue_id=1)) == [6]


def test_idempotent_producer(cluster: Cluster) -> None:
    with rayq.Producer(group="ipg", idempotent=True, namespace=NAMESPACE) as producer:
        results = producer.send_batch([rayq.Message("idem", f"b{i}".encode()) for i in range(4)])
        assert len({r.queue_offset for r in results}) == 4
        one = producer.send(rayq.Message("idem", b"single", keys=["k"]))
        futures = [producer.send_async(rayq.Message("idem", f"a{i}".encode())) for i in range(20)]
        assert all(f.result(30).status is rayq.SendStatus.SEND_OK for f in futures)
    msgs = rayq.Admin(namespace=NAMESPACE).query_message("idem", "k")
    assert [m.queue_offset for m in msgs] == [one.queue_offset]
    assert msgs[0].properties["__PID"] == producer.client_id
    with pytest.raises(rayq.ConfigError):
        rayq.Producer(group="ipg", idempotent="yes", namespace=NAMESPACE)  # type: ignore[arg-type]
    with (
        rayq.Producer(group="ipg", namespace=NAMESPACE) as plain,
        pytest.raises(InvalidMessageError, match="reserved"),
    ):
        plain.send(rayq.Message("idem", b"x", properties={"__PID": "forged"}))
