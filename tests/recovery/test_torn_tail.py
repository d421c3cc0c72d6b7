"""Torn tails: cut or zero the commit log past the checkpoint, at every byte of a record.

A pristine store is built once per test and crashed with un-checkpointed records
in its last segment; each case copies it, damages the copy and reopens it. The
expectations are the same for every cut: every record that lies wholly before the
cut reads back unchanged, nothing from the cut on is visible (not even in a
queue's max offset), the files hold no partial record afterwards, and the store
appends and recovers normally again.
"""

from __future__ import annotations

import os
import random
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from rayq.store.checkpoint import load_checkpoint

QUEUES = [("TornA", 0), ("TornA", 1), ("TornA", 2), ("TornB", 0)]
PRISTINE_SEED = 20240611
TAIL_BODY_SIZE = 200

Damage = Callable[[Path], None]  # applied to the copied last segment file


@dataclass(frozen=True)
class Pristine:
    """A crashed store and what it acknowledged."""

    root: Path
    sent: list  # list[Sent]
    checkpoint: int  # commitlog_flushed_offset
    segment_name: str  # the commit log's last segment file
    segment_start: int
    data_end: int  # one past the last record

    @property
    def tail(self):  # the last record of the last segment
        return max(self.sent, key=lambda s: s.commitlog_offset)

    def unflushed_in_last_segment(self) -> list:
        return [
            s for s in self.sent if s.commitlog_offset >= max(self.checkpoint, self.segment_start)
        ]


def build_pristine(kit, root: Path) -> Pristine:
    """Records across several segments and queues, a checkpoint, more records, a crash."""
    rng = random.Random(PRISTINE_SEED)
    store = kit.open(root)
    sent = kit.write(store, rng, 30, QUEUES, body_sizes=(2000, 7000), batch_max=3)
    store.flush()
    sent += kit.write(store, rng, 12, QUEUES, body_sizes=(60, 400), batch_max=2)
    sent += kit.put(store, [kit.message("TornA", 1, TAIL_BODY_SIZE)])
    segments = store.commitlog.file.segments
    last = segments[-1]
    pristine = Pristine(
        root=root,
        sent=sent,
        checkpoint=load_checkpoint(root).commitlog_flushed_offset,
        segment_name=last.path.name,
        segment_start=last.start,
        data_end=max(s.end for s in sent),
    )
    store.crash()
    # The layout every case relies on (fixed by the seed; checked so a change shows).
    assert len(segments) >= 3
    assert pristine.tail.commitlog_offset >= max(pristine.checkpoint, last.start)
    assert len(pristine.unflushed_in_last_segment()) >= 8
    return pristine


def truncate_to(length: int) -> Damage:
    def damage(segment: Path) -> None:
        os.truncate(segment, length)  # open() extends it back with zeros

    return damage


def zero_from(kit, start: int, end: int) -> Damage:
    def damage(segment: Path) -> None:
        kit.zero_range(segment, start, end)

    return damage


def check_cut(kit, pristine: Pristine, work: Path, cut: int, damage: Damage) -> None:
    """Damage a copy of the pristine store at commit-log offset ``cut`` and check it."""
    case = work / "case"
    shutil.rmtree(case, ignore_errors=True)
    shutil.copytree(pristine.root, case)
    damage(case / "commitlog" / pristine.segment_name)
    survivors = [s for s in pristine.sent if s.end <= cut]
    lost = [s for s in pristine.sent if s.end > cut]

    store = kit.open(case)
    kit.assert_consistent(store, survivors)
    new_at = min((s.commitlog_offset for s in lost), default=pristine.data_end)
    assert store.commitlog.max_offset == new_at
    (new,) = kit.put(store, [kit.message(pristine.tail.topic, pristine.tail.queue_id, 64)])
    assert new.commitlog_offset == new_at
    assert new.queue_offset == sum(s.queue == new.queue for s in survivors)
    store.crash()

    store = kit.open(case)
    kit.assert_consistent(store, [*survivors, new])
    store.crash()


