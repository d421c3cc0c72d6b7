"""Deleted consume-queue and index files are rebuilt from the commit log on open.

The expected consume queue is derived independently: the conftest oracle decodes
every commit-log record and groups ``(queue_offset, commitlog_offset, size)`` by
topic and queue; it must equal both the raw entries and what get_messages serves.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest

from rayq.store.checkpoint import load_checkpoint

BIG = ("CQ", 0)  # enough messages for four consume-queue segments (64 entries each)
SMALL = [("CQ", 1), ("Other", 0)]


def cq_segments(root: Path, key: tuple[str, int]) -> list[Path]:
    return sorted((root / "consumequeue" / key[0] / str(key[1])).iterdir())


def write_and_stop(kit, root: Path, how: str) -> list:
    """A workload, then a clean close or (flush, a few more messages, crash)."""
    rng = random.Random(2024)
    store = kit.open(root)
    sent = []
    for _ in range(200):
        sent += kit.put(store, [kit.message(*BIG, rng.randint(60, 300))])
        if rng.random() < 0.3:
            sent += kit.put(store, [kit.message(*rng.choice(SMALL), rng.randint(60, 300))])
    if how == "crash":
        store.flush()
        sent += kit.write(store, rng, 10, [BIG, *SMALL], body_sizes=(60, 300))
        assert max(s.end for s in sent) > load_checkpoint(root).commitlog_flushed_offset
        store.crash()
    else:
        store.close()
    assert len(cq_segments(root, BIG)) == 4
    return sent


def delete_queue_files(root: Path, which: str) -> None:
    segments = cq_segments(root, BIG)
    if which == "whole queue":
        shutil.rmtree(segments[0].parent)
    else:
        victim = {"first segment": 0, "middle segment": 1, "last segment": -1}[which]
        segments[victim].unlink()


@pytest.mark.parametrize("how", ["close", "crash"])
@pytest.mark.parametrize(
    "which", ["whole queue", "first segment", "middle segment", "last segment"]
)
def test_deleted_consume_queue_files_are_rebuilt_from_the_commit_log(
    kit, tmp_path: Path, how: str, which: str
) -> None:
    """After deleting consume-queue files the queue equals the one the commit log implies."""
    root = tmp_path / "store"
    sent = write_and_stop(kit, root, how)
    delete_queue_files(root, which)

    store = kit.open(root)

    kit.assert_consistent(store, sent)
    assert "CQ/0" in store.recovery.queues_rebuilt
    (new,) = kit.put(store, [kit.message(*BIG, 100)])
    assert new.queue_offset == sum(s.queue == BIG for s in sent)
    store.close()
    store = kit.open(root)
    assert store.recovery.queues_rebuilt == []
    kit.assert_consistent(store, [*sent, new])


@pytest.mark.parametrize("how", ["close", "crash"])
@pytest.mark.parametrize("which", ["all", "oldest", "newest"])
def test_deleted_index_files_are_rebuilt_and_every_key_is_found(
    kit, tmp_path: Path, how: str, which: str
) -> None:
    """After deleting index files, query_message finds every key and unique id again."""
    root = tmp_path / "store"
    sent = write_and_stop(kit, root, how)
    index_files = sorted((root / "index").iterdir())
    assert len(index_files) >= 3
    victims = {"all": index_files, "oldest": index_files[:1], "newest": index_files[-1:]}
    for path in victims[which]:
        path.unlink()

    store = kit.open(root)

    kit.assert_keys_found(store, sent)
    assert store.recovery.index_rebuilt is True
    for s in sent[::17]:
        found = store.view_message(s.uniq)
        assert found is not None
        assert found.commitlog_offset == s.commitlog_offset
        assert found.body == s.body
