"""Pages whose records stay in the commit log (page readers answering a caller on their
node: actors/page_reader.py, ``columnar.refs_page``).

``resolve`` reads such a page as the JVM does (rayq/connectors/jvm CommitLogRuns): the runs read
back to back from the segment files, every named record checked (size, magic, CRC),
its body cut out. What it reads must be exactly the whole page."""

from __future__ import annotations

import os
import zlib
from pathlib import Path

import msgspec
import numpy as np
import pyarrow as pa
import pytest

from rayq.actors.page_reader import PageReaderService
from rayq.actors.protocol import ReadArrowRequest
from rayq.actors.protocol.config import BrokerConfig
from rayq.actors.server import columnar
from rayq.store import InnerMessage, MessageStore, StoreConfig, codec
from rayq.store.bulk_reader import record_crcs
from rayq.store.message import COMPRESSED_FLAG

CONFIG = StoreConfig.for_tests(commitlog_segment_size_bytes=64 * 1024, cq_entries_per_file=256)
NODE = "0a1b2c3d"
COLUMNS = ["queue_offset", "body", "tags", "properties"]


class Damaged(Exception):
    """A record named by a page fails its check where the caller read it."""


def _msgs(n: int, queue_id: int = 0, size: int = 300) -> list[InnerMessage]:
    return [
        InnerMessage(
            topic="T",
            queue_id=queue_id,
            body=bytes([i % 251]) * (size + i % 7),
            tags=f"t{i % 3}",
            keys=f"k{i}",
            properties={"n": str(i)},
        )
        for i in range(n)
    ]


@pytest.fixture
def store(tmp_path: Path) -> MessageStore:
    with MessageStore(tmp_path / "s", CONFIG, broker_name="b") as s:
        yield s


@pytest.fixture
def reader(store: MessageStore) -> PageReaderService:
    config = BrokerConfig(broker_name="b", store=CONFIG)
    service = PageReaderService(config, str(store.root), NODE)
    yield service
    service.files.close()


def _request(
    start: int,
    end: int,
    local_node: str,
    columns: list[str] | None = COLUMNS,
    max_bytes: int = 1 << 20,
) -> bytes:
    return msgspec.json.encode(
        ReadArrowRequest(
            topic="T",
            queue_id=1,
            start=start,
            end=end,
            max_bytes=max_bytes,
            columns=columns,
            local_node=local_node,
        )
    )


def _split(page: bytes) -> tuple[int, int, pa.RecordBatch | None]:
    next_offset, rows = np.frombuffer(page[:16], dtype="<i8").tolist()
    batch = pa.ipc.open_stream(page[16:]).read_next_batch() if len(page) > 16 else None
    return next_offset, rows, batch


def resolve(batch: pa.RecordBatch, columns: list[str] = COLUMNS) -> pa.RecordBatch:
    """A by-reference page read as the JVM reads it: ``columns``, bodies from the files."""
    meta = batch.schema.metadata or {}
    assert meta.get(columnar.REFS_KEY) == columnar.REFS_VALUE
    directory, segment_size = meta[b"rayq.commitlog"].decode(), int(meta[b"rayq.segment_size"])
    data = b""
    for run in meta[b"rayq.runs"].decode().split(","):
        start, length = (int(x) for x in run.split(":"))
        segment = start - start % segment_size
        fd = os.open(Path(directory) / f"{segment:020d}", os.O_RDONLY)
        try:
            data += os.pread(fd, length, start - segment)
        finally:
            os.close(fd)
    at = batch.column(columnar.RECORD_AT).to_numpy().astype(np.int64)
    head = np.array([codec.PREFIX_CRC.unpack_from(data, a) for a in at.tolist()], dtype=np.int64)
    sizes = head[:, 0] if len(at) else np.empty(0, np.int64)
    if len(at) and (
        (head[:, 1] != codec.MAGIC).any() or (head[:, 2] != record_crcs(data, at, sizes)).any()
    ):
        raise Damaged
    bodies = []
    for a in at.tolist():
        n = int.from_bytes(data[a + codec.HEADER_SIZE - 4 : a + codec.HEADER_SIZE], "big")
        bodies.append(data[a + codec.HEADER_SIZE : a + codec.HEADER_SIZE + n])
    assert batch.schema.names == [c for c in columns if c != "body"] + [columnar.RECORD_AT]
    arrays = [pa.array(bodies, pa.binary()) if c == "body" else batch.column(c) for c in columns]
    return pa.RecordBatch.from_arrays(arrays, names=columns)


