"""Puts over Ray's inline limit: the records travel as chunks of one call, and the broker
appends the batch whole or not at all, in order, exactly once for idempotent sends."""

from __future__ import annotations

import msgspec
import pytest
import ray

import rayq
from rayq.actors.protocol import MaxOffsetRequest, PullRequest, broker_actor_name
from rayq.actors.server.dedupe import sequence_properties
from rayq.cluster import Cluster
from rayq.store import InnerMessage, decode_records, encode_batch
from rayq.store.errors import BrokerBusyError, InvalidMessageError, InvalidRequestError
from rayq.transport.context import ClientContext
from rayq.transport.ray_actors import inline_args

pytestmark = pytest.mark.integration
NAMESPACE = "rayq-test-split-puts"
BODY = 2048  # 60 messages: ~126 KiB of records, two chunks


@pytest.fixture(scope="module")
def ctx(cluster: Cluster) -> ClientContext:
    rayq.Admin(namespace=NAMESPACE).create_topic("split", queues=4)
    return ClientContext(rayq.ClientConfig(transport="ray"), namespace=NAMESPACE)  # Ray's chunks


def batch(queue_id: int, first: int, n: int, pid: str = ""):  # type: ignore[no-untyped-def]
    props = sequence_properties(pid, first, first + n - 1) if pid else {}
    msgs = [
        InnerMessage(
            topic="split",
            queue_id=queue_id,
            uniq_key=f"{pid}u{first + i}",
            body=(b"%08d" % (first + i)) * (BODY // 8),
            properties=props,
        )
        for i in range(n)
    ]
    encoded = encode_batch(msgs, max_body_bytes=1 << 20, max_properties_bytes=4096)
    if pid:
        encoded = msgspec.structs.replace(encoded, producer_id=pid, first_sequence=first)
    return encoded


def max_offset(ctx: ClientContext, queue_id: int) -> int:
    req = MaxOffsetRequest(topic="split", queue_id=queue_id)
    return ctx.broker("broker-a").max_offset(req).result(30).offset


def read(ctx: ClientContext, queue_id: int) -> list[int]:
    """The sequence numbers in queue ``queue_id``, in queue order."""
    out: list[int] = []
    while True:
        req = PullRequest(
            group="g",
            topic="split",
            queue_id=queue_id,
            queue_offset=len(out),
            max_nums=1000,
            suspend_ms=0,
        )
        resp = ctx.broker("broker-a").pull(req).result(30)
        got = [int(m.body[:8]) for m in decode_records(resp.buffer)]
        if not got:
            return out
        out += got


def test_a_batch_over_the_inline_limit_is_one_call_of_chunks_appended_whole_in_order(
    ctx: ClientContext,
) -> None:
    big = batch(0, 0, 60)
    assert len(inline_args(big)) == 3  # metadata + two chunks
    offsets = ctx.broker("broker-a").put(big).result(30).queue_offsets
    assert offsets == list(range(60))
    assert read(ctx, 0) == list(range(60))
    producer = rayq.Producer("split-p", namespace=NAMESPACE)
    try:
        results = producer.send_batch(
            [rayq.Message("split", b"%08d" % i * (BODY // 8)) for i in range(60, 360)]
        )
    finally:
        producer.shutdown()
    q, start = results[0].queue.queue_id, results[0].queue_offset
    assert [r.queue_offset for r in results] == list(range(start, start + 300))
    assert read(ctx, q)[-300:] == list(range(60, 360))


def test_a_batch_of_more_chunks_than_pay_off_goes_beside_its_records_in_one_call(
    ctx: ClientContext,
) -> None:
    before = max_offset(ctx, 3)
    huge = batch(3, 1000, 1000)  # ~2 MiB of records: over INLINE_CHUNKS_MAX chunks
    meta, records = inline_args(huge)
    assert meta.records == b"" and records is huge.records
    offsets = ctx.broker("broker-a").put(huge).result(30).queue_offsets
    assert offsets == list(range(before, before + 1000))
    assert read(ctx, 3)[before:] == list(range(1000, 2000))


def test_a_bad_chunk_fails_the_whole_batch_and_leaves_the_queue_as_it_was(
    ctx: ClientContext,
) -> None:
    handle = ray.get_actor(broker_actor_name("broker-a"), namespace=NAMESPACE)
    before = max_offset(ctx, 1)
    meta, first, second = inline_args(batch(1, 0, 60))
    damaged = second[:-100] + bytes(100)  # the last record of the second chunk breaks
    with pytest.raises(InvalidMessageError):
        ray.get(handle.put.remote(meta, first, damaged))
    with pytest.raises(InvalidMessageError):
        ray.get(handle.put.remote(meta, first))  # a chunk missing
    with pytest.raises(InvalidRequestError, match="either in the batch or as bytes chunks"):
        ray.get(handle.put.remote(batch(1, 0, 60), first))
    with pytest.raises(InvalidRequestError, match="either in the batch or as bytes chunks"):
        ray.get(handle.put.remote(meta, first, "not bytes"))
    assert max_offset(ctx, 1) == before  # nothing of any of them was appended
    ray.get(handle.put.remote(meta, first, second))  # the broker serves the good one
    assert read(ctx, 1)[before:] == list(range(60))


def test_idempotent_split_batches_land_exactly_once_and_in_order_through_retries(
    ctx: ClientContext,
) -> None:
    broker = ctx.broker("broker-a")
    before = max_offset(ctx, 2)  # the producer of the first test may have sent here
    a, b = batch(2, 0, 60, pid="split-pid"), batch(2, 60, 60, pid="split-pid")
    with pytest.raises(BrokerBusyError, match="out of order"):
        broker.put(b).result(30)  # b before a: refused, so a retry cannot reorder them
    first = broker.put(a).result(30).queue_offsets
    assert broker.put(a).result(30).queue_offsets == first  # a retry of a: dropped
    broker.put(b).result(30)
    assert broker.put(a).result(30).queue_offsets == [-1] * 60  # an older retry: dropped
    broker.put(b).result(30)
    assert read(ctx, 2)[before:] == list(range(120))
    assert max_offset(ctx, 2) == before + 120
