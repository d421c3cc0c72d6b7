"""store/columnar.py: records of a queue range decode into Arrow columns, paged by bytes."""

from __future__ import annotations

import zlib
from pathlib import Path

import pytest

from rayq.actors.server import columnar
from rayq.store import InnerMessage, MessageStore, StoreConfig, decode_records
from rayq.store.errors import InvalidOffsetError
from rayq.store.message import COMPRESSED_FLAG

CONFIG = StoreConfig.for_tests(commitlog_segment_size_bytes=256 * 1024, cq_entries_per_file=1024)


def _msgs(n: int, queue_id: int = 0) -> list[InnerMessage]:
    out = []
    for i in range(n):
        body = f"body-{i}".encode() * (1 + i % 3)
        out.append(InnerMessage(
            topic="T", queue_id=queue_id, body=body, tags=f"tag{i % 2}" if i % 3 else None,
            keys="k1 k2" if i % 2 else "", uniq_key=f"U{i:04d}" if i % 5 else "",
            properties={"a": str(i)}, born_timestamp=1000 + i, reconsume_times=i % 4,
        ))  # fmt: skip
    return out


@pytest.fixture
def store(tmp_path: Path) -> MessageStore:
    with MessageStore(tmp_path / "s", CONFIG, broker_name="b") as s:
        yield s


def test_columns_match_decoded_messages(store: MessageStore) -> None:
    assert store.put_messages(_msgs(300)).ok
    batch, nxt = columnar.read_columns(store, "T", 0, 0, 300, 1 << 30, "b")
    assert nxt == 300 and batch.num_rows == 300
    assert batch.schema == columnar.SCHEMA
    got = store.get_messages("g", "T", 0, 0, 32)
    expected = decode_records(got.buffer)
    rows = batch.to_pylist()
    for row, msg in zip(rows, expected, strict=False):
        assert row["queue_offset"] == msg.queue_offset
        assert row["body"] == msg.body
        assert row["tags"] == msg.tags
        assert row["keys"] == msg.keys
        assert row["msg_id"] == msg.msg_id
        assert dict(row["properties"]) == msg.properties
        assert row["born_timestamp"].timestamp() * 1000 == pytest.approx(msg.born_timestamp)
        assert row["reconsume_times"] == msg.reconsume_times
        assert (row["topic"], row["broker"], row["queue_id"]) == ("T", "b", 0)


def test_pages_by_bytes_and_stops_at_end(store: MessageStore) -> None:
    assert store.put_messages(_msgs(500)).ok
    offsets, start = [], 10
    while start < 400:
        batch, start = columnar.read_columns(store, "T", 0, start, 400, 2000, "b")
        assert 0 < batch.num_rows < 100  # pages of about 2000 bytes
        offsets += batch.column("queue_offset").to_pylist()
    assert offsets == list(range(10, 400))


def test_compressed_bodies_are_inflated(store: MessageStore) -> None:
    body = b"x" * 5000
    msg = InnerMessage(topic="T", queue_id=1, body=zlib.compress(body), sys_flag=COMPRESSED_FLAG)
    assert store.put_messages([msg]).ok
    batch, _ = columnar.read_columns(store, "T", 1, 0, 1, 1 << 20)
    assert batch.column("body").to_pylist() == [body]
    assert batch.column("keys").to_pylist() == [[]]


def test_empty_range_and_unknown_queue(store: MessageStore) -> None:
    batch, nxt = columnar.read_columns(store, "T", 3, 0, 10, 1 << 20)
    assert batch.num_rows == 0 and nxt == 10
    assert store.put_messages(_msgs(5)).ok
    batch, nxt = columnar.read_columns(store, "T", 0, 5, 5, 1 << 20)
    assert batch.num_rows == 0 and nxt == 5


def test_ipc_round_trip(store: MessageStore) -> None:
    assert store.put_messages(_msgs(20)).ok
    batch, _ = columnar.read_columns(store, "T", 0, 0, 20, 1 << 20)
    (back,) = columnar.from_ipc(columnar.to_ipc(batch))
    assert back.equals(batch)


def test_removed_range_is_reported(tmp_path: Path) -> None:
    with MessageStore(tmp_path / "r", CONFIG) as store:
        assert store.put_messages(_msgs(10)).ok
        cq = store.queues[("T", 0)]
        cq.min_logic_offset = 5 * 20  # as retention leaves it
        with pytest.raises(InvalidOffsetError, match="removed by retention"):
            columnar.read_columns(store, "T", 0, 0, 10, 1 << 20)
