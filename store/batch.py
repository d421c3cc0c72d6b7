"""Batches encoded once, by the producer, in commit-log record format.

``encode_batch`` (producer side, pure) turns messages for one topic/queue into an
``EncodedBatch``: the records back to back exactly as the commit log stores them
(codec.py), with the store block zeroed and the CRC of the producer's bytes in each
crc field, plus columns the
store would otherwise have to parse out again (sizes, tag hashes, key-index hashes).
In the common shapes the work per message is C-level (maps, joins, ``struct``), with
at most one comprehension (the properties text of messages with tags or keys): the
batch is taken apart into columns (``_Fields``) checked in bulk, each record's
properties are built around one shared suffix (``_shared_property_texts``; message by
message only when properties differ or hold reserved names), header fields are packed
once per body length when they are the batch's own (``_producer_fields``), and each
record is joined from three parts with its CRC carried over them (``_assemble``).

The broker passes the batch to ``MessageStore.put_encoded`` unchanged, one Ray call
per batch; the store re-checks the framing of every record with numpy
(``check_encoded``), verifies every CRC, fills the store block and finishes each
CRC over it (``fill_store_block``), and copies the bytes in. No Python bytecode runs per message
on the store side.

``scheduled`` marks a batch in which some record carries a ``DELAY`` or
``__DELIVER_AT_MS`` property: only such batches take the broker's scheduled path
(schedule.py), which decodes them and refuses a batch marked ``scheduled`` with no such
record; every other batch is appended without a look at those properties.

Tag hashes are checked: ``check_encoded`` finds each record's ``TAGS`` property with one
anchored regex match per record (C-level ``map``), looks its Java hash up in a dict of known
tags and compares with the ``tags_codes`` column, so a batch whose column disagrees is refused
(the consume queue would otherwise carry a hash that recovery later recomputes differently).
Key hashes are hints the store trusts: a wrong one only hides the sender's own message from a
key query (queries re-check keys), and recovery recomputes them from the properties.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterable, Sequence
from itertools import accumulate, chain, repeat
from typing import Final, NamedTuple

import msgspec
import numpy as np
from crc32c import crc32c

from . import codec
from . import properties as P
from .errors import InvalidMessageError, MessageTooLargeError
from .filters import tags_code
from .index_file import topic_seed
from .message import InnerMessage
from .names import validate_topic

STORE_BLOCK_DTYPE: Final = np.dtype(
    [("queue_offset", ">i8"), ("commitlog_offset", ">i8"), ("store_timestamp", ">i8"),
     ("store_host", "S8")]
)  # fmt: skip
assert STORE_BLOCK_DTYPE.itemsize == codec.STORE_BLOCK_SIZE
_RESERVED: Final = (P.TAGS, P.KEYS, P.UNIQ_KEY)
_NONE: Final = type(None)
# A record's header after the store block, as the producer writes it: queue_id, flag,
# sys_flag, born_timestamp, born_host, reconsume_times, prepared_transaction_offset,
# body_length (codec.HEADER from CRC_START on).
_PRODUCER_FIELDS: Final = struct.Struct(">iiiq8siqi")
assert codec.CRC_START + _PRODUCER_FIELDS.size == codec.HEADER_SIZE
assert codec.PREFIX_CRC.size == codec.STORE_BLOCK_OFFSET
_ZERO_STORE_BLOCK: Final[bytes] = bytes(codec.STORE_BLOCK_SIZE)
# Matched at the start of a record's properties, both always succeed; group 1 is the TAGS
# value or None. The encoder writes TAGS first (_TAGS_FIRST, the fast path); _TAGS_ANYWHERE
# skips whole properties before it, as recovery (commitlog.py) finds TAGS anywhere.
_TAGS: Final[bytes] = P.TAGS.encode() + b"\x01"
_TAGS_FIRST: Final = re.compile(b"(?:" + _TAGS + b"([^\x02]*))?")
_TAGS_ANYWHERE: Final = re.compile(
    b"(?:(?:(?!" + _TAGS + b")[^\x02]*\x02)*" + _TAGS + b"([^\x02]*))?"
)
_TAGS_LATER: Final[bytes] = b"\x02" + _TAGS
_TAG_CODES_MAX: Final[int] = 65536
_tag_codes: dict[bytes | None, int] = {None: 0}
_tag_prefixes: dict[int, bytes] = {}  # tag hash -> b"TAGS\x01<tags>\x02" last verified with it


class EncodedBatch(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Records for one topic/queue, encoded once; crosses actor boundaries as is.

    ``sizes`` (int32), ``tags_codes`` (int64) and ``index_hashes`` (int64) are
    little-endian buffers (numpy reads them); ``index_records`` (int32) names the record of
    each index hash. ``scheduled``: some record has a DELAY or __DELIVER_AT_MS property.
    """

    topic: str
    queue_id: int
    count: int
    records: bytes
    sizes: bytes
    tags_codes: bytes
    index_hashes: bytes = b""
    index_records: bytes = b""
    msg_ids: list[str] = []
    scheduled: bool = False
    # Idempotent produce (dedupe.py): set by the producer after encoding; "" = off.
    producer_id: str = ""
    first_sequence: int = 0


