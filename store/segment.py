"""Fixed-size memory-mapped segment files and the ordered list of them.

A segmented file (commit log or one consume queue) is a directory of files, each
exactly ``segment_size`` bytes, named by the 20-digit zero-padded offset of their
first byte (``00000000000000000000``, ``00000000001073741824``, ...). Segment k
starts at ``k * segment_size``: the name of the segment holding any offset is
arithmetic, so another process (the flusher) can find it without asking.

New segments are preallocated (``posix_fallocate``), so a full disk shows up
when a segment is created, not in the middle of a write. Unwritten bytes read as
zero, which every format here treats as "nothing written yet". Writes go through
``pwrite`` (``Segment.write``), reads through the mapping. A segment found shorter than
``segment_size`` (cut by a crash or by hand) is extended with zeros on open and
the shortfall logged; recovery then decides what is valid.
"""

from __future__ import annotations

import logging
import mmap
import os
from collections.abc import Callable
from pathlib import Path

from .errors import StoreError

logger = logging.getLogger(__name__)

NAME_DIGITS = 20


def segment_name(start_offset: int) -> str:
    return f"{start_offset:0{NAME_DIGITS}d}"


def _preallocate(fd: int, size: int) -> None:
    """Allocate the file's blocks now: a write fault on a sparse mapping costs ~4 us/KiB."""
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as exc:  # e.g. a file system without fallocate: stay sparse
        logger.debug("posix_fallocate failed (%s); segment stays sparse", exc)


class Segment:
    """One mapped file; ``wrote`` is how many bytes of it hold data (set by its owner)."""

    __slots__ = ("_fd", "found_size", "mm", "mv", "path", "size", "start", "wrote")

    def __init__(self, path: Path, start: int, size: int) -> None:
        self.path = path
        self.start = start
        self.size = size
        self.wrote = 0
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        actual = self.found_size = os.fstat(self._fd).st_size
        if actual != size:
            if actual > size:
                os.close(self._fd)
                raise StoreError(
                    f"segment {path} is {actual} bytes, larger than the configured {size}; "
                    "was the store written with a bigger segment size?",
                    path=str(path),
                )
            if actual:
                logger.warning("segment %s is %d bytes, extending to %d", path, actual, size)
            os.ftruncate(self._fd, size)
            _preallocate(self._fd, size)
        self.mm = mmap.mmap(self._fd, size)
        self.mv = memoryview(self.mm)

    @property
    def end(self) -> int:
        return self.start + self.size

    @property
    def wrote_offset(self) -> int:
        return self.start + self.wrote

    def write(self, position: int, data: bytes | bytearray | memoryview) -> None:
        """Write at ``position`` through the page cache (``pwrite``), not the mapping.

        A first write through a shared mapping faults each page in (tens of
        microseconds a page on a VM); ``pwrite`` copies in bulk, and the mapping sees
        the same page cache. Out of disk space becomes an OSError, not a SIGBUS.
        """
        view = memoryview(data)
        while view:
            written = os.pwrite(self._fd, view, position)
            view = view[written:]
            position += written

    def flush(self) -> None:
        self.mm.flush()

    def zero_from(self, position: int, upto: int | None = None) -> None:
        """Overwrite [position, upto) with zeros (stale bytes past a truncation)."""
        end = self.size if upto is None else upto
        if end > position:
            self.mv[position:end] = bytes(end - position)

    def data_end(self, position: int, page: int = 4096) -> int:
        """One past the last non-zero byte before the first all-zero page after ``position``.

        Used to find how far stale or torn bytes reach past a truncation point.
        """
        zero = bytes(page)
        start = -(-position // page) * page
        end = self.size
        for p in range(start, self.size, page):
            if self.mv[p : p + page] == zero:
                end = p
                break
        # exact: the last non-zero byte before that page, but never before position
        tail_from = max(position, end - page)
        return max(position, tail_from + len(bytes(self.mv[tail_from:end]).rstrip(b"\0")))

    def close(self) -> None:
        if self.mm.closed:
            return
        self.mv.release()
        self.mm.close()
        os.close(self._fd)

    def destroy(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)


class SegmentedFile:
    """The ordered segments of one directory (RocketMQ ``MappedFileQueue``).

    ``on_create`` is called after ``create`` allocated a new segment (the store's disk
    gauge: see disk_gauge.py)."""

    def __init__(
        self, directory: Path, segment_size: int, on_create: Callable[[], None] | None = None
    ) -> None:
        self.directory = directory
        self.segment_size = segment_size
        self.on_create = on_create
        self.segments: list[Segment] = []
        self.gaps: list[int] = []  # start offsets of missing segments between present ones
        self.cut: list[int] = []  # start offsets of segments found shorter than segment_size
        self._load()

    def _load(self) -> None:
        if not self.directory.is_dir():
            return
        names = sorted(p.name for p in self.directory.iterdir() if p.name.isdigit())
        for name in names:
            start = int(name)
            if start % self.segment_size:
                raise StoreError(
                    f"segment {self.directory / name} does not start at a multiple of "
                    f"{self.segment_size}; the configured segment size does not match the store",
                    path=str(self.directory / name),
                )
            if self.segments and start != self.segments[-1].end:
                self.gaps.extend(range(self.segments[-1].end, start, self.segment_size))
            seg = Segment(self.directory / name, start, self.segment_size)
            if seg.found_size < self.segment_size:
                self.cut.append(start)
            self.segments.append(seg)

    @property
    def min_offset(self) -> int:
        return self.segments[0].start if self.segments else 0

    @property
    def max_offset(self) -> int:
        return self.segments[-1].wrote_offset if self.segments else 0

    def last(self) -> Segment | None:
        return self.segments[-1] if self.segments else None

    def create(self, start: int) -> Segment:
        """Append a new segment beginning at ``start`` (a multiple of segment_size)."""
        if start % self.segment_size:
            raise StoreError(f"segment start {start} is not a multiple of {self.segment_size}")
        self.directory.mkdir(parents=True, exist_ok=True)
        seg = Segment(self.directory / segment_name(start), start, self.segment_size)
        self.segments.append(seg)
        if self.on_create is not None:
            self.on_create()
        return seg

    def find(self, offset: int) -> Segment | None:
        """The segment holding ``offset``, or None if it is not on disk."""
        if not self.segments:
            return None
        first = self.segments[0].start
        if offset < first or offset >= self.segments[-1].end:
            return None
        index = (offset - first) // self.segment_size
        seg = self.segments[index] if index < len(self.segments) else None
        if seg is not None and seg.start <= offset < seg.end:
            return seg
        for seg in self.segments:  # only after gaps; rare
            if seg.start <= offset < seg.end:
                return seg
        return None

    def truncate(self, offset: int) -> None:
        """Keep data below ``offset``: later segments deleted, the tail zeroed."""
        while self.segments and self.segments[-1].start > offset:
            self.segments.pop().destroy()
        if not self.segments:
            return
        last = self.segments[-1]
        if offset < last.end:
            position = offset - last.start
            last.zero_from(position, max(last.wrote, position))
            last.wrote = position

    def drop_first(self) -> Segment:
        seg = self.segments.pop(0)
        seg.destroy()
        return seg

    def destroy_all(self) -> None:
        for seg in self.segments:
            seg.destroy()
        self.segments.clear()

    def flush(self) -> None:
        for seg in self.segments[-2:]:
            seg.flush()

    def close(self) -> None:
        for seg in self.segments:
            seg.close()
