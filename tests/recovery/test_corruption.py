"""Flipped bytes: a damaged record is never served, and its neighbours always are.

Below the checkpoint nothing is re-validated on open, so the read path must check
every record's CRC. From the checkpoint on (here: the checkpoint file deleted, so
everything), recovery quarantines a record whose CRC fails but whose framing
holds, and truncates at a record it cannot frame (a torn tail).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from pathlib import Path

import pytest

from rayq.store import GetStatus, codec
from rayq.store.checkpoint import load_checkpoint

QUEUES = [("Flip", 0), ("Flip", 1), ("Flip", 2), ("Other", 0)]
GROUP = "recovery-tests"

# Where to flip, relative to the record start. Every field is protected: by the CRC,
# or (the store-assigned block, if the CRC leaves it out) by recovery's own checks.
FIELDS: dict[str, Callable[..., int]] = {
    "body": lambda s: codec.HEADER_SIZE + len(s.body) // 2,
    "queue_id": lambda s: codec.QUEUE_ID_OFFSET + 3,
    "store_timestamp": lambda s: codec.STORE_TIMESTAMP_OFFSET + 7,
    "queue_offset": lambda s: codec.COMMITLOG_OFFSET_OFFSET - 1,  # it precedes commitlog_offset
    "queue_offset_high_bit": lambda s: codec.COMMITLOG_OFFSET_OFFSET - 2,  # +-256
    "commitlog_offset": lambda s: codec.COMMITLOG_OFFSET_OFFSET + 7,
    "crc": lambda s: codec.CRC_OFFSET + 1,
    "properties": lambda s: s.store_size - 3,
}


def write_store(kit, root: Path, *, count: int = 80) -> list:
    """``count`` messages over several queues and segments, closed cleanly."""
    rng = random.Random(99)
    store = kit.open(root)
    sent = kit.write(store, rng, count, QUEUES, body_sizes=(300, 2500), batch_max=4)
    assert len(store.commitlog.file.segments) >= 2
    store.close()
    return sent


def middle_record(sent: list):
    """A record near the middle of the log with records of its queue before and after it."""
    for s in sent[len(sent) // 2 :]:
        same_queue = [t for t in sent if t.queue == s.queue]
        if same_queue[0] is not s and same_queue[-1] is not s:
            return s
    raise AssertionError("no record with neighbours in its queue")


def flip(kit, root: Path, target, field: str) -> None:
    path, local = kit.segment_of(root, target.commitlog_offset)
    kit.flip_byte(path, local + FIELDS[field](target), mask=0x01)


def assert_not_served(kit, store, target) -> None:
    """The damaged record is not readable by queue offset, key, unique id or msg id."""
    one = store.get_messages(GROUP, *target.queue, target.queue_offset, max_nums=1)
    assert one.count == 0
    assert one.status is GetStatus.OFFSET_FOUND_NULL
    assert one.next_begin_offset == target.queue_offset + 1
    _msgs, skipped = kit.read_queue(store, *target.queue)
    assert skipped == [target.queue_offset]
    assert store.query_message(target.topic, target.keys[0]) == []
    assert store.query_message(target.topic, target.uniq) == []
    assert store.view_message(target.uniq) is None
    host = codec.encode_host(kit.store_host)
    assert store.view_message(codec.offset_msg_id(host, target.commitlog_offset)) is None


@pytest.mark.parametrize("field", sorted(FIELDS))
def test_flipped_byte_in_unchecked_record_is_quarantined_and_neighbours_survive(
    kit, tmp_path: Path, caplog: pytest.LogCaptureFixture, field: str
) -> None:
    """Re-validation quarantines a record failing its CRC; all others stay readable."""
    root = tmp_path / "store"
    sent = write_store(kit, root)
    target = middle_record(sent)
    flip(kit, root, target, field)
    (root / "checkpoint").unlink()

    with caplog.at_level(logging.ERROR, logger="rayq.store"):
        store = kit.open(root)

    assert store.recovery.records_quarantined == [target.commitlog_offset]
    assert store.recovery.truncated_at is None
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert any(str(target.commitlog_offset) in e for e in errors), errors
    others = [s for s in sent if s is not target]
    kit.assert_consistent(store, others)
    assert_not_served(kit, store, target)
    assert kit.scan(root).quarantined == [target.commitlog_offset]


@pytest.mark.parametrize("field", ["body", "commitlog_offset"])
def test_quarantine_survives_a_later_crash_and_appends_continue_after_the_hole(
    kit, tmp_path: Path, field: str
) -> None:
    """After a quarantine, new messages take the next queue offsets and survive a crash."""
    root = tmp_path / "store"
    sent = write_store(kit, root)
    target = middle_record(sent)
    flip(kit, root, target, field)
    (root / "checkpoint").unlink()
    store = kit.open(root)
    new = kit.put(store, [kit.message(*target.queue, 100) for _ in range(3)])
    queue_end = max(s.queue_offset for s in sent if s.queue == target.queue) + 1
    assert [n.queue_offset for n in new] == [queue_end, queue_end + 1, queue_end + 2]
    store.crash()  # no checkpoint yet: the next open re-validates everything again

    store = kit.open(root)
    assert store.recovery.start_offset == 0
    assert store.recovery.records_quarantined == []  # set aside already
    others = [s for s in sent if s is not target]
    kit.assert_consistent(store, [*others, *new])
    assert_not_served(kit, store, target)


@pytest.mark.parametrize("field", sorted(FIELDS))
def test_flipped_byte_in_checkpointed_record_is_never_returned(
    kit, tmp_path: Path, caplog: pytest.LogCaptureFixture, field: str
) -> None:
    """Without re-validation the read path's CRC check hides the damaged record."""
    root = tmp_path / "store"
    sent = write_store(kit, root)
    target = middle_record(sent)
    flip(kit, root, target, field)

    store = kit.open(root)
    assert store.recovery.records_validated == 0
    assert store.recovery.records_quarantined == []
    with caplog.at_level(logging.ERROR, logger="rayq.store"):
        kit.assert_holds_exactly(store, [s for s in sent if s is not target])
        assert_not_served(kit, store, target)
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert any(str(target.commitlog_offset) in e for e in errors), errors


