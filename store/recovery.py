"""Recovery: make the commit log, consume queues and key index agree again on open.

What is trusted: commit-log bytes below the checkpoint's ``recover_from`` (they
were fsynced, and their consume-queue and index entries too). Everything from
there on is re-validated record by record (magic, sizes, CRC-32C):

* a valid record is re-dispatched (consume-queue entry, index keys);
* a record whose CRC fails but whose framing holds *and* is followed by a valid
  record is quarantined (magic rewritten, logged) and its queue gets a hole;
* anything else that fails (a damaged size or magic, zeros inside the data, a
  missing segment file) is resynchronised past (resync.py): the walk goes on at the
  next position where a complete record validates, the damaged span between is set
  aside (copied to ``quarantine/``, marked, logged with its range, counted in the
  report) and the queue offsets it held become holes;
* only when nothing valid follows, up to the last non-zero byte of the last segment,
  is it a torn tail: the commit log is truncated there, stale bytes after it zeroed;
* consume-queue entries pointing at or past ``recover_from`` are cut off before
  re-dispatch; index entries are simply re-added (queries de-duplicate).

Damage below ``recover_from`` that recovery can see without reading every record
(a consume queue deleted, missing a segment or shorter than recorded; index files
deleted) triggers a rebuild of just that structure from the commit log's start.
A normal restart after a clean close re-validates nothing: the checkpoint is at
the end. A walk over at least ``PROGRESS_MIN_BYTES`` (after a crash, or a rebuild)
logs its progress every ``PROGRESS_EVERY_S``: percent done, rate and time left, at
WARNING (the level broker logs show: an operator is waiting for it).
"""

from __future__ import annotations

import logging
import time
from bisect import bisect_left
from collections.abc import Callable

import msgspec

from .codec import Check
from .commitlog import CommitLog, DispatchBatch
from .resync import Damage, walk
from .scanner import GoodRun

logger = logging.getLogger(__name__)

DISPATCH_CHUNK = 8192
PROGRESS_MIN_BYTES = 256 * 2**20
PROGRESS_EVERY_S = 5.0

DispatchSink = Callable[[DispatchBatch], None]


class RecoveryReport(msgspec.Struct, kw_only=True):
    abnormal: bool = False
    start_offset: int = 0
    end_offset: int = 0
    records_validated: int = 0
    records_quarantined: list[int] = []
    spans_set_aside: list[tuple[int, int]] = []  # [start, end) of damaged spans
    bytes_set_aside: int = 0
    truncated_at: int | None = None
    truncated_bytes: int = 0
    cq_entries_dropped: int = 0
    queues_rebuilt: list[str] = []
    index_rebuilt: bool = False


