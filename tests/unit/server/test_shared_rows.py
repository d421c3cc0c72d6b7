"""actors/server/shared_rows.py: a put's rows read from an executor's shared-memory slot.

The slot directory is a temp dir here (the broker's is /dev/shm); the broker side is
``SharedRows`` and ``BrokerServer.arrow_batches`` over a view of a slot."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import msgspec
import pyarrow as pa
import pytest

from rayq.actors.protocol import ArrowPutRequest, check_json
from rayq.actors.protocol.config import BrokerConfig
from rayq.actors.server import shared_rows
from rayq.actors.server.broker_server import BrokerServer
from rayq.actors.server.shared_rows import SharedRows
from rayq.store import StoreConfig, decode_records
from rayq.store.errors import InvalidRequestError


def slot(directory: Path, data: bytes, size: int = 1 << 16) -> Path:
    path = directory / f"rayq-put-{uuid.uuid4().hex}"
    path.write_bytes(data.ljust(size, b"\0"))
    return path


@pytest.fixture
def rows(tmp_path: Path) -> SharedRows:
    out = SharedRows(str(tmp_path))
    yield out
    out.close()


def test_a_slot_is_read_in_place_and_kept_after_the_sender_unlinks_it(
    tmp_path: Path, rows: SharedRows
) -> None:
    path = slot(tmp_path, b"first rows")
    assert bytes(rows.view(str(path), 10)) == b"first rows"
    path.write_bytes(b"second rows".ljust(1 << 16, b"\0"))  # the slot reused: same file
    assert bytes(rows.view(str(path), 11)) == b"second rows"
    fd = os.open(path, os.O_RDWR)
    try:
        path.unlink()  # after the first answered put: only the mappings hold it
        os.pwrite(fd, b"third", 0)
        assert bytes(rows.view(str(path), 5)) == b"third"
    finally:
        os.close(fd)
    assert rows.puts == {"shared": 3, "inline": 0}


def test_a_puts_rows_come_inline_or_from_the_slot_it_names(
    tmp_path: Path, rows: SharedRows
) -> None:
    path = slot(tmp_path, b"slot rows")
    assert rows.rows_of("", 0, b"inline rows") == b"inline rows"
    assert bytes(rows.rows_of(str(path), 9, b"")) == b"slot rows"
    assert rows.rows_of(str(tmp_path / f"rayq-put-{uuid.uuid4().hex}"), 1, b"") is None
    with pytest.raises(InvalidRequestError, match="rows in a file and in the call"):
        rows.rows_of(str(path), 9, b"both")
    assert rows.puts == {"shared": 1, "inline": 1}


def test_files_it_may_not_or_cannot_read_are_refused(tmp_path: Path, rows: SharedRows) -> None:
    outside = tmp_path / "sub"
    outside.mkdir()
    for path in (
        str(slot(outside, b"x")),  # another directory
        str(tmp_path / "rayq-put-xyz"),  # not the slot name
        str(tmp_path / "passwd"),
    ):
        with pytest.raises(InvalidRequestError, match="rows_file must be"):
            rows.view(path, 1)
    gone = tmp_path / f"rayq-put-{uuid.uuid4().hex}"
    assert rows.view(str(gone), 1) is None  # another node's slot, or one no longer held
    link = tmp_path / f"rayq-put-{uuid.uuid4().hex}"
    link.symlink_to(slot(outside, b"secret"))
    assert rows.view(str(link), 6) is None
    path = slot(tmp_path, b"short", size=16)
    with pytest.raises(InvalidRequestError, match="outside the 16 bytes"):
        rows.view(str(path), 17)
    assert rows.puts["shared"] == 0


def test_idle_mappings_are_dropped_and_their_unlinked_files_then_refused(
    tmp_path: Path, rows: SharedRows, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = [1000.0]
    monkeypatch.setattr(shared_rows.time, "monotonic", lambda: clock[0])
    old, new = slot(tmp_path, b"old"), slot(tmp_path, b"new")
    assert bytes(rows.view(str(old), 3)) == b"old"
    old.unlink()
    clock[0] += shared_rows.IDLE_S + 1
    assert bytes(rows.view(str(new), 3)) == b"new"  # drops the idle one
    assert rows.view(str(old), 3) is None
    monkeypatch.setattr(shared_rows, "MAX_FILES", 2)
    third = slot(tmp_path, b"3rd")
    clock[0] += 1
    assert bytes(rows.view(str(third), 3)) == b"3rd"
    new.unlink()
    clock[0] += 1
    fourth = slot(tmp_path, b"4th")
    assert bytes(rows.view(str(fourth), 3)) == b"4th"  # drops the oldest
    assert rows.view(str(new), 3) is None
    fourth.unlink()
    clock[0] += shared_rows.IDLE_S + 1
    rows.drop_idle()  # the broker's timer: without a put coming
    assert rows.view(str(fourth), 3) is None


def test_the_request_names_only_slot_files() -> None:
    base = {
        "topic": "t",
        "queue_id": 0,
        "producer_id": "p",
        "first_sequence": 0,
        "group": "g",
        "body": "body",
    }
    good = f"/dev/shm/rayq-put-{uuid.uuid4().hex}"
    assert (
        check_json(
            msgspec.json.encode({**base, "rows_file": good, "rows_length": 9}), ArrowPutRequest
        ).rows_file
        == good
    )
    for bad in ("/etc/passwd", "/dev/shm/../etc/passwd", good + "/x", "/tmp/rayq-put-" + "a" * 32):
        with pytest.raises(InvalidRequestError, match="rows_file"):
            check_json(msgspec.json.encode({**base, "rows_file": bad}), ArrowPutRequest)


def test_rows_are_copied_out_of_the_slot_before_the_put_is_answered(tmp_path: Path) -> None:
    """The encoded batches do not point into the slot: the sender writes it again."""
    bodies = [f"row {i}".encode() * 5 for i in range(50)]
    sink = pa.BufferOutputStream()
    table = pa.table({"body": bodies})
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    data = bytearray(sink.getvalue().to_pybytes())
    server = BrokerServer(BrokerConfig(store=StoreConfig.for_tests()), str(tmp_path / "s"))
    try:
        req = ArrowPutRequest(
            topic="t", queue_id=0, producer_id="p", first_sequence=0, group="g", body="body"
        )
        view = memoryview(data)
        batches = server.arrow_batches(req, view)
        del view
        data[:] = bytes(len(data))  # the slot written again
        got = [m.body for b in batches for m in decode_records(b.records)]
        assert got == bodies
    finally:
        server.close()
