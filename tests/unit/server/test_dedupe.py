"""store/dedupe.py: idempotent produce survives restarts, crashes and torn tails."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from rayq.actors.server.dedupe import (
    EXPIRY_MS,
    ProducerSequences,
    SequenceEntry,
    Verdict,
    check_producer_id,
    open_sequences,
    sequence_properties,
)
from rayq.store import InnerMessage, MessageStore, StoreConfig
from rayq.store.batch import encode_batch
from rayq.store.errors import InvalidMessageError
from rayq.testing import FakeCluster, FakeTransport

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


def test_epochs_of_a_family_share_one_entry() -> None:
    """Given producer ids ``<family>~<epoch>`` (Spark's: one epoch per micro-batch), a
    newer epoch starts the family over from 0, the current one follows the sequence
    rules, and an older one is fenced; the table keeps one entry per family and queue
    however many epochs wrote."""
    seqs = ProducerSequences("/nonexistent")
    for epoch in range(1000):
        pid = f"spark-q-3~{epoch}"
        assert seqs.check(pid, "T", 0, 0, 9)[0] is Verdict.NEW
        seqs.appended(pid, "T", 0, 0, 9, "r", 0)
        assert seqs.check(pid, "T", 0, 10, 14)[0] is Verdict.NEW
        seqs.appended(pid, "T", 0, 10, 14, "r", 0)
    assert list(seqs.table) == ["spark-q-3|T|0"] and seqs.table["spark-q-3|T|0"].epoch == 999
    assert seqs.check("spark-q-3~999", "T", 0, 0, 9)[0] is Verdict.DUPLICATE  # a re-run
    assert seqs.check("spark-q-3~999", "T", 0, 10, 14) == (Verdict.DUPLICATE, "r")
    assert seqs.check("spark-q-3~999", "T", 0, 5, 19)[0] is Verdict.OVERLAP
    assert seqs.check("spark-q-3~500", "T", 0, 0, 99) == (Verdict.FENCED, 999)  # ended
    assert seqs.check("spark-q-3~1000", "T", 0, 5, 9)[0] is Verdict.OUT_OF_ORDER  # from 0
    assert seqs.check("spark-q-4~999", "T", 0, 0, 9)[0] is Verdict.NEW  # another family
    # not an epoch: a family of its own (Producer(idempotent=True) ids have no "~")
    assert seqs.check("spark-q-3~x", "T", 0, 0, 9)[0] is Verdict.NEW
    assert seqs.check("spark-q-3~-1", "T", 0, 0, 9)[0] is Verdict.NEW


def test_epochs_replay_from_the_log(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with MessageStore(root, CONFIG) as store:
        seqs = open_sequences(root / "config", store.commitlog, 0)
        assert _append(store, seqs, _batch("f~1", 0, 5))
        assert _append(store, seqs, _batch("f~1", 5, 5))
        seqs.persist(store.written_offset, 0)
        assert _append(store, seqs, _batch("f~2", 0, 3))  # only in the log
    with MessageStore(root, CONFIG) as store:
        seqs = open_sequences(root / "config", store.commitlog, 0)
        assert seqs.table["f|T|0"] == SequenceEntry(2, 0, 2)
        assert seqs.check("f~1", "T", 0, 0, 4)[0] is Verdict.FENCED
        assert not _append(store, seqs, _batch("f~2", 0, 3))
        assert _append(store, seqs, _batch("f~2", 3, 2))
        assert store.max_offset("T", 0) == 15
    (root / "config" / "producerSequence.json").unlink()  # rebuilt from the whole log
    with MessageStore(root, CONFIG) as store:
        seqs = open_sequences(root / "config", store.commitlog, 0)
        assert seqs.table["f|T|0"] == SequenceEntry(4, 0, 2)


def test_a_snapshot_from_before_epochs_loads_at_epoch_0(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.mkdir()
    (config / "producerSequence.json").write_text(
        '{"commitlog_offset": 0, "table": {"p|T|0": [9, 5]}}'
    )
    seqs = ProducerSequences(config)
    seqs.load(0, 0)
    assert seqs.table["p|T|0"] == SequenceEntry(9, 5, 0)
    assert seqs.check("p", "T", 0, 10, 12)[0] is Verdict.NEW


def test_idle_producers_expire_when_the_table_is_persisted(tmp_path: Path) -> None:
    """Kafka's producer.id.expiration.ms: an entry no batch touched for EXPIRY_MS is
    dropped at the next persist (with its cached answer); one touched since stays."""
    seqs = ProducerSequences(tmp_path)
    seqs.appended("old", "T", 0, 0, 9, "r", 0)
    seqs.appended("busy~1", "T", 0, 0, 9, "r", 0)
    seqs.appended("busy~2", "T", 0, 0, 9, "r", EXPIRY_MS)  # touched a week later
    assert seqs.persist(0, EXPIRY_MS)  # exactly EXPIRY_MS idle: kept
    assert set(seqs.table) == {"old|T|0", "busy|T|0"}
    seqs.dirty = True
    assert seqs.persist(0, EXPIRY_MS + 1)
    assert set(seqs.table) == {"busy|T|0"}
    assert seqs.check("old", "T", 0, 0, 9) == (Verdict.NEW, None)  # forgotten: new again
    assert seqs.check("old", "T", 0, 10, 19)[0] is Verdict.OUT_OF_ORDER
    reloaded = ProducerSequences(tmp_path)
    reloaded.load(0, 0)
    assert set(reloaded.table) == {"busy|T|0"}


def test_the_broker_drops_a_re_run_epoch_and_refuses_an_older_one(tmp_path: Path) -> None:
    """Through a broker's put: a re-sent batch of the current epoch is answered without
    being appended, the next epoch starts from 0, and an older epoch is refused with
    InvalidMessageError naming the fence; nothing it carried is stored."""
    with FakeCluster(tmp_path) as cluster:
        client = FakeTransport(cluster).broker("broker-a")

        def put(pid: str, first: int, n: int) -> list[int]:
            return client.put(_batch(pid, first, n)).result(5).queue_offsets

        assert put("f~1", 0, 3) == [0, 1, 2]
        assert put("f~1", 0, 3) == [0, 1, 2]  # a re-run: the cached answer, no copies
        assert put("f~2", 0, 2) == [3, 4]
        with pytest.raises(InvalidMessageError, match=r"fenced.*epoch 2"):
            put("f~1", 3, 2)
        assert cluster.server().store.max_offset("T", 0) == 5