class ScanProgress:
    """Logs how far a walk over ``[start, end)`` of the commit log has come."""

    def __init__(
        self, what: str, start: int, end: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.what, self.start, self.end, self.clock = what, start, end, clock
        self.on = end > start and end - start >= PROGRESS_MIN_BYTES
        self.began = self.last = clock()
        self.logged = 0

    def at(self, offset: int) -> None:
        if not self.on:
            return
        now = self.clock()
        if now - self.last < PROGRESS_EVERY_S:
            return
        self.last = now
        done = max(0, min(offset, self.end) - self.start)
        total = self.end - self.start
        rate = done / max(now - self.began, 1e-9)
        left = (total - done) / rate if rate else float("inf")
        self.logged += 1
        logger.warning(
            "%s: %.0f%% (%.2f of %.2f GiB) at %.0f MiB/s, about %.0f s left",
            self.what,
            100 * done / total,
            done / 2**30,
            total / 2**30,
            rate / 2**20,
            left,
        )


def validate_tail(
    commitlog: CommitLog,
    start: int,
    report: RecoveryReport,
    sink: DispatchSink,
    owners: dict[int, tuple[str, int, int]] | None = None,
) -> int:
    """Re-validate records from ``start``; returns the valid end offset.

    ``owners`` maps commit-log offsets to the (topic, queue id, queue offset) a
    consume queue gave them before recovery: a record lost to damage keeps its
    queue offset as a hole.
    """
    valid_end = start
    holes = _Holes(owners)
    batch = DispatchBatch()
    progress = ScanProgress("recovery: re-validating the commit log", start, commitlog.max_offset)
    for item in walk(commitlog, start):
        if isinstance(item, GoodRun):
            batch.add_run(item)
            report.records_validated += len(item.offsets)
            valid_end = item.offsets[-1] + item.sizes[-1]
            progress.at(valid_end)
        elif isinstance(item, Damage):
            if item.end is None:
                valid_end = item.start
                if item.verdict is not Check.END:
                    logger.error("recovery: torn or damaged record at %d", item.start)
                break
            set_aside(commitlog, item, report)
            holes.add(batch, item.start, item.end)
            valid_end = item.end
        else:
            verdict, offset, size, parsed = item
            if verdict is Check.OK:
                commitlog.dispatch(offset, size, parsed, batch)  # type: ignore[arg-type]
                report.records_validated += 1
            valid_end = offset + size
        if len(batch) >= DISPATCH_CHUNK:
            sink(batch)
            batch = DispatchBatch()
    sink(batch)
    return valid_end


def set_aside(commitlog: CommitLog, damage: Damage, report: RecoveryReport) -> None:
    """Quarantine a damaged record, or set a damaged span aside; log and count it."""
    assert damage.end is not None
    if damage.record:
        commitlog.quarantine(damage.start)
        report.records_quarantined.append(damage.start)
        logger.error("recovery: record at %d failed its CRC; quarantined", damage.start)
        return
    commitlog.set_aside(damage.start, damage.end)
    report.spans_set_aside.append((damage.start, damage.end))
    report.bytes_set_aside += damage.end - damage.start
    logger.error(
        "recovery: damaged bytes [%d, %d) (%s at %d) set aside; the next valid record is at %d",
        damage.start,
        damage.end,
        damage.verdict.name,
        damage.start,
        damage.end,
    )


class _Holes:
    """Queue offsets that records inside a damaged range had (from ``owners``)."""

    def __init__(self, owners: dict[int, tuple[str, int, int]] | None) -> None:
        self.owners = owners or {}
        self._keys: list[int] | None = None

    def add(self, batch: DispatchBatch, start: int, end: int) -> None:
        if not self.owners:
            return
        if self._keys is None:
            self._keys = sorted(self.owners)
        keys = self._keys
        i = bisect_left(keys, start)
        while i < len(keys) and keys[i] < end:
            batch.add_hole(*self.owners[keys[i]], keys[i])
            i += 1


def rebuild_scan(
    commitlog: CommitLog,
    upto: int,
    sink: DispatchSink,
    start: int | None = None,
    report: RecoveryReport | None = None,
) -> int:
    """Dispatch every record from ``start`` (default: the log's start) to ``upto``.

    For ranges already validated: no CRC checks on the way, but a walk that cannot
    frame a record resynchronises (with every check) and sets the damage aside.
    """
    batch = DispatchBatch()
    count = 0
    begin = commitlog.min_offset if start is None else start
    progress = ScanProgress("recovery: rebuilding from the commit log", begin, upto)
    for item in walk(commitlog, begin, check_crc=False):
        if isinstance(item, GoodRun):
            keep = sum(1 for o in item.offsets if o < upto)
            batch.add_run(GoodRun._make(column[:keep] for column in item))
            count += keep
            progress.at(item.offsets[-1])
            if keep < len(item.offsets):
                break
        elif isinstance(item, Damage):
            if item.end is None or item.end > upto:
                break  # damage reaching past ``upto`` is validate_tail's
            set_aside(commitlog, item, report if report is not None else RecoveryReport())
        else:
            verdict, offset, size, parsed = item
            if offset >= upto:
                break
            if verdict is Check.OK:
                commitlog.dispatch(offset, size, parsed, batch)  # type: ignore[arg-type]
                count += 1
        if len(batch) >= DISPATCH_CHUNK:
            sink(batch)
            batch = DispatchBatch()
    sink(batch)
    return count
