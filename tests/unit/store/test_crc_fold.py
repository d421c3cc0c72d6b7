"""crc_fold: folding a store block into a producer's CRC with tables equals ``crc32c``
over the block from that CRC (and so the record CRC ``codec.record_crc`` computes)."""

from __future__ import annotations

import numpy as np
import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from rayq.store import codec
from rayq.store.batch import fill_store_block
from rayq.store.crc_fold import GATHER_MAX, LOOP_MAX, fold_store_blocks

BLOCK = codec.STORE_BLOCK_SIZE


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 2**32 - 1), st.binary(min_size=BLOCK, max_size=BLOCK)),
        min_size=1,
        max_size=20,
    )
)
def test_fold_equals_crc32c_from_the_producer_crc(rows: list[tuple[int, bytes]]) -> None:
    producer = np.array([p for p, _ in rows], dtype=np.uint32)
    blocks = np.frombuffer(b"".join(b for _, b in rows), dtype=np.uint8).reshape(-1, BLOCK)
    assert fold_store_blocks(producer, blocks).tolist() == [crc32c(b, p) for p, b in rows]


@pytest.mark.parametrize("n", [1, LOOP_MAX, LOOP_MAX + 1, GATHER_MAX, GATHER_MAX + 1, 5000])
def test_each_way_of_folding_equals_crc32c(n: int) -> None:
    """A few records, a gather's worth and a bulk read's are folded three ways."""
    rng = np.random.default_rng(n)
    producer = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    blocks = rng.integers(0, 256, (n, BLOCK), dtype=np.uint8)
    want = [crc32c(blocks[i].tobytes(), int(producer[i])) for i in range(n)]
    folded = fold_store_blocks(producer, blocks)
    assert folded.dtype == np.uint32
    assert folded.tolist() == want


def test_a_record_crc_is_the_producer_part_then_its_block() -> None:
    buf = bytearray(np.random.default_rng(7).integers(0, 256, 300, dtype=np.uint8).tobytes())
    producer = crc32c(bytes(buf[codec.CRC_START :]))
    block = np.frombuffer(bytes(buf[codec.STORE_BLOCK_OFFSET : codec.CRC_START]), np.uint8)
    folded = fold_store_blocks(np.array([producer], np.uint32), block.reshape(1, BLOCK))
    assert int(folded[0]) == codec.record_crc(buf, 0, len(buf))


def test_a_few_records_get_the_store_blocks_numpy_would_give() -> None:
    """``fill_store_block`` fills up to ``LOOP_MAX`` records with ``struct`` and
    ``crc32c``: the same bytes as its numpy way, which the first records of a longer
    batch get."""
    rng = np.random.default_rng(3)
    sizes = rng.integers(codec.HEADER_SIZE, 400, LOOP_MAX + 1)
    records = rng.integers(0, 256, int(sizes.sum()), dtype=np.uint8).tobytes()
    starts = (np.cumsum(sizes) - sizes).astype(np.int64)
    crcs = rng.integers(0, 2**32, LOOP_MAX + 1, dtype=np.uint64).astype(np.uint32)
    args = (7, 1 << 40, 1_700_000_000_000, b"\x0a\x00\x00\x01\x00\x00\x27\x10")
    many = fill_store_block(records, starts, crcs, *args)  # numpy
    end = int(starts[LOOP_MAX])
    few = fill_store_block(records[:end], starts[:LOOP_MAX], crcs[:LOOP_MAX], *args)
    assert few == many[:end]
