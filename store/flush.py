"""Making the store durable: flush commit log, consume queues and index, then checkpoint.

``DiskFlusher`` works on the files alone, by name (segment k of the commit log is
``commitlog/<k * segment_size:020d>``), so it can run in another process on the
same node (the Flusher actor) while the writer keeps appending through its own
mappings: shared mappings and the page cache make the writer's bytes visible to
this process's ``fdatasync``. The writer tells it how far to flush.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from .checkpoint import Checkpoint, load_checkpoint, save_checkpoint
from .clock import SYSTEM_CLOCK, Clock
from .segment import segment_name

logger = logging.getLogger(__name__)

PAGE_SIZE = 4096


class DiskFlusher:
    """fdatasync what the writer reports written, and record it in the checkpoint."""

    def __init__(self, root: str | Path, segment_size: int, clock: Clock = SYSTEM_CLOCK) -> None:
        self.root = Path(root)
        self.segment_size = segment_size
        self.clock = clock
        cp = load_checkpoint(self.root)
        self.commitlog_flushed = cp.commitlog_flushed_offset
        self.cq_flushed = cp.consume_queue_flushed_offset
        self.index_flushed = cp.index_flushed_offset

    def reset(self, offset: int) -> None:
        """After recovery: everything below ``offset`` is durable or rebuilt."""
        self.commitlog_flushed = self.cq_flushed = self.index_flushed = offset

    def flush_commitlog(self, upto_offset: int, least_pages: int = 0) -> int:
        """Make commit-log bytes below ``upto_offset`` durable; returns the durable offset.

        With ``least_pages`` > 0, does nothing unless that many pages are pending.
        """
        if upto_offset <= self.commitlog_flushed:
            return self.commitlog_flushed
        if least_pages and upto_offset - self.commitlog_flushed < least_pages * PAGE_SIZE:
            return self.commitlog_flushed
        first = self.commitlog_flushed // self.segment_size
        last = (upto_offset - 1) // self.segment_size
        for k in range(first, last + 1):
            _fdatasync(self.root / "commitlog" / segment_name(k * self.segment_size))
        self.commitlog_flushed = upto_offset
        return upto_offset

    def flush_logics(self, dispatched_offset: int) -> None:
        """Make consume queues and index durable for records below ``dispatched_offset``."""
        if dispatched_offset <= min(self.cq_flushed, self.index_flushed):
            return
        cq_root = self.root / "consumequeue"
        if cq_root.is_dir():
            for topic_dir in cq_root.iterdir():
                for queue_dir in topic_dir.iterdir():
                    for name in sorted(os.listdir(queue_dir))[-2:]:
                        _fdatasync(queue_dir / name)
        index_dir = self.root / "index"
        if index_dir.is_dir():
            for name in sorted(os.listdir(index_dir))[-2:]:
                _fdatasync(index_dir / name)
        self.cq_flushed = self.index_flushed = dispatched_offset

    def checkpoint(self) -> Checkpoint:
        cp = Checkpoint(
            commitlog_flushed_offset=self.commitlog_flushed,
            consume_queue_flushed_offset=min(self.cq_flushed, self.commitlog_flushed),
            index_flushed_offset=min(self.index_flushed, self.commitlog_flushed),
            written_at_ms=self.clock.now_ms(),
        )
        save_checkpoint(self.root, cp)
        return cp


def _fdatasync(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:  # deleted by retention meanwhile
        return
    try:
        os.fdatasync(fd)
    finally:
        os.close(fd)
