"""Commit-log replication at the store level: the master's reads, the slave's appends.

A slave's commit log is a byte-for-byte copy of its master's (RocketMQ HAService):
the slave says how far it has the log (its ``written_offset``), the master answers
with the raw bytes from there (``read_chunk``), and the slave writes them at the
same offsets (``append_chunk``) -- records, blank records and the zeros after a
blank alike, so both logs roll to their next segment at the same offset and stay
identical. A chunk never crosses a segment's end and may end inside a record; the
slave dispatches (consume-queue entries, index keys) only the whole records its log
holds (``whole_records``), each checked (framing, CRC, position) as recovery does,
and a record cut by a chunk's end waits for the next chunk.

Nothing here knows about Ray or roles: the broker decides who reads and who appends
(actors/server/replication.py).
"""

from __future__ import annotations

from collections.abc import Iterator

from . import codec
from .codec import Check
from .commitlog import CommitLog
from .errors import CorruptRecordError, InvalidOffsetError
from .scanner import GoodRun, _check_run, _walk

Item = GoodRun | tuple[int, int, codec.ParsedRecord]


def read_chunk(commitlog: CommitLog, offset: int, max_bytes: int) -> bytes:
    """The commit-log bytes from ``offset`` up to ``max_bytes``, the end of what is
    written, or the end of the segment, whichever comes first (b"" at the end)."""
    end = commitlog.max_offset
    if not commitlog.min_offset <= offset <= end:
        raise InvalidOffsetError(
            f"replication from commit-log offset {offset}: this log holds "
            f"[{commitlog.min_offset}, {end}); a slave that far behind (or ahead) must be "
            "rebuilt from a copy of the master's store",
            offset=offset,
            min_offset=commitlog.min_offset,
            max_offset=end,
        )
    if offset == end:
        return b""
    seg = commitlog.file.find(offset)
    if seg is None:
        raise InvalidOffsetError(f"commit-log offset {offset} is in a segment that is missing")
    stop = min(end, seg.end, offset + max_bytes)
    return bytes(seg.mv[offset - seg.start : stop - seg.start])


def append_chunk(commitlog: CommitLog, offset: int, data: bytes) -> None:
    """Write ``data`` (from the master's ``read_chunk``) at ``offset``, the end of this log."""
    end = commitlog.max_offset
    if offset != end:
        raise InvalidOffsetError(
            f"a replicated chunk starts at commit-log offset {offset}, but this log ends at "
            f"{end}; chunks must continue where the log ends",
            offset=offset,
            max_offset=end,
        )
    seg = commitlog.file.last()
    if seg is None or seg.wrote == seg.size:
        if offset % commitlog.segment_size:
            raise InvalidOffsetError(f"offset {offset} is not a segment start")
        seg = commitlog.file.create(offset)
    local = offset - seg.start
    if local + len(data) > seg.size:
        raise InvalidOffsetError(
            f"a replicated chunk of {len(data)} bytes at {offset} crosses the segment end "
            f"{seg.end}",
            offset=offset,
        )
    seg.write(local, data)
    seg.wrote = local + len(data)


def whole_records(commitlog: CommitLog, start: int) -> Iterator[Item]:
    """The whole records from ``start`` (a record boundary) to the end of what is written:
    good runs and single ``(offset, size, parsed)`` records, checked like recovery's. A
    record cut by the end of the log is left for later; damage raises CorruptRecordError."""
    pos = start
    while True:
        seg = commitlog.file.find(pos)
        if seg is None:
            return
        local, limit = pos - seg.start, seg.wrote
        starts, walked_to = _walk(seg.mv, local, limit)
        if starts:
            good = _check_run(seg.mv, seg.start, starts, walked_to, True)
            if good.offsets:
                yield good
                pos = good.offsets[-1] + good.sizes[-1]
                if len(good.offsets) == len(starts):
                    continue
                local = pos - seg.start
        if local + codec.BLANK_SIZE_MIN > limit:
            return  # nothing more written yet (or a segment's last bytes, not yet sent)
        size, _magic = codec.PREFIX.unpack_from(seg.mv, local)
        if size > 0 and local + size > limit and seg.wrote < seg.size:
            return  # a record the next chunk completes
        verdict, size, parsed = codec.parse_record(seg.mv, local, seg.size, seg.start)
        if verdict is Check.OK:
            yield pos, size, parsed  # type: ignore[misc]
            pos += size
        elif verdict is Check.BLANK or (verdict is Check.QUARANTINED and local + size == seg.size):
            if seg.wrote < seg.size:
                return  # the rest of the segment is still to come
            pos = seg.end
        elif verdict is Check.QUARANTINED:
            pos += size
        elif verdict is Check.END and seg.wrote == seg.size:
            pos = seg.end  # zeros to the end of a full segment
        elif verdict is Check.END:
            return
        else:
            raise CorruptRecordError(
                f"replicated commit-log bytes at {pos} fail their {verdict.name} check; the "
                "slave stops replicating rather than serve them",
                offset=pos,
            )
