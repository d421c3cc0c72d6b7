"""Arrow columns to an ``EncodedBatch`` column-wise: ``encode_batch`` without a row in Python.

The records are those ``encode_batch`` (batch.py) writes for the same messages, byte for
byte (codec.py has the layout): header, body, topic, properties length, properties.
``ArrowRows`` holds a batch's messages as columns: binary bodies, optional tags (string;
null or "" for none), keys (string, several joined by a space; "" for none) and each
row's own properties, encoded (``properties_text`` makes them from a map column).
``arrow_rows`` builds one from the columns a Spark or Ray Data writer takes (string
bodies, list<string> keys) and refuses what ``encode_batch`` would refuse, with an
``InvalidMessageError`` naming the row.

How ``encode_rows`` works, per batch (no Python bytecode per row):

- properties text with ``pyarrow.compute``'s element-wise string joins:
  ``[TAGS\\x01t\\x02][KEYS\\x01k\\x02]UNIQ_KEY\\x01u\\x02``, the row's own properties,
  then those the batch shares (a producer's group, the idempotence properties): the
  order ``encode_message_properties`` writes ``{**own, **shared}``;
- the 88-byte headers as one numpy structured array (``_HEADER``, big-endian), the
  topic and properties length as one (n, T+2) uint8 array;
- one ``binary_join_element_wise`` joins header, body, tail and properties of each row:
  its data buffer is the records back to back;
- a map column's properties (``properties_text``): flattened, names dropped or refused
  with ``is_in``, ``name\\x01value\\x02`` joined element-wise and then per row
  (``binary_join`` over a list array built from the row counts);
- the producer CRCs with ``crc32c`` mapped (C-level ``map``) over slices of that
  buffer, written into the crc fields with one numpy scatter;
- tag hashes once per distinct tag (``dictionary_encode``), key-index hashes over the
  split keys (``split_pattern``, ``list_parent_indices``) and the ids, CRC-32C seeded
  with ``topic#`` as index_file.py hashes them.

``sequence_ids`` gives ``<producer id>-<sequence>`` ids in bulk, and ``record_bounds``
an upper bound of each record's size (before its ids are known), for cutting a large
input into puts below a byte limit. Pure: no Ray, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from crc32c import crc32c

from . import codec
from . import properties as P
from .batch import EncodedBatch, body_too_large, properties_too_large
from .errors import InvalidMessageError, MessageTooLargeError
from .filters import tags_code
from .index_file import topic_seed
from .names import validate_topic

# codec.HEADER as a numpy record (big-endian); the store block stays zero.
_HEADER: Final = np.dtype(
    [
        ("total_size", ">i4"),
        ("magic", ">u4"),
        ("crc", ">u4"),
        ("store_block", f"V{codec.STORE_BLOCK_SIZE}"),
        ("queue_id", ">i4"),
        ("flag", ">i4"),
        ("sys_flag", ">i4"),
        ("born_timestamp", ">i8"),
        ("born_host", "S8"),
        ("reconsume_times", ">i4"),
        ("prepared_transaction_offset", ">i8"),
        ("body_length", ">i4"),
    ]
)
assert _HEADER.itemsize == codec.HEADER_SIZE
assert _HEADER.fields is not None and _HEADER.fields["crc"][1] == codec.CRC_OFFSET
_CRC_SIZE: Final[int] = codec.CRC.size
_OFFSETS_MAX: Final[int] = 2**31 - 1  # binary arrays' int32 offsets
_SEPARATORS: Final[str] = "[\x01\x02]"
_EMPTY: Final = pa.scalar(b"", pa.binary())


class ArrowRows(NamedTuple):
    """A batch's messages as Arrow columns of one length (see ``arrow_rows``)."""

    bodies: pa.Array  # binary, no nulls
    tags: pa.Array | None = None  # string; null = no tags
    keys: pa.Array | None = None  # string, keys joined by P.KEY_SEPARATOR; "" = none
    properties: pa.Array | None = None  # string, each row's own (``properties_text``)

    def slice(self, start: int, stop: int) -> ArrowRows:
        """Rows ``start .. stop - 1`` (zero-copy)."""
        return ArrowRows(*(None if c is None else c.slice(start, stop - start) for c in self))


