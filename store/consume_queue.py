"""Consume queue: the per-topic/queue index of the commit log (RocketMQ ``ConsumeQueue``).

Files: ``consumequeue/<topic>/<queue_id>/<20-digit start byte offset>``, each
``cq_entries_per_file * 20`` bytes (a segmented file, see segment.py). Entry k of
the queue (queue offset k) sits at byte ``k * 20``. Big-endian::

    offset  size  type   field
    0       8     int64  commitlog_offset   where the record starts in the commit log
    8       4     int32  size               record size in bytes
    12      8     int64  tags_code          Java String.hashCode of the tag (0: none)

An all-zero entry was never written. A hole (the entry of a record recovery had
to quarantine, or a gap before a later record) is ``(commitlog_offset, HOLE_SIZE,
0)``, with the offset of the record it stands for or of the next record, so
offsets never decrease along a queue; readers skip both. No CRC: every entry
can be rebuilt from the commit log, and recovery does so for everything past the
checkpoint. On open, the end of the queue is the last non-zero entry of the last
segment. Entries whose record lies at or past a truncation point are cut off
(``truncate_from_commitlog``); segments whose every record was deleted from the
commit log are dropped (``delete_expired``) and ``min_offset`` moves up.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

import numpy as np

from .segment import Segment, SegmentedFile

ENTRY: Final[struct.Struct] = struct.Struct(">qiq")
ENTRY_SIZE: Final[int] = ENTRY.size  # 20
ENTRY_DTYPE: Final[np.dtype] = np.dtype([("offset", ">i8"), ("size", ">i4"), ("tags", ">i8")])
HOLE_SIZE: Final[int] = 0x7FFFFFFF

assert ENTRY_DTYPE.itemsize == ENTRY_SIZE


# Lists or numpy arrays of ints.
Ints = Sequence[int] | np.ndarray


def pack_entries(offsets: Ints, sizes: Ints, tags: Ints) -> bytes:
    """Consecutive entries as bytes (one numpy pass; used per dispatched batch)."""
    arr = np.empty(len(offsets), dtype=ENTRY_DTYPE)
    arr["offset"] = offsets
    arr["size"] = sizes
    arr["tags"] = tags
    return arr.tobytes()


def queue_dir(root: Path, topic: str, queue_id: int) -> Path:
    return root / "consumequeue" / topic / str(queue_id)


class ConsumeQueue:
    """The entries of one topic/queue, appended in queue-offset order."""

    def __init__(
        self,
        root: Path,
        topic: str,
        queue_id: int,
        entries_per_file: int,
        on_create: Callable[[], None] | None = None,
    ) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.file = SegmentedFile(
            queue_dir(root, topic, queue_id), entries_per_file * ENTRY_SIZE, on_create
        )
        self.min_logic_offset = 0  # bytes; raised when old commit-log segments are deleted
        self._find_end()

    def _find_end(self) -> None:
        segs = self.file.segments
        while segs:
            last = segs[-1]
            arr = np.frombuffer(last.mm, dtype=ENTRY_DTYPE)
            used = np.flatnonzero((arr["size"] != 0) | (arr["offset"] != 0))
            del arr
            if used.size:
                last.wrote = int(used[-1] + 1) * ENTRY_SIZE
                break
            if len(segs) == 1:
                last.wrote = 0
                break
            self.file.segments.pop().destroy()
        for seg in segs[:-1]:
            seg.wrote = seg.size

    @property
    def gaps(self) -> list[int]:
        return self.file.gaps

    @property
    def max_offset(self) -> int:
        """One past the last entry (the next queue offset to be written)."""
        return self.file.max_offset // ENTRY_SIZE

    @property
    def min_offset(self) -> int:
        return max(self.file.min_offset, self.min_logic_offset) // ENTRY_SIZE

    def _segment_for_write(self, byte_offset: int) -> Segment:
        seg = self.file.find(byte_offset)
        if seg is None:
            start = byte_offset - byte_offset % self.file.segment_size
            last = self.file.last()
            if last is not None:
                last.wrote = last.size
            seg = self.file.create(start)
        return seg

    def put(self, queue_offset: int, entries: bytes) -> None:
        """Write entries starting at ``queue_offset``; holes are filled, overlaps skipped."""
        end = self.max_offset
        if queue_offset < end:  # already dispatched (re-dispatch after recovery)
            skip = end - queue_offset
            entries = entries[skip * ENTRY_SIZE :]
            queue_offset = end
        elif queue_offset > end:
            if end == 0 and not self.file.segments:
                self.min_logic_offset = queue_offset * ENTRY_SIZE
            else:
                next_phys = ENTRY.unpack_from(entries)[0] if entries else 0
                hole = ENTRY.pack(next_phys, HOLE_SIZE, 0) * (queue_offset - end)
                self._write(end * ENTRY_SIZE, hole)
        self._write(queue_offset * ENTRY_SIZE, entries)

    def _write(self, byte_offset: int, data: bytes) -> None:
        pos = 0
        while pos < len(data):
            seg = self._segment_for_write(byte_offset)
            local = byte_offset - seg.start
            n = min(len(data) - pos, seg.size - local)
            seg.write(local, data[pos : pos + n])
            seg.wrote = max(seg.wrote, local + n)
            pos += n
            byte_offset += n

    def read(self, queue_offset: int, max_entries: int) -> bytes:
        """Raw entries from ``queue_offset`` (up to the end of one segment)."""
        byte_offset = queue_offset * ENTRY_SIZE
        seg = self.file.find(byte_offset)
        if seg is None:
            return b""
        local = byte_offset - seg.start
        n = min(max_entries * ENTRY_SIZE, seg.wrote - local)
        return seg.mm[local : local + n] if n > 0 else b""

    def entry(self, queue_offset: int) -> tuple[int, int, int] | None:
        raw = self.read(queue_offset, 1)
        return ENTRY.unpack(raw) if raw else None

    def entries_from_commitlog(self, commitlog_offset: int) -> list[tuple[int, int]]:
        """(queue offset, commit-log offset) of the entries at or past ``commitlog_offset``."""
        first = self.max_offset - self.truncate_preview(commitlog_offset)
        raw = b"".join(self.read(q, self.max_offset - q) for q in range(first, self.max_offset))
        arr = np.frombuffer(raw, dtype=ENTRY_DTYPE)
        return list(zip(range(first, first + len(arr)), arr["offset"].tolist(), strict=True))

    def truncate_preview(self, commitlog_offset: int) -> int:
        """How many entries ``truncate_from_commitlog(commitlog_offset)`` would drop."""
        lo, hi = self.file.min_offset // ENTRY_SIZE, self.max_offset
        while lo < hi:
            mid = (lo + hi) // 2
            e = self.entry(mid)
            if e is not None and e[1] != 0 and e[0] >= commitlog_offset:
                hi = mid
            else:
                lo = mid + 1
        return self.max_offset - lo

    def truncate_from_commitlog(self, commitlog_offset: int) -> int:
        """Drop entries whose record starts at or past ``commitlog_offset``; returns count."""
        end = self.max_offset
        dropped = self.truncate_preview(commitlog_offset)
        if dropped:
            lo = end - dropped
            self.file.truncate(lo * ENTRY_SIZE)
            if not self.file.segments:
                self.min_logic_offset = lo * ENTRY_SIZE
        return dropped

    def offset_by_time(self, timestamp_ms: int, store_time_of: Callable[[int], int | None]) -> int:
        """First queue offset whose record was stored at or after ``timestamp_ms``."""
        lo, hi = self.min_offset, self.max_offset
        while lo < hi:
            mid = (lo + hi) // 2
            e = self.entry(mid)
            ts = store_time_of(e[0]) if e is not None and e[1] != HOLE_SIZE else None
            if ts is None or ts < timestamp_ms:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def delete_expired(self, commitlog_min_offset: int) -> int:
        """Drop segments whose entries all point below the commit log's first byte."""
        dropped = 0
        while len(self.file.segments) > 1:
            first = self.file.segments[0]
            (offset, size, _tags) = ENTRY.unpack_from(first.mm, first.size - ENTRY_SIZE)
            if offset + (1 if size == HOLE_SIZE else size) > commitlog_min_offset:
                break
            self.file.drop_first()
            dropped += 1
        self.correct_min_offset(commitlog_min_offset)
        return dropped

    def correct_min_offset(self, commitlog_min_offset: int) -> None:
        """Move min_offset past entries whose record is below the commit log's start."""
        lo, hi = self.file.min_offset // ENTRY_SIZE, self.max_offset
        while lo < hi:
            mid = (lo + hi) // 2
            e = self.entry(mid)
            if e is not None and e[0] < commitlog_min_offset:
                lo = mid + 1
            else:
                hi = mid
        self.min_logic_offset = max(self.min_logic_offset, lo * ENTRY_SIZE)

    def destroy(self) -> None:
        self.file.destroy_all()

    def close(self) -> None:
        self.file.close()
