"""Splitting a put's records under Ray's inline limit (rayq/transport/ray_actors.py), no Ray."""

from __future__ import annotations

from rayq.store import InnerMessage, encode_batch
from rayq.transport.ray_actors import INLINE_BYTES, INLINE_CHUNKS_MAX, inline_args


def batch(n: int, size: int):  # type: ignore[no-untyped-def]
    msgs = [
        InnerMessage(topic="t", queue_id=0, body=bytes([i % 251]) * size, uniq_key=f"u{i}")
        for i in range(n)
    ]
    return encode_batch(msgs, max_body_bytes=1 << 20, max_properties_bytes=4096)


def test_a_batch_under_the_limit_goes_as_it_is() -> None:
    small = batch(10, 1024)
    assert inline_args(small) == (small,)


def test_a_large_batch_goes_as_its_metadata_and_near_equal_chunks_under_the_limit() -> None:
    for n, size in ((100, 1024), (500, 1024), (3, 150_000)):
        big = batch(n, size)
        meta, *chunks = inline_args(big)
        assert meta.records == b"" and meta.count == big.count and meta.sizes == big.sizes
        assert meta.msg_ids == big.msg_ids
        assert b"".join(chunks) == big.records
        assert len(chunks) == -(-len(big.records) // INLINE_BYTES)
        assert all(type(c) is bytes and len(c) <= INLINE_BYTES for c in chunks)
        assert max(map(len, chunks)) - min(map(len, chunks)) < len(chunks)


def test_a_batch_of_more_chunks_than_pay_off_goes_as_its_metadata_and_its_records() -> None:
    huge = batch(2 * INLINE_CHUNKS_MAX, INLINE_BYTES // 2 + 1000)
    meta, records = inline_args(huge)
    assert records is huge.records  # one object-store transfer, outside the msgpack
    assert meta.records == b"" and meta.count == huge.count and meta.sizes == huge.sizes