def test_quarantined_last_record_of_a_queue_keeps_its_queue_offset(kit, tmp_path: Path) -> None:
    """A quarantined record that ends its queue leaves a hole: its queue offset is not reused."""
    root = tmp_path / "store"
    rng = random.Random(5)
    store = kit.open(root)
    sent = kit.write(store, rng, 10, QUEUES, body_sizes=(100, 400))
    (target,) = kit.put(store, [kit.message("Solo", 0, 300)])
    sent += kit.write(store, rng, 10, QUEUES, body_sizes=(100, 400))
    store.close()
    flip(kit, root, target, "body")
    (root / "checkpoint").unlink()

    store = kit.open(root)
    assert store.recovery.records_quarantined == [target.commitlog_offset]
    assert store.max_offset("Solo", 0) == 1
    (new,) = kit.put(store, [kit.message("Solo", 0, 100)])
    assert new.queue_offset == 1
    msgs, skipped = kit.read_queue(store, "Solo", 0)
    assert skipped == [0]
    assert [m.body for m in msgs] == [new.body]


@pytest.mark.parametrize("size_byte", range(4))
def test_flipped_size_of_last_record_is_a_torn_tail(
    kit, tmp_path: Path, caplog: pytest.LogCaptureFixture, size_byte: int
) -> None:
    """A last record whose size field is damaged is cut off; everything before it is kept."""
    root = tmp_path / "store"
    rng = random.Random(17)
    store = kit.open(root)
    sent = kit.write(store, rng, 50, QUEUES, body_sizes=(300, 2500), batch_max=3)
    store.flush()
    sent += kit.write(store, rng, 6, QUEUES, body_sizes=(100, 500))
    last = max(sent, key=lambda s: s.commitlog_offset)
    assert last.commitlog_offset >= load_checkpoint(root).commitlog_flushed_offset
    store.crash()
    path, local = kit.segment_of(root, last.commitlog_offset)
    kit.flip_byte(path, local + size_byte, mask=0xFF)

    with caplog.at_level(logging.ERROR, logger="rayq.store"):
        store = kit.open(root)

    assert store.recovery.truncated_at == last.commitlog_offset
    assert store.recovery.truncated_bytes == last.store_size
    assert store.recovery.records_quarantined == []
    assert f"at {last.commitlog_offset}" in caplog.text
    kit.assert_consistent(store, [s for s in sent if s is not last])
    (new,) = kit.put(store, [kit.message(*last.queue, 100)])
    assert new.commitlog_offset == last.commitlog_offset
    assert new.queue_offset == last.queue_offset
