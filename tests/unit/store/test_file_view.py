"""store/file_view.py: a read-only view of a store's files gives the pages the store gives.

The view runs beside a live store here (as a page reader beside its broker): the same
records and checks, new segments and files found as they appear, and what retention
deleted read as removed, with the deleted file's mapping dropped."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rayq.actors.server import columnar
from rayq.store import GetStatus, InnerMessage, MessageStore, StoreConfig, codec
from rayq.store.file_view import StoreFiles

CONFIG = StoreConfig.for_tests(commitlog_segment_size_bytes=64 * 1024, cq_entries_per_file=256)


def _msgs(n: int, queue_id: int = 0, size: int = 300) -> list[InnerMessage]:
    return [
        InnerMessage(
            topic="T",
            queue_id=queue_id,
            body=bytes([i % 251]) * (size + i % 7),
            tags="a",
            keys=f"k{i}",
        )
        for i in range(n)
    ]


@pytest.fixture
def store(tmp_path: Path) -> MessageStore:
    with MessageStore(tmp_path / "s", CONFIG, broker_name="b") as s:
        yield s


@pytest.fixture
def files(store: MessageStore) -> StoreFiles:
    view = StoreFiles(store.root, CONFIG)
    yield view
    view.close()


def _offsets(page_buffer: bytes, starts: np.ndarray) -> list[int]:
    return [codec.HEADER.unpack_from(page_buffer, s)[3] for s in starts.tolist()]


def test_pages_equal_the_stores_across_segments_and_files(
    store: MessageStore, files: StoreFiles
) -> None:
    assert store.put_messages(_msgs(200) + _msgs(300, queue_id=1)).ok  # many segments
    assert len(store.commitlog.file.segments) > 2
    end = store.queues[("T", 1)].max_offset
    for start, count, max_bytes in ((0, 1000, 1 << 30), (17, 40, 5000), (255, 10, 1 << 20)):
        want = store.read_page("T", 1, start, count, max_bytes)
        got = files.read_page("T", 1, start, count, max_bytes, end)
        assert got.status is want.status is GetStatus.FOUND
        assert got.buffer == want.buffer and got.starts.tolist() == want.starts.tolist()
        assert (got.next_offset, got.full) == (want.next_offset, want.full)


def test_columns_through_the_view_equal_the_stores(store: MessageStore, files: StoreFiles) -> None:
    assert store.put_messages(_msgs(120)).ok

    class Upto:
        def read_page(self, *args: int | str) -> object:
            return files.read_page(*args, 120)  # type: ignore[arg-type]

    for columns in (None, [], ["body"], ["keys", "queue_offset"]):
        want, nxt = columnar.read_columns(store, "T", 0, 3, 120, 1 << 20, "b", columns)
        got, nxt2 = columnar.read_columns(Upto(), "T", 0, 3, 120, 1 << 20, "b", columns)
        assert got.equals(want) and nxt == nxt2 and got.num_rows == 117


def test_reads_stop_at_the_given_end(store: MessageStore, files: StoreFiles) -> None:
    assert store.put_messages(_msgs(50)).ok
    page = files.read_page("T", 0, 0, 1000, 1 << 30, 30)
    assert _offsets(page.buffer, page.starts) == list(range(30)) and page.next_offset == 30
    assert files.read_page("T", 0, 30, 10, 1 << 20, 30).status is GetStatus.OFFSET_OVERFLOW_ONE


def test_records_and_files_written_after_the_view_opened_are_read(
    store: MessageStore, files: StoreFiles
) -> None:
    assert store.put_messages(_msgs(10)).ok
    assert len(files.read_page("T", 0, 0, 100, 1 << 30, 10).starts) == 10
    assert files.read_page("T", 2, 0, 10, 1 << 20, 5).status is GetStatus.NO_MATCHED_LOGIC_QUEUE
    assert store.put_messages(_msgs(600) + _msgs(5, queue_id=2)).ok  # new segments, queue 2
    seen, offset = [], 0
    while offset < 610:  # a page ends with its consume-queue file
        page = files.read_page("T", 0, offset, 1000, 1 << 30, 610)
        seen += _offsets(page.buffer, page.starts)
        offset = page.next_offset
    assert seen == list(range(610))
    assert len(files.read_page("T", 2, 0, 10, 1 << 20, 5).starts) == 5


def test_damaged_record_is_left_out_as_the_store_leaves_it(
    store: MessageStore, files: StoreFiles
) -> None:
    assert store.put_messages(_msgs(50)).ok
    offset, _size, _ = store.queues[("T", 0)].entry(20)
    seg = store.commitlog.file.find(offset)
    seg.mv[offset - seg.start + codec.HEADER_SIZE] ^= 0xFF  # a body byte
    page = files.read_page("T", 0, 0, 100, 1 << 20, 50)
    assert page.damaged == 1
    assert _offsets(page.buffer, page.starts) == [q for q in range(50) if q != 20]


def test_pages_are_views_of_the_mapping_when_their_records_are_one_run(
    store: MessageStore, files: StoreFiles
) -> None:
    assert store.put_messages(_msgs(30)).ok
    page = files.read_page("T", 0, 0, 30, 1 << 20, 30)
    assert isinstance(page.buffer, memoryview) and page.buffer.readonly  # not copied
    assert bytes(page.buffer) == store.read_page("T", 0, 0, 30, 1 << 20).buffer


def test_what_retention_deleted_reads_as_removed(store: MessageStore, files: StoreFiles) -> None:
    assert store.put_messages(_msgs(1000)).ok
    held = files.read_page("T", 0, 0, 10, 1 << 20, 1000)  # maps segment 0, keeps a view
    assert len(held.starts) == 10
    before = bytes(held.buffer)
    first = store.commitlog.file.segments[0]
    first_path = first.path
    for _ in range(3):  # as retention_tick does
        store.commitlog.delete_first_segment()
    for cq in store.queues.values():
        cq.delete_expired(store.commitlog.min_offset)
    lo = store.queues[("T", 0)].min_offset
    assert lo > 0 and not first_path.exists()
    page = files.read_page("T", 0, 0, 10, 1 << 20, 1000)
    assert page.status is GetStatus.OFFSET_TOO_SMALL and page.min_offset == lo
    assert 0 not in files.commitlog.file.mapped  # the deleted file's mapping is dropped
    assert bytes(held.buffer) == before  # a page still held keeps its mapping readable
    del held
    want = store.read_page("T", 0, lo, 1000, 1 << 30)
    got = files.read_page("T", 0, lo, 1000, 1 << 30, 1000)
    assert got.buffer == want.buffer and got.next_offset == want.next_offset


def test_a_topic_deleted_and_made_anew_is_read_anew(store: MessageStore, files: StoreFiles) -> None:
    """Given a view that read a topic's queue, when the topic is deleted and its queue is
    written again (new files under the old names), then the view reads the new records,
    not the old file it had mapped."""
    assert store.put_messages(_msgs(20)).ok
    old = files.read_page("T", 0, 0, 5, 1 << 20, 20)
    assert len(old.starts) == 5
    store.delete_topic("T")
    fresh = [
        InnerMessage(topic="T", queue_id=0, body=f"new-{i}".encode(), tags="b") for i in range(5)
    ]
    assert store.put_messages(fresh).ok
    want = store.read_page("T", 0, 0, 5, 1 << 20)
    got = files.read_page("T", 0, 0, 5, 1 << 20, 5)
    assert got.buffer == want.buffer and len(got.starts) == 5
    bodies = [codec.decode_record(got.buffer, s).body for s in got.starts.tolist()]
    assert bodies == [f"new-{i}".encode() for i in range(5)]


def test_file_view_does_not_import_ray() -> None:
    code = "import sys, rayq.store.file_view; assert 'ray' not in sys.modules; print('ok')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ok"


def test_a_page_ends_with_a_long_first_run_and_is_read_in_place(
    store: MessageStore, files: StoreFiles
) -> None:
    """Two writers' batches interleaved in the log (queue 0 and 1): a run of queue 0 is 40
    records (~12 KiB). A page whose cap that run fills to a quarter ends with it, in
    place; one whose cap it fills less of joins the runs (a copy); all records either way."""
    for _ in range(4):
        assert store.put_messages(_msgs(40)).ok and store.put_messages(_msgs(40, 1)).ok
    end = store.queues[("T", 0)].max_offset
    assert end == 160
    page = files.read_page("T", 0, 0, 1000, 32 * 1024, end)
    assert isinstance(page.buffer, memoryview)
    assert _offsets(page.buffer, page.starts) == list(range(40))
    assert page.next_offset == 40 and page.full
    joined = files.read_page("T", 0, 0, 1000, 96 * 1024, end)
    assert isinstance(joined.buffer, bytes) and len(joined.starts) > 40
    for cap in (32 * 1024, 96 * 1024):
        seen, offset = [], 0
        while offset < end:
            page = files.read_page("T", 0, offset, 1000, cap, end)
            seen += _offsets(page.buffer, page.starts)
            offset = page.next_offset
        assert seen == list(range(end)), cap
