"""connectors.arrow_io's write path, without Ray: a writer's Arrow batches become idempotent puts
of at most PUT_BYTES of records, numbered without gaps, the same on every run; null
bodies raise before the first put."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from rayq.actors.protocol import MessageQueue
from rayq.connectors import arrow_io
from rayq.connectors.arrow_io import Columns
from rayq.store import decode_records
from rayq.store.batch import check_encoded
from rayq.store.errors import InvalidMessageError

QUEUE = MessageQueue("out", "broker-a", 2)
COLS = Columns("body", keys="keys", tags="tags")


def _batches(sizes: list[int]) -> list[pa.RecordBatch]:
    out, i = [], 0
    for size in sizes:
        bodies = [f"{i + j:06d}".encode() * (20 + (i + j) % 50) for j in range(size)]
        tags = [None if (i + j) % 3 else f"t{(i + j) % 5}" for j in range(size)]
        keys = [[f"k{i + j}"] if (i + j) % 2 else [] for j in range(size)]
        out.append(pa.record_batch({"body": bodies, "tags": tags, "keys": keys}))
        i += size
    return out


def _puts(batches: list[pa.RecordBatch]) -> list[arrow_io.Put]:
    return list(arrow_io._puts(iter(batches), QUEUE, "pid-1", COLS, "grp"))


def test_rows_are_cut_into_numbered_puts_below_the_byte_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(arrow_io, "PUT_BYTES", 20_000)
    batches = _batches([7, 120, 3, 0, 200, 45])
    puts = _puts(batches)
    encoded = [p.batch for p in puts]
    assert len(puts) > 5
    assert all(len(b.records) <= 20_000 for b in encoded)
    assert [b.first_sequence for b in encoded] == list(
        np.cumsum([0] + [b.count for b in encoded[:-1]])
    )
    assert {b.producer_id for b in encoded} == {"pid-1"}
    assert all(len(b.records) > 20_000 * 0.8 for b in encoded[:-1])  # as few puts as fit
    messages = [m for b in encoded for m in decode_records(b.records)]
    bodies = [b for batch in batches for b in batch.column("body").to_pylist()]
    assert [m.body for m in messages] == bodies
    assert [m.msg_id for m in messages] == [f"pid-1-{i}" for i in range(len(bodies))]
    assert [m.queue_id for m in messages] == [2] * len(bodies)
    for b in encoded:
        check_encoded(b, 4 * 1024 * 1024, 32 * 1024)
        seq = decode_records(b.records)[0].properties["__PSEQ"]
        assert seq == f"{b.first_sequence}-{b.first_sequence + b.count - 1}"
    tags = [t for batch in batches for t in batch.column("tags").to_pylist()]
    assert [m.tags for m in messages] == tags
    assert [m.keys for m in messages] == [
        k for batch in batches for k in batch.column("keys").to_pylist()
    ]


def test_a_rerun_cuts_the_same_puts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(arrow_io, "PUT_BYTES", 30_000)
    first = [(p.batch.first_sequence, p.batch.count) for p in _puts(_batches([90, 90, 90]))]
    again = [(p.batch.first_sequence, p.batch.count) for p in _puts(_batches([90, 90, 90]))]
    assert first == again


def test_small_batches_join_into_one_put() -> None:
    puts = _puts(_batches([10] * 20))
    assert [p.batch.count for p in puts] == [200]


def test_null_bodies_raise_before_the_first_put_is_made() -> None:
    bad = pa.record_batch(
        {
            "body": pa.array([b"a", None], pa.binary()),
            "tags": pa.nulls(2, pa.string()),
            "keys": pa.nulls(2, pa.list_(pa.string())),
        }
    )
    puts = arrow_io._puts(iter([*_batches([5]), bad]), QUEUE, "pid-1", COLS, "grp")
    with pytest.raises(InvalidMessageError, match="'body' has 1 null bodies in 2 rows"):
        next(puts)


def test_a_properties_column_keeps_the_batch_properties_and_refuses_reserved_names() -> None:
    """Read-back names in a row (PGROUP, __PID, RETRY_TOPIC) are dropped for the batch's
    own; a name only the broker sets (REAL_TOPIC) raises before any put."""
    maps = pa.map_(pa.string(), pa.string())
    row = [("PGROUP", "old"), ("__PID", "old"), ("RETRY_TOPIC", "t"), ("k", "v")]
    batch = pa.record_batch({"body": [b"a", b"b"], "props": pa.array([row, None], maps)})
    cols = Columns("body", properties="props")
    (put,) = arrow_io._puts(iter([batch]), QUEUE, "pid-1", cols, "grp")
    first, second = decode_records(put.batch.records)
    shared = {"PGROUP": "grp", "__PID": "pid-1", "__PSEQ": "0-1"}
    assert first.properties == {"UNIQ_KEY": "pid-1-0", "k": "v", **shared}
    assert second.properties == {"UNIQ_KEY": "pid-1-1", **shared}
    bad = pa.record_batch({"body": [b"a"], "props": pa.array([[("REAL_TOPIC", "x")]], maps)})
    with pytest.raises(InvalidMessageError, match=r"REAL_TOPIC.*reserved"):
        next(arrow_io._puts(iter([bad]), QUEUE, "pid-1", cols, "grp"))
