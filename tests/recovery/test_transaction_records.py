"""The store's side of transactions: PREPARED and ROLLBACK records never reach a
consume queue, on append and when recovery rebuilds the queues from the log."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rayq.store import MessageStore, PutStatus, StoreConfig
from rayq.store.message import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    InnerMessage,
)
from rayq.store.names import TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC

CFG = StoreConfig.for_tests()


def msg(topic: str, kind: int, body: bytes = b"b", prepared: int = 0) -> InnerMessage:
    return InnerMessage(
        topic=topic,
        queue_id=0,
        body=body,
        sys_flag=kind,
        properties={"TRAN_MSG": "true"},
        prepared_transaction_offset=prepared,
    )


def fill(store: MessageStore) -> int:
    half = store.put_messages([msg(TRANS_HALF_TOPIC, TRANSACTION_PREPARED_TYPE, b"h1")])
    key = half.commitlog_offsets[0]
    assert half.queue_offsets == [0]
    store.put_messages([msg("orders", 0, b"plain")])
    store.put_messages([msg("orders", TRANSACTION_COMMIT_TYPE, b"h1", prepared=key)])
    store.put_messages([msg(TRANS_HALF_TOPIC, TRANSACTION_PREPARED_TYPE, b"h2")])
    store.put_messages([msg(TRANS_OP_HALF_TOPIC, TRANSACTION_ROLLBACK_TYPE, b"k", prepared=key)])
    return key


def queues(store: MessageStore) -> dict[tuple[str, int], int]:
    return {k: cq.max_offset for k, cq in store.queues.items()}


def bodies(store: MessageStore) -> list[bytes]:
    got = store.get_messages("g", "orders", 0, 0, 32)
    from rayq.store.codec import decode_records

    return [m.body for m in decode_records(got.buffer)]


def test_halves_and_ops_get_no_queue(tmp_path: Path) -> None:
    with MessageStore(tmp_path, CFG) as store:
        fill(store)
        assert queues(store) == {("orders", 0): 2}
        assert bodies(store) == [b"plain", b"h1"]


@pytest.mark.parametrize("how", ["clean", "crash", "queues-deleted"])
def test_recovery_keeps_them_out(tmp_path: Path, how: str) -> None:
    store = MessageStore(tmp_path, CFG)
    fill(store)
    if how == "clean":
        store.close()
    else:
        store.crash()
        (tmp_path / "checkpoint").unlink(missing_ok=True)
    if how == "queues-deleted":
        shutil.rmtree(tmp_path / "consumequeue")
    with MessageStore(tmp_path, CFG) as again:
        assert queues(again) == {("orders", 0): 2}
        assert bodies(again) == [b"plain", b"h1"]
        assert not (tmp_path / "consumequeue" / TRANS_HALF_TOPIC).exists()


@pytest.mark.parametrize(
    ("topic", "kind"),
    [
        ("orders", TRANSACTION_PREPARED_TYPE),  # a half outside the half topic
        ("orders", TRANSACTION_ROLLBACK_TYPE),
        (TRANS_HALF_TOPIC, 0),  # the half topic holds halves only
        (TRANS_HALF_TOPIC, TRANSACTION_COMMIT_TYPE),
        (TRANS_OP_HALF_TOPIC, TRANSACTION_PREPARED_TYPE),
    ],
)
def test_misplaced_transaction_records_are_refused(tmp_path: Path, topic: str, kind: int) -> None:
    with MessageStore(tmp_path, CFG) as store:
        result = store.put_messages([msg(topic, kind)])
        assert result.status is PutStatus.MESSAGE_ILLEGAL
        assert store.written_offset == 0


def test_producer_batches_cannot_carry_transaction_types(tmp_path: Path) -> None:
    from rayq.store.batch import encode_batch

    with MessageStore(tmp_path, CFG) as store:
        for topic, kind in (("orders", TRANSACTION_COMMIT_TYPE), (TRANS_HALF_TOPIC, 0)):
            batch = encode_batch([msg(topic, kind)], max_body_bytes=1024, max_properties_bytes=1024)
            result = store.put_encoded(batch)
            assert result.status is PutStatus.MESSAGE_ILLEGAL, topic
        assert store.written_offset == 0
