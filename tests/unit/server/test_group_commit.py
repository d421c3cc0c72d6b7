"""Group commit (SYNC_FLUSH): senders waiting for durability at the same time share
fdatasyncs. The fsyncs are counted at the one place the store makes them."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from rayq.actors.flusher import FlushService
from rayq.store import FakeClock, InnerMessage, MessageStore, StoreConfig
from rayq.store import flush as store_flush

CONFIG = StoreConfig.for_tests()
SENDERS = 50


def written_log(root: Path) -> list[int]:
    """A commit log in one segment; the end offset of each of its messages."""
    store = MessageStore(root, CONFIG, clock=FakeClock())
    ends = []
    for _ in range(SENDERS):
        result = store.put_messages([InnerMessage(topic="T", queue_id=0, body=b"x" * 100)])
        assert result.ok, result.error
        ends.append(store.written_offset)
    assert ends[-1] < CONFIG.commitlog_segment_size_bytes
    store.close()
    return ends


def test_senders_waiting_together_share_one_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Given one fsync in progress, when 49 more senders ask to be durable up to their
    own message meanwhile, expect all 50 answered after two fsyncs in all (the one in
    progress, then one for everything that queued behind it), not one each."""
    ends = written_log(tmp_path)
    fsyncs: list[Path] = []
    disk_busy = threading.Event()
    release = threading.Event()
    real_fdatasync = store_flush._fdatasync

    def counted(path: Path) -> None:
        fsyncs.append(path)
        disk_busy.set()
        assert release.wait(30), "the test never released the disk"
        real_fdatasync(path)

    monkeypatch.setattr(store_flush, "_fdatasync", counted)

    async def run() -> list[int]:
        service = FlushService(str(tmp_path), CONFIG)
        service.disk.reset(0)  # nothing durable yet: every sender must wait
        first = asyncio.create_task(service.sync(ends[0]))
        # the first sender's fsync is on the disk
        assert await asyncio.to_thread(disk_busy.wait, 30)
        rest = [asyncio.create_task(service.sync(end)) for end in ends[1:]]
        await asyncio.sleep(0.01)  # every other sender is waiting now
        assert len(service._waiters) == SENDERS
        release.set()
        return await asyncio.gather(first, *rest)

    durable = asyncio.run(run())
    assert all(d >= end for d, end in zip(durable, ends, strict=True))
    assert len(fsyncs) == 2, f"{len(fsyncs)} fsyncs for {SENDERS} waiting senders"


def test_a_sender_behind_what_is_durable_needs_no_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ends = written_log(tmp_path)
    fsyncs: list[Path] = []
    monkeypatch.setattr(store_flush, "_fdatasync", fsyncs.append)

    async def run() -> tuple[int, int]:
        service = FlushService(str(tmp_path), CONFIG)
        service.disk.reset(0)
        last = await service.sync(ends[-1])
        return last, await service.sync(ends[0])

    assert asyncio.run(run()) == (ends[-1], ends[-1])
    assert len(fsyncs) == 1
