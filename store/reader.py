"""Reading a consume queue: RocketMQ's ``getMessage`` after the argument checks.

From a queue offset, consume-queue entries are read in one slice (the scan window:
``max_nums`` entries, or ``max_filter_scan_entries`` with a tag filter), holes,
records already deleted and tag mismatches are skipped, and the records are copied
out of the commit log, whole runs of back-to-back records in one slice, each one
checked (size, magic, CRC) so that no damaged byte is ever served. Per-pull caps
follow RocketMQ: 32 messages / 256 KiB when the data is recent (within
``access_message_in_memory_max_ratio`` of RAM from the end of the log), 8 / 64 KiB
when it is old.

Unreadable entries do not use up the caps: a record that fails its check is logged
and skipped, and the read goes on with the entries after it in the window until the
caps are full (FOUND, the next offset past what it returned). Only a window with
nothing readable answers without records (OFFSET_FOUND_NULL, MESSAGE_WAS_REMOVING
or NO_MATCHED_MESSAGE), and then with the next offset past the whole window, so a
reader moves past damage at once instead of waiting for news.
"""

from __future__ import annotations

import logging
import os
from bisect import bisect_right
from itertools import accumulate, pairwise, repeat
from operator import add, sub

from crc32c import crc32c

from . import codec
from .commitlog import CommitLog
from .config import StoreConfig
from .consume_queue import ENTRY, HOLE_SIZE, ConsumeQueue
from .filters import TagFilter
from .message import GetResult, GetStatus
from .segment import Segment

logger = logging.getLogger(__name__)

MEMORY_BYTES = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def offset_status(offset: int, lo: int, hi: int) -> tuple[GetStatus | None, int]:
    """An offset outside ``lo..hi``: its status and where to read instead (RocketMQ's
    ``getMessage``); None for an offset with entries to read."""
    if hi == 0:
        return GetStatus.NO_MESSAGE_IN_QUEUE, 0
    if offset < lo:
        return GetStatus.OFFSET_TOO_SMALL, lo
    if offset == hi:
        return GetStatus.OFFSET_OVERFLOW_ONE, offset
    if offset > hi:
        # Past the end: a queue that never lost a message (min 0) is read again from its
        # start (the offset belongs to an older life of the queue, e.g. a store that was
        # wiped), else from its end.
        return GetStatus.OFFSET_OVERFLOW_BADLY, lo if lo == 0 else hi
    return None, offset


