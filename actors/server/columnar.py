"""Commit-log records as Arrow columns: what Spark and Ray Data read from a broker.

``read_columns`` reads a queue's offset range ``[start, end)`` in pages of at most
``max_bytes`` of records (so a huge backlog never lands in one object) and decodes
each page into one ``pyarrow.RecordBatch`` with ``SCHEMA``::

    topic string, broker string, queue_id int32, queue_offset int64, msg_id string,
    tags string, keys list<string>, body binary, properties map<string, string>,
    born_timestamp timestamp[us, UTC], store_timestamp timestamp[us, UTC],
    reconsume_times int32

``properties`` holds every property of the record (TAGS, KEYS and UNIQ_KEY
included, as ``MessageExt.properties``); ``msg_id`` is the unique id (UNIQ_KEY) or
the offset message id; compressed bodies are inflated. Decoding is columnar: the
fixed headers are gathered with one numpy fancy index, properties are split with
Arrow compute kernels; Python runs per record only to cut bodies out of the page.
Timestamps are microseconds with a time zone, as Spark's Arrow format wants them.
"""

from __future__ import annotations

import functools
import struct
import zlib
from typing import Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rayq.store import codec
from rayq.store import properties as P
from rayq.store.config import StoreConfig
from rayq.store.errors import InvalidOffsetError
from rayq.store.message import COMPRESSED_FLAG, GetStatus
from rayq.store.message_store import MessageStore
from rayq.store.reader import QueueReader

SCHEMA: Final = pa.schema(
    [
        ("topic", pa.string()),
        ("broker", pa.string()),
        ("queue_id", pa.int32()),
        ("queue_offset", pa.int64()),
        ("msg_id", pa.string()),
        ("tags", pa.string()),
        ("keys", pa.list_(pa.string())),
        ("body", pa.binary()),
        ("properties", pa.map_(pa.string(), pa.string())),
        ("born_timestamp", pa.timestamp("us", tz="UTC")),
        ("store_timestamp", pa.timestamp("us", tz="UTC")),
        ("reconsume_times", pa.int32()),
    ]
)
MAX_RECORDS_PER_GET: Final[int] = 8192

_HEADER: Final = np.dtype(
    [("size", ">i4"), ("magic", ">u4"), ("crc", ">u4"), ("queue_offset", ">i8"),
     ("commitlog_offset", ">i8"), ("store_timestamp", ">i8"), ("store_host", "S8"),
     ("queue_id", ">i4"), ("flag", ">i4"), ("sys_flag", ">i4"), ("born_timestamp", ">i8"),
     ("born_host", "S8"), ("reconsume_times", ">i4"), ("prepared", ">i8"),
     ("body_length", ">i4")]
)  # fmt: skip
assert _HEADER.itemsize == codec.HEADER_SIZE
_ROW: Final = np.arange(codec.HEADER_SIZE)
_SIZE: Final = struct.Struct(">i")


@functools.lru_cache(maxsize=64)
def _bulk_reader(commitlog: object, config: StoreConfig, max_bytes: int) -> QueueReader:
    """A reader without RocketMQ's small per-pull caps: pages of up to ``max_bytes``."""
    big = config.replace(
        max_transfer_count_in_memory=MAX_RECORDS_PER_GET,
        max_transfer_count_on_disk=MAX_RECORDS_PER_GET,
        max_transfer_bytes_in_memory=max_bytes,
        max_transfer_bytes_on_disk=max_bytes,
    )
    return QueueReader(commitlog, big)  # type: ignore[arg-type]


def read_columns(store: MessageStore, topic: str, queue_id: int, start: int, end: int,
                 max_bytes: int, broker: str = "") -> tuple[pa.RecordBatch, int]:  # fmt: skip
    """Records of ``topic``/``queue_id`` from ``start`` (before ``end``, about ``max_bytes``
    of records: at least one record) as one batch, and the offset to continue from
    (``end`` when done).

    Raises InvalidOffsetError when ``start`` was already removed by retention.
    """
    cq = store.queues.get((topic, queue_id))
    parts: list[bytes] = []
    size, offset = 0, start
    while cq is not None and offset < end and size < max_bytes:
        reader = _bulk_reader(store.commitlog, store.config, max(max_bytes - size, 1))
        got = reader.read(cq, offset, min(end - offset, MAX_RECORDS_PER_GET), None)
        if got.status is GetStatus.OFFSET_TOO_SMALL:
            raise InvalidOffsetError(
                f"offsets from {offset} of {topic}/{queue_id} on broker {broker!r} were "
                f"removed by retention; the queue now starts at {got.min_offset}",
                value=offset, limit=got.min_offset,
            )  # fmt: skip
        if got.status is not GetStatus.FOUND and got.next_begin_offset <= offset:
            break  # past the end of the queue
        parts.append(got.buffer)
        size += len(got.buffer)
        offset = min(max(got.next_begin_offset, offset), end)
    if cq is None:
        offset = end
    return decode_columns(b"".join(parts), topic, broker), offset


