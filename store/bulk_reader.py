"""Reading a long range of a consume queue in bulk: the pages columnar readers decode.

``reader.py`` answers a consumer's pull (tens of records, RocketMQ's per-pull caps,
tag filters). Spark and Ray Data read whole offset ranges instead, thousands of
records a call, and ``read_page`` does that without Python work per record:

1. one slice of consume-queue entries (up to the end of one consume-queue segment;
   a first window of ``FIRST_WINDOW_ENTRIES``, then as many as the byte cap seems to
   need) becomes a numpy view of 20-byte entries (``consume_queue.ENTRY_DTYPE``);
2. holes and entries whose record retention already removed are masked out, and
   the byte cap is a cumulative sum over the entry sizes;
3. the records are cut into runs that are back to back in one commit-log segment
   (normally a single run) and each run is copied out of the mapping in one slice;
4. every record is checked as ``reader.py`` checks it: size and magic from a numpy
   gather of the record prefixes, and the CRC: one ``crc32c`` call a record over a
   slice of the page (the one step still made per record, about 0.2 us for 1 KiB),
   the 32-byte store block folded in with lookup tables (``record_crcs``).

A record that fails its check is left out of ``starts`` and counted (``damaged``),
and the page goes on past it, as ``reader.py`` does; the caller decodes the records
at ``starts`` (``rayq.actors.server.columnar``), never walking the buffer by sizes.
"""

from __future__ import annotations

import logging
from itertools import pairwise
from typing import Final, NamedTuple

import numpy as np
from crc32c import crc32c
from numpy.lib.stride_tricks import sliding_window_view

from . import codec
from .commitlog import CommitLog
from .consume_queue import ENTRY_DTYPE, HOLE_SIZE, ConsumeQueue
from .crc_fold import fold_store_blocks
from .message import GetStatus
from .reader import offset_status

logger = logging.getLogger(__name__)

PREFIX_DTYPE: Final[np.dtype] = np.dtype(
    [
        ("size", ">i4"),  # total_size
        ("magic", ">u4"),  # magic
        ("crc", ">u4"),  # crc
    ]
)
assert PREFIX_DTYPE.itemsize == codec.PREFIX_CRC.size
FIRST_WINDOW_ENTRIES: Final[int] = 1024  # entries read first; then as many as seem to fit
# In place (file_view.py), a page ends with its first run of records when that run holds
# at least 1/IN_PLACE_SHARE of its byte cap (a writer's batches interleaved with other
# queues' leave runs of megabytes): no copy, a few more pages.
IN_PLACE_SHARE: Final[int] = 4


class RecordPage(NamedTuple):
    """Records copied out of the commit log, and where the good ones start."""

    status: GetStatus
    next_offset: int  # the queue offset to continue from
    min_offset: int  # the queue's first offset
    buffer: bytes | memoryview = b""  # runs of records, back to back (in place: a view)
    starts: np.ndarray = np.empty(0, dtype=np.int64)  # offsets of the checked records in buffer
    damaged: int = 0  # records left out because they failed their check
    full: bool = False  # stopped at ``max_bytes`` (not at the end of the entries read)
    # where ``buffer`` was cut from: (commit-log offset, length) of each run, in order
    runs: np.ndarray = np.empty((0, 2), dtype=np.int64)


