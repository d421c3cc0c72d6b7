"""Commit-log records as Arrow columns: what Spark and Ray Data read from a broker.

``read_columns`` reads a queue's offset range ``[start, end)`` in pages of at most
``max_bytes`` of records (so a huge backlog never lands in one object) and decodes
each page into one ``pyarrow.RecordBatch`` with ``SCHEMA`` (or only the columns asked
for, decoding only what they need: Spark's pruned scans)::

    topic string, broker string, queue_id int32, queue_offset int64, msg_id string,
    tags string, keys list<string>, body binary, properties map<string, string>,
    born_timestamp timestamp[us, UTC], store_timestamp timestamp[us, UTC],
    reconsume_times int32

``properties`` holds every property of the record (TAGS, KEYS and UNIQ_KEY
included, as ``MessageExt.properties``); ``msg_id`` is the unique id (UNIQ_KEY) or
the offset message id; compressed bodies are inflated. Timestamps are microseconds
with a time zone, as Spark's Arrow format wants them.

No Python runs per record (but for compressed bodies and properties that are not
UTF-8). The store hands over the records of a page with their start positions
(store/bulk_reader.py: consume-queue entries and record checks in numpy). Here:

- the fixed headers are gathered with one numpy row gather (a sliding-window view);
- every variable-length column is a set of ascending, non-overlapping byte ranges of
  one buffer (bodies and property strings of the page; names, values, tags, keys and
  unique ids of the property strings). numpy writes the range bounds as the offsets
  of one Arrow array over the whole buffer (zero-copy: element 2i is range i, 2i+1
  the bytes up to the next one) and ``take`` of the even elements gathers the ranges
  into offsets + one data buffer in C++;
- properties (``NAME\\x01VALUE\\x02...``) are split by numpy over the separator
  positions; names up to 8 bytes are compared as one uint64; offset message ids are
  hex-encoded with a lookup table.

Properties that are not valid UTF-8 are read with U+FFFD in place of the bad bytes
(``bytes.decode(errors="replace")``), and the number of such messages is logged; the
read does not fail.
"""

from __future__ import annotations

import functools
import logging
import zlib
from collections.abc import Sequence
from typing import Final, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rayq.actors.protocol.arrow import SCHEMA as SCHEMA
from rayq.actors.protocol.arrow import from_ipc as from_ipc
from rayq.store import codec
from rayq.store import properties as P
from rayq.store.bulk_reader import RecordPage, rows
from rayq.store.errors import InvalidOffsetError
from rayq.store.message import COMPRESSED_FLAG, GetStatus

logger = logging.getLogger(__name__)

MAX_ENTRIES_PER_READ: Final[int] = 65536

_HEADER: Final = np.dtype(
    [
        ("size", ">i4"),  # total_size
        ("magic", ">u4"),  # magic
        ("crc", ">u4"),  # crc
        ("queue_offset", ">i8"),  # queue_offset
        ("commitlog_offset", ">i8"),  # commitlog_offset
        ("store_timestamp", ">i8"),  # store_timestamp
        ("store_host", "S8"),  # store_host
        ("queue_id", ">i4"),  # queue_id
        ("flag", ">i4"),  # flag
        ("sys_flag", ">i4"),  # sys_flag
        ("born_timestamp", ">i8"),  # born_timestamp
        ("born_host", "S8"),  # born_host
        ("reconsume_times", ">i4"),  # reconsume_times
        ("prepared", ">i8"),  # prepared_transaction_offset
        ("body_length", ">i4"),  # body_length
    ]
)
assert _HEADER.itemsize == codec.HEADER_SIZE
assert _HEADER.fields is not None
# An offset message id is the store host then the commit-log offset (hosts.py).
_OFFSET_ID_AT: Final = np.concatenate(
    [
        _HEADER.fields["store_host"][1] + np.arange(8),
        _HEADER.fields["commitlog_offset"][1] + np.arange(8),
    ]
)
_HEX: Final = np.frombuffer(b"0123456789ABCDEF", dtype=np.uint8)
_NAME_VALUE: Final[int] = ord(P.NAME_VALUE_SEPARATOR)
_PROPERTY_END: Final[int] = ord(P.PROPERTY_SEPARATOR)
_KEY_SEPARATOR: Final[int] = ord(P.KEY_SEPARATOR)
# Property names up to 8 bytes (TAGS, KEYS, UNIQ_KEY) are compared as one uint64.
_NAME_KEY_BYTES: Final[int] = 8
_NAME_KEY_MASK: Final = np.array(
    [(1 << (8 * k)) - 1 for k in range(_NAME_KEY_BYTES)] + [(1 << 64) - 1], dtype=np.uint64
)  # by name length: the bytes of the name (native order: the first byte is the lowest)
_TIMESTAMP: Final = pa.timestamp("us", tz="UTC")