def arrow_rows(
    bodies: pa.Array | pa.ChunkedArray,
    tags: pa.Array | pa.ChunkedArray | None = None,
    keys: pa.Array | pa.ChunkedArray | None = None,
) -> ArrowRows:
    """Rows from a writer's columns: bodies binary or string, tags string, keys string or
    list<string>. InvalidMessageError for a null body, a null key in a list, or tags or
    keys with \\x01 or \\x02 (as ``encode_batch``); before any of it is sent."""
    body = _binary(_one_chunk(bodies))
    if body.null_count:
        row = pc.index(pc.is_null(body), True).as_py()
        raise InvalidMessageError(
            f"row {row}: the body is null ({body.null_count} null bodies in "
            f"{len(body)} rows); every message needs a body: fill or filter them",
            row=row,
        )
    return ArrowRows(body, _tags(tags), _keys(keys))


def _one_chunk(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(column, pa.ChunkedArray):
        return column.combine_chunks()
    return column


def _binary(column: pa.Array) -> pa.Array:
    """``column`` as binary with int32 offsets (string bytes are their UTF-8)."""
    if column.type == pa.binary():
        return column
    if column.type in (pa.string(), pa.large_string(), pa.large_binary()):
        return column.cast(pa.binary())
    raise InvalidMessageError(f"bodies must be binary or string, got {column.type}")


def _tags(column: pa.Array | pa.ChunkedArray | None) -> pa.Array | None:
    if column is None:
        return None
    tags = _one_chunk(column).cast(pa.string())
    if tags.null_count == len(tags):
        return None
    _check_separators(tags, "tags")
    return pc.if_else(pc.equal(tags, ""), pa.scalar(None, pa.string()), tags)


def _keys(column: pa.Array | pa.ChunkedArray | None) -> pa.Array | None:
    if column is None:
        return None
    keys = _one_chunk(column)
    if pa.types.is_list(keys.type) or pa.types.is_large_list(keys.type):
        if pc.list_flatten(keys).null_count:
            raise InvalidMessageError("keys: a list of keys holds a null key; drop it")
        keys = pc.binary_join(keys, P.KEY_SEPARATOR)
    keys = keys.cast(pa.string()).fill_null("")
    _check_separators(keys, "keys")
    return keys


def _check_separators(column: pa.Array, what: str) -> None:
    if pc.any(pc.match_substring_regex(column, _SEPARATORS)).as_py():
        row = pc.index(pc.match_substring_regex(column, _SEPARATORS), True).as_py()
        raise InvalidMessageError(
            f"row {row}: {what} must not contain \\x01 or \\x02 (the property encoding "
            "reserves them)",
            row=row,
        )


def properties_text(
    column: pa.Array | pa.ChunkedArray, dropped: frozenset[str], refused: Mapping[str, str]
) -> pa.Array:
    """Each row's ``map<string, string>`` properties as ``encode_properties`` writes them
    (in map order; names in ``dropped`` left out; a null map has none), a string array.
    InvalidMessageError naming the row for a name in ``refused`` (its value says why), a
    name given twice, an empty name, a null value, or \\x01 / \\x02 in a name or value."""
    maps = _one_chunk(column)
    entries_type = pa.struct([maps.type.key_field, maps.type.item_field])
    lists = maps.view(pa.list_(pa.field("entries", entries_type, nullable=False)))
    flat = pc.list_flatten(lists)
    names, values = flat.field(0), flat.field(1)
    rows = pc.list_parent_indices(lists)
    kept = pc.invert(pc.is_in(names, pa.array(sorted(dropped), pa.string())))
    names, values, rows = pc.filter(names, kept), pc.filter(values, kept), pc.filter(rows, kept)
    if len(names) == 0:
        return pa.repeat(pa.scalar("", pa.string()), len(maps))
    _check_property_names(names, rows, refused)
    bad = pc.or_(pc.is_null(values), pc.equal(pc.binary_length(names), 0))
    for part in (names, values.fill_null("")):
        bad = pc.or_(bad, pc.match_substring_regex(part, _SEPARATORS))
    if pc.any(bad).as_py():
        row = rows[pc.index(bad, True).as_py()].as_py()
        raise InvalidMessageError(
            f"row {row}: property names must not be empty, values not null, and neither may "
            "contain \\x01 or \\x02 (the property encoding reserves them)",
            row=row,
        )
    entries = pc.binary_join_element_wise(names, "\x01", values, "\x02", "")
    counts = np.bincount(rows.to_numpy(), minlength=len(maps))
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    return pc.binary_join(pa.ListArray.from_arrays(pa.array(offsets), entries), "")


def _check_property_names(names: pa.Array, rows: pa.Array, refused: Mapping[str, str]) -> None:
    """InvalidMessageError for a refused name or a name a row gives twice."""
    hit = pc.is_in(names, pa.array(sorted(refused), pa.string()))
    if pc.any(hit).as_py():
        at = pc.index(hit, True).as_py()
        name, row = names[at].as_py(), rows[at].as_py()
        raise InvalidMessageError(
            f"row {row}: property name {name!r} is reserved: {refused[name]}", name=name, row=row
        )
    pairs = pc.binary_join_element_wise(rows.cast(pa.string()), names, "\x01")
    if pc.count_distinct(pairs).as_py() != len(pairs):
        seen: set[str] = set()
        for twice in pairs.to_pylist():  # error path only
            if twice in seen:
                break
            seen.add(twice)
        row, _, name = twice.partition("\x01")
        raise InvalidMessageError(f"row {row}: property {name!r} is given twice", name=name)


def sequence_ids(prefix: str, first: int, count: int) -> pa.Array:
    """``f"{prefix}{first + i}"`` for i in 0 .. count - 1, as a string array."""
    numbers = pa.array(np.arange(first, first + count, dtype=np.int64)).cast(pa.string())
    return pc.binary_join_element_wise(prefix, numbers, "")


def record_bounds(rows: ArrowRows, topic: str, other_properties_bytes: int) -> np.ndarray:
    """Each row's record size (int64) with ``other_properties_bytes`` of properties
    besides TAGS and KEYS (UNIQ_KEY and the shared ones): an upper bound of the sizes
    ``encode_rows`` gives when that is one."""
    sizes = _lengths(rows.bodies) + codec.FIXED_SIZE + len(topic) + other_properties_bytes
    for column, name in ((rows.tags, P.TAGS), (rows.keys, P.KEYS)):
        if column is not None:
            sizes += _lengths(column) + np.where(_lengths(column) > 0, len(name) + 2, 0)
    if rows.properties is not None:
        sizes += _lengths(rows.properties)
    return sizes


def cuts(bounds: np.ndarray, limit_bytes: int) -> list[tuple[int, int]]:
    """Consecutive ``(start, stop)`` row ranges whose ``bounds`` add up to at most
    ``limit_bytes`` (a row above it alone); deterministic for the same bounds."""
    ends = np.cumsum(bounds)
    out, start, base = [], 0, 0
    while start < len(bounds):
        stop = int(np.searchsorted(ends, base + limit_bytes, side="right"))
        stop = max(stop, start + 1)
        out.append((start, stop))
        base, start = int(ends[stop - 1]), stop
    return out


def _lengths(column: pa.Array) -> np.ndarray:
    lengths: np.ndarray = pc.binary_length(column).fill_null(0).to_numpy().astype(np.int64)
    return lengths


def encode_rows(
    rows: ArrowRows,
    *,
    topic: str,
    queue_id: int,
    uniq_keys: pa.Array,
    properties: dict[str, str],
    born_timestamp: int = 0,
    born_host: str = "127.0.0.1:0",
    max_body_bytes: int,
    max_properties_bytes: int,
) -> EncodedBatch:
    """The ``EncodedBatch`` that ``encode_batch`` makes of ``InnerMessage``\\ s with these
    bodies, tags, keys, ``uniq_keys`` (non-empty strings) and ``properties`` (shared by all,
    without TAGS, KEYS or UNIQ_KEY). Raises ClientErrors as ``encode_batch`` does."""
    n = len(rows.bodies)
    uniq_keys = _one_chunk(uniq_keys).cast(pa.string())  # _crcs reads int32 offsets
    _check_batch(rows, topic, queue_id, uniq_keys, properties)
    lengths = _check_bodies(rows.bodies, max_body_bytes)
    props = _property_texts(rows, uniq_keys, properties)
    props_lengths = _lengths(props)
    _check_properties_size(props_lengths, max_properties_bytes)
    topic_field = codec.topic_field(topic)
    sizes = codec.FIXED_SIZE - 1 + len(topic_field) + lengths + props_lengths
    records = _records(
        rows.bodies,
        props,
        topic_field,
        sizes,
        lengths,
        props_lengths,
        queue_id,
        born_timestamp,
        born_host,
    )
    hashes, owners = _index_columns(topic, rows.keys, uniq_keys)
    return EncodedBatch(
        topic=topic,
        queue_id=queue_id,
        count=n,
        records=records,
        sizes=sizes.astype("<i4").tobytes(),
        tags_codes=_tags_codes(rows.tags, n),
        index_hashes=hashes.astype("<i8").tobytes(),
        index_records=owners.astype("<i4").tobytes(),
        msg_ids=uniq_keys.to_pylist(),
        scheduled=False,
    )


def _check_batch(
    rows: ArrowRows, topic: str, queue_id: int, uniq_keys: pa.Array, properties: dict[str, str]
) -> None:
    n = len(rows.bodies)
    if n == 0:
        raise InvalidMessageError("empty batch: nothing to send")
    validate_topic(topic)
    if queue_id.__class__ is not int or not 0 <= queue_id <= codec.QUEUE_ID_MAX:
        raise InvalidMessageError(f"queue_id {queue_id!r} is outside 0..{codec.QUEUE_ID_MAX}")
    if any(c is not None and len(c) != n for c in (*rows, uniq_keys)):
        raise InvalidMessageError("a batch's columns must all have one length")
    if uniq_keys.null_count or pc.min(pc.binary_length(uniq_keys)).as_py() < 1:
        raise InvalidMessageError("every row needs a unique id")
    _check_separators(uniq_keys, "unique ids")
    if any(name in properties for name in (P.TAGS, P.KEYS, P.UNIQ_KEY)):
        raise InvalidMessageError("shared properties must not set TAGS, KEYS or UNIQ_KEY")
    P.check_properties(properties)


def _check_bodies(bodies: pa.Array, max_body_bytes: int) -> np.ndarray:
    if bodies.null_count:
        raise InvalidMessageError("a body is null; use arrow_rows to check the columns")
    lengths = _lengths(bodies)
    if lengths.min() < 1:
        raise InvalidMessageError(f"message {int(lengths.argmin())}: body is empty")
    if lengths.max() > max_body_bytes:
        i = int(lengths.argmax())
        raise body_too_large(i, int(lengths[i]), max_body_bytes)
    return lengths


def _check_properties_size(props_lengths: np.ndarray, max_properties_bytes: int) -> None:
    longest = int(props_lengths.max())
    if longest > max_properties_bytes:
        raise properties_too_large(int(props_lengths.argmax()), longest, max_properties_bytes)


def _property_texts(rows: ArrowRows, uniq_keys: pa.Array, shared: dict[str, str]) -> pa.Array:
    """Each row's properties as UTF-8 (binary): TAGS, KEYS, UNIQ_KEY, its own, ``shared``."""
    parts: list[pa.Array | str] = []
    if rows.tags is not None:
        parts.append(pc.binary_join_element_wise(f"{P.TAGS}\x01", rows.tags, "\x02", ""))
        parts[-1] = pc.fill_null(parts[-1], "")
    if rows.keys is not None:
        joined = pc.binary_join_element_wise(f"{P.KEYS}\x01", rows.keys, "\x02", "")
        parts.append(pc.if_else(pc.equal(rows.keys, ""), "", joined))
    parts += [f"{P.UNIQ_KEY}\x01", uniq_keys, "\x02"]
    if rows.properties is not None:
        parts.append(rows.properties)
    parts.append(P.encode_properties(shared))
    return pc.binary_join_element_wise(*parts, "").cast(pa.binary())


def _records(
    bodies: pa.Array,
    props: pa.Array,
    topic_field: bytes,
    sizes: np.ndarray,
    lengths: np.ndarray,
    props_lengths: np.ndarray,
    queue_id: int,
    born_timestamp: int,
    born_host: str,
) -> bytes:
    """The records back to back, each CRC over its producer bytes filled in."""
    n, total = len(sizes), int(sizes.sum())
    if total > _OFFSETS_MAX:
        raise MessageTooLargeError(
            f"a batch of {total} bytes of records; cut it below 2 GiB",
            value=total,
            limit=_OFFSETS_MAX,
            field="batch",
        )
    header = np.zeros(n, dtype=_HEADER)
    header["total_size"] = sizes
    header["magic"] = codec.MAGIC
    header["queue_id"] = queue_id
    header["born_timestamp"] = born_timestamp
    header["born_host"] = codec.encode_host(born_host)
    header["body_length"] = lengths
    tail = np.empty((n, len(topic_field) + codec.PROPS_LEN.size), dtype=np.uint8)
    tail[:, : len(topic_field)] = np.frombuffer(topic_field, dtype=np.uint8)
    tail[:, len(topic_field) :] = props_lengths.astype(">u2").view(np.uint8).reshape(n, 2)
    joined = pc.binary_join_element_wise(
        _fixed_width(header.view(np.uint8), codec.HEADER_SIZE, n),
        bodies,
        _fixed_width(tail.reshape(-1), tail.shape[1], n),
        props,
        _EMPTY,
    )
    buffer = joined.buffers()[2]  # fresh from the join: patched in place, then copied once
    assert buffer is not None and buffer.is_mutable
    data = memoryview(buffer)[:total]
    ends = np.cumsum(sizes)
    starts = ends - sizes
    slices = map(slice, (starts + codec.CRC_START).tolist(), ends.tolist())
    crcs = np.fromiter(map(crc32c, map(data.__getitem__, slices)), dtype=">u4", count=n)
    view = np.frombuffer(buffer, dtype=np.uint8, count=total)
    at = (starts + codec.CRC_OFFSET)[:, None] + np.arange(_CRC_SIZE)
    view[at] = crcs.view(np.uint8).reshape(n, _CRC_SIZE)
    del view
    return bytes(data)


def _fixed_width(data: np.ndarray, width: int, n: int) -> pa.Array:
    """``n`` binary values of ``width`` bytes each, over ``data`` (no copy)."""
    offsets = np.arange(0, width * (n + 1), width, dtype=np.int32)
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _tags_codes(tags: pa.Array | None, n: int) -> bytes:
    """Each row's tag hash (Java ``String.hashCode``), once per distinct tag; 0 without."""
    if tags is None or tags.null_count == n:
        return bytes(8 * n)
    encoded = pc.dictionary_encode(tags)
    distinct = encoded.dictionary.to_pylist()
    codes = np.fromiter(map(tags_code, distinct), dtype=np.int64, count=len(distinct))
    codes = np.append(codes, 0)  # the code of "no tags", at index len(distinct)
    indices = pc.fill_null(encoded.indices, len(distinct)).to_numpy()
    packed: bytes = codes[indices].astype("<i8").tobytes()
    return packed


def _index_columns(
    topic: str, keys: pa.Array | None, uniq_keys: pa.Array
) -> tuple[np.ndarray, np.ndarray]:
    """Key-index hashes (each key, then each unique id) and the row of each."""
    seed = topic_seed(topic)
    hashes, owners = [], []
    if keys is not None and pc.max(pc.binary_length(keys)).as_py():
        split = pc.split_pattern(keys, P.KEY_SEPARATOR)
        flat, parents = pc.list_flatten(split), pc.list_parent_indices(split)
        kept = pc.greater(pc.binary_length(flat), 0)
        flat, parents = pc.filter(flat, kept), pc.filter(parents, kept)
        hashes.append(_crcs(flat, seed))
        owners.append(parents.to_numpy().astype(np.int64))
    hashes.append(_crcs(uniq_keys, seed))
    owners.append(np.arange(len(uniq_keys), dtype=np.int64))
    return np.concatenate(hashes), np.concatenate(owners)


def _crcs(values: pa.Array, seed: int) -> np.ndarray:
    """CRC-32C of each value (no nulls) from state ``seed``."""
    n = len(values)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    at = values.offset
    offsets = np.frombuffer(values.buffers()[1], dtype=np.int32)[at : at + n + 1]
    data = memoryview(values.buffers()[2])
    slices = map(slice, offsets[:-1].tolist(), offsets[1:].tolist())
    seeds = [seed] * n
    return np.fromiter(map(crc32c, map(data.__getitem__, slices), seeds), dtype=np.int64, count=n)
