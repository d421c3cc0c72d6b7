"""Two faults together cost only the bytes they hit: recovery resyncs past damage.

Each case writes a workload over several segments and queues, stops the store,
damages the commit log (flipped bytes, zeros, a cut) together with a second fault
(checkpoint deleted, consume queues deleted, a restart with more writes) and
reopens it. Every complete record that was not hit must come back with its queue
offset unchanged, nothing damaged may be served (by queue, key, unique id or msg
id), the damage is set aside (kept in ``quarantine/``, reported) and a second
recovery finds nothing new to set aside.
"""

from __future__ import annotations

import logging
import os
import random
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from rayq.store import codec
from rayq.store.segment import segment_name

QUEUES = [("Sync", 0), ("Sync", 1), ("Sync", 2), ("Other", 0)]

# Every header field, and the two length fields after the body: where to flip,
# relative to the record start.
FIELDS: dict[str, Callable[..., int]] = {
    "total_size": lambda s: 1,
    "magic": lambda s: 6,
    "crc": lambda s: codec.CRC_OFFSET + 2,
    "queue_offset": lambda s: codec.QUEUE_OFFSET_OFFSET + 6,
    "commitlog_offset": lambda s: codec.COMMITLOG_OFFSET_OFFSET + 6,
    "store_timestamp": lambda s: codec.STORE_TIMESTAMP_OFFSET + 6,
    "store_host": lambda s: 37,
    "queue_id": lambda s: codec.QUEUE_ID_OFFSET + 3,
    "flag": lambda s: 48 + 3,
    "sys_flag": lambda s: 52 + 2,
    "born_timestamp": lambda s: 56 + 6,
    "born_host": lambda s: 64 + 1,
    "reconsume_times": lambda s: 72 + 3,
    "prepared_transaction_offset": lambda s: 76 + 7,
    "body_length": lambda s: codec.BODY_LENGTH_OFFSET + 2,
    "topic_length": lambda s: codec.HEADER_SIZE + len(s.body),
    "properties_length": lambda s: codec.HEADER_SIZE + len(s.body) + 1 + len(s.topic),
}
FRAMING = {"total_size", "magic", "body_length", "topic_length", "properties_length"}


def write_store(kit, root: Path, count: int = 200) -> list:
    """``count`` messages over several queues and at least four segments, closed cleanly."""
    store = kit.open(root)
    sent = kit.write(store, random.Random(11), count, QUEUES, body_sizes=(300, 2500), batch_max=4)
    assert len(store.commitlog.file.segments) >= 4
    store.close()
    return sent


def interior(sent: list, segment_size: int, *, first_in_segment: bool = False) -> list:
    """Records (in commit-log order) with records of their queue before and after them."""
    out = []
    for s in sent:
        same = [t for t in sent if t.queue == s.queue]
        if same[0] is s or same[-1] is s:
            continue
        if first_in_segment != (s.commitlog_offset % segment_size == 0):
            continue
        out.append(s)
    return sorted(out, key=lambda s: s.commitlog_offset)


def second_fault(root: Path, which: str) -> None:
    if which == "checkpoint deleted":
        (root / "checkpoint").unlink()
    else:
        shutil.rmtree(root / "consumequeue")


def reopen(kit, root: Path, caplog: pytest.LogCaptureFixture):
    with caplog.at_level(logging.ERROR, logger="rayq.store"):
        return kit.open(root)


def assert_not_served(store, damaged: list, *, by_offset: bool = True) -> None:
    """No damaged record is found by key, unique id or (``by_offset``: its place was not
    taken by a later append after a truncation) msg id."""
    host = codec.encode_host("127.0.0.1:10911")
    for s in damaged:
        for key in (*s.keys, s.uniq):
            assert store.query_message(s.topic, key) == [], key
        if by_offset:
            assert store.view_message(codec.offset_msg_id(host, s.commitlog_offset)) is None