class PageStore(Protocol):
    """What ``read_columns`` reads of a store: a ``MessageStore``, or a replica's files
    (the page readers)."""

    def read_page(
        self, topic: str, queue_id: int, offset: int, count: int, max_bytes: int, /
    ) -> RecordPage: ...


def read_columns(
    store: PageStore,
    topic: str,
    queue_id: int,
    start: int,
    end: int,
    max_bytes: int,
    broker: str = "",
    columns: Sequence[str] | None = None,
) -> tuple[pa.RecordBatch, int]:
    """Records of ``topic``/``queue_id`` from ``start`` (before ``end``, about ``max_bytes``
    of records: at least one record) as one batch, and the offset to continue from
    (``end`` when done). ``columns``: only these (``decode_columns``).

    Raises InvalidOffsetError when ``start`` was already removed by retention.
    """
    pages, offset = read_pages(store, topic, queue_id, start, end, max_bytes, broker)
    buffer, starts = _joined(pages)
    return decode_columns(buffer, starts, topic, broker, columns), offset


def read_pages(
    store: PageStore,
    topic: str,
    queue_id: int,
    start: int,
    end: int,
    max_bytes: int,
    broker: str = "",
) -> tuple[list[RecordPage], int]:
    """The record pages ``read_columns`` decodes, and the offset to continue from."""
    pages: list[RecordPage] = []
    size, offset = 0, start
    while offset < end and size < max_bytes:
        count = min(end - offset, MAX_ENTRIES_PER_READ)
        page = store.read_page(topic, queue_id, offset, count, max(max_bytes - size, 1))
        if page.status is GetStatus.NO_MATCHED_LOGIC_QUEUE:
            offset = end
            break
        if page.status is GetStatus.OFFSET_TOO_SMALL:
            raise InvalidOffsetError(
                f"offsets from {offset} of {topic}/{queue_id} on broker {broker!r} were "
                f"removed by retention; the queue now starts at {page.min_offset}",
                value=offset,
                limit=page.min_offset,
            )
        if page.next_offset <= offset:
            break  # past the end of the queue
        pages.append(page)
        size += len(page.buffer)
        offset = min(page.next_offset, end)
        if page.full:
            break
    return pages, offset


def _joined(pages: list[RecordPage]) -> tuple[bytes | memoryview, np.ndarray]:
    """One buffer and record starts for several pages (one page: as it is)."""
    if len(pages) == 1:
        return pages[0].buffer, pages[0].starts
    bases = np.cumsum([0] + [len(p.buffer) for p in pages])
    starts = [p.starts + base for p, base in zip(pages, bases.tolist(), strict=False)]
    return b"".join(p.buffer for p in pages), np.concatenate([np.empty(0, np.int64), *starts])


