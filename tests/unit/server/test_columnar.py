"""columnar.py: records of a queue range decode into Arrow columns, paged by bytes."""

from __future__ import annotations

import logging
import zlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from rayq.actors.server import columnar
from rayq.store import InnerMessage, MessageStore, StoreConfig, codec, decode_records
from rayq.store.errors import InvalidOffsetError
from rayq.store.message import COMPRESSED_FLAG

CONFIG = StoreConfig.for_tests(commitlog_segment_size_bytes=256 * 1024, cq_entries_per_file=1024)


def _msgs(n: int, queue_id: int = 0) -> list[InnerMessage]:
    out = []
    for i in range(n):
        body = f"body-{i}".encode() * (1 + i % 3)
        out.append(
            InnerMessage(
                topic="T",
                queue_id=queue_id,
                body=body,
                tags=f"tag{i % 2}" if i % 3 else None,
                keys="k1 k2" if i % 2 else "",
                uniq_key=f"U{i:04d}" if i % 5 else "",
                properties={"a": str(i)},
                born_timestamp=1000 + i,
                reconsume_times=i % 4,
            )
        )
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


def _records(props: list[bytes]) -> tuple[bytes, np.ndarray]:
    """Records with the given raw property bytes, back to back, and their starts."""
    parts, offset = [], 0
    for i, raw in enumerate(props):
        rec = codec.encode_record(
            topic="T",
            queue_id=0,
            queue_offset=i,
            body=b"b" * i,
            properties=raw,
            commitlog_offset=offset,
        )
        parts.append(rec)
        offset += len(rec)
    starts = np.cumsum([0] + [len(p) for p in parts[:-1]]).astype(np.int64)
    return b"".join(parts), starts


ODD_PROPERTIES = [
    b"",
    b"TAGS\x01t\x02KEYS\x01a  b c\x02UNIQ_KEY\x01U1\x02",
    b"TAGS\x01no-final-separator",
    b"\x02\x02TAGS\x01x\x02\x02",  # empty entries
    b"LONELY\x02TAGS\x01\x02",  # an entry without \x01; an empty tag
    b"a\x01b\x01c\x02",  # a value holding \x01
    b"TAGS\x01first\x02TAGS\x01last\x02",  # a repeated name: the last wins
    b"A_VERY_LONG_PROPERTY_NAME\x01v\x02KEYS\x01 k1 \x02",
    b"UNIQ_KEY\x01\x02",  # an empty unique id: the offset message id
    b"\xc3\xa9t\xc3\xa9\x01\xe2\x82\xac\x02",  # non-ASCII UTF-8
]


@pytest.mark.parametrize("order", ["as listed", "reversed"])
def test_odd_property_strings_decode_as_message_ext_does(order: str) -> None:
    props = ODD_PROPERTIES if order == "as listed" else ODD_PROPERTIES[::-1]
    buffer, starts = _records(props)
    batch = columnar.decode_columns(buffer, starts, "T", "b")
    expected = decode_records(buffer)
    for row, msg in zip(batch.to_pylist(), expected, strict=True):
        assert dict(row["properties"]) == msg.properties
        assert (row["tags"], row["keys"], row["msg_id"]) == (msg.tags, msg.keys, msg.msg_id)
        assert row["body"] == msg.body


def test_properties_that_are_not_utf8_read_with_replacement_characters(
    caplog: pytest.LogCaptureFixture,
) -> None:
    props = [b"TAGS\x01ok\x02", b"TAGS\x01bad\xff\x02KEYS\x01k\xfe1\x02", b"x\x01\xc3\x02"]
    buffer, starts = _records(props)
    with caplog.at_level(logging.WARNING, logger=columnar.__name__):
        batch = columnar.decode_columns(buffer, starts, "T", "b")
    assert batch.column("tags").to_pylist() == ["ok", "bad\ufffd", None]
    assert batch.column("keys").to_pylist() == [[], ["k\ufffd1"], []]
    assert dict(batch.column("properties")[2].as_py()) == {"x": "\ufffd"}
    assert "2 message(s) of topic 'T' have properties that are not valid UTF-8" in caplog.text


