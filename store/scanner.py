"""Walking the commit log in bulk, for recovery and rebuilds.

``scan`` yields, from a start offset, either a ``GoodRun`` (a run of consecutive
records that all passed every check, with the columns dispatch needs) or, for
anything else, one ``(verdict, offset, size, parsed)`` tuple decided by
``codec.parse_record``, the careful one-record path. Most of a healthy log is
good runs: record boundaries are found with one small unpack per record, and
framing, position and CRC are checked for up to ``CHUNK_RECORDS`` records at a
time with numpy and C-level ``map`` calls. The first record that fails a bulk check
ends the run and is handed to the careful path, which says what it is (torn,
damaged, blank, quarantined). Both paths apply the same rules (codec.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

import numpy as np
from crc32c import crc32c

from . import codec
from .codec import Check
from .commitlog import CommitLog

CHUNK_RECORDS = 16384

_HEADER_DTYPE = np.dtype(
    [
        ("size", ">i4"),
        ("magic", ">u4"),
        ("crc", ">u4"),
        ("queue_offset", ">i8"),
        ("commitlog_offset", ">i8"),
        ("store_timestamp", ">i8"),
        ("store_host", "V8"),
        ("queue_id", ">i4"),
        ("rest", "V36"),
        ("body_length", ">i4"),
    ]
)
assert _HEADER_DTYPE.itemsize == codec.HEADER_SIZE
_ARANGE = np.arange(codec.HEADER_SIZE)
_topics: dict[bytes, str] = {}


class GoodRun(NamedTuple):
    """Consecutive valid records: one entry per record in each column."""

    offsets: list[int]
    sizes: list[int]
    queue_ids: list[int]
    queue_offsets: list[int]
    store_timestamps: list[int]
    topics: list[str]
    properties: list[bytes]


Item = GoodRun | tuple[Check, int, int, codec.ParsedRecord | None]


def scan(commitlog: CommitLog, start: int, *, check_crc: bool = True) -> Iterator[Item]:
    """Good runs and single verdicts from ``start`` until END or BAD_FRAMING.

    Past the last segment, or at a segment missing from the files, the last item is
    ``(END, offset, 0, None)``."""
    pos = start
    while True:
        seg = commitlog.file.find(pos)
        if seg is None:
            yield Check.END, pos, 0, None
            return
        buf, base, limit, local = seg.mv, seg.start, seg.size, pos - seg.start
        while True:
            starts, walked_to = _walk(buf, local, limit)
            good = _check_run(buf, base, starts, walked_to, check_crc) if starts else None
            if good is not None and good.offsets:
                yield good
                local = good.offsets[-1] + good.sizes[-1] - base
            if (
                good is not None
                and len(good.offsets) == len(starts)
                and len(starts) == CHUNK_RECORDS
            ):
                continue  # a full chunk passed: walk on
            verdict, size, parsed = codec.parse_record(buf, local, limit, base, check_crc)
            yield verdict, base + local, size, parsed
            if verdict in (Check.END, Check.BAD_FRAMING):
                return
            if verdict is Check.BLANK or local + size == limit:
                break  # the segment's end (a blank, or a span set aside up to it)
            local += size
        pos = seg.end


def _walk(buf: memoryview, local: int, limit: int) -> tuple[list[int], int]:
    """Starts of up to CHUNK_RECORDS plausible records (right magic, size fits)."""
    unpack = codec.PREFIX.unpack_from
    magic_ok, smallest = codec.MAGIC, codec.FIXED_SIZE + 1
    starts: list[int] = []
    while len(starts) < CHUNK_RECORDS and local + smallest <= limit:
        size, magic = unpack(buf, local)
        if magic != magic_ok or size < smallest or local + size > limit:
            break
        starts.append(local)
        local += size
    return starts, local


def _check_run(buf: memoryview, base: int, starts: list[int], end: int, check_crc: bool) -> GoodRun:
    """The longest prefix of ``starts`` whose records pass every check, with its columns."""
    first = starts[0]
    data = bytes(buf[first:end])
    rel = np.asarray(starts, dtype=np.int64) - first
    ends = np.empty_like(rel)
    ends[:-1] = rel[1:]
    ends[-1] = end - first
    arr = np.frombuffer(data, np.uint8)
    head = arr[rel[:, None] + _ARANGE].view(_HEADER_DTYPE).ravel()
    body = head["body_length"].astype(np.int64)
    tpos = rel + codec.HEADER_SIZE + body
    ok = (body >= 0) & (tpos + 3 <= ends)
    tpos = np.where(ok, tpos, rel)  # keep gathers inside the data
    tlen = arr[tpos].astype(np.int64)
    ppos = tpos + 1 + tlen
    ok &= ppos + 2 <= ends
    ppos = np.where(ok, ppos, rel)
    plen = (arr[ppos].astype(np.int64) << 8) | arr[ppos + 1]
    ok &= ppos + 2 + plen == ends
    if check_crc:
        ok &= head["commitlog_offset"] == rel + first + base
        mv = memoryview(data)
        body_at = (rel + codec.CRC_START).tolist()
        ends_list = ends.tolist()
        producer = map(crc32c, map(mv.__getitem__, map(slice, body_at, ends_list)))
        blocks = map(mv.__getitem__, map(slice, (rel + codec.STORE_BLOCK_OFFSET).tolist(), body_at))
        crcs = np.fromiter(map(crc32c, blocks, producer), np.uint32, len(starts))
        ok &= crcs == head["crc"]
    k = len(starts) if ok.all() else int(np.argmin(ok))
    topic_spans = map(slice, (tpos[:k] + 1).tolist(), ppos[:k].tolist())
    raw_topics = list(map(data.__getitem__, topic_spans))
    topics = [_topics.get(t) or _topics.setdefault(t, t.decode("ascii")) for t in raw_topics]
    props = list(map(data.__getitem__, map(slice, (ppos[:k] + 2).tolist(), ends[:k].tolist())))
    return GoodRun(
        offsets=(rel[:k] + first + base).tolist(),
        sizes=(ends[:k] - rel[:k]).tolist(),
        queue_ids=head["queue_id"][:k].tolist(),
        queue_offsets=head["queue_offset"][:k].tolist(),
        store_timestamps=head["store_timestamp"][:k].tolist(),
        topics=topics,
        properties=props,
    )