class _Fields(NamedTuple):
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


assert _Fields._fields == InnerMessage.__struct_fields__, "update _Fields"


def _columns(msgs: Sequence[InnerMessage]) -> _Fields:
    return _Fields(*zip(*map(msgspec.structs.astuple, msgs), strict=True))


class _Properties(NamedTuple):
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


def _props_of(i: int, m: InnerMessage) -> tuple[str | None, str, str, dict[str, str]]:
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


def _property_texts(msgs: Sequence[InnerMessage], cols: _Fields) -> _Properties:
    """Each record's properties; the common shapes in bulk (``_shared_property_texts``),
    else message by message."""
    fast = _shared_property_texts(msgs, cols)
    if fast is not None:
        return fast
    texts, fields, entries, scheduled = [], [], 0, False
    for i, m in enumerate(msgs):
        tags, keys, uniq, others = _props_of(i, m)
        texts.append(P.encode_message_properties(tags, keys, uniq, others))
        fields.append((tags, keys, uniq))
        entries += P.count_entries(tags, keys, uniq, others)
        scheduled = scheduled or _is_scheduled(others)
    tags_column, keys_column, uniq_column = zip(*fields, strict=True)
    raws = list(map(str.encode, texts))
    return _Properties(raws, tags_column, keys_column, uniq_column, entries, scheduled)


