"""A long recovery walk logs its progress (percent, rate, time left); a short one does not."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from rayq.store import InnerMessage, MessageStore, StoreConfig
from rayq.store import recovery as R

CFG = StoreConfig.for_tests(commitlog_segment_size_bytes=64 * 1024)


def filled_store(root: Path, crash: bool = True) -> None:
    store = MessageStore(root, CFG)
    for i in range(40):
        store.put_messages(
            [InnerMessage(topic="T", queue_id=0, body=bytes(2000), keys=f"k{i}") for _ in range(10)]
        )
    if not crash:
        store.close()
        return
    store.crash()
    (root / "checkpoint").unlink(missing_ok=True)


def progress_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("recovery: re")]


def test_long_walks_log_progress(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    crashed, cut = tmp_path / "crashed", tmp_path / "cut"
    filled_store(crashed)  # re-validated from the log's start
    filled_store(cut, crash=False)
    shutil.rmtree(cut / "consumequeue")  # rebuilt from the log
    monkeypatch.setattr(R, "PROGRESS_MIN_BYTES", 0)
    monkeypatch.setattr(R, "PROGRESS_EVERY_S", 0.0)
    with caplog.at_level(logging.WARNING, logger="rayq.store.recovery"):
        MessageStore(crashed, CFG).close()
        MessageStore(cut, CFG).close()
    lines = progress_lines(caplog)
    assert any(line.startswith("recovery: re-validating the commit log: ") for line in lines)
    assert any(line.startswith("recovery: rebuilding from the commit log: ") for line in lines)
    assert all("% (" in line and "MiB/s" in line and "s left" in line for line in lines)


def test_short_walks_are_quiet(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    filled_store(tmp_path)
    with caplog.at_level(logging.WARNING, logger="rayq.store.recovery"):
        MessageStore(tmp_path, CFG).close()
    assert progress_lines(caplog) == []


def test_percent_and_rate_are_right() -> None:
    ticks = iter([0.0, 10.0])
    progress = R.ScanProgress("walk", 0, 4 * 2**30, clock=lambda: next(ticks))
    progress.at(2**30)  # a quarter done in 10 s
    assert progress.logged == 1
