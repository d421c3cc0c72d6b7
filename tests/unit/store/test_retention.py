"""Retention: which commit-log segments go when, what follows them, and the disk-full switch.

Time comes from a FakeClock and disk usage from an injected callable, so every
rule (delete hour, disk ratios, expiry, batch limit) is driven by hand.
"""

from __future__ import annotations

import struct
import time
from pathlib import Path

from rayq.store import (
    FakeClock,
    GetStatus,
    InnerMessage,
    MessageStore,
    PutStatus,
    StoreConfig,
    decode_records,
)

HOUR_MS = 3_600_000
T0 = 1_700_000_000_000
RESERVED_HOURS = 1
BODY = 1000
LOW, MAX_USED, FORCIBLY, WARNING = 0.10, 0.80, 0.87, 0.95  # vs defaults 0.75 / 0.85 / 0.90


def local_hour(ms: int) -> int:
    return time.localtime(ms / 1000).tm_hour


class Disk:
    """The injected disk_usage callable: returns whatever ratio the test sets."""

    def __init__(self) -> None:
        self.ratio = LOW
        self.calls: list[Path] = []

    def __call__(self, path: Path) -> float:
        self.calls.append(path)
        return self.ratio


def make_store(
    root: Path,
    clock: FakeClock,
    disk: Disk,
    *,
    delete_at_ms: int,
    at_hour: bool,
    **overrides: object,
) -> MessageStore:
    """A store whose delete_when is (or is not) the local hour of ``delete_at_ms``."""
    hour = local_hour(delete_at_ms) if at_hour else (local_hour(delete_at_ms) + 12) % 24
    config = StoreConfig.for_tests(
        delete_when=f"{hour:02d}",
        file_reserved_hours=RESERVED_HOURS,
        index_entries_max=64,
        **overrides,
    )
    return MessageStore(root, config, clock=clock, disk_usage=disk)


