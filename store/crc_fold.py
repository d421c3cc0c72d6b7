"""A record's CRC from its producer's CRC and its store block, for many records at once.

A record's CRC (``codec.record_crc``) covers its bytes from ``CRC_START`` to its end,
then its 32-byte store block (queue offset, commit-log offset, store timestamp, store
host: what the broker fills in). The producer computes the first part; the broker and
the bulk reader fold the block in. CRC-32C's register update is linear over GF(2):
from register ``r``, the 32 block bytes leave ``A(r) ^ B(block)``, where ``A`` runs 32
zero bytes through the register and ``B`` runs the block from a zero register. Both are
sums (xor) of table entries, one per byte, so numpy folds every record's block with 36
table lookups a record and no Python per record. The tables are made with ``crc32c``.

How the sum is taken depends on how many records there are (numpy's cost is per call,
not per record, until the records number in the thousands):
- a few (a single send): ``crc32c`` itself, one call a record (about 3 us);
- up to ``GATHER_MAX``: one gather of all 36 x n entries from one flat table, then one
  xor-reduce per row (about 8-20 us for 1-100 records, where 36 table lookups as 36
  numpy calls took 80 us);
- more (a bulk read): table by table, 36 lookups of n entries each, which touches less
  memory at once.
"""

from __future__ import annotations

import functools
from typing import Final

import numpy as np
from crc32c import crc32c

from . import codec

_ONES: Final = np.uint32(0xFFFFFFFF)  # CRC-32C's initial value and final xor
LOOP_MAX: Final = 8  # records folded by crc32c calls, one a record
GATHER_MAX: Final = 2048  # records folded by one gather


def fold_store_blocks(producer_crcs: np.ndarray, blocks: np.ndarray) -> np.ndarray:
    """``crc32c(block_i, producer_crcs[i])`` for each row ``block_i`` of ``blocks`` (n x 32
    uint8), as uint32."""
    n = len(producer_crcs)
    if n <= LOOP_MAX:
        raw = np.ascontiguousarray(blocks).tobytes()
        size = codec.STORE_BLOCK_SIZE
        return np.array(
            [
                crc32c(raw[i * size : (i + 1) * size], crc)
                for i, crc in enumerate(producer_crcs.tolist())
            ],
            dtype=np.uint32,
        )
    register = producer_crcs.astype(np.uint32) ^ _ONES
    if n <= GATHER_MAX:
        table, offsets = _flat_table()
        index = np.empty((n, 4 + codec.STORE_BLOCK_SIZE), dtype=np.intp)
        index[:, :4] = register.astype("<u4").view(np.uint8).reshape(n, 4)
        index[:, 4:] = blocks
        index += offsets
        gathered: np.ndarray = np.bitwise_xor.reduce(table[index], axis=1) ^ _ONES
        return gathered
    by_register, by_block = _tables()
    acc = by_register[0][register & 0xFF]
    for k in range(1, 4):
        acc ^= by_register[k][(register >> (8 * k)) & 0xFF]
    columns = np.ascontiguousarray(blocks.T)
    for j in range(codec.STORE_BLOCK_SIZE):
        acc ^= by_block[j][columns[j]]
    crcs: np.ndarray = acc ^ _ONES
    return crcs


@functools.cache
def _flat_table() -> tuple[np.ndarray, np.ndarray]:
    """``A`` then ``B`` as one table of 36 x 256 entries, and each byte's row start."""
    by_register, by_block = _tables()
    table = np.concatenate([by_register, by_block]).reshape(-1)
    return table, np.arange(4 + codec.STORE_BLOCK_SIZE, dtype=np.intp) * 256


@functools.cache
def _tables() -> tuple[np.ndarray, np.ndarray]:
    """``A`` by register byte (4 x 256) and ``B`` by block byte (32 x 256)."""
    zeros = bytes(codec.STORE_BLOCK_SIZE)
    ones = int(_ONES)
    by_register = [
        [crc32c(zeros, (b << (8 * k)) ^ ones) ^ ones for b in range(256)] for k in range(4)
    ]
    by_block = []
    for j in range(codec.STORE_BLOCK_SIZE):
        block = bytearray(codec.STORE_BLOCK_SIZE)
        row = []
        for b in range(256):
            block[j] = b
            row.append(crc32c(block, ones) ^ ones)
        by_block.append(row)
    return np.array(by_register, dtype=np.uint32), np.array(by_block, dtype=np.uint32)