def _shared_property_texts(
    msgs: Sequence[InnerMessage], cols: _Fields | None = None
) -> _Properties | None:
    """The common case, in bulk: every message has the same other properties (a
    producer adds its group to each) and str/None tags, keys and unique ids."""
    cols = cols or _columns(msgs)
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
    tags, keys, uniq_keys = cols.tags, cols.keys, cols.uniq_key
    shared_entries, scheduled = len(shared) * n, _is_scheduled(shared)
    if not any(tags) and not any(keys) and all(uniq_keys):  # UNIQ_KEY and the shared ones
        uniq_bytes = list(map(str.encode, uniq_keys))
        return _Properties(
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
        return _Properties(raws, tags, keys, uniq_keys, 3 * n + shared_entries, scheduled)
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
    return _Properties(raws, tags, keys, uniq_keys, entries + shared_entries, scheduled)


def _check_texts(props: _Properties) -> None:
    """Each property adds one \\x01 and one \\x02: any other is in a value."""
    joined, n = b"".join(props.middles), len(props.middles)
    around = props.head + props.tail
    for separator in (b"\x01", b"\x02"):
        if joined.count(separator) + n * around.count(separator) != props.entries:
            raise InvalidMessageError(
                "tags, keys and property values must not contain \\x01 or \\x02 "
                "(the property encoding reserves them)"
            )


def encode_batch(
    msgs: Sequence[InnerMessage],
    *,
    max_body_bytes: int,
    max_properties_bytes: int,
) -> EncodedBatch:
    """Encode messages for one topic and queue (producer side). Raises ClientErrors."""
    if not msgs:
        raise InvalidMessageError("empty batch: nothing to send")
    if set(map(type, msgs)) != {InnerMessage}:
        raise InvalidMessageError("batch items must be InnerMessage")
    cols = _columns(msgs)
    topic, queue_id = cols.topic[0], cols.queue_id[0]
    validate_topic(topic)
    if set(cols.topic) != {topic} or set(cols.queue_id) != {queue_id}:
        raise InvalidMessageError(
            "a batch goes to one topic and one queue; split it by topic and queue"
        )
    if queue_id.__class__ is not int or not 0 <= queue_id <= codec.QUEUE_ID_MAX:
        raise InvalidMessageError(f"queue_id {queue_id!r} is outside 0..{codec.QUEUE_ID_MAX}")
    lengths = _check_bodies(cols.body, max_body_bytes)
    props = _property_texts(msgs, cols)
    _check_texts(props)
    props_lengths = props.lengths()
    longest = max(props_lengths)
    if longest > max_properties_bytes:
        i = props_lengths.index(longest)
        raise MessageTooLargeError(
            f"message {i}: properties are {longest} bytes encoded; at most "
            f"{max_properties_bytes} (max_properties_size_bytes)",
            value=longest,
            limit=max_properties_bytes,
            field="properties",
        )
    records, sizes = _assemble(cols, lengths, props, props_lengths)
    hashes, owners = _index_columns(topic, props)
    return EncodedBatch(
        topic=topic,
        queue_id=queue_id,
        count=len(msgs),
        records=records,
        sizes=_column("i", sizes),
        tags_codes=_tags_codes(props.tags),
        index_hashes=_column("q", hashes),
        index_records=_column("i", owners),
        msg_ids=list(props.uniq_keys),
        scheduled=props.scheduled,
    )


def _check_bodies(bodies: tuple[bytes, ...], max_body: int) -> list[int]:
    """Each body's length; raises for a body that is not bytes, empty or too large."""
    if set(map(type, bodies)) != {bytes}:
        bad = next(b for b in bodies if b.__class__ is not bytes)
        raise InvalidMessageError(f"a body must be bytes, got {type(bad).__name__}")
    lengths = list(map(len, bodies))
    if min(lengths) < 1:
        raise InvalidMessageError(f"message {lengths.index(0)}: body is empty")
    if max(lengths) > max_body:
        i = lengths.index(max(lengths))
        raise MessageTooLargeError(
            f"message {i}: body is {lengths[i]} bytes; at most {max_body} (max_message_size_bytes)",
            value=lengths[i],
            limit=max_body,
            field="body",
        )
    return lengths


def _assemble(
    cols: _Fields, lengths: list[int], props: _Properties, props_lengths: list[int]
) -> tuple[bytes, list[int]]:
    """The records back to back and their sizes, with C-level maps only.

    A record is joined from three parts: total_size, magic and crc
    (``codec.PREFIX_CRC``); the zeroed store block and ``_PRODUCER_FIELDS``
    (``_producer_fields``); the body and the tail (topic, properties length,
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
    fields, states, same_length = _producer_fields(cols, lengths)
    if same_length and len(starts) == 1:
        sizes = [fixed + lengths[0] + props_lengths[0]] * len(lengths)
    else:
        sizes = [fixed + b + p for b, p in zip(lengths, props_lengths, strict=True)]
    prefixes = map(codec.PREFIX_CRC.pack, sizes, repeat(codec.MAGIC), map(crc32c, ends, states))
    return b"".join(chain.from_iterable(zip(prefixes, fields, ends, strict=False))), sizes


def _producer_fields(cols: _Fields, lengths: list[int]) -> tuple[list[bytes], Iterable[int], bool]:
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
    flag, sys_flag, born, host, reconsume, prepared = (column[0] for column in header)
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


def _column(code: str, values: Sequence[int]) -> bytes:
    """A little-endian column of ``struct`` type ``code`` (``i``: int32, ``q``: int64)."""
    return struct.pack(f"<{len(values)}{code}", *values)


def _tags_codes(tags: Sequence[str | None]) -> bytes:
    """The ``tags_codes`` column: each record's tag hash, 0 without tags."""
    if not any(tags):
        return bytes(8 * len(tags))
    codes = {t: tags_code(t) for t in set(tags)}
    return _column("q", list(map(codes.__getitem__, tags)))


def _index_columns(topic: str, props: _Properties) -> tuple[list[int], list[int]]:
    """Key-index hashes (each key, then each unique id) and the record of each."""
    seed = topic_seed(topic)
    hashes: list[int] = []
    owners: list[int] = []
    keys, uniq_keys = props.keys, props.uniq_keys
    if all(keys) and P.KEY_SEPARATOR not in "".join(keys):  # one key each: no split needed
        hashes += map(crc32c, map(str.encode, keys), repeat(seed))
        owners += range(len(keys))
    elif any(keys):
        for i, value in enumerate(keys):
            for k in value.split(P.KEY_SEPARATOR) if value else ():
                if not k:
                    continue
                hashes.append(crc32c(k.encode(), seed))
                owners.append(i)
    if all(uniq_keys):
        hashes += map(crc32c, props.uniq_bytes or map(str.encode, uniq_keys), repeat(seed))
        owners += range(len(uniq_keys))
    else:
        with_id = [i for i, u in enumerate(uniq_keys) if u]
        hashes += [crc32c(uniq_keys[i].encode(), seed) for i in with_id]
        owners += with_id
    return hashes, owners


class BatchRejected(Exception):
    """An encoded batch failed the store's checks (becomes MESSAGE_ILLEGAL)."""


def check_encoded(
    batch: EncodedBatch, max_body_bytes: int, max_properties_bytes: int
) -> tuple[np.ndarray, np.ndarray]:
    """Check every record's framing and CRC: (record start offsets, producer CRCs).

    No Python bytecode per field: C-level ``map``s of ``struct.unpack_from`` and
    ``crc32c`` over the records, and one comprehension of comparisons.
    """
    n = batch.count
    sizes = np.frombuffer(batch.sizes, dtype="<i4").tolist()
    if n < 1 or len(sizes) != n or len(batch.tags_codes) != 8 * n:
        raise BatchRejected("batch columns do not match its count")
    if len(batch.index_hashes) != 2 * len(batch.index_records):
        raise BatchRejected("batch index columns do not match")
    ends = list(accumulate(sizes))
    if ends[-1] != len(batch.records) or min(sizes) <= codec.FIXED_SIZE:
        raise BatchRejected("batch sizes do not add up to its records")
    if batch.index_records:
        owners = np.frombuffer(batch.index_records, dtype="<i4")
        if owners.min() < 0 or owners.max() >= n:
            raise BatchRejected("batch index columns name records it does not have")
    starts = [e - z for e, z in zip(ends, sizes, strict=True)]
    crcs = _check_records(batch, starts, sizes, ends, max_body_bytes, max_properties_bytes)
    return np.asarray(starts, dtype=np.int64), np.asarray(crcs, dtype=np.uint32)


# total_size, magic, crc, (store block), queue_id, (flag .. prepared offset), body_length
_CHECKED: Final = struct.Struct(">iII32xi36xi")
assert _CHECKED.size == codec.HEADER_SIZE


def _check_records(batch: EncodedBatch, starts: list[int], sizes: list[int], ends: list[int],
                   max_body: int, max_props: int) -> list[int]:  # fmt: skip
    records = batch.records
    topic = codec.topic_field(batch.topic)
    tail = struct.Struct(f">{len(topic)}sH")  # topic field, properties length
    try:
        heads = list(map(_CHECKED.unpack_from, repeat(records), starts))
        tpos = [s + codec.HEADER_SIZE + h[4] for s, h in zip(starts, heads, strict=True)]
        tails = list(map(tail.unpack_from, repeat(records), tpos))
    except struct.error:
        raise BatchRejected("a record's body_length points outside the record") from None
    fixed, magic, qid = len(topic) + 2, codec.MAGIC, batch.queue_id
    if not all([
        h[0] == z and h[1] == magic and h[3] == qid and 0 < h[4] <= max_body
        and t[0] == topic and t[1] <= max_props and p + fixed + t[1] == e
        for h, t, z, p, e in zip(heads, tails, sizes, tpos, ends, strict=True)
    ]):  # fmt: skip
        raise BatchRejected(
            "a record's total_size, magic, queue_id, body_length, topic or properties length "
            f"does not match its batch (bodies are 1..{max_body} bytes)"
        )
    mv = memoryview(records)
    body_at = [s + codec.CRC_START for s in starts]
    crcs = list(map(crc32c, map(mv.__getitem__, map(slice, body_at, ends))))
    if crcs != [h[2] for h in heads]:
        raise BatchRejected("a record fails its CRC: it was damaged on the way or mis-encoded")
    _check_tags_codes(batch, records, list(map(fixed.__add__, tpos)), ends)
    return crcs


def _check_tags_codes(batch: EncodedBatch, records: bytes, props_at: list[int],
                      ends: list[int]) -> None:  # fmt: skip
    """The ``tags_codes`` column equals the Java hash of each record's TAGS (0 without).

    C-level maps only. Fast path (``_tags_plainly_match``, what encode_batch writes); else
    one anchored regex match per record's properties, its group, and a dict of known tag
    hashes (only tags not seen before are hashed in Python).
    """
    claimed = np.frombuffer(batch.tags_codes, dtype="<i8").tolist()
    if _tags_plainly_match(claimed, records, props_at, ends):
        return
    matches = map(_TAGS_FIRST.match, repeat(records), props_at, ends)
    values = list(map(re.Match.group, matches, repeat(1)))
    if None in values and _tags_later(records, props_at, ends):
        matches = map(_TAGS_ANYWHERE.match, repeat(records), props_at, ends)
        values = list(map(re.Match.group, matches, repeat(1)))
    codes = list(map(_tag_codes.get, values))
    if None in codes:
        codes = [_tag_code(v) if c is None else c for c, v in zip(codes, values, strict=True)]
    if codes != claimed:
        bad = next(i for i, (c, t) in enumerate(zip(codes, claimed, strict=True)) if c != t)
        raise InvalidMessageError(
            f"record {bad} of the batch has tag hash {claimed[bad]} in its tags_codes column, "
            f"but its TAGS property {values[bad]!r} hashes to {codes[bad]}; encode batches "
            "with rayq.store.encode_batch (or fix the column)",
            value=claimed[bad],
            limit=codes[bad],
        )
    if len(_tag_prefixes) >= _TAG_CODES_MAX:
        _tag_prefixes.clear()
    _tag_prefixes.update(
        (c, _TAGS + v + b"\x02") for c, v in set(zip(codes, values, strict=True)) if v
    )


def _tags_plainly_match(claimed: list[int], records: bytes, props_at: list[int],
                        ends: list[int]) -> bool:  # fmt: skip
    """True when no record has a TAGS property and every code is 0, or every record's
    properties start with the TAGS property its code was last verified with. False proves
    nothing (a hash collision, a new tag, a mixed batch): the caller checks exactly."""
    if not any(claimed):
        return max(map(records.find, repeat(_TAGS), props_at, ends)) < 0
    prefixes = list(map(_tag_prefixes.get, claimed))
    return None not in prefixes and all(map(records.startswith, prefixes, props_at, ends))


def _tags_later(records: bytes, props_at: list[int], ends: list[int]) -> bool:
    """Whether some record's properties hold a TAGS property after the first one."""
    return max(map(records.find, repeat(_TAGS_LATER), props_at, ends)) >= 0


def _tag_code(tags: bytes) -> int | None:
    """Java hash of ``tags`` (cached); None for bytes that are not UTF-8 (never matches)."""
    try:
        code = tags_code(tags.decode("utf-8"))
    except UnicodeDecodeError:
        return None
    if len(_tag_codes) >= _TAG_CODES_MAX:
        _tag_codes.clear()
        _tag_codes[None] = 0
    _tag_codes[tags] = code
    return code


_ARANGE = np.arange(1024)


def fill_store_block(records: bytes, starts: np.ndarray, producer_crcs: np.ndarray,
                     first_queue_offset: int, first_commitlog_offset: int, store_timestamp: int,
                     store_host: bytes) -> bytearray:  # fmt: skip
    """A copy of ``records`` with each store block filled in and each CRC finished."""
    out = bytearray(records)
    n = len(starts)
    block = np.empty(n, dtype=STORE_BLOCK_DTYPE)
    block["queue_offset"] = np.arange(first_queue_offset, first_queue_offset + n)
    block["commitlog_offset"] = starts + first_commitlog_offset
    block["store_timestamp"] = store_timestamp
    block["store_host"] = store_host
    raw = block.tobytes()
    size = codec.STORE_BLOCK_SIZE
    blocks = map(
        raw.__getitem__, map(slice, range(0, n * size, size), range(size, n * size + 1, size))
    )
    crcs = np.fromiter(map(crc32c, blocks, producer_crcs.tolist()), dtype=">u4", count=n)
    view = np.frombuffer(out, dtype=np.uint8)
    view[(starts + codec.STORE_BLOCK_OFFSET)[:, None] + _ARANGE[:size]] = np.frombuffer(
        raw, np.uint8
    ).reshape(n, size)
    view[(starts + codec.CRC_OFFSET)[:, None] + _ARANGE[:4]] = crcs.view(np.uint8).reshape(n, 4)
    del view
    return out


def split_by_queue(msgs: Sequence[InnerMessage]) -> tuple[list[list[InnerMessage]], list[int]]:
    """Messages grouped by (topic, queue) in order of first appearance, and the input
    position of each message in group order (to put per-message results back in order)."""
    groups: dict[tuple[str, int], list[int]] = {}
    for i, m in enumerate(msgs):
        groups.setdefault((m.topic, m.queue_id), []).append(i)
    order = [i for idx in groups.values() for i in idx]
    return [[msgs[i] for i in idx] for idx in groups.values()], order
