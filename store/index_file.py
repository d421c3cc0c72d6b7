"""Key index: find messages by ``topic#key`` or by unique id (RocketMQ ``IndexFile``).

Files: ``index/<20-digit creation time in ms>``, each
``HEADER_SIZE + index_hash_slots * 4 + index_entries_max * 20`` bytes, sparse.
Big-endian. Layout::

    +--------------+--------------------------+-------------------------------+
    | header 40 B  | slot table: slots x 4 B  | entries: entries_max x 20 B   |
    +--------------+--------------------------+-------------------------------+

    header  offset size type   field
            0      8    int64  begin_timestamp   store time of the first entry (ms)
            8      8    int64  end_timestamp     store time of the last entry (ms)
            16     8    int64  begin_phy_offset  commit-log offset of the first entry
            24     8    int64  end_phy_offset    commit-log offset of the last entry
            32     4    int32  hash_slot_count   slots in use
            36     4    int32  index_count       next free entry number (starts at 1)

    slot    int32  number of the newest entry whose hash falls in this slot (0: none)

    entry   offset size type   field
            0      4    int32  key_hash          CRC-32C of "topic#key" & 0x7fffffff
            4      8    int64  phy_offset        commit-log offset of the message
            12     4    int32  time_diff         seconds since begin_timestamp
            16     4    int32  prev_index        older entry of the same slot (0: end)

A key's entries form a chain from its slot through ``prev_index``. Entry 0 is never
used. No CRC: an entry only nominates a commit-log record, and a query reads that
record and keeps it only if its topic and key really match, so a stale or torn
entry costs a wasted read, never a wrong answer. Entries past the commit log's
valid end (after a crash) are rebuilt from the commit log; duplicates that
creates are removed by the query. ``end_phy_offset`` tells recovery how far
the index got.
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

import numpy as np
from crc32c import crc32c

from .segment import _preallocate

HEADER: Final[struct.Struct] = struct.Struct(">qqqqii")
HEADER_SIZE: Final[int] = HEADER.size  # 40
SLOT_SIZE: Final[int] = 4
ENTRY_DTYPE: Final[np.dtype] = np.dtype(
    [("hash", ">i4"), ("phy", ">i8"), ("time_diff", ">i4"), ("prev", ">i4")]
)
ENTRY_SIZE: Final[int] = ENTRY_DTYPE.itemsize  # 20
ENTRY: Final[struct.Struct] = struct.Struct(">iqii")
assert ENTRY.size == ENTRY_SIZE


def key_hash(key: str) -> int:
    """Hash of an index key ``topic#key``."""
    return crc32c(key.encode("utf-8")) & 0x7FFFFFFF


def topic_seed(topic: str) -> int:
    """CRC-32C state after ``topic#``: ``key_hash(f"{t}#{k}") == crc32c(k, seed) & mask``."""
    return crc32c(f"{topic}#".encode())


HASH_MASK: Final[int] = 0x7FFFFFFF


def index_file_size(slots: int, entries_max: int) -> int:
    return HEADER_SIZE + slots * SLOT_SIZE + entries_max * ENTRY_SIZE


def _touch(mm: mmap.mmap, length: int, chunk: int = 1 << 20) -> None:
    zeros = bytes(chunk)
    for pos in range(0, length, chunk):
        n = min(chunk, length - pos)
        mm[pos : pos + n] = zeros[:n]