def assert_recovered(kit, store, sent: list, damaged: list, *, on_disk: bool = True) -> None:
    """Everything not damaged reads back unchanged (queue offsets too), nothing damaged.

    ``on_disk``: the damage was set aside, so the files hold no damaged record either
    (else it is still there, below the checkpoint, and only the read path hides it)."""
    survivors = [s for s in sent if s not in damaged]
    if on_disk:
        kit.assert_consistent(store, survivors)
    else:
        kit.assert_holds_exactly(store, survivors)
    kit.assert_keys_found(store, survivors)
    assert_not_served(store, damaged)
    assert store.recovery.truncated_at is None
    for s in damaged:  # its queue offset is skipped, never taken by another record
        _msgs, skipped = kit.read_queue(store, *s.queue)
        assert s.queue_offset in skipped


def assert_set_aside_for_good(kit, root: Path, sent: list, damaged: list) -> None:
    """A crash and a full re-validation later: nothing new set aside, nothing lost."""
    kit.close_all()
    (root / "checkpoint").unlink(missing_ok=True)
    store = kit.open(root)
    assert store.recovery.start_offset == 0
    assert store.recovery.spans_set_aside == []
    assert store.recovery.records_quarantined == [] or store.recovery.records_quarantined == [
        d.commitlog_offset
        for d in damaged  # CRC damage the rebuild left to the read path
    ]
    assert_recovered(kit, store, sent, damaged)
    new = kit.put(store, [kit.message(*damaged[0].queue, 100)])
    assert new[0].queue_offset == max(s.queue_offset for s in sent if s.queue == new[0].queue) + 1
    store.close()


def flip(kit, root: Path, target, field: str, mask: int = 0x10) -> None:
    path, local = kit.segment_of(root, target.commitlog_offset)
    kit.flip_byte(path, local + FIELDS[field](target), mask=mask)


@pytest.mark.parametrize("fault", ["checkpoint deleted", "consume queues deleted"])
@pytest.mark.parametrize("field", sorted(FIELDS))
def test_flipped_header_byte_in_the_middle_of_a_segment_costs_only_that_record(
    kit, tmp_path: Path, caplog: pytest.LogCaptureFixture, field: str, fault: str
) -> None:
    root = tmp_path / "store"
    sent = write_store(kit, root)
    target = interior(sent, kit.config.commitlog_segment_size_bytes)[10]
    flip(kit, root, target, field)
    path, local = kit.segment_of(root, target.commitlog_offset)
    damaged_bytes = path.read_bytes()[local : local + target.store_size]
    second_fault(root, fault)

    store = reopen(kit, root, caplog)

    report = store.recovery
    crc_only = fault == "consume queues deleted" and field not in FRAMING
    if crc_only:
        # The rebuild trusts what it can frame below the checkpoint (no CRC pass); the
        # read path's CRC check hides the record instead.
        assert report.spans_set_aside == [] and report.records_quarantined == []
    elif field in FRAMING:
        assert report.spans_set_aside == [(target.commitlog_offset, target.end)]
        assert report.bytes_set_aside == target.store_size
        assert str(target.commitlog_offset) in caplog.text
        kept = (root / "quarantine" / segment_name(target.commitlog_offset)).read_bytes()
        assert kept == damaged_bytes.rstrip(b"\0")
    else:
        assert report.records_quarantined == [target.commitlog_offset]
    assert_recovered(kit, store, sent, [target], on_disk=not crc_only)
    assert_set_aside_for_good(kit, root, sent, [target])


