"""The checkpoint file and the abort marker.

``checkpoint`` (written whole to ``checkpoint.tmp``, fsynced, renamed). Big-endian::

    offset  size  type    field
    0       8     int64   commitlog_flushed_offset   every commit-log byte below is durable
    8       8     int64   consume_queue_flushed_offset  every consume-queue entry for
                                                        records below is durable
    16      8     int64   index_flushed_offset       likewise for the key index
    24      8     int64   written_at_ms
    32      4     uint32  crc                        CRC-32C of bytes [0, 32)

Recovery trusts the commit log below ``min`` of the three offsets and re-validates
(CRC, sizes, magic) and re-dispatches everything from there on. A missing or
damaged checkpoint counts as all zeros: everything is re-validated.

``abort``: an empty file created when a store opens and removed when it closes
cleanly; found on open, it means the last run crashed (logged, and reported by
``MessageStore.recovered_abnormally``).
"""

from __future__ import annotations

import logging
import os
import struct
from pathlib import Path
from typing import Final

import msgspec
from crc32c import crc32c

logger = logging.getLogger(__name__)

LAYOUT: Final[struct.Struct] = struct.Struct(
    ">"
    "q"  # commitlog_flushed_offset
    "q"  # consume_queue_flushed_offset
    "q"  # index_flushed_offset
    "q"  # written_at_ms
)
CRC: Final[struct.Struct] = struct.Struct(">I")
FILE_NAME: Final[str] = "checkpoint"
ABORT_NAME: Final[str] = "abort"


class Checkpoint(msgspec.Struct, frozen=True):
    commitlog_flushed_offset: int = 0
    consume_queue_flushed_offset: int = 0
    index_flushed_offset: int = 0
    written_at_ms: int = 0

    @property
    def recover_from(self) -> int:
        return min(
            self.commitlog_flushed_offset,
            self.consume_queue_flushed_offset,
            self.index_flushed_offset,
        )


def encode_checkpoint(cp: Checkpoint) -> bytes:
    body = LAYOUT.pack(
        cp.commitlog_flushed_offset,
        cp.consume_queue_flushed_offset,
        cp.index_flushed_offset,
        cp.written_at_ms,
    )
    return body + CRC.pack(crc32c(body))


def decode_checkpoint(raw: bytes) -> Checkpoint | None:
    if len(raw) != LAYOUT.size + CRC.size:
        return None
    body = raw[: LAYOUT.size]
    if CRC.unpack_from(raw, LAYOUT.size)[0] != crc32c(body):
        return None
    return Checkpoint(*LAYOUT.unpack(body))


def load_checkpoint(root: Path) -> Checkpoint:
    path = root / FILE_NAME
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return Checkpoint()
    cp = decode_checkpoint(raw)
    if cp is None:
        logger.warning("checkpoint %s is damaged; everything will be re-validated", path)
        return Checkpoint()
    return cp


def save_checkpoint(root: Path, cp: Checkpoint) -> None:
    tmp = root / (FILE_NAME + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, encode_checkpoint(cp))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, root / FILE_NAME)
