"""A batch of one record (a single send) is written without numpy
(``MessageStore._write_one``): the same commit-log bytes, consume-queue entries, index
keys and results as the general path writes for those records in one batch."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from rayq.store import (
    EncodedBatch,
    FakeClock,
    InnerMessage,
    MessageStore,
    StoreConfig,
    decode_records,
    encode_batch,
)

KiB = 1024
T0 = 1_700_000_000_000
CONFIG = StoreConfig.for_tests()  # 64 KiB segments: the records below roll them often


def messages(n: int, seed: int) -> list[InnerMessage]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        out.append(
            InnerMessage(
                topic="T",
                queue_id=0,
                body=rng.randbytes(rng.choice([1, 100, 3 * KiB, 9 * KiB])),
                tags=rng.choice([None, "TagA", "TagB"]),
                keys="" if i % 5 == 4 else rng.choice([f"key-{i}", f"key-{i} other-{i}"]),
                uniq_key=f"{seed:08X}{i:024X}",
                born_timestamp=T0 - i,
                born_host="10.0.0.7:5000",
                properties={"PGROUP": "pg"},
            )
        )
    return out


def encode(msgs: list[InnerMessage]) -> EncodedBatch:
    return encode_batch(
        msgs,
        max_body_bytes=CONFIG.max_message_size_bytes,
        max_properties_bytes=CONFIG.max_properties_size_bytes,
    )


def files(root: Path, folder: str) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted((root / folder).rglob("*"))
        if p.is_file()
    }


@dataclass
class Written:
    msg_ids: list[str] = field(default_factory=list)
    queue_offsets: list[int] = field(default_factory=list)
    commitlog_offsets: list[int] = field(default_factory=list)
    store_sizes: list[int] = field(default_factory=list)


def put(store: MessageStore, batch: EncodedBatch, into: Written) -> None:
    result = store.put_encoded(batch)
    assert result.ok, result.error
    into.msg_ids.extend(result.msg_ids)
    into.queue_offsets.extend(result.queue_offsets)
    into.commitlog_offsets.extend(result.commitlog_offsets)
    into.store_sizes.extend(result.store_sizes)


def test_single_puts_write_what_one_batch_of_them_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    msgs = messages(60, seed=7)  # about 250 KiB: several segment rolls
    ones = []
    write_one = MessageStore._write_one
    monkeypatch.setattr(
        MessageStore, "_write_one", lambda self, b, *a: ones.append(b) or write_one(self, b, *a)
    )
    one_by_one, batched = tmp_path / "one", tmp_path / "batch"
    singles, whole = Written(), Written()
    with MessageStore(one_by_one, CONFIG, clock=FakeClock(T0)) as store:
        for m in msgs:
            put(store, encode([m]), singles)
        single_keys = [store.query_message("T", f"key-{i}", 4) for i in (0, 30, 58)]
    with MessageStore(batched, CONFIG, clock=FakeClock(T0)) as store:
        for start in range(0, len(msgs), 20):  # batches that cross segment ends
            put(store, encode(msgs[start : start + 20]), whole)
        batch_keys = [store.query_message("T", f"key-{i}", 4) for i in (0, 30, 58)]

    assert len(ones) == 60  # each single put took the one-record path, no batch did
    assert len(files(one_by_one, "commitlog")) > 2
    assert files(one_by_one, "commitlog") == files(batched, "commitlog")
    assert files(one_by_one, "consumequeue") == files(batched, "consumequeue")
    assert singles.queue_offsets == whole.queue_offsets == list(range(60))
    assert singles.commitlog_offsets == whole.commitlog_offsets
    assert singles.store_sizes == whole.store_sizes
    assert singles.msg_ids == whole.msg_ids == [m.uniq_key for m in msgs]
    assert [[m.msg_id for m in found] for found in single_keys] == [
        [m.msg_id for m in found] for found in batch_keys
    ]
    assert all(single_keys)


def test_single_puts_read_back_and_survive_a_reopen(tmp_path: Path) -> None:
    msgs = messages(25, seed=11)
    with MessageStore(tmp_path, CONFIG, clock=FakeClock(T0)) as store:
        for m in msgs:
            put(store, encode([m]), Written())
    with MessageStore(tmp_path, CONFIG, clock=FakeClock(T0)) as store:
        read = store.get_messages("g", "T", 0, 0, max_nums=32)
        got = decode_records(read.buffer)
        assert [m.body for m in got] == [m.body for m in msgs]
        assert [m.queue_offset for m in got] == list(range(25))
        assert [m.store_timestamp for m in got] == [T0] * 25