def decode_columns(
    buffer: bytes | memoryview,
    starts: np.ndarray,
    topic: str,
    broker: str = "",
    columns: Sequence[str] | None = None,
) -> pa.RecordBatch:
    """The records at ``starts`` of ``buffer`` (checked ones: bulk_reader.py) as one batch
    of ``SCHEMA``, or of only ``columns`` (in that order; none: a batch of no columns
    that still has the row count). Only what the asked columns need is decoded."""
    n = len(starts)
    names = SCHEMA.names if columns is None else list(columns)
    schema = SCHEMA if columns is None else pa.schema([SCHEMA.field(c) for c in names])
    if n == 0:
        return pa.RecordBatch.from_pylist([], schema=schema)
    if not names:  # a count: no columns, n rows
        return pa.RecordBatch.from_arrays([pa.nulls(n)], names=["n"]).select([])
    page = _Page(buffer, starts, topic, broker)
    return pa.RecordBatch.from_arrays([page.column(c) for c in names], schema=schema)


_PAGE_HEAD: Final = np.dtype([("next_offset", "<i8"), ("rows", "<i8")])


def page_bytes(batch: pa.RecordBatch, next_offset: int) -> bytes:
    """A page for the JVM (rayq/connectors/jvm RayqReader): ``_PAGE_HEAD``, then ``batch`` as an
    Arrow IPC stream unless it has no columns."""
    sink = pa.BufferOutputStream()
    sink.write(np.array([(next_offset, batch.num_rows)], _PAGE_HEAD).tobytes())
    if batch.num_columns:
        with pa.ipc.new_stream(sink, batch.schema) as writer:
            writer.write_batch(batch)
    data: bytes = sink.getvalue().to_pybytes()
    return data


# A page whose records stay in the commit log (``refs_page``): its schema's metadata.
REFS_KEY: Final[bytes] = b"rayq.records"
REFS_VALUE: Final[bytes] = b"in-files"
RECORD_AT: Final[str] = "record_at"


def refs_page(
    pages: list[RecordPage],
    next_offset: int,
    topic: str,
    broker: str,
    columns: Sequence[str],
    commitlog_dir: str,
    segment_size: int,
) -> bytes | None:
    """``pages`` as a page for a reader on the broker's node that reads the records from
    the commit-log files itself and checks their CRCs there (rayq/connectors/jvm CommitLogRuns), or
    None when a body it asks for is compressed (it must be inflated here: the caller
    sends the whole page).

    As ``page_bytes``, but without ``body``: the asked columns but that one, then
    ``record_at`` (int32): where each record starts in the page's runs of records read
    back to back. The schema's metadata names the runs: ``rayq.commitlog`` (the
    directory), ``rayq.segment_size`` and ``rayq.runs`` (``offset:length`` of each run
    in the commit log, comma-separated). The records' sizes and magics were checked
    here; their CRCs are the reader's to check, over the bytes it reads, before it uses
    any column (a count too)."""
    buffer, starts = _joined(pages)
    if not len(starts):
        return page_bytes(decode_columns(buffer, starts, topic, broker, columns), next_offset)
    page = _Page(buffer, starts, topic, broker)
    if "body" in columns and ((page.heads["sys_flag"] & COMPRESSED_FLAG) != 0).any():
        return None
    names = [c for c in columns if c != "body"]
    fields = [SCHEMA.field(c) for c in names] + [pa.field(RECORD_AT, pa.int32(), False)]
    arrays = [page.column(c) for c in names] + [pa.array(starts.astype(np.int32))]
    runs = np.concatenate([p.runs for p in pages])
    meta = {
        REFS_KEY: REFS_VALUE,
        b"rayq.commitlog": commitlog_dir.encode(),
        b"rayq.segment_size": str(segment_size).encode(),
        b"rayq.runs": ",".join(f"{a}:{n}" for a, n in runs.tolist()).encode(),
    }
    batch = pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields, metadata=meta))
    return page_bytes(batch, next_offset)


