"""Resync: walking the commit log past damage instead of stopping at it.

Recovery and the consume-queue / index rebuild walk the commit log record by record
(scanner.py). Where the walk meets something it cannot accept -- a record whose
size or magic is wrong, one whose CRC fails, zeros where data should be, a segment
file that is missing -- ``walk`` looks for the next position where a complete record
validates (``next_valid``) and goes on from there, so damage costs the bytes it hit
and not everything after them. What lies between is a ``Damage``:

* ``record=True``: one record whose framing holds but whose CRC fails, followed by a
  valid record, blank or set-aside span at its end: the record is quarantined
  (its magic rewritten, commitlog.py);
* ``end`` set: a damaged span ``[start, end)`` the caller sets aside
  (``CommitLog.set_aside``: the bytes copied to ``quarantine/``, an 8-byte SPAN
  marker written over the span's start, codec.py);
* ``end`` None: nothing valid follows up to the end of the data (the last non-zero
  byte of the last segment): a torn tail, which the caller truncates.

A false resync cannot happen: a candidate is accepted only where the magic sits at
offset 4, the three length fields add up to its total size inside the segment, the
CRC-32C over the whole record matches, *and* the record's stored commitlog_offset
equals the position it was found at. The store writes that field at append time,
so a record (or a copy of one inside another message's body) found anywhere other
than where it was appended fails the last check even though its CRC holds. A
resync is therefore exact to the byte, or it does not happen.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

from . import codec
from .codec import Check
from .commitlog import CommitLog
from .scanner import GoodRun, scan

_PASSES = (Check.OK, Check.BLANK, Check.QUARANTINED)


class Damage(NamedTuple):
    """Bytes a walk could not accept, from ``start`` to the next valid record ``end``."""

    start: int
    end: int | None  # None: nothing valid follows (a torn tail)
    verdict: Check  # what the walk found at ``start``
    record: bool  # one framed record failing its CRC, ``end`` = its end


Item = GoodRun | tuple[Check, int, int, codec.ParsedRecord | None] | Damage


def walk(commitlog: CommitLog, start: int, *, check_crc: bool = True) -> Iterator[Item]:
    """``scan`` from ``start``, resynchronising past damage, to the end of the data.

    Yields good runs, OK / BLANK / QUARANTINED verdicts (as ``scan``) and ``Damage``;
    ends after a ``Damage`` whose ``end`` is None, or at the end of the data.
    """
    end = commitlog.max_offset
    pos = start
    while True:
        stop: tuple[Check, int, int] = (Check.END, end, 0)
        for item in scan(commitlog, pos, check_crc=check_crc):
            if isinstance(item, GoodRun) or item[0] in _PASSES:
                yield item
                continue
            stop = item[:3]
            break
        verdict, offset, size = stop
        if verdict is Check.END and offset >= end:
            return
        if verdict is Check.BAD_CRC and _passes_at(commitlog, offset + size):
            yield Damage(offset, offset + size, verdict, record=True)
            pos = offset + size
            continue
        resume = next_valid(commitlog, offset, end)
        yield Damage(offset, resume, verdict, record=False)
        if resume is None:
            return
        pos = resume


def _passes_at(commitlog: CommitLog, offset: int) -> bool:
    seg = commitlog.file.find(offset)
    if seg is None:
        return False
    return codec.parse_record(seg.mv, offset - seg.start, seg.size, seg.start)[0] in _PASSES


def next_valid(commitlog: CommitLog, offset: int, end: int) -> int | None:
    """The first position in ``(offset, end)`` where a complete record validates.

    The candidates are the places where the magic appears (``mmap.find``, at memory
    speed); each is checked in full (framing, CRC, stored position). Segments that
    are missing from the files are skipped.
    """
    pos = offset + 1
    while pos < end:
        seg = commitlog.file.find(pos)
        if seg is None:
            later = [s.start for s in commitlog.file.segments if s.start > pos]
            if not later:
                return None
            pos = later[0]
            continue
        limit = min(seg.size, end - seg.start)
        i = seg.mm.find(codec.MAGIC_BYTES, pos - seg.start + 4, limit)
        while i >= 0:
            candidate = i - 4
            if codec.parse_record(seg.mv, candidate, seg.size, seg.start)[0] is Check.OK:
                return seg.start + candidate
            i = seg.mm.find(codec.MAGIC_BYTES, i + 1, limit)
        pos = seg.end
    return None