def record_starts(buf: bytes) -> np.ndarray:
    starts = []
    pos, n, unpack = 0, len(buf), _SIZE.unpack_from
    while pos < n:
        starts.append(pos)
        pos += unpack(buf, pos)[0]
    return np.asarray(starts, dtype=np.int64)


def decode_columns(buf: bytes, topic: str, broker: str = "") -> pa.RecordBatch:
    """Records laid back to back (a GetResult buffer) as one batch of ``SCHEMA``."""
    starts = record_starts(buf)
    n = len(starts)
    if n == 0:
        return pa.RecordBatch.from_pylist([], schema=SCHEMA)
    raw = np.frombuffer(buf, dtype=np.uint8)
    heads = raw[starts[:, None] + _ROW].view(_HEADER).ravel()
    body_at = starts + codec.HEADER_SIZE
    body_end = body_at + heads["body_length"].astype(np.int64)
    topic_len = raw[body_end].astype(np.int64)
    props_at = body_end + 1 + topic_len + 2
    rec_end = starts + heads["size"].astype(np.int64)
    bodies = list(map(buf.__getitem__, map(slice, body_at.tolist(), body_end.tolist())))
    for i in np.flatnonzero(heads["sys_flag"] & COMPRESSED_FLAG).tolist():
        bodies[i] = zlib.decompress(bodies[i])
    props_raw = list(map(buf.__getitem__, map(slice, props_at.tolist(), rec_end.tolist())))
    props = pc.cast(pa.array(props_raw, pa.binary()), pa.string())
    names, values, parents = _split_properties(props)
    counts = np.bincount(parents, minlength=n)
    offsets = pa.array(np.concatenate([[0], np.cumsum(counts)]).astype(np.int32))
    prop_map = pa.MapArray.from_arrays(offsets, names, values)
    tags = _pick(names, values, parents, P.TAGS, n)
    keys = _keys(_pick(names, values, parents, P.KEYS, n), n)
    msg_ids = _pick(names, values, parents, P.UNIQ_KEY, n)
    if msg_ids.null_count:
        ids = msg_ids.to_pylist()
        for i in [i for i, v in enumerate(ids) if v is None]:
            ids[i] = codec.offset_msg_id(bytes(heads["store_host"][i]),
                                         int(heads["commitlog_offset"][i]))  # fmt: skip
        msg_ids = pa.array(ids, pa.string())
    ts = pa.timestamp("us", tz="UTC")
    columns = [
        pa.array([topic] * n, pa.string()),
        pa.array([broker] * n, pa.string()),
        pa.array(heads["queue_id"].astype(np.int32)),
        pa.array(heads["queue_offset"].astype(np.int64)),
        msg_ids,
        tags,
        keys,
        pa.array(bodies, pa.binary()),
        prop_map,
        pa.array(heads["born_timestamp"].astype(np.int64) * 1000, ts),
        pa.array(heads["store_timestamp"].astype(np.int64) * 1000, ts),
        pa.array(heads["reconsume_times"].astype(np.int32)),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=SCHEMA)


def _split_properties(props: pa.Array) -> tuple[pa.Array, pa.Array, np.ndarray]:
    """Property names, values and the row each pair belongs to."""
    entries = pc.split_pattern(props, "\x02")
    items = pc.list_flatten(entries)
    parents = pc.list_parent_indices(entries)
    keep = pc.not_equal(items, "")
    items, parents = items.filter(keep), parents.filter(keep)
    pairs = pc.split_pattern(items, "\x01", max_splits=1)
    names = pc.list_element(pairs, 0)
    values = pc.list_element(pairs, 1)
    return names, values, parents.to_numpy(zero_copy_only=False).astype(np.int64)


def _pick(names: pa.Array, values: pa.Array, parents: np.ndarray, name: str, n: int) -> pa.Array:
    """The value of property ``name`` per row (null where a row has none)."""
    mask = pc.equal(names, name)
    found = values.filter(mask)
    rows = parents[np.asarray(mask.to_numpy(zero_copy_only=False), dtype=bool)]
    index = np.full(n, -1, dtype=np.int64)
    index[rows] = np.arange(len(rows))
    return pc.take(found, pa.array(index, mask=index < 0))


def _keys(joined: pa.Array, n: int) -> pa.Array:
    """KEYS values (space-separated) as lists; rows without keys get an empty list."""
    split = pc.split_pattern(pc.fill_null(joined, ""), P.KEY_SEPARATOR)
    items = pc.list_flatten(split)
    parents = pc.list_parent_indices(split)
    keep = pc.not_equal(items, "")
    items = items.filter(keep)
    rows = parents.filter(keep).to_numpy(zero_copy_only=False).astype(np.int64)
    offsets = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=n))]).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), items)


def to_ipc(batch: pa.RecordBatch) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def from_ipc(data: bytes) -> list[pa.RecordBatch]:
    with pa.ipc.open_stream(pa.py_buffer(data)) as reader:
        return list(reader)