def run_cuts(kit, pristine: Pristine, work: Path, cuts: list[tuple[int, Damage]]) -> None:
    """Check every ``(cut, damage)`` case; report all failing cuts at once."""
    failures: list[str] = []
    for cut, damage in cuts:
        try:
            check_cut(kit, pristine, work, cut, damage)
        except AssertionError as exc:
            first_line = str(exc).splitlines()[0] if str(exc) else "assertion failed"
            failures.append(
                f"cut at {cut} (tail record at {pristine.tail.commitlog_offset}): {first_line}"
            )
        finally:
            kit.close_all()
    assert not failures, f"{len(failures)} of {len(cuts)} cuts failed:\n" + "\n".join(failures)


@pytest.fixture
def pristine(kit, scratch: Path) -> Pristine:
    return build_pristine(kit, scratch / "pristine")


def test_truncating_the_last_record_at_every_byte_keeps_everything_before_it(
    kit, pristine: Pristine, scratch: Path
) -> None:
    """A cut anywhere inside the last record drops exactly that record."""
    tail = pristine.tail
    local = tail.commitlog_offset - pristine.segment_start
    cuts = [(tail.commitlog_offset + i, truncate_to(local + i)) for i in range(tail.store_size)]
    run_cuts(kit, pristine, scratch, cuts)


def test_zeroing_the_tail_of_the_last_record_at_every_byte_keeps_everything_before_it(
    kit, pristine: Pristine, scratch: Path
) -> None:
    """Zeros over the last record from any byte on drop exactly that record."""
    tail = pristine.tail
    local = tail.commitlog_offset - pristine.segment_start
    end = local + tail.store_size
    cuts = [
        (tail.commitlog_offset + i, zero_from(kit, local + i, end)) for i in range(tail.store_size)
    ]
    run_cuts(kit, pristine, scratch, cuts)


def test_truncating_at_record_boundaries_plus_minus_one_keeps_whole_records(
    kit, pristine: Pristine, scratch: Path
) -> None:
    """Cuts at, just before and just after each un-checkpointed record start keep whole records."""
    lowest = max(pristine.checkpoint, pristine.segment_start)
    boundaries = [s.commitlog_offset for s in pristine.unflushed_in_last_segment()]
    boundaries.append(pristine.data_end)
    cut_points = sorted({b + d for b in boundaries for d in (-1, 0, 1)})
    cuts = [
        (cut, truncate_to(cut - pristine.segment_start))
        for cut in cut_points
        if lowest <= cut <= pristine.data_end
    ]
    assert len(cuts) >= 3 * 8
    run_cuts(kit, pristine, scratch, cuts)


def test_truncating_at_random_offsets_past_the_checkpoint_keeps_whole_records(
    kit, pristine: Pristine, scratch: Path
) -> None:
    """Seeded random cuts between the checkpoint and the end keep every whole record."""
    rng = random.Random(1234)
    lowest = max(pristine.checkpoint, pristine.segment_start)
    cut_points = sorted(rng.randint(lowest, pristine.data_end) for _ in range(25))
    cuts = [(cut, truncate_to(cut - pristine.segment_start)) for cut in cut_points]
    run_cuts(kit, pristine, scratch, cuts)


def test_zeroing_at_random_offsets_past_the_checkpoint_keeps_whole_records(
    kit, pristine: Pristine, scratch: Path
) -> None:
    """Seeded random zeroing from a point to the end keeps every whole record before it."""
    rng = random.Random(4321)
    lowest = max(pristine.checkpoint, pristine.segment_start)
    end = pristine.data_end - pristine.segment_start
    cut_points = sorted(rng.randint(lowest, pristine.data_end) for _ in range(25))
    cuts = [(cut, zero_from(kit, cut - pristine.segment_start, end)) for cut in cut_points]
    run_cuts(kit, pristine, scratch, cuts)
