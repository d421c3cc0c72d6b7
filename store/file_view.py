"""A read-only view of a store's files, for page readers in other processes.

A broker serves Spark's pages from its own process one at a time. ``StoreFiles`` lets
other processes on the same node (the page readers, actors/page_reader.py) read the same
pages from the same files, as ``DiskFlusher`` flushes them: every file is found by name
(commit-log segment k is ``commitlog/<k * segment_size:020d>``, consume-queue file k of
a queue ``consumequeue/<topic>/<queue id>/<k * entries_per_file * 20:020d>``; see
segment.py and consume_queue.py), mapped read-only, and read through the page cache the
writer's ``pwrite`` fills. Nothing here writes, locks or recovers.

What it may read is bounded by the caller: a page of queue offsets ``[start, end)``
where ``end`` is at most the queue's end the broker reported (its consume-queue entries
and their records were written before it said so). Records are checked as the broker
checks them (size, magic, CRC: bulk_reader.py), so a record being overwritten (a slave
cutting its log) is left out, never returned torn.

Records are not copied out of the mapping when a page's records lie back to back in one
segment (the usual case): the page's buffer is a view of it (``read_page(in_place=True)``).
A view keeps its mapping alive, so a mapping is never closed here, only dropped: it is
unmapped when the last page over it is gone.

Files deleted by retention: each read lists the directories it uses, so a deleted
segment's mapping is dropped (its disk space is freed once no page holds it) and
offsets below the first file left read as removed (``OFFSET_TOO_SMALL``), as the broker
answers. A file deleted and made anew under its name (a topic deleted and created
again) is told by its inode, and mapped afresh.
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path

from .bulk_reader import RecordPage, read_page
from .config import StoreConfig
from .consume_queue import ENTRY, ENTRY_SIZE, queue_dir
from .message import GetStatus
from .segment import NAME_DIGITS, segment_name


class _Mapped:
    """One mapped file, as bulk_reader.py reads a segment (``start``, ``wrote``, ``mm``)."""

    __slots__ = ("inode", "mm", "start", "wrote")

    def __init__(self, start: int, mm: mmap.mmap, inode: int) -> None:
        self.start, self.mm, self.wrote, self.inode = start, mm, len(mm), inode


class _Files:
    """The segment files of one directory, mapped read-only when first read."""

    def __init__(self, directory: Path, segment_size: int) -> None:
        self.directory, self.segment_size = directory, segment_size
        self.mapped: dict[int, _Mapped] = {}
        self.first: int | None = None  # start of the first file there, None: no file

    def refresh(self) -> None:
        """List the directory: the first file, and unmap the files deleted since (or
        deleted and made anew under the same name: a topic deleted and created again)."""
        try:
            with os.scandir(self.directory) as entries:
                starts = {
                    int(e.name): e.inode()
                    for e in entries
                    if len(e.name) == NAME_DIGITS and e.name.isdigit()
                }
        except FileNotFoundError:
            starts = {}
        self.first = min(starts) if starts else None
        for start in [s for s, m in self.mapped.items() if starts.get(s) != m.inode]:
            del self.mapped[start]  # unmapped when no page of it is left (refcounts)

    def find(self, offset: int) -> _Mapped | None:
        start = offset - offset % self.segment_size
        seg = self.mapped.get(start)
        if seg is None:
            try:
                fd = os.open(self.directory / segment_name(start), os.O_RDONLY)
            except FileNotFoundError:
                return None
            try:
                stat = os.fstat(fd)
                if stat.st_size == 0:
                    return None
                mm = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
                seg = self.mapped[start] = _Mapped(start, mm, stat.st_ino)
            finally:
                os.close(fd)
        return seg

    def close(self) -> None:
        self.mapped.clear()  # each unmapped when no page of it is left


class _CommitLogView:
    """What bulk_reader.py reads of a commit log."""

    def __init__(self, root: Path, segment_size: int) -> None:
        self.file = _Files(root / "commitlog", segment_size)
        self.segment_size = segment_size

    @property
    def min_offset(self) -> int:
        return self.file.first or 0


class _QueueView:
    """What bulk_reader.py reads of a consume queue: entries up to ``max_offset`` (the
    end the caller was told)."""

    def __init__(self, root: Path, topic: str, queue_id: int, entries_per_file: int) -> None:
        self.topic, self.queue_id = topic, queue_id
        self.file = _Files(queue_dir(root, topic, queue_id), entries_per_file * ENTRY_SIZE)
        self.min_offset = self.max_offset = 0

    def bound(self, end: int, commitlog_min: int) -> None:
        """Entries up to ``end``; from the first one whose record retention left (the first
        file's first entry, past those pointing below ``commitlog_min``: a binary search,
        as ConsumeQueue.correct_min_offset)."""
        self.max_offset = end
        lo, hi = (self.file.first or 0) // ENTRY_SIZE, end
        while commitlog_min and lo < hi:
            mid = (lo + hi) // 2
            at = mid * ENTRY_SIZE
            seg = self.file.find(at)
            if seg is None or ENTRY.unpack_from(seg.mm, at - seg.start)[0] >= commitlog_min:
                hi = mid
            else:
                lo = mid + 1
        self.min_offset = lo

    def read(self, queue_offset: int, max_entries: int) -> bytes:
        """Raw entries from ``queue_offset`` (up to the end of one file and ``max_offset``)."""
        at = queue_offset * ENTRY_SIZE
        seg = self.file.find(at)
        if seg is None:
            return b""
        local = at - seg.start
        n = min(max_entries, self.max_offset - queue_offset) * ENTRY_SIZE
        n = min(n, seg.wrote - local)
        return seg.mm[local : local + n] if n > 0 else b""


class StoreFiles:
    """Pages of a store's queues read from its files (see the module docstring)."""

    def __init__(self, root: str | os.PathLike[str], config: StoreConfig) -> None:
        self.root = Path(root)
        self.config = config
        self.commitlog = _CommitLogView(self.root, config.commitlog_segment_size_bytes)
        self.queues: dict[tuple[str, int], _QueueView] = {}

    @property
    def commitlog_dir(self) -> Path:
        """Where the commit-log segments are (absolute)."""
        return self.commitlog.file.directory.absolute()

    def read_page(
        self,
        topic: str,
        queue_id: int,
        queue_offset: int,
        max_count: int,
        max_bytes: int,
        end: int,
        check_crc: bool = True,
    ) -> RecordPage:
        """Records of ``topic``/``queue_id`` from ``queue_offset`` (before ``end``): at most
        ``max_count`` entries and about ``max_bytes`` of records, as
        ``MessageStore.read_page`` (``check_crc``: bulk_reader.read_page); a queue with no
        files answers NO_MATCHED_LOGIC_QUEUE."""
        cq = self.queues.get((topic, queue_id))
        if cq is None:
            cq = self.queues[(topic, queue_id)] = _QueueView(
                self.root, topic, queue_id, self.config.cq_entries_per_file
            )
        cq.file.refresh()
        if cq.file.first is None:
            return RecordPage(GetStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0)
        self.commitlog.file.refresh()
        cq.bound(end, self.commitlog.min_offset)
        return read_page(
            self.commitlog,  # type: ignore[arg-type]  # duck-typed: what read_page reads
            cq,  # type: ignore[arg-type]
            queue_offset,
            max_count,
            max_bytes,
            in_place=True,
            check_crc=check_crc,
        )

    def close(self) -> None:
        self.commitlog.file.close()
        for cq in self.queues.values():
            cq.file.close()
        self.queues.clear()
