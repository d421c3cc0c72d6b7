"""store/warm.py: a thread reads the page cache in ahead of the commit log's writes.

Residency is asked of the kernel (``mincore`` over a fresh read-only mapping, which
faults nothing in), after the file's pages were dropped from the page cache."""

from __future__ import annotations

import ctypes
import mmap
import os
import threading
from pathlib import Path

import pytest

from rayq.store import ConfigError, InnerMessage, MessageStore, StoreConfig
from rayq.store.warm import Warmer
from rayq.testing import wait_until

MiB = 1 << 20
PAGE = mmap.PAGESIZE
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [
    ctypes.c_void_p,
    ctypes.c_size_t,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_long,
]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]


def resident(path: Path, start: int, end: int) -> float:
    """The share of the pages of ``path`` in ``[start, end)`` that are in the page cache."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        assert addr not in (None, ctypes.c_void_p(-1).value), os.strerror(ctypes.get_errno())
        try:
            pages = (size + PAGE - 1) // PAGE
            vec = (ctypes.c_ubyte * pages)()
            assert _libc.mincore(addr, size, vec) == 0, os.strerror(ctypes.get_errno())
            picked = vec[start // PAGE : end // PAGE]
            return sum(b & 1 for b in picked) / max(len(picked), 1)
        finally:
            _libc.munmap(addr, size)
    finally:
        os.close(fd)


def segment(path: Path, size: int) -> Path:
    """A preallocated file of zeros (as segment.py makes them), out of the page cache."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.ftruncate(fd, size)
        os.posix_fallocate(fd, 0, size)
        os.fsync(fd)
        os.posix_fadvise(fd, 0, size, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    return path


def warmers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("rayq-warmer")]


def test_pages_ahead_of_the_writer_are_read_in_and_no_further(tmp_path: Path) -> None:
    seg = segment(tmp_path / "a", 16 * MiB)
    if resident(seg, 0, 16 * MiB) > 0.01:
        pytest.skip("this file system keeps the pages of a preallocated file cached")
    warmer = Warmer(4 * MiB)
    try:
        warmer.wrote(seg, MiB, 16 * MiB)  # the writer is at 1 MiB
        wait_until(lambda: resident(seg, MiB, 5 * MiB) == 1.0)
        assert resident(seg, 10 * MiB, 16 * MiB) == 0.0  # not past the window
        warmer.wrote(seg, 8 * MiB, 16 * MiB)  # the window moves with the writer
        wait_until(lambda: resident(seg, 8 * MiB, 12 * MiB) == 1.0)
        assert resident(seg, 14 * MiB, 16 * MiB) == 0.0
    finally:
        warmer.close()


def test_the_warmer_follows_the_writer_into_the_next_segment_and_stops(tmp_path: Path) -> None:
    first, second = segment(tmp_path / "a", 4 * MiB), segment(tmp_path / "b", 4 * MiB)
    if resident(second, 0, 4 * MiB) > 0.01:
        pytest.skip("this file system keeps the pages of a preallocated file cached")
    warmer = Warmer(2 * MiB, "rayq-warmer-test")
    try:
        warmer.wrote(first, 4 * MiB, 4 * MiB)  # full: nothing left to warm there
        warmer.wrote(second, 0, 4 * MiB)
        wait_until(lambda: resident(second, 0, 2 * MiB) == 1.0)
        warmer.wrote(tmp_path / "gone", 0, 4 * MiB)  # a file deleted since: skipped
        warmer.wrote(second, 2 * MiB, 4 * MiB)
        wait_until(lambda: resident(second, 2 * MiB, 4 * MiB) == 1.0)
    finally:
        warmer.close()
    assert "rayq-warmer-test" not in [t.name for t in threading.enumerate()]


def test_small_appends_wake_the_warmer_once_per_eighth_of_its_window(tmp_path: Path) -> None:
    """A single-message send must not hand the GIL to the warmer each time: appends of
    1 KiB wake it when the writer has moved an eighth of ``ahead``, or changed segment."""
    first, second = tmp_path / "a", tmp_path / "b"
    warmer = Warmer(8 * MiB)
    try:
        for k in range(4096):  # 4 MiB in 1 KiB appends
            warmer.wrote(first, k * 1024, 16 * MiB)
        assert warmer.wakes == 4  # at 0, 1, 2 and 3 MiB
        warmer.wrote(second, 0, 16 * MiB)
        assert warmer.wakes == 5
    finally:
        warmer.close()


def test_a_store_warms_ahead_of_its_appends_and_stops_with_it(tmp_path: Path) -> None:
    config = StoreConfig.for_tests(
        commitlog_segment_size_bytes=16 * MiB, commitlog_warm_ahead_bytes=4 * MiB
    )
    before = len(warmers())
    with MessageStore(tmp_path / "s", config, broker_name="warm") as store:
        assert len(warmers()) == before  # started by the first append
        assert store.put_messages([InnerMessage(topic="T", queue_id=0, body=b"x" * 1000)]).ok
        seg = store.commitlog.file.last()
        assert seg is not None and seg.wrote > 0
        assert len(warmers()) == before + 1
        wait_until(lambda: resident(seg.path, seg.wrote, seg.wrote + 4 * MiB) == 1.0)
    assert len(warmers()) == before


def test_warming_off_starts_no_thread_and_a_negative_window_is_refused(tmp_path: Path) -> None:
    config = StoreConfig.for_tests(commitlog_warm_ahead_bytes=0)
    before = len(warmers())
    with MessageStore(tmp_path / "s", config, broker_name="cold") as store:
        assert store.put_messages([InnerMessage(topic="T", queue_id=0, body=b"x")]).ok
        assert len(warmers()) == before
    with pytest.raises(ConfigError, match="commitlog_warm_ahead_bytes"):
        StoreConfig.for_tests(commitlog_warm_ahead_bytes=-1)
