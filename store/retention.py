"""Retention: when to delete old commit-log segments (RocketMQ ``CleanCommitLogService``).

A segment (never the one being written) is *expired* once the next segment's
first record is older than ``file_reserved_hours``: that record was stored after
every record of the segment, so this needs no file times. Expired segments are
deleted, oldest first and at most ``delete_files_batch_max`` per tick, when

* the local hour is one of ``delete_when`` (``"04"`` or ``"04;05"``), or
* disk usage is above ``disk_max_used_space_ratio``;

above ``disk_clean_forcibly_ratio`` the oldest segments go even if not expired.
Above ``disk_warning_ratio`` the store refuses writes (``PutStatus.DISK_FULL``)
until a measurement finds usage below it again: a tick's, or one the put path takes
when it is due (disk_gauge.py, which also logs the change). Consume-queue segments and index files
whose entries all point below the commit log's new first byte follow (the store
does that), and reads of removed ranges then report OFFSET_TOO_SMALL or
MESSAGE_WAS_REMOVING.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

import msgspec

from .config import StoreConfig, parse_delete_when

logger = logging.getLogger(__name__)

HOUR_MS = 3_600_000


class RetentionReport(msgspec.Struct, kw_only=True):
    disk_ratio: float = 0.0
    disk_full: bool = False
    reason: str = ""
    segments_to_delete: int = 0
    cq_segments_deleted: int = 0
    index_files_deleted: int = 0


class RetentionPolicy:
    """Pure decision: how many leading segments to delete now."""

    def __init__(self, config: StoreConfig, disk_usage: Callable[[Path], float]) -> None:
        self.config = config
        self.disk_usage = disk_usage
        self.delete_hours = parse_delete_when(config.delete_when)

    def tick(self, root: Path, now_ms: int, last_written_ms: list[int | None]) -> RetentionReport:
        """``last_written_ms[i]``: when segment i (all but the active one) was last written."""
        cfg = self.config
        ratio = self.disk_usage(root)
        report = RetentionReport(disk_ratio=ratio, disk_full=ratio > cfg.disk_warning_ratio)
        force = ratio > cfg.disk_clean_forcibly_ratio
        if force:
            report.reason = "disk past disk_clean_forcibly_ratio"
        elif ratio > cfg.disk_max_used_space_ratio:
            report.reason = "disk past disk_max_used_space_ratio"
        elif time.localtime(now_ms / 1000).tm_hour in self.delete_hours:
            report.reason = "delete_when"
        else:
            return report
        reserved_ms = int(cfg.file_reserved_hours * HOUR_MS)
        count = 0
        for written in last_written_ms[: cfg.delete_files_batch_max]:
            expired = written is not None and written + reserved_ms <= now_ms
            if not (expired or force):
                break
            count += 1
        report.segments_to_delete = count
        return report