def read_page(
    commitlog: CommitLog,
    cq: ConsumeQueue,
    queue_offset: int,
    max_count: int,
    max_bytes: int,
    in_place: bool = False,
    check_crc: bool = True,
) -> RecordPage:
    """Records of ``cq`` from ``queue_offset``: at most ``max_count`` entries and about
    ``max_bytes`` of records (the first record always fits). ``in_place``: records that
    lie in one run of one segment are not copied; the page's buffer is a view of the
    segment's mapping (for a caller that owns its mappings and drops the page before it
    unmaps one: store/file_view.py), and a page ends with a long first run
    (``IN_PLACE_SHARE``). ``check_crc=False``: records are checked for size and magic
    only (for a caller that reads the bytes again from the files and checks their CRCs
    there: the JVM's body reads, actors/page_reader.py)."""
    lo, hi = cq.min_offset, cq.max_offset
    status, next_offset = offset_status(queue_offset, lo, hi)
    if status is not None:
        return RecordPage(status, next_offset, lo)
    entries = _window(cq, queue_offset, max_count, max_bytes)
    commitlog_offsets = entries["offset"].astype(np.int64)
    sizes = entries["size"].astype(np.int64)
    live = (sizes != HOLE_SIZE) & (sizes > 0)
    wanted = live & (commitlog_offsets >= commitlog.min_offset)
    scanned = _scan_length(np.where(wanted, sizes, 0), wanted, max_bytes)
    picked = np.flatnonzero(wanted[:scanned])
    next_offset = queue_offset + scanned
    full = scanned < len(entries)
    if not picked.size:
        removed = bool(live[:scanned].any())
        status = GetStatus.MESSAGE_WAS_REMOVING if removed else GetStatus.OFFSET_FOUND_NULL
        return RecordPage(status, next_offset, lo, full=full)
    if in_place:
        last = _first_run_end(
            commitlog_offsets[picked], sizes[picked], commitlog.segment_size, max_bytes
        )
        if last < picked.size:  # the page ends with its first run: read in place
            picked = picked[:last]
            next_offset, full = queue_offset + int(picked[-1]) + 1, True
    buffer, starts, runs = _copy_runs(commitlog, commitlog_offsets[picked], sizes[picked], in_place)
    good = _checked(buffer, starts, sizes[picked], check_crc)
    damaged = int(good.size - np.count_nonzero(good))
    if damaged:
        first = int(commitlog_offsets[picked][~good][0])
        logger.error(
            "%d record(s) of %s/%d from commit-log offset %d are unreadable or fail their "
            "CRC; skipped",
            damaged,
            cq.topic,
            cq.queue_id,
            first,
        )
    starts = starts[good]
    status = GetStatus.FOUND if starts.size else GetStatus.OFFSET_FOUND_NULL
    return RecordPage(status, next_offset, lo, buffer, starts, damaged, full, runs)


def _window(cq: ConsumeQueue, queue_offset: int, max_count: int, max_bytes: int) -> np.ndarray:
    """Entries from ``queue_offset``: a first window, then about as many as ``max_bytes``
    of records of the sizes seen so far need (at most ``max_count``)."""
    count = min(max_count, FIRST_WINDOW_ENTRIES)
    entries = np.frombuffer(cq.read(queue_offset, count), dtype=ENTRY_DTYPE)
    if len(entries) < count or count == max_count:
        return entries
    sizes = entries["size"].astype(np.int64)
    sizes = sizes[(sizes != HOLE_SIZE) & (sizes > 0)]
    covered = int(sizes.sum())
    if covered >= max_bytes:
        return entries
    mean = covered / max(sizes.size, 1) or codec.FIXED_SIZE
    more = int((max_bytes - covered) / mean * 1.25) + 16
    return np.frombuffer(cq.read(queue_offset, min(max_count, count + more)), dtype=ENTRY_DTYPE)


def _scan_length(sizes: np.ndarray, wanted: np.ndarray, max_bytes: int) -> int:
    """How many entries to take: as many as fit ``max_bytes``, at least the first wanted one."""
    if not sizes.size:
        return 0
    total = np.cumsum(sizes)
    scanned = int(np.searchsorted(total, max_bytes, side="right"))
    first = int(np.argmax(wanted)) if wanted.any() else sizes.size - 1
    return max(scanned, first + 1)


def _run_breaks(offsets: np.ndarray, sizes: np.ndarray, segment_size: int) -> np.ndarray:
    """Indexes ``i`` where record ``i + 1`` does not follow record ``i`` back to back in
    the same segment (where one run of records ends)."""
    segment = offsets // segment_size
    return np.flatnonzero(
        (offsets[1:] != offsets[:-1] + sizes[:-1]) | (segment[1:] != segment[:-1])
    )


def _first_run_end(
    offsets: np.ndarray, sizes: np.ndarray, segment_size: int, max_bytes: int
) -> int:
    """How many records the first run (back to back in one segment) holds, if it holds
    at least a quarter of ``max_bytes`` (a page may end there and be read in place);
    else all of them (the page is copied, runs joined)."""
    breaks = _run_breaks(offsets, sizes, segment_size)
    if not breaks.size:
        return len(offsets)
    first = int(breaks[0]) + 1
    return first if int(sizes[:first].sum()) >= max_bytes // IN_PLACE_SHARE else len(offsets)


