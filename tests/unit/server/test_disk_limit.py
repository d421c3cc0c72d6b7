"""The disk limit on the write path: puts past ``disk_warning_ratio`` get DISK_FULL at once.

The put path keeps the last measured ratio (store/disk_gauge.py) and measures only when
the store allocated a file, before a put that needs a new commit-log segment, and every
``disk_check_interval_ms``. Disk usage is injected and time comes from a FakeClock, so
which put measures is driven by hand; no test looks at the real disk.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from rayq.actors.protocol import CreateTopicRequest
from rayq.actors.protocol.config import BrokerConfig
from rayq.actors.server.broker_server import BrokerServer
from rayq.store import (
    FakeClock,
    GetStatus,
    InnerMessage,
    MessageStore,
    PutResult,
    PutStatus,
    StoreConfig,
)
from rayq.store.batch import encode_batch
from rayq.store.disk_gauge import DiskGauge
from rayq.store.errors import DiskFullError

T0 = 1_700_000_000_000
LOW, HIGH = 0.10, 0.95  # the default disk_warning_ratio is 0.90
CONFIG = StoreConfig.for_tests()
SEG = CONFIG.commitlog_segment_size_bytes
INTERVAL = CONFIG.disk_check_interval_ms
BODY = 1000


class Disk:
    """The injected disk_usage callable: ``ratio`` or ``ratio_of(root)``; counts calls."""

    def __init__(self, ratio_of: Callable[[Path], float] | None = None) -> None:
        self.ratio = LOW
        self.ratio_of = ratio_of
        self.calls = 0

    def __call__(self, root: Path) -> float:
        self.calls += 1
        return self.ratio_of(root) if self.ratio_of is not None else self.ratio


def commitlog_files(root: Path) -> int:
    directory = root / "commitlog"
    return sum(1 for _ in directory.iterdir()) if directory.is_dir() else 0


def open_store(root: Path, disk: Disk, clock: FakeClock) -> MessageStore:
    return MessageStore(root, CONFIG, clock=clock, disk_usage=disk)


def started(store: MessageStore) -> int:
    """Two puts: the first allocates the first segments, the second measures after that.
    Returns the size of one record."""
    first = put(store)
    assert first.ok and put(store).ok
    return first.store_sizes[0]


def put(store: MessageStore, body: bytes = b"m" * BODY) -> PutResult:
    return store.put_messages([InnerMessage(topic="T", queue_id=0, body=body)])


def assert_refused_and_unchanged(store: MessageStore, result: PutResult) -> None:
    """DISK_FULL with its clear error, nothing written, and the store still readable."""
    written, top = store.written_offset, store.max_offset("T", 0)
    assert result.status is PutStatus.DISK_FULL
    assert "disk_warning_ratio" in result.error
    assert result.results == []
    assert (store.written_offset, store.max_offset("T", 0)) == (written, top)
    last = store.get_messages("g", "T", 0, top - 1)
    assert (last.status, last.count) == (GetStatus.FOUND, 1)


def test_a_disk_filled_by_the_stores_own_segments_refuses_the_put_after_the_allocation(
    tmp_path: Path,
) -> None:
    """Usage grows with every commit-log segment the store allocates (0.25 a file; 1.0 at
    the fourth, past the limit). The clock never moves, so no interval is ever due: the
    allocation itself makes the next put measure, and that put is refused; no fifth
    segment is ever made."""
    disk = Disk(lambda root: 0.25 * commitlog_files(root))
    store = open_store(tmp_path, disk, FakeClock(T0))
    created_by: list[int] = []
    while True:
        files = commitlog_files(tmp_path)
        before = (store.written_offset, store.max_offset("T", 0))
        result = put(store)
        if not result.ok:
            break
        created_by.append(commitlog_files(tmp_path) - files)
        assert len(created_by) < 1000, "never refused"
    assert_refused_and_unchanged(store, result)
    assert (store.written_offset, store.max_offset("T", 0)) == before
    assert commitlog_files(tmp_path) == 4
    assert created_by[-1] == 1  # the put just before the refused one made the fourth file
    assert sum(created_by) == 4
    assert put(store).status is PutStatus.DISK_FULL  # and it stays refused
    assert commitlog_files(tmp_path) == 4
    store.close()


def test_a_put_that_needs_a_new_segment_measures_first_and_is_refused_with_nothing_written(
    tmp_path: Path,
) -> None:
    """Someone else fills the disk; the clock never moves. Puts that fit the current segment
    take no measurement; the first one that needs a new segment measures before
    allocating it and is refused: no new file, nothing written."""
    disk = Disk()
    store = open_store(tmp_path, disk, FakeClock(T0))
    size = started(store)
    disk.ratio = HIGH
    measured = disk.calls
    fitting = 0
    while not store.commitlog.needs_segment(size):
        assert put(store).ok  # within the segment: no measurement is due
        fitting += 1
    assert fitting > 10
    assert disk.calls == measured
    assert_refused_and_unchanged(store, put(store))
    assert disk.calls == measured + 1
    assert commitlog_files(tmp_path) == 1
    disk.ratio = LOW
    assert put(store).ok  # measured again before allocating: accepted
    assert commitlog_files(tmp_path) == 2
    store.close()


def test_a_disk_filled_by_someone_else_is_refused_after_the_interval_without_a_tick(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """No retention_tick: the first put disk_check_interval_ms after the last measurement
    measures; usage dropping again lifts the refusal the same way."""
    disk = Disk()
    clock = FakeClock(T0)
    store = open_store(tmp_path, disk, clock)
    started(store)
    disk.ratio = HIGH
    clock.advance(INTERVAL - 1)
    assert put(store).ok  # not yet due
    clock.advance(1)
    with caplog.at_level(logging.ERROR, logger="rayq.store"):
        assert_refused_and_unchanged(store, put(store))
    assert "past disk_warning_ratio" in caplog.text
    disk.ratio = LOW
    assert put(store).status is PutStatus.DISK_FULL  # measured just now: not due again
    clock.advance(INTERVAL)
    assert put(store).ok
    store.close()


def test_puts_do_not_measure_the_disk_each_time(tmp_path: Path) -> None:
    """Thousands of puts over a few seconds measure once per allocated file (commit-log
    and consume-queue segments, twice for the former: before and after), once per
    interval, and once at the start."""
    disk = Disk()
    clock = FakeClock(T0)
    store = open_store(tmp_path, disk, clock)
    puts = 3000
    for _ in range(puts):
        assert put(store, b"s" * 100).ok
        clock.advance(1)
    files = sum(1 for p in tmp_path.rglob("*") if p.is_file() and p.name.isdigit())
    assert files < puts // 50
    assert disk.calls <= 1 + 2 * files + puts // INTERVAL
    assert disk.calls < puts // 25
    store.close()


def test_gauge_measures_when_due_and_keeps_its_state_when_measuring_fails() -> None:
    """Due after the interval, after ``stale`` and when the clock went back; an OSError
    keeps the last state and is tried again after the interval."""
    ratios: list[float | Exception] = [HIGH, LOW, OSError("gone"), LOW]

    def usage(_root: Path) -> float:
        got = ratios.pop(0)
        if isinstance(got, Exception):
            raise got
        return got

    gauge = DiskGauge(Path("/nowhere"), usage, 0.9, 100)
    assert gauge.check(T0) is True
    assert gauge.check(T0 + 99) is True  # cached
    assert gauge.check(T0 - 1) is False  # the clock went back: measured (LOW)
    gauge.stale()
    assert gauge.check(T0) is False  # measuring failed: the last state stays
    assert gauge.check(T0 + 50) is False and len(ratios) == 1  # not retried before the interval
    gauge.update(HIGH, T0 + 60)  # a retention tick's measurement
    assert gauge.check(T0 + 61) is True
    assert gauge.check(T0 + 160) is False and ratios == []


def test_a_broker_put_on_a_full_disk_raises_disk_full_error(tmp_path: Path) -> None:
    """BrokerServer.put surfaces DISK_FULL as DiskFullError (retriable), nothing appended."""
    srv = BrokerServer(BrokerConfig(store=CONFIG), str(tmp_path))
    try:
        srv.create_topic(
            CreateTopicRequest(topic="t", read_queue_nums=1, write_queue_nums=1, perm=6)
        )

        def batch() -> object:
            msgs = [InnerMessage(topic="t", queue_id=0, body=b"x" * 100)]
            return encode_batch(msgs, max_body_bytes=1 << 20, max_properties_bytes=4096)

        assert srv.put(batch()).queue_offsets == [0]  # type: ignore[arg-type]
        srv.store.disk.usage = lambda _root: HIGH
        srv.store.disk.stale()
        with pytest.raises(DiskFullError, match="disk_warning_ratio") as info:
            srv.put(batch())  # type: ignore[arg-type]
        assert info.value.retriable
        assert srv.store.max_offset("t", 0) == 1
    finally:
        srv.close()