class _Page:
    """One page of records; each column decoded when asked for (the headers, bodies and
    property strings once, by the first column that needs them)."""

    def __init__(
        self, buffer: bytes | memoryview, starts: np.ndarray, topic: str, broker: str
    ) -> None:
        self.n, self.starts, self.topic, self.broker = len(starts), starts, topic, broker
        self.data = pa.py_buffer(buffer)
        self.raw = np.frombuffer(buffer, dtype=np.uint8)
        self.heads = rows(self.raw, starts, codec.HEADER_SIZE).view(_HEADER).ravel()

    @functools.cached_property
    def body_end(self) -> np.ndarray:
        return self.starts + codec.HEADER_SIZE + self.heads["body_length"].astype(np.int64)

    @functools.cached_property
    def props(self) -> _Properties:
        raw, body_end = self.raw, self.body_end
        props_at = body_end + raw[body_end].astype(np.int64) + 1 + codec.PROPS_LEN.size
        record_end = self.starts + self.heads["size"].astype(np.int64)
        return _Properties(
            _utf8(_Ranges(self.data, pa.binary(), props_at, record_end).get(), self.topic)
        )

    def column(self, name: str) -> pa.Array:
        heads, n = self.heads, self.n
        match name:
            case "topic":
                return pa.repeat(self.topic, n)
            case "broker":
                return pa.repeat(self.broker, n)
            case "queue_id" | "reconsume_times":
                return pa.array(heads[name].astype(np.int32))
            case "queue_offset":
                return pa.array(heads[name].astype(np.int64))
            case "born_timestamp" | "store_timestamp":
                return pa.array(heads[name].astype(np.int64) * 1000, _TIMESTAMP)
            case "msg_id":
                uniq = self.props.value_of(P.UNIQ_KEY, empty_is_null=True)
                return _msg_ids(uniq, self.raw, self.starts)
            case "tags":
                return self.props.value_of(P.TAGS)
            case "keys":
                return self.props.keys()
            case "properties":
                return self.props.as_map()
            case "body":
                body_at = self.starts + codec.HEADER_SIZE
                return _inflated(
                    _Ranges(self.data, pa.binary(), body_at, self.body_end).get(), heads
                )
        raise KeyError(name)


class _Ranges:
    """Byte ranges of one buffer given by ``k`` bounds per item, ascending over all
    items: part ``p`` of item ``i`` is ``data[bounds[p][i] : bounds[p + 1][i]]``."""

    def __init__(self, data: pa.Buffer, kind: pa.DataType, *bounds: np.ndarray) -> None:
        self.n, self.k = len(bounds[0]), len(bounds)
        offsets = np.empty((self.n, self.k), dtype=np.int32)
        for i, column in enumerate(bounds):
            offsets[:, i] = column
        # Element j of ``tokens`` is data[offsets[j] : offsets[j + 1]]: part j % k of
        # item j // k (no copy; the last part of each item is what lies between items).
        length = max(offsets.size - 1, 0)
        offsets_buffer = pa.py_buffer(offsets if offsets.size else np.zeros(1, np.int32))
        self.tokens = pa.Array.from_buffers(kind, length, [None, offsets_buffer, data])

    def get(self, part: int = 0, index: np.ndarray | None = None) -> pa.Array:
        """Part ``part`` of each item, or of the items at ``index`` (null where -1),
        gathered by Arrow into offsets + one data buffer."""
        assert 0 <= part < self.k - 1
        if index is None:
            picked = np.arange(part, self.n * self.k, self.k)
            return self.tokens.take(pa.array(picked))
        picked = np.maximum(index, 0) * self.k + part
        return self.tokens.take(pa.array(picked, mask=index < 0))


def _inflated(bodies: pa.Array, heads: np.ndarray) -> pa.Array:
    """Compressed bodies inflated (zlib, one call per compressed body)."""
    compressed = (heads["sys_flag"] & COMPRESSED_FLAG) != 0
    if not compressed.any():
        return bodies
    picked = bodies.filter(pa.array(compressed)).to_pylist()
    inflated = pa.array([zlib.decompress(b) for b in picked], pa.binary())
    return pc.replace_with_mask(bodies, pa.array(compressed), inflated)