def _copy_runs(
    commitlog: CommitLog, commitlog_offsets: np.ndarray, sizes: np.ndarray, in_place: bool = False
) -> tuple[bytes | memoryview, np.ndarray, np.ndarray]:
    """The records as one buffer, one slice per run of back-to-back records in a segment
    (``in_place`` and one run: a view of the mapping, no copy), where each record
    starts in it (-1: not on disk), and the runs the buffer joins ((offset, length) rows)."""
    ends = commitlog_offsets + sizes
    cuts = _run_breaks(commitlog_offsets, sizes, commitlog.segment_size)
    bounds = [0, *(cuts + 1).tolist(), len(sizes)]
    parts: list[bytes | memoryview] = []
    runs: list[tuple[int, int]] = []
    starts = np.full(len(sizes), -1, dtype=np.int64)
    size = 0
    for i, j in pairwise(bounds):
        first, end = int(commitlog_offsets[i]), int(ends[j - 1])
        seg = commitlog.file.find(first)
        if seg is None or end - seg.start > seg.wrote:
            continue
        view = memoryview(seg.mm) if in_place and len(bounds) == 2 else seg.mm
        parts.append(view[first - seg.start : end - seg.start])
        runs.append((first, end - first))
        starts[i:j] = commitlog_offsets[i:j] - first + size
        size += end - first
    buffer = parts[0] if len(parts) == 1 else b"".join(parts)
    return buffer, starts, np.array(runs, dtype=np.int64).reshape(-1, 2)


def rows(raw: np.ndarray, starts: np.ndarray, width: int) -> np.ndarray:
    """``raw[s : s + width]`` for each ``s`` in ``starts``, as the rows of one array (one
    row copy each, through a sliding-window view); bytes past the end of ``raw`` are 0."""
    if raw.size < width:
        raw = np.concatenate([raw, np.zeros(width - raw.size, dtype=np.uint8)])
    last = raw.size - width
    out: np.ndarray = sliding_window_view(raw, width)[np.minimum(np.maximum(starts, 0), last)]
    tail = np.flatnonzero(starts > last)
    if tail.size:  # rows that start in the last ``width`` bytes: padded with zeros
        at = starts[tail, None] + np.arange(width)
        out[tail] = np.where(at < raw.size, raw[np.minimum(at, raw.size - 1)], 0)
    return out


def _checked(
    buffer: bytes | memoryview, starts: np.ndarray, sizes: np.ndarray, check_crc: bool = True
) -> np.ndarray:
    """Which records are whole and intact: size, magic and (``check_crc``) CRC (codec.py)."""
    ok = starts >= 0
    if not ok.all():
        starts, sizes = np.where(ok, starts, 0), np.where(ok, sizes, codec.FIXED_SIZE)
    raw = np.frombuffer(buffer, dtype=np.uint8)
    if not raw.size:
        return np.zeros(len(starts), dtype=bool)
    prefix = rows(raw, starts, PREFIX_DTYPE.itemsize).view(PREFIX_DTYPE).ravel()
    ok &= (prefix["size"] == sizes) & (prefix["magic"] == codec.MAGIC)
    if check_crc:
        ok &= prefix["crc"] == record_crcs(buffer, starts, sizes)
    return ok


def record_crcs(buffer: bytes | memoryview, starts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """The CRC each record at ``starts`` must carry (``codec.record_crc``): one ``crc32c``
    call a record over ``[44, size)``, the 32-byte store block folded in by numpy
    (crc_fold.py)."""
    view = memoryview(buffer)
    ends = (starts + sizes).tolist()
    body_at = (starts + codec.CRC_START).tolist()
    producer = map(crc32c, map(view.__getitem__, map(slice, body_at, ends)))
    crcs = np.fromiter(producer, dtype=np.uint32, count=len(ends))
    raw = np.frombuffer(buffer, dtype=np.uint8)
    return fold_store_blocks(
        crcs, rows(raw, starts + codec.STORE_BLOCK_OFFSET, codec.STORE_BLOCK_SIZE)
    )
