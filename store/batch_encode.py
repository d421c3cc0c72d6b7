"""The steps of ``encode_batch`` (batch.py), in bulk: pure functions over a batch's columns.

``columns`` takes a batch of ``InnerMessage`` apart (``Fields``: one tuple per field).
``property_texts`` gives each record's encoded properties: for the common shapes at
once around the properties every message shares (a producer adds its group to each:
``shared_property_texts``), else message by message (``props_of`` allows TAGS, KEYS and
UNIQ_KEY inside the properties, as records read back carry them). ``assemble`` joins
the records (codec.py's layout) from three parts each, ``producer_fields`` packs their
header fields once per body length when the batch shares them, and
``index_columns`` / ``tags_codes`` / ``column`` give the batch's other columns.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from itertools import chain, repeat
from typing import Final, NamedTuple

import msgspec
from crc32c import crc32c

from . import codec
from . import properties as P
from .errors import InvalidMessageError
from .filters import tags_code
from .index_file import topic_seed
from .message import InnerMessage

_RESERVED: Final = (P.TAGS, P.KEYS, P.UNIQ_KEY)
_NONE: Final = type(None)
# A record's header after the store block, as the producer writes it: queue_id, flag,
# sys_flag, born_timestamp, born_host, reconsume_times, prepared_transaction_offset,
# body_length (codec.HEADER from CRC_START on).
_PRODUCER_FIELDS: Final = struct.Struct(">iiiq8siqi")
assert codec.CRC_START + _PRODUCER_FIELDS.size == codec.HEADER_SIZE
assert codec.PREFIX_CRC.size == codec.STORE_BLOCK_OFFSET
_ZERO_STORE_BLOCK: Final[bytes] = bytes(codec.STORE_BLOCK_SIZE)


class Fields(NamedTuple):
    """A batch's messages column by column (``InnerMessage``'s fields, in order)."""

    topic: tuple[str, ...]
    queue_id: tuple[int, ...]
    body: tuple[bytes, ...]
    tags: tuple[str | None, ...]
    keys: tuple[str, ...]
    uniq_key: tuple[str, ...]
    properties: tuple[dict[str, str], ...]
    flag: tuple[int, ...]
    sys_flag: tuple[int, ...]
    born_timestamp: tuple[int, ...]
    born_host: tuple[str, ...]
    reconsume_times: tuple[int, ...]
    prepared_transaction_offset: tuple[int, ...]


assert Fields._fields == InnerMessage.__struct_fields__, "update Fields"


def columns(msgs: Sequence[InnerMessage]) -> Fields:
    return Fields(*zip(*map(msgspec.structs.astuple, msgs), strict=True))


class Properties(NamedTuple):
    """Each record's encoded properties, ``head + middles[i] + tail`` (in the common case
    the middles are the unique ids), its TAGS/KEYS/UNIQ_KEY values as stored, the
    number of properties in all and whether any record is scheduled."""

    middles: list[bytes]
    tags: Sequence[str | None]
    keys: Sequence[str]
    uniq_keys: Sequence[str]
    entries: int
    scheduled: bool
    head: bytes = b""
    tail: bytes = b""
    uniq_bytes: list[bytes] | None = None  # the unique ids encoded, when at hand

    def lengths(self) -> list[int]:
        """Each record's encoded properties length."""
        lengths = list(map(len, self.middles))
        around = len(self.head) + len(self.tail)
        if not around:
            return lengths
        if lengths.count(lengths[0]) == len(lengths):
            return [lengths[0] + around] * len(lengths)
        return [around + z for z in lengths]


def _is_scheduled(props: dict[str, str]) -> bool:
    return bool(props) and (P.DELAY in props or P.DELIVER_AT_MS in props)


def props_of(i: int, m: InnerMessage) -> tuple[str | None, str, str, dict[str, str]]:
    """tags, keys, uniq key and other properties (reserved names in properties allowed)."""
    props = m.properties
    tags, keys, uniq = m.tags, m.keys, m.uniq_key
    if props and any(name in props for name in _RESERVED):
        props = dict(props)
        tags = tags or props.pop(P.TAGS, None)
        keys = keys or props.pop(P.KEYS, "")
        uniq = uniq or props.pop(P.UNIQ_KEY, "")
        for name in _RESERVED:
            props.pop(name, None)
    for name, value in (("tags", tags), ("keys", keys), ("uniq_key", uniq)):
        if value is not None and not isinstance(value, str):
            raise InvalidMessageError(
                f"message {i}: {name} must be a str, got {type(value).__name__}"
            )
    if props:
        try:
            P.check_properties(props)
        except InvalidMessageError as exc:
            raise InvalidMessageError(f"message {i}: {exc}") from None
    return tags, keys, uniq, props


