"""Flushing and the checkpoint, in-process and from a DiskFlusher in another process."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

from rayq.store import DiskFlusher, FakeClock, InnerMessage, MessageStore, StoreConfig
from rayq.store.checkpoint import (
    Checkpoint,
    decode_checkpoint,
    encode_checkpoint,
    load_checkpoint,
    save_checkpoint,
)
from rayq.store.flush import PAGE_SIZE

CONFIG = StoreConfig.for_tests()
SEGMENT = CONFIG.commitlog_segment_size_bytes

# Run by exec() in a "spawn" child: nothing is inherited from the parent but these names.
CHILD_CODE = """
from pathlib import Path
from rayq.store.checkpoint import load_checkpoint
from rayq.store.flush import DiskFlusher

flusher = DiskFlusher(Path(root), segment_size)
flushed = flusher.flush_commitlog(upto)
flusher.flush_logics(upto)
flusher.checkpoint()
assert flushed == upto, (flushed, upto)
assert load_checkpoint(Path(root)).commitlog_flushed_offset == upto
"""


def put_many(store: MessageStore, count: int, *, body_size: int = 700, topic: str = "T") -> None:
    for i in range(count):
        result = store.put_messages(
            [
                InnerMessage(
                    topic=topic, queue_id=i % 3, body=bytes([i % 251]) * body_size, keys=f"k{i}"
                )
            ]
        )
        assert result.ok, result.error


def test_flush_writes_checkpoint_at_the_written_offset(tmp_path: Path) -> None:
    """After flush() every checkpoint offset equals the commit log's written offset."""
    store = MessageStore(tmp_path, CONFIG, clock=FakeClock())
    put_many(store, 250)  # several segments
    written = store.written_offset
    assert written > 2 * SEGMENT
    assert store.flush() == written
    cp = load_checkpoint(tmp_path)
    assert cp.commitlog_flushed_offset == written
    assert cp.consume_queue_flushed_offset == written
    assert cp.index_flushed_offset == written
    assert cp.recover_from == written
    assert cp.written_at_ms == 1_700_000_000_000
    store.close()


def test_clean_close_then_reopen_revalidates_nothing(tmp_path: Path) -> None:
    """A reopen after close() starts recovery at the end: the checkpoint covers everything."""
    store = MessageStore(tmp_path, CONFIG, clock=FakeClock())
    put_many(store, 120)
    written = store.written_offset
    store.close()
    reopened = MessageStore(tmp_path, CONFIG, clock=FakeClock())
    assert not reopened.recovery.abnormal
    assert reopened.recovery.start_offset == written
    assert reopened.recovery.records_validated == 0
    assert reopened.written_offset == written
    reopened.close()


def test_flusher_in_another_process_writes_checkpoint_that_recovery_starts_from(
    tmp_path: Path,
) -> None:
    """A spawned DiskFlusher flushes the writer's bytes; a crash+reopen re-validates from there."""
    store = MessageStore(tmp_path, CONFIG, clock=FakeClock())
    put_many(store, 200)
    upto = store.written_offset
    assert upto > 2 * SEGMENT
    assert load_checkpoint(tmp_path).recover_from < upto  # nothing flushed by the parent

    run_flusher_in_child(tmp_path, upto)

    cp = load_checkpoint(tmp_path)
    assert cp.commitlog_flushed_offset == upto
    assert cp.consume_queue_flushed_offset == upto
    assert cp.index_flushed_offset == upto

    put_many(store, 5, topic="Later")  # unflushed tail, past the checkpoint
    tail_end = store.written_offset
    store.crash()
    reopened = MessageStore(tmp_path, CONFIG, clock=FakeClock())
    assert reopened.recovery.abnormal
    assert reopened.recovery.start_offset == upto
    assert reopened.recovery.records_validated == 5
    assert reopened.recovery.end_offset == tail_end
    assert reopened.max_offset("T", 0) == 67
    assert reopened.max_offset("Later", 0) == 2
    reopened.close()


