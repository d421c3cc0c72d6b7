"""Reads over damaged records: they do not use up a pull's caps, and a window with
nothing readable answers at once with the next offset past the damage.

The damage is a flipped body byte in records below the checkpoint (a clean close, so
the next open re-validates nothing): only the read path's check finds it. The pull
caps are shrunk (``max_transfer_count_in_memory``, ``max_transfer_bytes_in_memory``)
so that the damage is larger than what one pull may return.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from rayq.store import GetStatus, StoreConfig, codec, decode_records
from rayq.store.filters import TagFilter

GROUP = "recovery-tests"
COUNT = 20
DAMAGED = range(5, 11)  # queue offsets of the damaged records: six, more than a pull's cap
CAP = 4


def write_damaged(kit, root: Path, damaged: range) -> list:
    """COUNT messages of D/0 (and some of another queue between them), closed cleanly;
    then a body byte of each record at ``damaged`` flipped."""
    store = kit.open(root)
    sent = []
    for i in range(COUNT):
        sent += kit.put(store, [kit.message("D", 0, 300)])
        if i % 4 == 0:
            kit.put(store, [kit.message("Other", 0, 200)])
    store.close()
    for s in sent[damaged.start : damaged.stop]:
        path, local = kit.segment_of(root, s.commitlog_offset)
        kit.flip_byte(path, local + codec.HEADER_SIZE + len(s.body) // 2, mask=0x01)
    return sent


def offsets_of(result) -> list[int]:
    return [m.queue_offset for m in decode_records(result.buffer)]


@pytest.mark.parametrize("tags", [None, "tag0 || tag1 || tag2"])
def test_a_pull_from_before_the_damage_returns_the_records_after_it(
    kit, tmp_path: Path, caplog: pytest.LogCaptureFixture, tags: str | None
) -> None:
    """One call from offset 4: record 4, then the damaged 5..10 skipped (logged), then
    records 11.. up to the count cap, and the next offset right after them."""
    root = tmp_path / "store"
    write_damaged(kit, root, DAMAGED)
    kit.config = StoreConfig.for_tests(max_transfer_count_in_memory=CAP)
    store = kit.open(root)
    assert store.recovery.records_validated == 0  # below the checkpoint: not re-validated
    tag_filter = TagFilter.parse(tags) if tags else None
    with caplog.at_level(logging.ERROR, logger="rayq.store"):
        got = store.get_messages(GROUP, "D", 0, 4, max_nums=16, tag_filter=tag_filter)
    assert got.status is GetStatus.FOUND
    assert offsets_of(got) == [4, 11, 12, 13]
    assert got.count == CAP
    assert got.next_begin_offset == 14
    assert caplog.text.count("fails its CRC") == len(DAMAGED)


def test_damaged_records_do_not_use_up_the_byte_cap(kit, tmp_path: Path) -> None:
    """With a byte cap of about three records, the records after the damage fill what the
    damaged ones left, and the answer stays within the cap."""
    root = tmp_path / "store"
    sent = write_damaged(kit, root, DAMAGED)
    cap = sum(s.store_size for s in sent[4:7]) + 10  # about three records
    kit.config = StoreConfig.for_tests(max_transfer_bytes_in_memory=cap)
    store = kit.open(root)
    got = store.get_messages(GROUP, "D", 0, 4, max_nums=16)
    assert got.status is GetStatus.FOUND
    assert offsets_of(got) == [4, 11, 12]
    assert len(got.buffer) <= cap
    assert got.next_begin_offset == 13


def test_a_window_of_only_damaged_records_returns_the_next_offset_past_them(
    kit, tmp_path: Path
) -> None:
    """Nothing readable in the window (``max_nums`` entries): no records, OFFSET_FOUND_NULL,
    the next offset past the whole window; the next call reads on from there."""
    root = tmp_path / "store"
    write_damaged(kit, root, DAMAGED)
    kit.config = StoreConfig.for_tests(max_transfer_count_in_memory=CAP)
    store = kit.open(root)
    window = store.get_messages(GROUP, "D", 0, DAMAGED.start, max_nums=len(DAMAGED))
    assert (window.status, window.count, window.buffer) == (GetStatus.OFFSET_FOUND_NULL, 0, b"")
    assert window.next_begin_offset == DAMAGED.stop
    after = store.get_messages(GROUP, "D", 0, window.next_begin_offset, max_nums=2)
    assert offsets_of(after) == [DAMAGED.stop, DAMAGED.stop + 1]


def test_damage_at_the_end_of_a_queue_moves_the_next_offset_to_its_end(kit, tmp_path: Path) -> None:
    """The last records of a queue damaged: a pull from before them returns the readable
    ones and moves to the queue's end; a pull from them returns nothing and the end."""
    root = tmp_path / "store"
    tail = range(COUNT - 3, COUNT)
    write_damaged(kit, root, tail)
    store = kit.open(root)
    before = store.get_messages(GROUP, "D", 0, COUNT - 5, max_nums=32)
    assert (offsets_of(before), before.next_begin_offset) == ([COUNT - 5, COUNT - 4], COUNT)
    only = store.get_messages(GROUP, "D", 0, tail.start, max_nums=32)
    assert (only.status, only.count) == (GetStatus.OFFSET_FOUND_NULL, 0)
    assert only.next_begin_offset == store.max_offset("D", 0) == COUNT