def _utf8(props: pa.Array, topic: str) -> pa.Array:
    """Property bytes that are valid UTF-8; bad bytes become U+FFFD (and are counted)."""
    as_text = pa.Array.from_buffers(pa.string(), len(props), props.buffers())
    try:
        as_text.validate(full=True)
        return props
    except pa.ArrowInvalid:
        pass
    raw = props.to_pylist()
    fixed = [b.decode("utf-8", errors="replace").encode() for b in raw]
    bad = sum(1 for b, f in zip(raw, fixed, strict=True) if b != f)
    logger.warning(
        "%d message(s) of topic %r have properties that are not valid UTF-8; "
        "read with replacement characters",
        bad,
        topic,
    )
    return pa.array(fixed, pa.binary())


class _Properties:
    """The property strings of a page (valid UTF-8, back to back), split into
    ``(name, value)`` entries with numpy."""

    def __init__(self, props: pa.Array) -> None:
        self.n = n = len(props)
        self.data = props.buffers()[2] or pa.py_buffer(b"")
        self.raw = np.frombuffer(self.data, dtype=np.uint8)
        bounds = np.frombuffer(props.buffers()[1], dtype=np.int32)[: n + 1].astype(np.int64)
        at, name_end, value_at, end, self.entries = _entries(self.raw, bounds)
        self.value_at, self.end = value_at, end
        self.parts = _Ranges(self.data, pa.string(), at, name_end, value_at, end)
        head = rows(self.raw, at, _NAME_KEY_BYTES).view(np.uint64).ravel()
        name_len = np.minimum(name_end - at, _NAME_KEY_BYTES + 1)
        self.name_key = head & _NAME_KEY_MASK[np.minimum(name_len, _NAME_KEY_BYTES)]
        self.name_key[name_len > _NAME_KEY_BYTES] = 0  # longer names: never wanted here

    def as_map(self) -> pa.Array:
        names, values = self.parts.get(0), self.parts.get(2)
        return pa.MapArray.from_arrays(pa.array(self.entries), names, values)

    def _entry_of(self, name: str) -> np.ndarray:
        """Per row, the entry of property ``name`` (the last one if repeated), or -1."""
        raw_name = name.encode()
        assert 0 < len(raw_name) <= _NAME_KEY_BYTES
        wanted = np.frombuffer(raw_name.ljust(_NAME_KEY_BYTES, b"\0"), dtype=np.uint64)[0]
        hits = np.flatnonzero(self.name_key == wanted)
        rows = np.searchsorted(self.entries, hits, side="right") - 1
        entry = np.full(self.n, -1, dtype=np.int64)
        entry[rows] = hits  # ascending: a repeated name keeps its last value
        return entry

    def value_of(self, name: str, empty_is_null: bool = False) -> pa.Array:
        """The value of property ``name`` per row (null where a row has none, or where it
        is empty and ``empty_is_null``)."""
        entry = self._entry_of(name)
        if empty_is_null and entry.size and self.value_at.size:
            entry[self.value_at[entry] == self.end[entry]] = -1
        return self.parts.get(2, entry)

    def keys(self) -> pa.Array:
        """KEYS values split at spaces (empty keys dropped); no KEYS: an empty list."""
        entry = self._entry_of(P.KEYS)
        rows = np.flatnonzero(entry >= 0)
        spaces = np.flatnonzero(self.raw == _KEY_SEPARATOR)
        at, end, owner = _split(spaces, self.value_at[entry[rows]], self.end[entry[rows]])
        counts = np.bincount(rows[owner], minlength=self.n)
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
        items = _Ranges(self.data, pa.string(), at, end).get()
        return pa.ListArray.from_arrays(pa.array(offsets), items)