def property_texts(msgs: Sequence[InnerMessage], cols: Fields) -> Properties:
    """Each record's properties; the common shapes in bulk (``shared_property_texts``),
    else message by message."""
    fast = shared_property_texts(msgs, cols)
    if fast is not None:
        return fast
    texts, fields, entries, scheduled = [], [], 0, False
    for i, m in enumerate(msgs):
        tags, keys, uniq, others = props_of(i, m)
        texts.append(P.encode_message_properties(tags, keys, uniq, others))
        fields.append((tags, keys, uniq))
        entries += P.count_entries(tags, keys, uniq, others)
        scheduled = scheduled or _is_scheduled(others)
    tags_column, keys_column, uniq_column = zip(*fields, strict=True)
    raws = list(map(str.encode, texts))
    return Properties(raws, tags_column, keys_column, uniq_column, entries, scheduled)


def shared_property_texts(
    msgs: Sequence[InnerMessage], cols: Fields | None = None
) -> Properties | None:
    """The common case, in bulk: every message has the same other properties (a
    producer adds its group to each) and str/None tags, keys and unique ids."""
    cols = cols or columns(msgs)
    props, n = cols.properties, len(cols.properties)
    shared = props[0]
    if props.count(shared) != n or any(name in shared for name in _RESERVED):
        return None
    if not set(map(type, chain(cols.tags, cols.keys))) <= {str, _NONE}:
        return None
    if set(map(type, cols.uniq_key)) != {str}:
        return None
    try:
        P.check_properties(shared)
    except InvalidMessageError:
        return None  # the general path reports it with the message's index
    suffix = P.encode_properties(shared)
    tags: Sequence[str | None] = cols.tags
    keys: Sequence[str] = cols.keys
    uniq_keys = cols.uniq_key
    shared_entries, scheduled = len(shared) * n, _is_scheduled(shared)
    if not any(tags) and not any(keys) and all(uniq_keys):  # UNIQ_KEY and the shared ones
        uniq_bytes = list(map(str.encode, uniq_keys))
        return Properties(
            middles=uniq_bytes,
            tags=(None,) * n,
            keys=("",) * n,
            uniq_keys=uniq_keys,
            entries=n + shared_entries,
            scheduled=scheduled,
            head=f"{P.UNIQ_KEY}\x01".encode(),
            tail=f"\x02{suffix}".encode(),
            uniq_bytes=uniq_bytes,
        )
    if all(tags) and all(keys) and all(uniq_keys):
        raws = [
            f"TAGS\x01{t}\x02KEYS\x01{k}\x02UNIQ_KEY\x01{u}\x02{suffix}".encode()
            for t, k, u in zip(tags, keys, uniq_keys, strict=True)
        ]
        return Properties(raws, tags, keys, uniq_keys, 3 * n + shared_entries, scheduled)
    raws = [
        (
            (f"TAGS\x01{t}\x02" if t else "")
            + (f"KEYS\x01{k}\x02" if k else "")
            + (f"UNIQ_KEY\x01{u}\x02" if u else "")
            + suffix
        ).encode()
        for t, k, u in zip(tags, keys, uniq_keys, strict=True)
    ]
    if None in keys or "" in tags:
        tags, keys = [t or None for t in tags], [k or "" for k in keys]
    entries = sum(map(bool, tags)) + sum(map(bool, keys)) + sum(map(bool, uniq_keys))
    return Properties(raws, tags, keys, uniq_keys, entries + shared_entries, scheduled)


def check_texts(props: Properties) -> None:
    """Each property adds one \\x01 and one \\x02: any other is in a value."""
    joined, n = b"".join(props.middles), len(props.middles)
    around = props.head + props.tail
    for separator in (b"\x01", b"\x02"):
        if joined.count(separator) + n * around.count(separator) != props.entries:
            raise InvalidMessageError(
                "tags, keys and property values must not contain \\x01 or \\x02 "
                "(the property encoding reserves them)"
            )