def fill(store: MessageStore, segments: int, *, tag: str) -> list[tuple[int, str]]:
    """Append 1 KiB messages to T/0 until ``segments`` more segments were started.

    Returns (queue_offset, key) of each message.
    """
    out: list[tuple[int, str]] = []
    seg = store.config.commitlog_segment_size_bytes
    target = (store.written_offset // seg + segments) * seg
    while store.written_offset < target:
        key = f"{tag}{len(out)}"
        r = store.put_messages(
            [InnerMessage(topic="T", queue_id=0, body=b"r" * BODY, keys=f"{key} all")]
        )
        assert r.ok, r.error
        out.append((r.results[0].queue_offset, key))
    return out


def commitlog_files(root: Path) -> list[int]:
    return sorted(int(p.name) for p in (root / "commitlog").iterdir())


Written = list[tuple[int, str]]


def two_age_store(
    root: Path, disk: Disk, *, at_hour: bool, **overrides: object
) -> tuple[MessageStore, FakeClock, Written, Written]:
    """Segments 0 and 1 written at T0, segments 2.. two hours later; 'now' is T0 + 2h + 1 min.

    Segment k's age is the store time of segment k+1's first record, so segments
    0 and 1 are expired (next first record at T0), segment 2 on are not.
    """
    now = T0 + 2 * HOUR_MS + 60_000
    clock = FakeClock(T0)
    store = make_store(root, clock, disk, delete_at_ms=now, at_hour=at_hour, **overrides)
    old = fill(store, 2, tag="old")  # ends just inside segment 2
    clock.advance(2 * HOUR_MS)
    new = fill(store, 3, tag="new")  # segments 2 (rest), 3, 4, 5 start
    clock.advance(60_000)
    assert clock.now_ms() == now
    return store, clock, old, new


SEG = StoreConfig.for_tests().commitlog_segment_size_bytes


def test_nothing_is_deleted_outside_delete_hour_when_disk_is_low(tmp_path: Path) -> None:
    """Expired segments stay while it is not a delete_when hour and the disk is not filling."""
    disk = Disk()
    store, _clock, _old, _new = two_age_store(tmp_path, disk, at_hour=False)
    files = commitlog_files(tmp_path)
    report = store.retention_tick()
    assert report.segments_to_delete == 0
    assert report.reason == ""
    assert not report.disk_full
    assert commitlog_files(tmp_path) == files
    assert store.min_offset("T", 0) == 0
    assert disk.calls
    store.close()


def test_delete_hour_deletes_expired_segments_oldest_first_only(tmp_path: Path) -> None:
    """At the delete_when hour segments 0 and 1 (expired) go; segment 2 on (young) stay."""
    disk = Disk()
    store, _clock, _old, _new = two_age_store(tmp_path, disk, at_hour=True)
    files = commitlog_files(tmp_path)
    assert files[:3] == [0, SEG, 2 * SEG]
    report = store.retention_tick()
    assert report.reason == "delete_when"
    assert report.segments_to_delete == 2
    assert commitlog_files(tmp_path) == files[2:]
    again = store.retention_tick()
    assert again.segments_to_delete == 0
    assert commitlog_files(tmp_path) == files[2:]
    store.close()


def test_delete_hour_never_deletes_the_active_segment(tmp_path: Path) -> None:
    """When everything is expired, all segments but the one being written go."""
    disk = Disk()
    clock = FakeClock(T0)
    later = T0 + 10 * HOUR_MS
    store = make_store(tmp_path, clock, disk, delete_at_ms=later, at_hour=True)
    fill(store, 4, tag="m")
    clock.advance(10 * HOUR_MS)
    files = commitlog_files(tmp_path)
    assert len(files) == 5
    report = store.retention_tick()
    assert report.segments_to_delete == 4
    assert commitlog_files(tmp_path) == files[-1:]
    assert store.retention_tick().segments_to_delete == 0
    assert commitlog_files(tmp_path) == files[-1:]
    r = store.put_messages([InnerMessage(topic="T", queue_id=0, body=b"after")])
    assert r.ok, r.error
    store.close()


def test_disk_above_max_used_ratio_deletes_expired_at_any_hour(tmp_path: Path) -> None:
    """Past disk_max_used_space_ratio expired segments go at any hour; young ones stay."""
    disk = Disk()
    store, _clock, _old, _new = two_age_store(tmp_path, disk, at_hour=False)
    files = commitlog_files(tmp_path)
    disk.ratio = MAX_USED
    report = store.retention_tick()
    assert report.reason == "disk past disk_max_used_space_ratio"
    assert report.segments_to_delete == 2
    assert not report.disk_full
    assert commitlog_files(tmp_path) == files[2:]
    store.close()


def test_disk_above_clean_forcibly_ratio_deletes_young_segments_but_not_the_last(
    tmp_path: Path,
) -> None:
    """Past disk_clean_forcibly_ratio even unexpired segments go, oldest first, never the last."""
    disk = Disk()
    clock = FakeClock(T0)
    store = make_store(tmp_path, clock, disk, delete_at_ms=T0, at_hour=False)
    fill(store, 5, tag="young")
    files = commitlog_files(tmp_path)
    disk.ratio = FORCIBLY
    report = store.retention_tick()
    assert report.reason == "disk past disk_clean_forcibly_ratio"
    assert report.segments_to_delete == len(files) - 1
    assert commitlog_files(tmp_path) == files[-1:]
    assert store.retention_tick().segments_to_delete == 0
    assert commitlog_files(tmp_path) == files[-1:]
    store.close()


def test_disk_above_warning_ratio_refuses_writes_until_it_drops(tmp_path: Path) -> None:
    """Past disk_warning_ratio puts get DISK_FULL with a clear error; a tick below lifts it."""
    disk = Disk()
    store = make_store(tmp_path, FakeClock(T0), disk, delete_at_ms=T0, at_hour=False)
    fill(store, 1, tag="m")
    disk.ratio = WARNING
    assert store.retention_tick().disk_full
    written = store.written_offset
    top = store.max_offset("T", 0)
    result = store.put_messages([InnerMessage(topic="T", queue_id=0, body=b"refused")])
    assert result.status is PutStatus.DISK_FULL
    assert "disk_warning_ratio" in result.error
    assert result.results == []
    assert store.written_offset == written
    assert store.max_offset("T", 0) == top
    assert store.get_messages("g", "T", 0, store.min_offset("T", 0)).status is GetStatus.FOUND

    disk.ratio = LOW
    assert not store.retention_tick().disk_full
    result = store.put_messages([InnerMessage(topic="T", queue_id=0, body=b"accepted")])
    assert result.ok, result.error
    assert result.results[0].queue_offset == top
    store.close()


def test_disk_full_is_lifted_by_the_next_measurement_not_by_every_put(tmp_path: Path) -> None:
    """A tick's disk state holds for disk_check_interval_ms: puts in that time do not ask
    the disk again (still refused after usage dropped); the first put after it measures
    and is accepted, without another tick."""
    disk = Disk()
    clock = FakeClock(T0)
    store = make_store(tmp_path, clock, disk, delete_at_ms=T0, at_hour=False)
    assert store.put_messages([InnerMessage(topic="T", queue_id=0, body=b"x")]).ok
    disk.ratio = WARNING
    store.retention_tick()  # one segment: nothing to delete, so nothing freed
    disk.ratio = LOW
    measured = len(disk.calls)
    clock.advance(store.config.disk_check_interval_ms - 1)
    refused = store.put_messages([InnerMessage(topic="T", queue_id=0, body=b"x")])
    assert refused.status is PutStatus.DISK_FULL
    assert len(disk.calls) == measured
    clock.advance(1)
    assert store.put_messages([InnerMessage(topic="T", queue_id=0, body=b"x")]).ok
    assert len(disk.calls) == measured + 1
    store.close()


def test_read_of_deleted_range_is_offset_too_small_with_next_at_new_min(tmp_path: Path) -> None:
    """After deletion old offsets answer OFFSET_TOO_SMALL, next_begin_offset = the new minimum."""
    disk = Disk()
    store, _clock, old, new = two_age_store(tmp_path, disk, at_hour=True)
    assert store.retention_tick().segments_to_delete == 2
    cl_min = 2 * SEG
    lo = store.min_offset("T", 0)
    first_survivor = store.get_messages("g", "T", 0, lo, 1)
    assert first_survivor.status is GetStatus.FOUND
    m = decode_records(first_survivor.buffer)[0]
    assert m.queue_offset == lo
    assert m.commitlog_offset >= cl_min
    assert lo > 0
    previous = store.lookup_message(m.commitlog_offset)
    assert previous is not None
    for offset in (0, old[len(old) // 2][0], lo - 1):
        r = store.get_messages("g", "T", 0, offset)
        assert r.status is GetStatus.OFFSET_TOO_SMALL
        assert r.next_begin_offset == lo
    assert new[-1][0] + 1 == store.max_offset("T", 0)
    store.close()


def _cq_last_entries(root: Path) -> dict[str, int]:
    """For each consume-queue file of T/0: commit-log offset of its last written entry."""
    out: dict[str, int] = {}
    for path in sorted((root / "consumequeue" / "T" / "0").iterdir()):
        raw = path.read_bytes()
        entries = [struct.unpack_from(">qiq", raw, i) for i in range(0, len(raw), 20)]
        written = [e for e in entries if e != (0, 0, 0)]
        out[path.name] = written[-1][0]
    return out


def _index_end_offsets(root: Path) -> dict[str, int]:
    """For each index file: end_phy_offset from its header (bytes 24..32)."""
    return {
        p.name: struct.unpack_from(">q", p.read_bytes(), 24)[0]
        for p in sorted((root / "index").iterdir())
    }


def test_consume_queue_and_index_files_of_deleted_data_are_removed(tmp_path: Path) -> None:
    """CQ and index files whose entries all point below the new commit-log start go; others stay."""
    disk = Disk()
    store, _clock, _old, _new = two_age_store(tmp_path, disk, at_hour=True)
    store.flush()  # index entries are written in batches; make them visible on disk
    cl_min = 2 * SEG
    cq_before = _cq_last_entries(tmp_path)
    index_before = _index_end_offsets(tmp_path)
    stale_cq = [n for n, last in list(cq_before.items())[:-1] if last < cl_min]
    stale_index = [n for n, end in list(index_before.items())[:-1] if end < cl_min]
    assert stale_cq
    assert stale_index

    report = store.retention_tick()

    assert report.segments_to_delete == 2
    assert report.cq_segments_deleted == len(stale_cq)
    assert report.index_files_deleted == len(stale_index)
    assert sorted(_cq_last_entries(tmp_path)) == sorted(set(cq_before) - set(stale_cq))
    assert sorted(_index_end_offsets(tmp_path)) == sorted(set(index_before) - set(stale_index))
    store.close()


def test_query_after_deletion_returns_only_surviving_messages(tmp_path: Path) -> None:
    """query_message skips index entries of deleted records and returns the survivors."""
    disk = Disk()
    store, _clock, old, new = two_age_store(tmp_path, disk, at_hour=True)
    assert store.retention_tick().segments_to_delete == 2
    cl_min = 2 * SEG
    survivors = store.query_message("T", "all", max_num=10_000, begin_ms=0)
    lo = store.min_offset("T", 0)
    assert sorted(m.queue_offset for m in survivors) == list(range(lo, store.max_offset("T", 0)))
    assert all(m.commitlog_offset >= cl_min for m in survivors)
    assert store.query_message("T", old[0][1], begin_ms=0) == []
    assert store.query_message("T", old[len(old) // 2][1], begin_ms=0) == []
    assert [m.queue_offset for m in store.query_message("T", new[-1][1], begin_ms=0)] == [
        new[-1][0]
    ]
    store.close()


def test_deletion_is_limited_to_delete_files_batch_max_per_tick(tmp_path: Path) -> None:
    """With delete_files_batch_max=2, six expired segments take three ticks."""
    disk = Disk()
    clock = FakeClock(T0)
    later = T0 + 10 * HOUR_MS
    store = make_store(
        tmp_path, clock, disk, delete_at_ms=later, at_hour=True, delete_files_batch_max=2
    )
    fill(store, 6, tag="m")
    clock.advance(10 * HOUR_MS)
    files = commitlog_files(tmp_path)
    assert len(files) == 7
    for tick in range(1, 4):
        assert store.retention_tick().segments_to_delete == 2
        assert commitlog_files(tmp_path) == files[2 * tick :]
    assert store.retention_tick().segments_to_delete == 0
    assert commitlog_files(tmp_path) == files[-1:]
    store.close()


def test_forced_deletion_also_respects_the_batch_limit(tmp_path: Path) -> None:
    """Past disk_clean_forcibly_ratio, still at most delete_files_batch_max segments per tick."""
    disk = Disk()
    store = make_store(
        tmp_path, FakeClock(T0), disk, delete_at_ms=T0, at_hour=False, delete_files_batch_max=3
    )
    fill(store, 5, tag="m")
    disk.ratio = FORCIBLY
    assert store.retention_tick().segments_to_delete == 3
    assert store.retention_tick().segments_to_delete == 2
    assert store.retention_tick().segments_to_delete == 0
    store.close()


def test_deleted_segments_stay_deleted_after_reopen(tmp_path: Path) -> None:
    """A reopened store starts at the new first segment and keeps the raised queue minimum."""
    disk = Disk()
    store, clock, _old, _new = two_age_store(tmp_path, disk, at_hour=True)
    store.retention_tick()
    lo = store.min_offset("T", 0)
    hi = store.max_offset("T", 0)
    store.close()
    reopened = MessageStore(tmp_path, store.config, clock=clock, disk_usage=disk)
    assert commitlog_files(tmp_path)[0] == 2 * SEG
    assert reopened.max_offset("T", 0) == hi
    r = reopened.get_messages("g", "T", 0, 0)
    assert r.status is GetStatus.OFFSET_TOO_SMALL
    assert r.next_begin_offset == reopened.min_offset("T", 0)
    assert reopened.min_offset("T", 0) == lo
    reopened.close()
