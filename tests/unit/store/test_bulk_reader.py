"""store/bulk_reader.py: pages of records for columnar reads, checked like every read."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rayq.store import GetStatus, InnerMessage, MessageStore, StoreConfig, codec
from rayq.store.bulk_reader import FIRST_WINDOW_ENTRIES, record_crcs, rows

CONFIG = StoreConfig.for_tests(commitlog_segment_size_bytes=256 * 1024, cq_entries_per_file=4096)


def _msgs(n: int, size: int = 40) -> list[InnerMessage]:
    return [
        InnerMessage(topic="T", queue_id=0, body=bytes([i % 251]) * (size + i % 7), tags="a")
        for i in range(n)
    ]


@pytest.fixture
def store(tmp_path: Path) -> MessageStore:
    with MessageStore(tmp_path / "s", CONFIG, broker_name="b") as s:
        yield s


def _record_offsets(page_buffer: bytes, starts: np.ndarray) -> list[int]:
    return [codec.HEADER.unpack_from(page_buffer, s)[3] for s in starts.tolist()]


def test_record_crcs_match_the_codec_for_records_of_any_size() -> None:
    rng = random.Random(7)
    sizes = [codec.FIXED_SIZE + rng.randrange(0, 3000) for _ in range(200)]
    buffer = rng.randbytes(sum(sizes) + 5)
    starts = np.cumsum([0, *sizes[:-1]]).astype(np.int64)
    expected = [
        codec.record_crc(buffer, s, s + n) for s, n in zip(starts.tolist(), sizes, strict=True)
    ]
    got = record_crcs(buffer, starts, np.array(sizes, dtype=np.int64))
    assert got.tolist() == expected


def test_rows_pad_past_the_end_with_zeros() -> None:
    raw = np.arange(10, dtype=np.uint8)
    got = rows(raw, np.array([0, 7, 9]), 4)
    assert got.tolist() == [[0, 1, 2, 3], [7, 8, 9, 0], [9, 0, 0, 0]]
    assert rows(raw[:2], np.array([0]), 4).tolist() == [[0, 1, 0, 0]]


def test_page_holds_the_records_in_queue_order(store: MessageStore) -> None:
    assert store.put_messages(_msgs(3000)).ok
    page = store.read_page("T", 0, 10, 5000, 1 << 30)
    assert page.status is GetStatus.FOUND
    assert len(page.starts) == 2990  # past the first window: it grew to the byte cap
    assert len(page.starts) > FIRST_WINDOW_ENTRIES
    assert _record_offsets(page.buffer, page.starts) == list(range(10, 3000))
    assert page.next_offset == 3000 and not page.full and page.damaged == 0


def test_byte_cap_stops_the_page_and_the_first_record_always_fits(store: MessageStore) -> None:
    assert store.put_messages(_msgs(100, size=1000)).ok
    page = store.read_page("T", 0, 0, 100, 5000)
    assert 0 < len(page.starts) < 5 and page.full
    assert len(page.buffer) <= 5000 and page.next_offset == len(page.starts)
    tiny = store.read_page("T", 0, 7, 100, 1)
    assert _record_offsets(tiny.buffer, tiny.starts) == [7] and tiny.next_offset == 8


def test_damaged_record_is_skipped_counted_and_read_past(store: MessageStore) -> None:
    assert store.put_messages(_msgs(50)).ok
    cq = store.queues[("T", 0)]
    offset, _size, _ = cq.entry(20)
    seg = store.commitlog.file.find(offset)
    at = offset - seg.start + codec.HEADER_SIZE  # first body byte
    seg.mv[at] ^= 0xFF
    page = store.read_page("T", 0, 0, 100, 1 << 20)
    assert page.damaged == 1 and page.status is GetStatus.FOUND
    assert _record_offsets(page.buffer, page.starts) == [q for q in range(50) if q != 20]
    assert page.next_offset == 50


def test_offsets_outside_the_queue_answer_statuses(store: MessageStore) -> None:
    assert store.read_page("T", 0, 0, 10, 100).status is GetStatus.NO_MATCHED_LOGIC_QUEUE
    assert store.put_messages(_msgs(5)).ok
    assert store.read_page("T", 0, 5, 10, 100).status is GetStatus.OFFSET_OVERFLOW_ONE
    store.queues[("T", 0)].min_logic_offset = 3 * 20  # as retention leaves it
    page = store.read_page("T", 0, 1, 10, 100)
    assert page.status is GetStatus.OFFSET_TOO_SMALL and page.min_offset == 3


def test_bulk_reader_does_not_import_ray() -> None:
    code = "import sys, rayq.store.bulk_reader; assert 'ray' not in sys.modules; print('ok')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ok"