def _kind(batch: pa.RecordBatch | None) -> str:
    meta = (batch.schema.metadata or {}) if batch is not None else {}
    return "refs" if meta.get(columnar.REFS_KEY) == columnar.REFS_VALUE else "whole"


def test_a_caller_on_the_node_reads_the_same_page_from_the_files(
    store: MessageStore, reader: PageReaderService
) -> None:
    """Two queues interleaved over many segments: a page is several runs; read from the
    files by reference, every page equals the page with its bodies."""
    for _ in range(4):  # interleaved batches: runs break between queues and segments
        assert store.put_messages(_msgs(40) + _msgs(60, queue_id=1)).ok
    assert len(store.commitlog.file.segments) > 2
    end = store.queues[("T", 1)].max_offset
    offset, pages = 0, 0
    while offset < end:
        local = _split(reader.read_arrow_ipc(_request(offset, end, NODE.upper(), max_bytes=20_000)))
        whole = _split(reader.read_arrow_ipc(_request(offset, end, "", max_bytes=20_000)))
        assert _kind(local[2]) == "refs" and _kind(whole[2]) == "whole"
        assert local[:2] == whole[:2]
        assert resolve(local[2]).to_pylist() == whole[2].to_pylist()
        offset, pages = local[0], pages + 1
    assert pages > 3 and reader.pages == {"refs": pages, "whole": pages}


def test_other_nodes_counts_and_compressed_bodies_get_the_whole_page(
    store: MessageStore, reader: PageReaderService
) -> None:
    bodies = [zlib.compress(b"x" * 5000), b"plain"]
    assert store.put_messages(
        [
            InnerMessage(topic="T", queue_id=1, body=bodies[0], sys_flag=COMPRESSED_FLAG),
            InnerMessage(topic="T", queue_id=1, body=bodies[1]),
        ]
    ).ok
    assert _kind(_split(reader.read_arrow_ipc(_request(0, 2, "ffff")))[2]) == "whole"
    _, rows, batch = _split(reader.read_arrow_ipc(_request(0, 2, NODE)))
    assert _kind(batch) == "whole" and rows == 2
    assert batch.column("body").to_pylist() == [b"x" * 5000, b"plain"]  # inflated here
    _, rows, batch = _split(reader.read_arrow_ipc(_request(1, 2, NODE)))
    assert _kind(batch) == "refs" and resolve(batch).column("body").to_pylist() == [b"plain"]
    _, rows, batch = _split(reader.read_arrow_ipc(_request(0, 2, NODE, columns=["tags"])))
    assert _kind(batch) == "refs" and resolve(batch, ["tags"]).num_rows == 2  # no body asked
    _, rows, batch = _split(reader.read_arrow_ipc(_request(0, 2, NODE, columns=[])))
    assert _kind(batch) == "whole" and rows == 2  # a count: rows only, checked here
    assert reader.pages == {"refs": 2, "whole": 3}


def test_damage_is_found_where_the_bodies_are_read_and_the_whole_page_leaves_it_out(
    store: MessageStore, reader: PageReaderService
) -> None:
    """A by-reference page checks sizes and magics only: a record whose body was damaged is
    named, and fails its CRC where the caller reads it (the JVM then asks for the whole
    page, which leaves it out as the broker does)."""
    assert store.put_messages(_msgs(30, queue_id=1)).ok
    offset, _size, _ = store.queues[("T", 1)].entry(7)
    seg = store.commitlog.file.find(offset)
    seg.mv[offset - seg.start + codec.HEADER_SIZE + 5] ^= 0xFF  # a body byte
    _, rows, batch = _split(reader.read_arrow_ipc(_request(0, 30, NODE)))
    assert _kind(batch) == "refs" and rows == 30
    with pytest.raises(Damaged):
        resolve(batch)
    _, rows, batch = _split(reader.read_arrow_ipc(_request(0, 30, "")))
    assert rows == 29 and 7 not in batch.column("queue_offset").to_pylist()


def test_a_reader_without_a_node_id_never_answers_by_reference(store: MessageStore) -> None:
    assert store.put_messages(_msgs(5, queue_id=1)).ok
    service = PageReaderService(BrokerConfig(broker_name="b", store=CONFIG), str(store.root))
    try:
        page = service.read_arrow_ipc(_request(0, 5, ""))
        assert _kind(_split(page)[2]) == "whole" and service.pages == {"refs": 0, "whole": 1}
    finally:
        service.files.close()
