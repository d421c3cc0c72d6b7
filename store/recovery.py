"""Recovery: make the commit log, consume queues and key index agree again on open.

What is trusted: commit-log bytes below the checkpoint's ``recover_from`` (they
were fsynced, and their consume-queue and index entries too). Everything from
there on is re-validated record by record (magic, sizes, CRC-32C):

* a valid record is re-dispatched (consume-queue entry, index keys);
* a record whose CRC fails but whose framing holds *and* is followed by a valid
  record is quarantined (magic rewritten, logged) and its queue gets a hole;
* anything else (bad framing, a CRC failure at the tail, a cut file) is a torn
  tail: the commit log is truncated there, stale bytes after it are zeroed;
* consume-queue entries pointing at or past ``recover_from`` are cut off before
  re-dispatch; index entries are simply re-added (queries de-duplicate).

Damage below ``recover_from`` that recovery can see without reading every record
(a consume queue deleted, missing a segment or shorter than recorded; index files
deleted) triggers a rebuild of just that structure from the commit log's start.
A normal restart after a clean close re-validates nothing: the checkpoint is at
the end.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import msgspec

from .codec import Check
from .commitlog import CommitLog, DispatchBatch
from .scanner import GoodRun, scan

logger = logging.getLogger(__name__)

DISPATCH_CHUNK = 8192

DispatchSink = Callable[[DispatchBatch], None]


class RecoveryReport(msgspec.Struct, kw_only=True):
    abnormal: bool = False
    start_offset: int = 0
    end_offset: int = 0
    records_validated: int = 0
    records_quarantined: list[int] = []
    truncated_at: int | None = None
    truncated_bytes: int = 0
    cq_entries_dropped: int = 0
    queues_rebuilt: list[str] = []
    index_rebuilt: bool = False


def validate_tail(
    commitlog: CommitLog,
    start: int,
    report: RecoveryReport,
    sink: DispatchSink,
    owners: dict[int, tuple[str, int, int]] | None = None,
) -> int:
    """Re-validate records from ``start``; returns the valid end offset.

    ``owners`` maps commit-log offsets to the (topic, queue id, queue offset) a
    consume queue gave them before recovery: a quarantined record keeps its queue
    offset as a hole.
    """
    valid_end = start
    suspect: int | None = None  # offset of a BAD_CRC record awaiting its successor
    batch = DispatchBatch()
    for item in scan(commitlog, start):
        if isinstance(item, GoodRun):
            if suspect is not None:
                _quarantine(commitlog, suspect, report, batch, owners)
                suspect = None
            batch.add_run(item)
            report.records_validated += len(item.offsets)
            valid_end = item.offsets[-1] + item.sizes[-1]
            if len(batch) >= DISPATCH_CHUNK:
                sink(batch)
                batch = DispatchBatch()
            continue
        verdict, offset, size, parsed = item
        if suspect is not None:
            if verdict in (Check.OK, Check.BLANK, Check.QUARANTINED):
                _quarantine(commitlog, suspect, report, batch, owners)
            else:
                valid_end = suspect
                break
            suspect = None
        if verdict is Check.OK:
            commitlog.dispatch(offset, size, parsed, batch)  # type: ignore[arg-type]
            report.records_validated += 1
            valid_end = offset + size
            if len(batch) >= DISPATCH_CHUNK:
                sink(batch)
                batch = DispatchBatch()
        elif verdict is Check.BLANK or verdict is Check.QUARANTINED:
            valid_end = offset + size
        elif verdict is Check.BAD_CRC:
            suspect = offset
            valid_end = offset
        else:  # END or BAD_FRAMING
            if verdict is Check.BAD_FRAMING:
                logger.error("recovery: torn or damaged record at %d", offset)
            valid_end = offset
            break
    sink(batch)
    return valid_end


def _quarantine(commitlog: CommitLog, offset: int, report: RecoveryReport, batch: DispatchBatch,
                owners: dict[int, tuple[str, int, int]] | None) -> None:  # fmt: skip
    commitlog.quarantine(offset)
    report.records_quarantined.append(offset)
    logger.error("recovery: record at %d failed its CRC; quarantined", offset)
    if owners and offset in owners:
        batch.add_hole(*owners[offset], offset)


def rebuild_scan(
    commitlog: CommitLog, upto: int, sink: DispatchSink, start: int | None = None
) -> int:
    """Dispatch every record from ``start`` (default: the log's start) to ``upto``.

    For ranges already validated: no CRC checks.
    """
    batch = DispatchBatch()
    count = 0
    begin = commitlog.min_offset if start is None else start
    for item in scan(commitlog, begin, check_crc=False):
        if isinstance(item, GoodRun):
            keep = sum(1 for o in item.offsets if o < upto)
            batch.add_run(GoodRun(*(column[:keep] for column in item)))
            count += keep
            if keep < len(item.offsets):
                break
            if len(batch) >= DISPATCH_CHUNK:
                sink(batch)
                batch = DispatchBatch()
            continue
        verdict, offset, size, parsed = item
        if offset >= upto or verdict in (Check.END, Check.BAD_FRAMING):
            break
        if verdict is Check.OK:
            commitlog.dispatch(offset, size, parsed, batch)  # type: ignore[arg-type]
            count += 1
            if len(batch) >= DISPATCH_CHUNK:
                sink(batch)
                batch = DispatchBatch()
    sink(batch)
    return count