@pytest.mark.parametrize("fault", ["checkpoint deleted", "consume queues deleted"])
@pytest.mark.parametrize("adjacent", [True, False])
def test_two_damaged_records_in_one_segment(
    kit, tmp_path: Path, caplog: pytest.LogCaptureFixture, fault: str, adjacent: bool
) -> None:
    root = tmp_path / "store"
    sent = write_store(kit, root)
    size = kit.config.commitlog_segment_size_bytes
    candidates = interior(sent, size)
    first = candidates[8]
    in_segment = [s for s in sent if s.commitlog_offset // size == first.commitlog_offset // size]
    after = [s for s in in_segment if s.commitlog_offset > first.commitlog_offset]
    second = after[0] if adjacent else after[2]
    assert second in candidates
    flip(kit, root, first, "total_size")
    flip(kit, root, second, "body_length")
    second_fault(root, fault)

    store = reopen(kit, root, caplog)

    spans = store.recovery.spans_set_aside
    if adjacent:
        assert spans == [(first.commitlog_offset, second.end)]
    else:
        assert spans == [(first.commitlog_offset, first.end), (second.commitlog_offset, second.end)]
    assert_recovered(kit, store, sent, [first, second])
    assert_set_aside_for_good(kit, root, sent, [first, second])


@pytest.mark.parametrize("fault", ["checkpoint deleted", "consume queues deleted"])
def test_damage_in_the_first_record_of_a_segment(
    kit, tmp_path: Path, caplog: pytest.LogCaptureFixture, fault: str
) -> None:
    root = tmp_path / "store"
    sent = write_store(kit, root)
    target = interior(sent, kit.config.commitlog_segment_size_bytes, first_in_segment=True)[1]
    flip(kit, root, target, "total_size", mask=0x7F)
    second_fault(root, fault)

    store = reopen(kit, root, caplog)

    assert store.recovery.spans_set_aside == [(target.commitlog_offset, target.end)]
    assert_recovered(kit, store, sent, [target])
    assert_set_aside_for_good(kit, root, sent, [target])


@pytest.mark.parametrize("fault", ["checkpoint deleted", "consume queues deleted"])
def test_damage_spanning_a_segment_boundary(
    kit, tmp_path: Path, caplog: pytest.LogCaptureFixture, fault: str
) -> None:
    """Zeros from inside a segment's last record into the next segment's first record."""
    root = tmp_path / "store"
    sent = write_store(kit, root)
    size = kit.config.commitlog_segment_size_bytes
    firsts = interior(sent, size, first_in_segment=True)
    head = firsts[1]  # the first record of its segment
    by_offset = sorted(sent, key=lambda s: s.commitlog_offset)
    tail = by_offset[by_offset.index(head) - 1]  # the last record of the segment before
    assert tail.commitlog_offset // size == head.commitlog_offset // size - 1
    path, local = kit.segment_of(root, tail.commitlog_offset)
    kit.zero_range(path, local + 10, size)
    next_path, _ = kit.segment_of(root, head.commitlog_offset)
    kit.zero_range(next_path, 0, 50)
    second_fault(root, fault)

    store = reopen(kit, root, caplog)

    assert store.recovery.spans_set_aside == [(tail.commitlog_offset, head.end)]
    assert_recovered(kit, store, sent, [tail, head])
    assert_set_aside_for_good(kit, root, sent, [tail, head])


def test_cut_last_segment_then_more_writes_then_checkpoint_deleted_loses_nothing(
    kit, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The third row of the issue: appends continue at the truncation point, no gap."""
    root = tmp_path / "store"
    sent = write_store(kit, root)
    last = max(sent, key=lambda s: s.commitlog_offset)
    path, local = kit.segment_of(root, last.commitlog_offset)
    os.truncate(path, local + last.store_size // 2)  # a clean stop, then the file is cut

    store = reopen(kit, root, caplog)
    assert store.recovery.truncated_at == last.commitlog_offset
    survivors = [s for s in sent if s is not last]
    kit.assert_consistent(store, survivors)
    new = kit.write(store, random.Random(3), 30, QUEUES, body_sizes=(100, 900))
    assert min(n.commitlog_offset for n in new) == last.commitlog_offset
    assert next(n for n in new if n.queue == last.queue).queue_offset == last.queue_offset
    store.close()
    (root / "checkpoint").unlink()

    store = kit.open(root)
    assert store.recovery.truncated_at is None
    assert store.recovery.spans_set_aside == []
    kit.assert_consistent(store, [*survivors, *new])


def test_zeroed_range_inside_the_log_is_set_aside_and_the_rest_recovered(
    kit, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Zeros over a few records in the middle of the log (a lost write-back) cost those."""
    root = tmp_path / "store"
    sent = write_store(kit, root)
    candidates = interior(sent, kit.config.commitlog_segment_size_bytes)
    first = candidates[12]
    in_order = sorted(sent, key=lambda s: s.commitlog_offset)
    hit = in_order[in_order.index(first) : in_order.index(first) + 3]
    size = kit.config.commitlog_segment_size_bytes
    assert {h.commitlog_offset // size for h in hit} == {first.commitlog_offset // size}
    path, local = kit.segment_of(root, first.commitlog_offset)
    kit.zero_range(path, local, local + hit[-1].end - first.commitlog_offset)
    (root / "checkpoint").unlink()

    store = reopen(kit, root, caplog)

    assert store.recovery.spans_set_aside == [(first.commitlog_offset, hit[-1].end)]
    survivors = [s for s in sent if s not in hit]
    kit.assert_consistent(store, survivors)
    assert_not_served(store, hit)


def _flip_size_and(kit, root: Path, sent: list, second: str) -> list:
    target = interior(sent, kit.config.commitlog_segment_size_bytes)[len(sent) // 3]
    flip(kit, root, target, "total_size", mask=0x01)
    second_fault(root, second)
    return [target]


def _cut_restart_write(kit, root: Path, sent: list, _second: str) -> list:
    last = max(sent, key=lambda s: s.commitlog_offset)
    path, local = kit.segment_of(root, last.commitlog_offset)
    os.truncate(path, local + last.store_size // 3)
    store = kit.open(root)
    sent += kit.write(store, random.Random(8), 300, QUEUES, body_sizes=(1024, 1024))
    store.close()
    (root / "checkpoint").unlink()
    return [last]


@pytest.mark.parametrize(
    ("damage", "second"),
    [
        (_flip_size_and, "checkpoint deleted"),
        (_flip_size_and, "consume queues deleted"),
        (_cut_restart_write, "checkpoint deleted"),
    ],
    ids=[
        "size byte + checkpoint deleted",
        "size byte + consume queues deleted",
        "cut tail, restart, 300 sends, checkpoint deleted",
    ],
)
def test_the_issue_table_loses_no_complete_acknowledged_record(
    kit, tmp_path: Path, caplog: pytest.LogCaptureFixture, damage, second: str
) -> None:
    """3,000 acknowledged 1 KiB messages, a clean stop, two faults, a restart: 0 lost."""
    root = tmp_path / "store"
    store = kit.open(root)
    sent = kit.write(store, random.Random(30), 3000, QUEUES, body_sizes=(1024, 1024))
    store.close()
    lost = damage(kit, root, sent, second)

    store = reopen(kit, root, caplog)

    survivors = [s for s in sent if s not in lost]
    kit.assert_consistent(store, survivors)
    assert_not_served(store, lost, by_offset=damage is _flip_size_and)


def test_a_missing_interior_segment_costs_only_its_records(
    kit, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A deleted commit-log segment file in the middle: the walk goes on at the next one."""
    root = tmp_path / "store"
    sent = write_store(kit, root)
    size = kit.config.commitlog_segment_size_bytes
    victim = sorted((root / "commitlog").iterdir())[1]
    lost = [s for s in sent if s.commitlog_offset // size == int(victim.name) // size]
    victim.unlink()
    (root / "checkpoint").unlink()

    store = reopen(kit, root, caplog)

    assert store.recovery.truncated_at is None
    assert store.recovery.spans_set_aside == [(int(victim.name), int(victim.name) + size)]
    survivors = [s for s in sent if s not in lost]
    kit.assert_holds_exactly(store, survivors)
    assert_not_served(store, lost)
    assert store.written_offset == max(s.end for s in sent)


@pytest.mark.parametrize("adjacent", [True, False])
def test_two_records_failing_their_crc_after_the_checkpoint(
    kit, tmp_path: Path, caplog: pytest.LogCaptureFixture, adjacent: bool
) -> None:
    """Bodies flipped in two records past the checkpoint: only those two are lost (before
    resync, the second CRC failure in a row made recovery truncate at the first)."""
    root = tmp_path / "store"
    sent = write_store(kit, root)
    size = kit.config.commitlog_segment_size_bytes
    first = interior(sent, size)[8]
    in_order = sorted(sent, key=lambda s: s.commitlog_offset)
    second = in_order[in_order.index(first) + (1 if adjacent else 3)]
    assert second in interior(sent, size)
    for target in (first, second):
        path, local = kit.segment_of(root, target.commitlog_offset)
        kit.flip_byte(path, local + codec.HEADER_SIZE + len(target.body) // 2, mask=0x01)
    (root / "checkpoint").unlink()

    store = reopen(kit, root, caplog)

    report = store.recovery
    if adjacent:
        assert report.spans_set_aside == [(first.commitlog_offset, second.end)]
    else:
        assert report.records_quarantined == [first.commitlog_offset, second.commitlog_offset]
    assert_recovered(kit, store, sent, [first, second])
