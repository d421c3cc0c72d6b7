"""Crash consistency, property style: random workloads, random flushes, random crashes.

Each seed runs several rounds of: append random batches to random queues with
flush() now and then, crash (or, sometimes, close), optionally cut or zero the last
segment anywhere at or past the checkpointed offset, and reopen; the next round
appends to the recovered store. After every recovery:

* no message acknowledged before the last flush() is lost;
* each queue's offsets are 0..max-1 with its messages in append order;
* the store holds exactly the acknowledged records that lie wholly before the cut
  (nothing partial, nothing resurrected);
* every consume-queue entry matches a commit-log record, and vice versa.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from rayq.store.checkpoint import load_checkpoint

QUEUES = [("PropA", 0), ("PropA", 1), ("PropA", 2), ("PropB", 0), ("PropB", 5)]
SEEDS = range(12)
ROUNDS = 5


def run_round(kit, store, rng: random.Random, model: list) -> int:
    """Append random batches with random flushes; returns how many of ``model`` are flushed."""
    flushed = -1
    for _ in range(rng.randint(3, 20)):
        model += kit.write(store, rng, rng.randint(1, 12), QUEUES, (20, 3000), batch_max=6)
        if rng.random() < 0.25:
            store.flush()
            flushed = len(model)
    return flushed


def damage_tail(kit, rng: random.Random, root: Path, segment, data_end: int) -> int | None:
    """Cut or zero the last segment at a random offset >= the checkpoint; returns the cut."""
    checkpoint = load_checkpoint(root).commitlog_flushed_offset
    low = max(checkpoint, segment.start)
    if rng.random() < 0.35 or data_end <= low:
        return None
    cut = rng.randint(low, data_end)
    if rng.random() < 0.5:
        os.truncate(segment.path, cut - segment.start)
    else:
        kit.zero_range(segment.path, cut - segment.start, data_end - segment.start)
    return cut


def assert_invariants(kit, store, survivors: list, durable: int) -> None:
    by_queue: dict[tuple[str, int], list[bytes]] = {}
    for s in survivors:
        by_queue.setdefault(s.queue, []).append(s.body)
    held = {}
    for key in sorted(set(by_queue) | set(store.queues)):
        msgs, skipped = kit.read_queue(store, *key)
        assert skipped == [], f"{key}: holes at {skipped}"
        assert [m.queue_offset for m in msgs] == list(range(len(msgs))), key
        assert [m.body for m in msgs] == by_queue.get(key, []), key
        held.update({m.commitlog_offset: m for m in msgs})
    for s in survivors[:durable]:
        assert s.commitlog_offset in held, f"flushed message lost: {s}"
        assert held[s.commitlog_offset].body == s.body
    kit.assert_consistent(store, survivors)


@pytest.mark.parametrize("seed", SEEDS)
def test_crash_loses_no_flushed_message_and_keeps_queues_contiguous(
    kit, scratch: Path, seed: int
) -> None:
    """Whatever the crash point and tail damage, recovery keeps the invariants."""
    rng = random.Random(seed)
    root = scratch / "store"
    model: list = []  # what the store holds, in append order
    durable = 0  # model[:durable] was acknowledged before the last flush
    store = kit.open(root)
    for _ in range(ROUNDS):
        flushed = run_round(kit, store, rng, model)
        durable = flushed if flushed >= 0 else durable
        cut = None
        if rng.random() < 0.15:
            store.close()
            durable = len(model)
        else:
            segment = store.commitlog.file.segments[-1]
            store.crash()
            cut = damage_tail(kit, rng, root, segment, max(s.end for s in model))

        store = kit.open(root)  # recover, then keep appending to the recovered store

        survivors = model if cut is None else [s for s in model if s.end <= cut]
        assert len(survivors) >= durable
        assert_invariants(kit, store, survivors, durable)
        model[:] = survivors
    store.close()
