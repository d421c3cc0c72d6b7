"""crc_fold: folding a store block into a producer's CRC with tables equals ``crc32c``
over the block from that CRC (and so the record CRC ``codec.record_crc`` computes)."""

from __future__ import annotations

import numpy as np
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from rayq.store import codec
from rayq.store.crc_fold import fold_store_blocks

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


def test_a_record_crc_is_the_producer_part_then_its_block() -> None:
    buf = bytearray(np.random.default_rng(7).integers(0, 256, 300, dtype=np.uint8).tobytes())
    producer = crc32c(bytes(buf[codec.CRC_START :]))
    block = np.frombuffer(bytes(buf[codec.STORE_BLOCK_OFFSET : codec.CRC_START]), np.uint8)
    folded = fold_store_blocks(np.array([producer], np.uint32), block.reshape(1, BLOCK))
    assert int(folded[0]) == codec.record_crc(buf, 0, len(buf))
