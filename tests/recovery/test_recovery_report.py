"""What recovery reports and logs: a clean reopen does nothing, a crash says what it dropped."""

from __future__ import annotations

import logging
import os
import random
from pathlib import Path

import pytest

from rayq.store.checkpoint import load_checkpoint

QUEUES = [("Report", 0), ("Report", 1)]


def test_clean_reopen_reports_normal_and_validates_nothing(kit, tmp_path: Path) -> None:
    """After close(), reopening trusts the checkpoint: abnormal=False, nothing re-validated."""
    root = tmp_path / "store"
    store = kit.open(root)
    sent = kit.write(store, random.Random(1), 80, QUEUES, body_sizes=(200, 2000), batch_max=4)
    end = store.commitlog.max_offset
    store.close()

    store = kit.open(root)

    report = store.recovery
    assert report.abnormal is False
    assert report.records_validated == 0
    assert report.start_offset == end
    assert report.end_offset == end
    assert report.truncated_at is None
    assert report.truncated_bytes == 0
    assert report.records_quarantined == []
    assert report.cq_entries_dropped == 0
    assert report.queues_rebuilt == []
    assert report.index_rebuilt is False
    kit.assert_consistent(store, sent)


def test_reopen_after_crash_reports_abnormal_and_revalidates_from_the_checkpoint(
    kit, tmp_path: Path
) -> None:
    """After a crash, recovery re-validates exactly the records past the checkpoint."""
    root = tmp_path / "store"
    rng = random.Random(2)
    store = kit.open(root)
    sent = kit.write(store, rng, 40, QUEUES, body_sizes=(200, 2000))
    store.flush()
    unflushed = kit.write(store, rng, 7, QUEUES, body_sizes=(200, 2000))
    store.crash()

    store = kit.open(root)

    report = store.recovery
    assert report.abnormal is True
    assert report.start_offset == load_checkpoint(root).commitlog_flushed_offset
    assert report.start_offset == min(s.commitlog_offset for s in unflushed)
    assert report.records_validated == len(unflushed)
    assert report.end_offset == max(s.end for s in unflushed)
    assert report.truncated_at is None
    kit.assert_consistent(store, [*sent, *unflushed])


def test_recovery_logs_the_truncation_offset_and_the_bytes_dropped(
    kit, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A torn tail is logged at ERROR with the offset it was cut at and the bytes dropped."""
    root = tmp_path / "store"
    rng = random.Random(3)
    store = kit.open(root)
    sent = kit.write(store, rng, 30, QUEUES, body_sizes=(200, 2000))
    store.flush()
    sent += kit.write(store, rng, 5, QUEUES, body_sizes=(200, 2000))
    torn = max(sent, key=lambda s: s.commitlog_offset)
    segment = store.commitlog.file.segments[-1]
    path, start = segment.path, segment.start
    store.crash()
    kept = torn.store_size // 2
    os.truncate(path, torn.commitlog_offset - start + kept)

    with caplog.at_level(logging.ERROR, logger="rayq.store"):
        store = kit.open(root)

    assert store.recovery.truncated_at == torn.commitlog_offset
    assert store.recovery.truncated_bytes == kept
    logged = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert any(str(torn.commitlog_offset) in m and str(kept) in m for m in logged), logged
    kit.assert_consistent(store, [s for s in sent if s is not torn])