def assemble(
    cols: Fields, lengths: list[int], props: Properties, props_lengths: list[int]
) -> tuple[bytes, list[int]]:
    """The records back to back and their sizes, with C-level maps only.

    A record is joined from three parts: total_size, magic and crc
    (``codec.PREFIX_CRC``); the zeroed store block and ``_PRODUCER_FIELDS``
    (``producer_fields``); the body and the tail (topic, properties length,
    properties). The CRC is the fields' CRC state carried on over the last part, so no
    record is read back once it is joined.
    """
    topic_field = codec.topic_field(cols.topic[0])
    starts = {z: topic_field + codec.PROPS_LEN.pack(z) + props.head for z in set(props_lengths)}
    if len(starts) == 1:
        tail_starts: Iterable[bytes] = repeat(starts[props_lengths[0]])
    else:
        tail_starts = map(starts.__getitem__, props_lengths)
    parts = zip(cols.body, tail_starts, props.middles, repeat(props.tail), strict=False)
    ends = list(map(b"".join, parts))  # body, then topic, properties length and properties
    fixed = codec.HEADER_SIZE + len(topic_field) + codec.PROPS_LEN.size
    fields, states, same_length = producer_fields(cols, lengths)
    if same_length and len(starts) == 1:
        sizes = [fixed + lengths[0] + props_lengths[0]] * len(lengths)
    else:
        sizes = [fixed + b + p for b, p in zip(lengths, props_lengths, strict=True)]
    prefixes = map(codec.PREFIX_CRC.pack, sizes, repeat(codec.MAGIC), map(crc32c, ends, states))
    return b"".join(chain.from_iterable(zip(prefixes, fields, ends, strict=False))), sizes


def producer_fields(cols: Fields, lengths: list[int]) -> tuple[list[bytes], Iterable[int], bool]:
    """Each record's zeroed store block and ``_PRODUCER_FIELDS``, the CRC-32C state
    after the fields, and whether all bodies have one length. Packed once per body
    length when flag .. prepared_transaction_offset are the same in all records (a
    producer's batch)."""
    header = (
        cols.flag,
        cols.sys_flag,
        cols.born_timestamp,
        cols.born_host,
        cols.reconsume_times,
        cols.prepared_transaction_offset,
    )
    queue_id, n = cols.queue_id[0], len(lengths)
    same_length = lengths.count(lengths[0]) == n
    hosts = {h: codec.encode_host(h) for h in set(cols.born_host)}
    if not all(column.count(column[0]) == n for column in header):
        fields = list(
            map(
                _PRODUCER_FIELDS.pack,
                repeat(queue_id),
                cols.flag,
                cols.sys_flag,
                cols.born_timestamp,
                map(hosts.__getitem__, cols.born_host),
                cols.reconsume_times,
                cols.prepared_transaction_offset,
                lengths,
            )
        )
        return list(map(_ZERO_STORE_BLOCK.__add__, fields)), map(crc32c, fields), same_length
    flag, sys_flag, born, _, reconsume, prepared = (column[0] for column in header)
    host = cols.born_host[0]
    packed = {
        z: _PRODUCER_FIELDS.pack(
            queue_id, flag, sys_flag, born, hosts[host], reconsume, prepared, z
        )
        for z in ((lengths[0],) if same_length else set(lengths))
    }
    states = {z: crc32c(f) for z, f in packed.items()}
    blocks = {z: _ZERO_STORE_BLOCK + f for z, f in packed.items()}
    if same_length:
        return [blocks[lengths[0]]] * n, repeat(states[lengths[0]]), True
    return list(map(blocks.__getitem__, lengths)), map(states.__getitem__, lengths), False


def column(code: str, values: Sequence[int]) -> bytes:
    """A little-endian column of ``struct`` type ``code`` (``i``: int32, ``q``: int64)."""
    return struct.pack(f"<{len(values)}{code}", *values)


def tags_codes(tags: Sequence[str | None]) -> bytes:
    """The ``tags_codes`` column: each record's tag hash, 0 without tags."""
    if not any(tags):
        return bytes(8 * len(tags))
    codes = {t: tags_code(t) for t in set(tags)}
    return column("q", list(map(codes.__getitem__, tags)))


def index_columns(topic: str, props: Properties) -> tuple[list[int], list[int]]:
    """Key-index hashes (each key, then each unique id) and the record of each."""
    seed = topic_seed(topic)
    hashes: list[int] = []
    owners: list[int] = []
    keys, uniq_keys = props.keys, props.uniq_keys
    if all(keys) and P.KEY_SEPARATOR not in "".join(keys):  # one key each: no split needed
        hashes += map(crc32c, map(str.encode, keys), repeat(seed))
        owners += range(len(keys))
    elif any(keys):  # many keys in one record (a trace record's): hashed in bulk
        for i, value in enumerate(keys):
            if not value:
                continue
            split = [k for k in value.split(P.KEY_SEPARATOR) if k]
            hashes += map(crc32c, map(str.encode, split), repeat(seed))
            owners += repeat(i, len(split))
    if all(uniq_keys):
        hashes += map(crc32c, props.uniq_bytes or map(str.encode, uniq_keys), repeat(seed))
        owners += range(len(uniq_keys))
    else:
        with_id = [i for i, u in enumerate(uniq_keys) if u]
        hashes += [crc32c(uniq_keys[i].encode(), seed) for i in with_id]
        owners += with_id
    return hashes, owners
