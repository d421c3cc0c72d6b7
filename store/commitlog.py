"""The commit log: every message of every topic, appended in arrival order.

Files: ``commitlog/<20-digit start offset>``, each ``commitlog_segment_size_bytes``
(1 GiB by default), segment k starting at ``k * size`` (segment.py). Records are
laid out as codec.py describes; a segment that cannot hold the next record plus
an 8-byte blank record is closed by a blank record and the record goes to the next
segment. A record never spans two segments.

``quarantine/<20-digit offset>`` (beside ``commitlog/``): bytes taken out of the log,
as found from that commit-log offset: a damaged span recovery set aside (resync.py;
trailing zeros left out, and in the log the span now starts with an 8-byte SPAN
marker, codec.py, that walkers step over), or a slave's divergent tail cut by epoch
fencing (``keep_copy``).

The commit log knows nothing of consume queues: ``append`` returns a
``DispatchBatch`` (one column per field) that the store hands to the consume queues
and the key index, and ``scan`` produces the same from the files during recovery.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec
from crc32c import crc32c

from . import codec
from .consume_queue import HOLE_SIZE
from .filters import tags_code
from .index_file import topic_seed
from .segment import Segment, SegmentedFile, segment_name

if TYPE_CHECKING:
    from .scanner import GoodRun

logger = logging.getLogger(__name__)


class DispatchBatch(msgspec.Struct, kw_only=True):
    """Columns describing appended records, for consume queues and the key index."""

    topics: list[str] = []
    queue_ids: list[int] = []
    queue_offsets: list[int] = []
    offsets: list[int] = []
    sizes: list[int] = []
    tags_codes: list[int] = []
    index_hashes: list[int] = []  # key_hash("topic#key") of KEYS and UNIQ_KEY
    index_offsets: list[int] = []
    index_times: list[int] = []
    tx_offsets: list[int] = []  # records with TRAN_MSG (transactions.py replays them)

    def __len__(self) -> int:
        return len(self.offsets)

    def add(
        self,
        topic: str,
        queue_id: int,
        queue_offset: int,
        offset: int,
        size: int,
        props: bytes,
        store_timestamp: int,
    ) -> None:
        """Add one record (the careful recovery path)."""
        self.add_records(
            [topic], [queue_id], [queue_offset], [offset], [size], [props], [store_timestamp]
        )

    def add_run(self, run: GoodRun) -> None:
        """Add a run of valid records (from scanner.scan)."""
        self.add_records(
            run.topics,
            run.queue_ids,
            run.queue_offsets,
            run.offsets,
            run.sizes,
            run.properties,
            run.store_timestamps,
        )

    def add_records(
        self,
        topics: list[str],
        queue_ids: list[int],
        queue_offsets: list[int],
        offsets: list[int],
        sizes: list[int],
        properties: list[bytes],
        store_timestamps: list[int],
    ) -> None:
        """Add records by columns; tags and keys are read from their raw properties."""
        self.topics += topics
        self.queue_ids += queue_ids
        self.queue_offsets += queue_offsets
        self.offsets += offsets
        self.sizes += sizes
        codes, hashes = self.tags_codes, self.index_hashes
        owners_at, times = self.index_offsets, self.index_times
        founds = map(_SYSTEM.findall, properties)
        for found, topic, offset, ts in zip(founds, topics, offsets, store_timestamps, strict=True):
            if not found:
                codes.append(0)
                continue
            d = dict(found)
            tags = d.get(b"TAGS")
            codes.append((_tag_codes.get(tags) or _tag_code(tags)) if tags else 0)
            seed = _seeds.get(topic) or _seed(topic)
            keys = d.get(b"KEYS")
            if keys:
                for k in keys.split(b" ") if b" " in keys else (keys,):
                    if k:
                        hashes.append(crc32c(k, seed))
                        owners_at.append(offset)
                        times.append(ts)
            uniq = d.get(b"UNIQ_KEY")
            if uniq:
                hashes.append(crc32c(uniq, seed))
                owners_at.append(offset)
                times.append(ts)
            if b"TRAN_MSG" in d:
                self.tx_offsets.append(offset)

    def add_hole(self, topic: str, queue_id: int, queue_offset: int, offset: int) -> None:
        """Keep ``queue_offset`` taken by a record that will never be served."""
        self.topics.append(topic)
        self.queue_ids.append(queue_id)
        self.queue_offsets.append(queue_offset)
        self.offsets.append(offset)
        self.sizes.append(HOLE_SIZE)
        self.tags_codes.append(0)


_SYSTEM = re.compile(b"(?:^|\x02)(TAGS|KEYS|UNIQ_KEY|TRAN_MSG)\x01([^\x02]*)")
_seeds: dict[str, int] = {}
_tag_codes: dict[bytes, int] = {}


def _tag_code(tags: bytes) -> int:
    code = _tag_codes[tags] = tags_code(tags.decode("utf-8", "replace"))
    return code


def _seed(topic: str) -> int:
    seed = _seeds[topic] = topic_seed(topic)
    return seed


class CommitLog:
    """Segments of records plus the write position."""

    def __init__(
        self, directory: Path, segment_size: int, on_create: Callable[[], None] | None = None
    ) -> None:
        self.file = SegmentedFile(directory, segment_size, on_create)
        self.segment_size = segment_size

    @property
    def min_offset(self) -> int:
        return self.file.min_offset

    @property
    def max_offset(self) -> int:
        """One past the last valid byte: the next record's physical offset."""
        return self.file.max_offset

    def needs_segment(self, size: int) -> bool:
        """Whether appending ``size`` bytes of records (one batch) starts a new segment."""
        seg = self.file.last()
        return seg is None or seg.wrote + size + codec.BLANK_SIZE_MIN > seg.size

    def writable_segment(self, size: int) -> Segment:
        """The segment the next record of ``size`` bytes goes to (rolling if needed)."""
        seg = self.file.last()
        if seg is None:
            return self.file.create(0)
        if seg.wrote + size + codec.BLANK_SIZE_MIN <= seg.size:
            return seg
        if seg.wrote + codec.BLANK_SIZE_MIN <= seg.size:
            codec.PREFIX.pack_into(seg.mv, seg.wrote, seg.size - seg.wrote, codec.BLANK_MAGIC)
        seg.wrote = seg.size
        return self.file.create(seg.end)

    def read(self, offset: int, size: int) -> bytes | None:
        """The record bytes at ``offset`` (``size`` from its consume-queue entry)."""
        seg = self.file.find(offset)
        if seg is None:
            return None
        local = offset - seg.start
        if local + size > seg.wrote:
            return None
        if codec.PREFIX.unpack_from(seg.mm, local) != (size, codec.MAGIC):
            return None
        return seg.mm[local : local + size]

    def read_at(self, offset: int) -> bytes | None:
        """The record starting at ``offset``, whatever its size, or None."""
        seg = self.file.find(offset)
        if seg is None or offset - seg.start + codec.PREFIX.size > seg.wrote:
            return None
        size, magic = codec.PREFIX.unpack_from(seg.mm, offset - seg.start)
        if magic != codec.MAGIC:
            return None
        return self.read(offset, size)

    def store_timestamp_at(self, offset: int) -> int | None:
        seg = self.file.find(offset)
        if seg is None:
            return None
        local = offset - seg.start
        if local + codec.HEADER_SIZE > seg.wrote:
            return None
        stamp: int = codec.INT64.unpack_from(seg.mm, local + codec.STORE_TIMESTAMP_OFFSET)[0]
        return stamp

    def quarantine(self, offset: int) -> None:
        seg = self.file.find(offset)
        assert seg is not None
        codec.PREFIX.pack_into(
            seg.mv,
            offset - seg.start,
            codec.PREFIX.unpack_from(seg.mv, offset - seg.start)[0],
            codec.QUARANTINE_MAGIC,
        )

    def set_aside(self, start: int, end: int) -> None:
        """Set ``[start, end)`` aside as damaged: its bytes copied to ``quarantine/``,
        then a SPAN marker over its first 8 bytes in each segment it touches."""
        pos = start
        while pos < end:
            seg = self.file.find(pos)
            if seg is None:  # a missing segment file: nothing to keep or mark
                pos = min([s.start for s in self.file.segments if s.start > pos] + [end])
                continue
            piece_end = min(end, seg.end)
            local, length = pos - seg.start, piece_end - pos
            self._keep_copy(pos, bytes(seg.mv[local : local + length]).rstrip(b"\0"))
            if length >= codec.BLANK_SIZE_MIN:
                seg.write(local, codec.PREFIX.pack(length, codec.SPAN_MAGIC))
                seg.flush()
            pos = piece_end

    def keep_copy(self, start: int, end: int) -> None:
        """Copy ``[start, end)`` to ``quarantine/`` (one file per segment it touches)."""
        pos = start
        while pos < end:
            seg = self.file.find(pos)
            if seg is None:
                return
            stop = min(end, seg.end)
            self._keep_copy(pos, bytes(seg.mv[pos - seg.start : stop - seg.start]))
            pos = stop

    def _keep_copy(self, offset: int, data: bytes) -> None:
        directory = self.file.directory.parent / "quarantine"
        directory.mkdir(exist_ok=True)
        with open(directory / segment_name(offset), "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())

    @staticmethod
    def dispatch(offset: int, size: int, parsed: codec.ParsedRecord, batch: DispatchBatch) -> None:
        """Add a parsed record (from ``scan``) to ``batch``."""
        header, topic, props = parsed
        batch.add(topic, header[7], header[3], offset, size, props, header[5])

    def truncate(self, offset: int) -> None:
        """Make ``offset`` the end: later segments deleted, stale bytes zeroed."""
        seg = self.file.find(offset) if offset > self.file.min_offset else None
        if seg is None and self.file.segments and offset == self.file.segments[-1].end:
            seg = self.file.segments[-1]
        if seg is not None:
            seg.wrote = max(seg.wrote, seg.data_end(offset - seg.start))
        self.file.truncate(offset)
        for s in self.file.segments[:-1]:
            s.wrote = s.size

    def delete_first_segment(self) -> None:
        self.file.drop_first()

    def flush(self) -> None:
        self.file.flush()

    def close(self) -> None:
        self.file.close()