class QueueReader:
    """Reads records of consume queues out of one commit log."""

    def __init__(self, commitlog: CommitLog, config: StoreConfig) -> None:
        self.commitlog = commitlog
        self.config = config
        self._memory_bytes = MEMORY_BYTES * config.access_message_in_memory_max_ratio

    def read(
        self, cq: ConsumeQueue, offset: int, max_nums: int, tag_filter: TagFilter | None
    ) -> GetResult:
        """Up to ``max_nums`` records from ``offset``, with RocketMQ's statuses."""
        lo, hi = cq.min_offset, cq.max_offset
        status, next_offset = offset_status(offset, lo, hi)
        if status is not None:
            return GetResult(
                status=status, next_begin_offset=next_offset, min_offset=lo, max_offset=hi
            )
        return self._read_queue(cq, offset, max_nums, tag_filter, lo, hi)

    def _read_queue(
        self,
        cq: ConsumeQueue,
        offset: int,
        max_nums: int,
        tag_filter: TagFilter | None,
        lo: int,
        hi: int,
    ) -> GetResult:
        cfg = self.config
        codes = tag_filter.codes if tag_filter is not None else None
        # a tag filter scans ahead for matches, but not (much) past what one answer can hold
        scan = (
            max_nums if codes is None else min(cfg.max_filter_scan_entries, max(8 * max_nums, 256))
        )
        entries = list(ENTRY.iter_unpack(cq.read(offset, scan)))
        # Far behind (RocketMQ: past accessMessageInMemoryMaxRatio of RAM from the end):
        # the data is likely on disk, not in the page cache; a slave may serve it instead.
        far = bool(entries) and self.commitlog.max_offset - entries[0][0] > self._memory_bytes
        if far:
            caps = min(cfg.max_transfer_count_on_disk, max_nums), cfg.max_transfer_bytes_on_disk
        else:
            caps = min(cfg.max_transfer_count_in_memory, max_nums), cfg.max_transfer_bytes_in_memory
        picked = self._pick_contiguous(entries, caps) if codes is None else None
        if picked is not None:  # the common case: one run of whole records, nothing to skip
            scanned, wanted = picked
            removed = filtered = 0
        else:
            scanned, wanted, removed, filtered = self._pick_entries(entries, caps, codes)
        parts, count = self._read_records(wanted, cq) if wanted else ([], 0)
        lost = len(wanted) - count
        while lost and scanned < len(entries):
            # Damaged records were left out: fill their place from the rest of the window.
            rest = (caps[0] - count, caps[1] - sum(map(len, parts)))
            more, wanted, gone, unmatched = self._pick_entries(
                entries[scanned:], rest, codes, first_free=not count
            )
            scanned += more
            removed += gone
            filtered += unmatched
            found, n = self._read_records(wanted, cq) if wanted else ([], 0)
            parts += found
            count += n
            lost = len(wanted) - n
        if count:
            status = GetStatus.FOUND
        elif filtered:
            status = GetStatus.NO_MATCHED_MESSAGE
        elif removed:
            status = GetStatus.MESSAGE_WAS_REMOVING
        else:
            status = GetStatus.OFFSET_FOUND_NULL
        return GetResult(
            status=status,
            next_begin_offset=offset + scanned,
            min_offset=lo,
            max_offset=hi,
            buffer=b"".join(parts),
            count=count,
            suggest_pull_from_slave=far,
        )

    def _pick_contiguous(
        self, entries: list[tuple[int, int, int]], caps: tuple[int, int]
    ) -> tuple[int, list[tuple[int, int]]] | None:
        """Entries to read when they are whole, live and back to back in the commit log."""
        if not entries:
            return None
        head = entries[: caps[0]]
        sizes = [e[1] for e in head]
        ends = list(accumulate(sizes))
        k = max(1, bisect_right(ends, caps[1]))
        first, last = head[0], head[k - 1]
        if (
            first[0] < self.commitlog.min_offset
            or last[0] - first[0] + last[1] != ends[k - 1]
            or min(sizes[:k]) <= 0
            or HOLE_SIZE in sizes[:k]
        ):
            return None
        return k, [(e[0], e[1]) for e in head[:k]]

    def _pick_entries(
        self,
        entries: list[tuple[int, int, int]],
        caps: tuple[int, int],
        codes: frozenset[int] | None,
        first_free: bool = True,
    ) -> tuple[int, list[tuple[int, int]], int, int]:
        """Entries to read, one by one: holes, removed records and the tag filter. The
        first record may be larger than the byte cap if ``first_free``."""
        cl_min = self.commitlog.min_offset
        cap_n, cap_b = caps
        wanted: list[tuple[int, int]] = []
        total = scanned = removed = filtered = 0
        for phys, size, code in entries:
            if size == HOLE_SIZE or size == 0:
                scanned += 1
                continue
            if len(wanted) >= cap_n or ((wanted or not first_free) and total + size > cap_b):
                break
            scanned += 1
            if phys < cl_min:
                removed += 1
            elif codes is not None and code not in codes:
                filtered += 1
            else:
                wanted.append((phys, size))
                total += size
        return scanned, wanted, removed, filtered

    def _read_records(
        self, wanted: list[tuple[int, int]], cq: ConsumeQueue
    ) -> tuple[list[bytes], int]:
        """The records, checked (magic, size, CRC); contiguous runs copied as one slice."""
        phys, sizes = [w[0] for w in wanted], [w[1] for w in wanted]
        ends = list(map(add, phys, sizes))
        cuts = [i for i in range(1, len(phys)) if phys[i] != ends[i - 1]]
        parts: list[bytes] = []
        count = 0
        for i, j in pairwise([0, *cuts, len(phys)]):
            seg = self.commitlog.file.find(phys[i])
            if seg is None:
                continue
            if ends[j - 1] - seg.start > seg.wrote:  # a run never spans segments: split it
                for k in range(i, j):
                    run, n = self._checked_run(seg, phys[k : k + 1], sizes[k : k + 1], cq)
                    parts += run
                    count += n
                continue
            run, n = self._checked_run(seg, phys[i:j], sizes[i:j], cq)
            parts += run
            count += n
        return parts, count

    def _checked_run(
        self, seg: Segment, phys: list[int], sizes: list[int], cq: ConsumeQueue
    ) -> tuple[list[bytes], int]:
        """Records back to back at ``phys``; all of them as one slice if all check out."""
        start = phys[0]
        local = start - seg.start
        end = phys[-1] + sizes[-1] - seg.start
        if local < 0 or end > seg.wrote:
            return [], 0
        data = seg.mm[local:end]
        mv = memoryview(data)
        rel = list(map(sub, phys, repeat(start)))
        ends = list(map(add, rel, sizes))
        body_at = list(map(add, rel, repeat(codec.CRC_START)))
        block_at = list(map(add, rel, repeat(codec.STORE_BLOCK_OFFSET)))
        producer = map(crc32c, map(mv.__getitem__, map(slice, body_at, ends)))
        crcs = map(crc32c, map(mv.__getitem__, map(slice, block_at, body_at)), producer)
        heads = list(map(codec.PREFIX_CRC.unpack_from, repeat(data), rel))
        expect = list(zip(sizes, repeat(codec.MAGIC), crcs))
        if heads == expect:
            return [data], len(phys)
        good = []
        for r, e, head, want, p in zip(rel, ends, heads, expect, phys, strict=True):
            if head == want:
                good.append(data[r:e])
            else:
                logger.error(
                    "record at %d (%s/%d) is unreadable or fails its CRC; skipped",
                    p,
                    cq.topic,
                    cq.queue_id,
                )
        return good, len(good)