class IndexFile:
    """One index file: a hash table of chains, filled until ``entries_max``."""

    # The header's fields (``HEADER``).
    begin_ts: int
    end_ts: int
    begin_phy: int
    end_phy: int
    slot_count: int
    count: int

    def __init__(self, path: Path, slots: int, entries_max: int, now_ms: int = 0) -> None:
        self.path = path
        self.slots = slots
        self.entries_max = entries_max
        size = index_file_size(slots, entries_max)
        existed = path.exists()
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        fresh = os.fstat(self._fd).st_size != size
        if fresh:
            os.ftruncate(self._fd, size)
            _preallocate(self._fd, size)
        self.mm = mmap.mmap(self._fd, size)
        if fresh:  # slots are hit at random: fault them in now, in bulk, not one by one later
            _touch(self.mm, HEADER_SIZE + slots * SLOT_SIZE)
        self._slot_arr = np.frombuffer(self.mm, dtype=">i4", count=slots, offset=HEADER_SIZE)
        self._entries = np.frombuffer(
            self.mm, dtype=ENTRY_DTYPE, count=entries_max, offset=HEADER_SIZE + slots * SLOT_SIZE
        )
        (self.begin_ts, self.end_ts, self.begin_phy, self.end_phy, self.slot_count, self.count) = (
            HEADER.unpack_from(self.mm, 0)
        )
        if not existed or self.count == 0:
            self.begin_ts, self.end_ts, self.begin_phy, self.end_phy = now_ms, now_ms, -1, -1
            self.count = 1
            self._write_header()

    def _write_header(self) -> None:
        HEADER.pack_into(
            self.mm,
            0,
            self.begin_ts,
            self.end_ts,
            self.begin_phy,
            self.end_phy,
            self.slot_count,
            self.count,
        )

    @property
    def full(self) -> bool:
        return self.count >= self.entries_max

    @property
    def empty(self) -> bool:
        return self.count <= 1

    def put(self, hashes: np.ndarray, phys: np.ndarray, times_ms: np.ndarray) -> int:
        """Add entries (arrays of equal length); returns how many fitted."""
        n = min(len(hashes), self.entries_max - self.count)
        if n <= 0:
            return 0
        hashes, phys, times_ms = hashes[:n], phys[:n], times_ms[:n]
        if self.empty:
            self.begin_ts, self.begin_phy = int(times_ms[0]), int(phys[0])
        ids = np.arange(self.count, self.count + n, dtype=np.int64)
        slots = hashes % self.slots
        order = np.argsort(slots, kind="stable")
        s_sorted = slots[order]
        same = np.zeros(n, dtype=bool)
        same[1:] = s_sorted[1:] == s_sorted[:-1]
        prev_sorted = self._slot_arr[s_sorted].astype(np.int64)
        prev_sorted[1:][same[1:]] = ids[order][:-1][same[1:]]
        prev = np.empty(n, dtype=np.int64)
        prev[order] = prev_sorted
        last_of_group = np.ones(n, dtype=bool)
        last_of_group[:-1] = ~same[1:]
        new_slots = s_sorted[last_of_group]
        self.slot_count += int(np.count_nonzero(self._slot_arr[new_slots] == 0))
        self._slot_arr[new_slots] = ids[order][last_of_group]
        block = self._entries[self.count : self.count + n]
        block["hash"] = hashes
        block["phy"] = phys
        block["time_diff"] = (times_ms - self.begin_ts) // 1000
        block["prev"] = prev
        self.count += n
        self.end_ts, self.end_phy = int(times_ms[-1]), int(phys[-1])
        self._write_header()
        return n

    def lookup(self, hash_: int, begin_ms: int, end_ms: int, max_num: int) -> list[int]:
        """Commit-log offsets whose entry has ``hash_`` and a time in [begin_ms, end_ms]."""
        out: list[int] = []
        if self.empty or self.end_ts < begin_ms - 1000 or self.begin_ts > end_ms + 1000:
            return out
        idx = int(self._slot_arr[hash_ % self.slots])
        seen = 0
        while 0 < idx < self.count and len(out) < max_num and seen < self.entries_max:
            h, phy, diff, prev = ENTRY.unpack_from(
                self.mm, HEADER_SIZE + self.slots * SLOT_SIZE + idx * ENTRY_SIZE
            )
            t = self.begin_ts + diff * 1000
            if h == hash_ and begin_ms - 1000 <= t <= end_ms + 1000:
                out.append(phy)
            if prev >= idx:  # a chain only points backwards; anything else is damage
                break
            idx = prev
            seen += 1
        return out

    def flush(self) -> None:
        self.mm.flush()

    def close(self) -> None:
        if self.mm.closed:
            return
        del self._slot_arr, self._entries
        self.mm.close()
        os.close(self._fd)

    def destroy(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)


class IndexService:
    """The index files of a store, newest last (RocketMQ ``IndexService``); ``on_create``
    is called after a new file was allocated."""

    def __init__(
        self,
        directory: Path,
        slots: int,
        entries_max: int,
        on_create: Callable[[], None] | None = None,
    ) -> None:
        self.directory = directory
        self.slots = slots
        self.entries_max = entries_max
        self.on_create = on_create
        directory.mkdir(parents=True, exist_ok=True)
        names = sorted(p.name for p in directory.iterdir() if p.name.isdigit())
        self.files = [IndexFile(directory / n, slots, entries_max) for n in names]

    @property
    def begin_phy_offset(self) -> int:
        """Commit-log offset of the oldest indexed message (-1: nothing indexed)."""
        return next((f.begin_phy for f in self.files if not f.empty), -1)

    @property
    def end_phy_offset(self) -> int:
        """Commit-log offset of the newest indexed message (-1: nothing indexed)."""
        return next((f.end_phy for f in reversed(self.files) if not f.empty), -1)

    def _writable(self, now_ms: int) -> IndexFile:
        if not self.files or self.files[-1].full:
            name = max(now_ms, int(self.files[-1].path.name) + 1) if self.files else now_ms
            self.files.append(
                IndexFile(self.directory / f"{name:020d}", self.slots, self.entries_max, now_ms)
            )
            if self.on_create is not None:
                self.on_create()
        return self.files[-1]

    def put(
        self,
        hashes: Sequence[int] | np.ndarray,
        phys: Sequence[int] | np.ndarray,
        times_ms: Sequence[int] | np.ndarray,
    ) -> None:
        """Index entries: key hash (``key_hash``, masked here) -> commit-log offset, store time."""
        if not len(hashes):
            return
        hash_arr = np.asarray(hashes, dtype=np.int64) & HASH_MASK
        phy_arr = np.asarray(phys, dtype=np.int64)
        time_arr = np.asarray(times_ms, dtype=np.int64)
        done = 0
        while done < len(hash_arr):
            f = self._writable(int(time_arr[done]))
            done += f.put(hash_arr[done:], phy_arr[done:], time_arr[done:])

    def lookup(self, key: str, begin_ms: int, end_ms: int, max_num: int) -> list[int]:
        """Commit-log offsets for ``key`` (``topic#key``), newest first, de-duplicated."""
        h = key_hash(key)
        out: list[int] = []
        seen: set[int] = set()
        for f in reversed(self.files):
            for phy in f.lookup(h, begin_ms, end_ms, max_num * 2):
                if phy not in seen:
                    seen.add(phy)
                    out.append(phy)
        return out

    def delete_before(self, commitlog_min_offset: int) -> int:
        """Drop files whose newest entry lies below the commit log's first byte."""
        dropped = 0
        while len(self.files) > 1 and self.files[0].end_phy < commitlog_min_offset:
            self.files.pop(0).destroy()
            dropped += 1
        return dropped

    def destroy_all(self) -> None:
        for f in self.files:
            f.destroy()
        self.files.clear()

    def flush(self) -> None:
        for f in self.files[-2:]:
            f.flush()

    def close(self) -> None:
        for f in self.files:
            f.close()