def test_a_stored_record_with_bad_utf8_properties_is_read_not_refused(
    store: MessageStore, caplog: pytest.LogCaptureFixture
) -> None:
    """Given a record whose properties were written as non-UTF-8 bytes by another client
    (its CRC intact), when its range is read, then the read succeeds."""
    assert store.put_messages(_msgs(5)).ok
    offset, size, _ = store.queues[("T", 0)].entry(2)
    seg = store.commitlog.file.find(offset)
    local = offset - seg.start
    record = bytearray(seg.mm[local : local + size])
    record[-2] = 0xFF  # inside the last property value ("a" -> its digit)
    codec.CRC.pack_into(record, codec.CRC_OFFSET, codec.record_crc(record, 0, size))
    seg.mv[local : local + size] = record
    with caplog.at_level(logging.WARNING, logger=columnar.__name__):
        batch, nxt = columnar.read_columns(store, "T", 0, 0, 5, 1 << 20, "b")
    assert nxt == 5 and batch.num_rows == 5
    assert dict(batch.column("properties")[2].as_py())["a"] == "\ufffd"
    assert "1 message(s)" in caplog.text


def test_large_page_matches_decoded_messages(store: MessageStore) -> None:
    """Given more records than one consume-queue segment holds, when read in one page,
    then every column equals the record-by-record decode."""
    assert store.put_messages(_msgs(1500)).ok
    batch, nxt = columnar.read_columns(store, "T", 0, 0, 1500, 1 << 30, "b")
    assert nxt == 1500
    got = store.get_messages("g", "T", 0, 0, 1500)
    expected, offset = [], 0
    while offset < 1500:
        got = store.get_messages("g", "T", 0, offset, 1000)
        expected += decode_records(got.buffer)
        offset = got.next_begin_offset
    assert batch.column("queue_offset").to_pylist() == [m.queue_offset for m in expected]
    assert batch.column("body").to_pylist() == [m.body for m in expected]
    assert batch.column("msg_id").to_pylist() == [m.msg_id for m in expected]
    assert batch.column("keys").to_pylist() == [m.keys for m in expected]


@pytest.mark.parametrize(
    "columns", [["body"], ["tags", "queue_offset"], ["msg_id", "keys", "properties"], []]
)
def test_asked_columns_are_those_of_the_full_batch(store: MessageStore, columns: list) -> None:
    """Given records, when only some columns (or none: a count) are asked for, then the
    batch has those columns in that order, equal to the full batch's, and every row."""
    assert store.put_messages(_msgs(120)).ok
    full, nxt = columnar.read_columns(store, "T", 0, 0, 120, 1 << 30, "b")
    some, nxt_some = columnar.read_columns(store, "T", 0, 0, 120, 1 << 30, "b", columns)
    assert nxt_some == nxt == 120
    assert some.schema.names == columns and some.num_rows == 120
    assert some.equals(full.select(columns))


def test_page_bytes_carry_the_next_offset_rows_and_an_ipc_stream(store: MessageStore) -> None:
    """The JVM's page: next offset and row count (little-endian), then Arrow IPC of the
    asked columns; a count's page is the header alone."""
    assert store.put_messages(_msgs(50)).ok
    batch, nxt = columnar.read_columns(store, "T", 0, 0, 50, 1 << 30, "b", ["body", "tags"])
    page = columnar.page_bytes(batch, nxt)
    assert np.frombuffer(page[:16], "<i8").tolist() == [50, 50]
    assert pa.ipc.open_stream(page[16:]).read_all().to_batches()[0].equals(batch)
    count, _ = columnar.read_columns(store, "T", 0, 10, 50, 1 << 30, "b", [])
    assert columnar.page_bytes(count, 50) == np.array([50, 40], "<i8").tobytes()