def run_flusher_in_child(root: Path, upto: int) -> None:
    """DiskFlusher.flush_commitlog/flush_logics/checkpoint up to ``upto`` in a spawned process."""
    ctx = multiprocessing.get_context("spawn")
    child = ctx.Process(
        target=exec, args=(CHILD_CODE, {"root": str(root), "segment_size": SEGMENT, "upto": upto})
    )
    child.start()
    child.join(60)
    assert child.exitcode == 0


def test_keys_below_an_external_checkpoint_are_still_queryable_after_a_crash(
    tmp_path: Path,
) -> None:
    """Index entries of records below a checkpoint written by another process survive a crash."""
    store = MessageStore(tmp_path, CONFIG, clock=FakeClock())
    put_many(store, 100)
    store.flush()  # the key index now has files on disk
    put_many(store, 100, topic="Second")
    upto = store.written_offset
    run_flusher_in_child(tmp_path, upto)
    assert load_checkpoint(tmp_path).recover_from == upto
    store.crash()
    reopened = MessageStore(tmp_path, CONFIG, clock=FakeClock())
    assert reopened.recovery.start_offset == upto
    for topic, key in [("T", "k5"), ("T", "k99"), ("Second", "k0"), ("Second", "k50")]:
        found = reopened.query_message(topic, key, begin_ms=0)
        assert [m.keys for m in found] == [[key]], (topic, key)
    reopened.close()


def test_flush_commitlog_with_least_pages_skips_tiny_flushes(tmp_path: Path) -> None:
    """With least_pages=4, fewer than 4 pending pages are not flushed; 4 or more are."""
    store = MessageStore(tmp_path, CONFIG, clock=FakeClock())
    put_many(store, 5, body_size=1000)  # about 5 KiB: one or two pages
    small = store.written_offset
    assert small < 4 * PAGE_SIZE
    flusher = DiskFlusher(tmp_path, SEGMENT)
    assert flusher.flush_commitlog(small, least_pages=4) == 0
    assert flusher.commitlog_flushed == 0
    put_many(store, 20, body_size=1000)
    big = store.written_offset
    assert big >= 4 * PAGE_SIZE
    assert flusher.flush_commitlog(big, least_pages=4) == big
    assert flusher.flush_commitlog(big + 10, least_pages=4) == big  # 10 bytes: too few
    assert flusher.flush_commitlog(big + 10) == big + 10  # least_pages=0 always flushes
    store.close()


def test_store_flush_with_least_pages_keeps_checkpoint_behind_until_enough_is_pending(
    tmp_path: Path,
) -> None:
    """store.flush(least_pages) returns the durable offset and never checkpoints past it."""
    store = MessageStore(tmp_path, CONFIG, clock=FakeClock())
    put_many(store, 2, body_size=500)
    assert store.flush(least_pages=4) == 0
    assert load_checkpoint(tmp_path).recover_from == 0
    assert store.flush() == store.written_offset
    store.close()


def test_flush_commitlog_never_goes_backwards(tmp_path: Path) -> None:
    """Asking to flush below the durable offset returns the durable offset."""
    store = MessageStore(tmp_path, CONFIG, clock=FakeClock())
    put_many(store, 10)
    flusher = DiskFlusher(tmp_path, SEGMENT)
    top = store.written_offset
    assert flusher.flush_commitlog(top) == top
    assert flusher.flush_commitlog(top // 2) == top
    store.close()


def test_checkpoint_encoding_round_trips_and_detects_damage(tmp_path: Path) -> None:
    """encode/decode round trip; a flipped byte or wrong length decodes to None (load: zeros)."""
    cp = Checkpoint(1, 2, 3, 4)
    raw = encode_checkpoint(cp)
    assert len(raw) == 36
    assert decode_checkpoint(raw) == cp
    damaged = bytearray(raw)
    damaged[3] ^= 1
    assert decode_checkpoint(bytes(damaged)) is None
    assert decode_checkpoint(raw[:-1]) is None
    save_checkpoint(tmp_path, cp)
    assert load_checkpoint(tmp_path) == cp
    (tmp_path / "checkpoint").write_bytes(bytes(damaged))
    assert load_checkpoint(tmp_path) == Checkpoint()
