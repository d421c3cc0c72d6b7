"""store/dedupe.py: idempotent produce survives restarts, crashes and torn tails."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from rayq.actors.server.dedupe import (
    ProducerSequences,
    Verdict,
    check_producer_id,
    open_sequences,
    sequence_properties,
)
from rayq.store import InnerMessage, MessageStore, StoreConfig
from rayq.store.batch import encode_batch
from rayq.store.errors import InvalidMessageError

CONFIG = StoreConfig.for_tests()


def _batch(pid: str, first: int, n: int, queue_id: int = 0):
    props = {"PGROUP": "pg", **sequence_properties(pid, first, first + n - 1)}
    msgs = [
        InnerMessage(
            topic="T",
            queue_id=queue_id,
            body=f"m{first + i}".encode(),
            uniq_key=f"U{first + i}",
            properties=props,
        )
        for i in range(n)
    ]
    batch = encode_batch(msgs, max_body_bytes=4096, max_properties_bytes=4096)
    return msgspec.structs.replace(batch, producer_id=pid, first_sequence=first)


def _append(store: MessageStore, seqs: ProducerSequences, batch) -> bool:
    """What the broker does (actors/broker.py): check, append, record."""
    last = batch.first_sequence + batch.count - 1
    verdict, _ = seqs.check(
        batch.producer_id, batch.topic, batch.queue_id, batch.first_sequence, last
    )
    if verdict is not Verdict.NEW:
        return False
    assert store.put_encoded(batch).ok
    seqs.appended(
        batch.producer_id, batch.topic, batch.queue_id, batch.first_sequence, last, "result", 0
    )
    return True


def test_verdicts() -> None:
    seqs = ProducerSequences("/nonexistent")
    assert seqs.check("p", "T", 0, 0, 9)[0] is Verdict.NEW
    seqs.appended("p", "T", 0, 0, 9, "r", 0)
    assert seqs.check("p", "T", 0, 0, 9) == (Verdict.DUPLICATE, "r")
    assert seqs.check("p", "T", 0, 0, 4) == (Verdict.DUPLICATE, None)
    assert seqs.check("p", "T", 0, 5, 14)[0] is Verdict.OVERLAP
    assert seqs.check("p", "T", 0, 10, 14)[0] is Verdict.NEW
    assert seqs.check("p", "T", 0, 20, 24)[0] is Verdict.OUT_OF_ORDER  # 10..19 not here yet
    assert seqs.check("p", "T", 1, 0, 9)[0] is Verdict.NEW  # per queue
    assert seqs.check("p", "T", 1, 5, 9)[0] is Verdict.OUT_OF_ORDER  # a new producer starts at 0
    with pytest.raises(InvalidMessageError):
        seqs.check("p", "T", 0, 5, 4)
    for bad in ("", "a|b", "x" * 200, 3):
        with pytest.raises(InvalidMessageError):
            check_producer_id(bad)


def test_restart_replays_past_the_snapshot(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with MessageStore(root, CONFIG) as store:
        seqs = open_sequences(root / "config", store.commitlog, 0)
        assert _append(store, seqs, _batch("p", 0, 5))
        seqs.persist(store.written_offset, 0)  # the snapshot covers batch 0..4
        assert _append(store, seqs, _batch("p", 5, 5))  # only in the log
        assert _append(store, seqs, _batch("q", 0, 3, queue_id=1))
    with MessageStore(root, CONFIG) as store:
        seqs = open_sequences(root / "config", store.commitlog, 0)
        assert not _append(store, seqs, _batch("p", 0, 5))
        assert not _append(store, seqs, _batch("p", 5, 5))
        assert not _append(store, seqs, _batch("q", 0, 3, queue_id=1))
        assert _append(store, seqs, _batch("p", 10, 5))
        assert store.max_offset("T", 0) == 15


def test_crash_without_snapshot_rebuilds_from_the_log(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = MessageStore(root, CONFIG)
    seqs = open_sequences(root / "config", store.commitlog, 0)
    for first in range(0, 200, 10):  # rolls over several 64 KiB segments
        assert _append(store, seqs, _batch("p", first, 10))
    store.flush()
    seqs.persist(10**9, 0)  # a snapshot claiming more than the log will hold
    store.crash()
    with MessageStore(root, CONFIG) as store:
        seqs = open_sequences(root / "config", store.commitlog, 0)
        assert seqs.table["p|T|0"].last == 199
        assert not _append(store, seqs, _batch("p", 190, 10))


def test_torn_batch_is_appended_again(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with MessageStore(root, CONFIG) as store:
        seqs = open_sequences(root / "config", store.commitlog, 0)
        assert _append(store, seqs, _batch("p", 0, 4))
        assert _append(store, seqs, _batch("p", 4, 4))
    seqs = ProducerSequences(root / "config")
    # Only 3 of the 4 records of the second batch survive (a torn tail):
    with MessageStore(root, CONFIG) as store:
        got = store.get_messages("g", "T", 0, 0, 7)
        props = [b"PGROUP\x01pg\x02__PID\x01p\x02__PSEQ\x010-3\x02"] * 4
        props += [b"PGROUP\x01pg\x02__PID\x01p\x02__PSEQ\x014-7\x02"] * 3
        seqs.replay(["T"] * 7, [0] * 7, props, 0)
        assert got.count == 7
    assert seqs.table["p|T|0"].last == 3
    assert seqs.check("p", "T", 0, 4, 7)[0] is Verdict.NEW