def _entries(raw: np.ndarray, bounds: np.ndarray) -> tuple[np.ndarray, ...]:
    """Property entries of back-to-back property strings (row i at ``bounds[i:i + 2]``
    of ``raw``): where each entry, its name's end and its value start, where it ends,
    and the first entry of each row (empty entries left out)."""
    marks = np.flatnonzero((raw == _NAME_VALUE) | (raw == _PROPERTY_END))
    kinds = raw[marks]
    rows_end = bounds[1:]
    closed = rows_end[rows_end > bounds[:-1]] - 1
    if (
        kinds.size % 2 == 0
        and (kinds[0::2] == _NAME_VALUE).all()
        and (kinds[1::2] == _PROPERTY_END).all()
        and (raw[closed] == _PROPERTY_END).all()
    ):  # the usual case: NAME\x01VALUE\x02 ..., each row ending in \x02
        name_end, end = marks[0::2], marks[1::2]
        at = np.concatenate([bounds[:1], end[:-1] + 1])[: end.size]
        return at, name_end, name_end + 1, end, np.searchsorted(end, bounds).astype(np.int32)
    ends = marks[kinds == _PROPERTY_END]
    at, end, row = _split(ends, bounds[:-1], rows_end)
    values = marks[kinds == _NAME_VALUE]
    first = np.searchsorted(values, at)
    value = values[np.minimum(first, values.size - 1)] if values.size else end
    has_value = (first < values.size) & (value < end)
    name_end = np.where(has_value, value, end)
    value_at = np.where(has_value, value + 1, end)
    entries = np.searchsorted(row, np.arange(len(rows_end) + 1)).astype(np.int32)
    return at, name_end, value_at, end, entries


def _split(
    cuts: np.ndarray, starts: np.ndarray, ends: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The non-empty pieces of the ranges ``[starts[i], ends[i])`` (ascending, not
    overlapping) cut at the positions ``cuts`` (ascending; the cut bytes are dropped):
    their starts, ends and the range each belongs to."""
    n = len(starts)
    owner = np.searchsorted(starts, cuts, side="right") - 1
    inside = (owner >= 0) & (cuts < ends[np.maximum(owner, 0)]) if n else owner < -1
    if not inside.any():
        keep = ends > starts
        return starts[keep], ends[keep], np.flatnonzero(keep)
    cuts, owner = cuts[inside], owner[inside]
    counts = np.bincount(owner, minlength=n) + 1
    last = np.cumsum(counts) - 1
    is_last = np.zeros(int(counts.sum()), dtype=bool)
    is_last[last] = True
    is_first = np.zeros_like(is_last)
    is_first[last - counts + 1] = True
    piece_at = np.empty(is_last.size, dtype=np.int64)
    piece_end = np.empty(is_last.size, dtype=np.int64)
    piece_end[is_last], piece_end[~is_last] = ends, cuts
    piece_at[is_first], piece_at[~is_first] = starts, cuts + 1
    parent = np.repeat(np.arange(n), counts)
    keep = piece_end > piece_at
    return piece_at[keep], piece_end[keep], parent[keep]


def _msg_ids(uniq: pa.Array, raw: np.ndarray, starts: np.ndarray) -> pa.Array:
    """UNIQ_KEY, or the offset message id (32 hex digits) where a record has none."""
    if not uniq.null_count:
        return uniq
    digits = raw[starts[:, None] + _OFFSET_ID_AT]
    hexed = np.empty((len(starts), 2 * digits.shape[1]), dtype=np.uint8)
    hexed[:, 0::2] = _HEX[digits >> 4]
    hexed[:, 1::2] = _HEX[digits & 0x0F]
    offsets = (np.arange(len(starts) + 1) * hexed.shape[1]).astype(np.int32)
    buffers = [None, pa.py_buffer(offsets), pa.py_buffer(hexed)]
    ids = pa.Array.from_buffers(pa.string(), len(starts), buffers)
    return pc.coalesce(uniq, ids)


def to_ipc(batch: pa.RecordBatch) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    data: bytes = sink.getvalue().to_pybytes()
    return data
