"""Batches encoded once, by the producer, in commit-log record format.

``encode_batch`` (producer side, pure) turns messages for one topic/queue into an
``EncodedBatch``: the records back to back exactly as the commit log stores them
(codec.py), with the store block zeroed and the CRC of the producer's bytes in each
crc field, plus columns the
store would otherwise have to parse out again (sizes, tag hashes, key-index hashes).
In the common shapes the work per message is C-level (maps, joins, ``struct``), with
at most one comprehension (the properties text of messages with tags or keys); the
steps are in batch_encode.py.

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
from collections.abc import Iterator, Sequence
from itertools import accumulate, repeat
from typing import Final, cast

import msgspec
import numpy as np
from crc32c import crc32c

from . import batch_encode as E
from . import codec
from . import properties as P
from .crc_fold import LOOP_MAX, fold_store_blocks
from .errors import InvalidMessageError, MessageTooLargeError
from .filters import tags_code
from .message import TRANSACTION_TYPE_MASK, InnerMessage
from .names import validate_topic

_shared_property_texts = E.shared_property_texts  # tests/unit/store/test_batch_paths.py

STORE_BLOCK_DTYPE: Final = np.dtype(
    [
        ("queue_offset", ">i8"),
        ("commitlog_offset", ">i8"),
        ("store_timestamp", ">i8"),
        ("store_host", "S8"),
    ]
)
assert STORE_BLOCK_DTYPE.itemsize == codec.STORE_BLOCK_SIZE
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


class RequestAuth(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A signed request's credentials (ACL, actors/server/acl.py): the account, when it
    was signed (ms since the epoch), the client's declared address and the hex
    keyed-BLAKE3 MAC of the request encoded with ``signature`` empty (actors/protocol/auth.py).
    ``address`` is the client's word, for logs: the whitelist never trusts it."""

    access_key: str = ""
    timestamp_ms: int = 0
    address: str = ""
    signature: str = ""


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
    auth: RequestAuth | None = None  # set by a client with credentials (ACL)


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
    cols = E.columns(msgs)
    topic, queue_id = cols.topic[0], cols.queue_id[0]
    validate_topic(topic)
    if set(cols.topic) != {topic} or set(cols.queue_id) != {queue_id}:
        raise InvalidMessageError(
            "a batch goes to one topic and one queue; split it by topic and queue"
        )
    if queue_id.__class__ is not int or not 0 <= queue_id <= codec.QUEUE_ID_MAX:
        raise InvalidMessageError(f"queue_id {queue_id!r} is outside 0..{codec.QUEUE_ID_MAX}")
    lengths = _check_bodies(cols.body, max_body_bytes)
    props = E.property_texts(msgs, cols)
    E.check_texts(props)
    props_lengths = props.lengths()
    longest = max(props_lengths)
    if longest > max_properties_bytes:
        raise properties_too_large(props_lengths.index(longest), longest, max_properties_bytes)
    records, sizes = E.assemble(cols, lengths, props, props_lengths)
    hashes, owners = E.index_columns(topic, props)
    return EncodedBatch(
        topic=topic,
        queue_id=queue_id,
        count=len(msgs),
        records=records,
        sizes=E.column("i", sizes),
        tags_codes=E.tags_codes(props.tags),
        index_hashes=E.column("q", hashes),
        index_records=E.column("i", owners),
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
        raise body_too_large(i, lengths[i], max_body)
    return lengths


def body_too_large(i: int, length: int, limit: int) -> MessageTooLargeError:
    """The error for message ``i`` of a batch whose body is over ``limit`` bytes."""
    return MessageTooLargeError(
        f"message {i}: body is {length} bytes; at most {limit} (max_message_size_bytes)",
        value=length,
        limit=limit,
        field="body",
    )


def properties_too_large(i: int, length: int, limit: int) -> MessageTooLargeError:
    """The error for message ``i`` of a batch whose encoded properties are over ``limit``."""
    return MessageTooLargeError(
        f"message {i}: properties are {length} bytes encoded; at most {limit} "
        "(max_properties_size_bytes)",
        value=length,
        limit=limit,
        field="properties",
    )


class BatchRejected(Exception):
    """An encoded batch failed the store's checks (becomes MESSAGE_ILLEGAL)."""


_BUFFERS = (bytes, bytearray, memoryview)
# (field, the width of its items in bytes)
_COLUMNS = (("sizes", 4), ("tags_codes", 8), ("index_hashes", 8), ("index_records", 4))


def check_shape(batch: EncodedBatch) -> None:
    """BatchRejected unless ``batch``'s fields have their types and its columns whole
    items: a batch that reached the broker as a Python object (not msgpack bytes) was
    never validated against the Struct, and ``msg_ids`` must name each record (the
    reply's ids line up with the messages)."""
    if not isinstance(batch, EncodedBatch):
        raise BatchRejected(f"a put takes an EncodedBatch, got {type(batch).__name__}")
    ints = (batch.queue_id, batch.count, batch.first_sequence)
    if any(type(v) is not int for v in ints) or type(batch.scheduled) is not bool:
        raise BatchRejected("batch queue_id, count and first_sequence must be ints")
    if type(batch.topic) is not str or type(batch.producer_id) is not str:
        raise BatchRejected("batch topic and producer_id must be str")
    if not isinstance(batch.records, _BUFFERS):
        raise BatchRejected(f"batch records must be bytes, got {type(batch.records).__name__}")
    for name, width in _COLUMNS:
        column = getattr(batch, name)
        if not isinstance(column, _BUFFERS) or len(column) % width:
            raise BatchRejected(f"batch column {name} must be bytes of {width}-byte items")
    ids = batch.msg_ids
    if type(ids) is not list or any(type(i) is not str for i in ids):
        raise BatchRejected("batch msg_ids must be a list of str")
    if ids and len(ids) != batch.count:
        raise BatchRejected(f"batch has {batch.count} records but {len(ids)} msg_ids")


def check_encoded(
    batch: EncodedBatch,
    max_body_bytes: int,
    max_properties_bytes: int,
    transactional: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Check every record's framing and CRC: (record start offsets, producer CRCs).
    A record with a transaction type in its sys_flag passes only if ``transactional``
    (the broker's own transaction records, never a producer's).

    No Python bytecode per field: C-level ``map``s of ``struct.unpack_from`` and
    ``crc32c`` over the records, and one comprehension of comparisons.
    """
    check_shape(batch)
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
        owners = np.frombuffer(batch.index_records, dtype="<i4").tolist()
        if min(owners) < 0 or max(owners) >= n:
            raise BatchRejected("batch index columns name records it does not have")
    starts = [e - z for e, z in zip(ends, sizes, strict=True)]
    crcs = _check_records(
        batch,
        starts,
        sizes,
        ends,
        max_body_bytes,
        max_properties_bytes,
        0 if transactional else TRANSACTION_TYPE_MASK,
    )
    return np.asarray(starts, dtype=np.int64), np.asarray(crcs, dtype=np.uint32)


_SIZE_ONE: Final = struct.Struct("<i")
_START_ZERO: Final = np.zeros(1, dtype=np.int64)
_START_ZERO.flags.writeable = False


def own_layout(batch: EncodedBatch) -> tuple[np.ndarray, np.ndarray]:
    """(record start offsets, producer CRCs) of a batch the broker encoded itself, read
    from its columns and the CRC fields (numpy; no per-record check): what
    ``check_encoded`` returns for a producer's batch after checking every record."""
    if batch.count == 1:  # the broker's own single records (the POP log): no numpy
        if batch.sizes != _SIZE_ONE.pack(len(batch.records)):
            raise BatchRejected("batch sizes do not add up to its records")
        (crc,) = _CRC.unpack_from(batch.records, codec.CRC_OFFSET)
        return _START_ZERO, np.array((crc,), dtype=np.uint32)
    sizes = np.frombuffer(batch.sizes, dtype="<i4").astype(np.int64)
    if batch.count < 1 or len(sizes) != batch.count or int(sizes.sum()) != len(batch.records):
        raise BatchRejected("batch sizes do not add up to its records")
    starts = np.cumsum(sizes) - sizes
    raw = np.frombuffer(batch.records, dtype=np.uint8)
    at = starts[:, None] + codec.CRC_OFFSET + np.arange(4)
    crcs = raw[at].copy().view(">u4").ravel().astype(np.uint32)
    return starts, crcs


# total_size, magic, crc, (store block), queue_id, (flag), sys_flag, (born timestamp ..
# prepared offset), body_length
_CHECKED: Final = struct.Struct(">iII32xi4xi28xi")
assert _CHECKED.size == codec.HEADER_SIZE


def _check_records(
    batch: EncodedBatch,
    starts: list[int],
    sizes: list[int],
    ends: list[int],
    max_body: int,
    max_props: int,
    refused_flags: int,
) -> list[int]:
    records = batch.records
    topic = codec.topic_field(batch.topic)
    tail = struct.Struct(f">{len(topic)}sH")  # topic field, properties length
    try:
        heads = list(map(_CHECKED.unpack_from, repeat(records), starts))
        tpos = [s + codec.HEADER_SIZE + h[5] for s, h in zip(starts, heads, strict=True)]
        tails = list(map(tail.unpack_from, repeat(records), tpos))
    except struct.error:
        raise BatchRejected("a record's body_length points outside the record") from None
    fixed, magic, qid = len(topic) + 2, codec.MAGIC, batch.queue_id
    if not all(
        [
            h[0] == z
            and h[1] == magic
            and h[3] == qid
            and 0 < h[5] <= max_body
            and not h[4] & refused_flags
            and t[0] == topic
            and t[1] <= max_props
            and p + fixed + t[1] == e
            for h, t, z, p, e in zip(heads, tails, sizes, tpos, ends, strict=True)
        ]
    ):
        raise BatchRejected(
            "a record's total_size, magic, queue_id, body_length, topic or properties length "
            f"does not match its batch (bodies are 1..{max_body} bytes), or its sys_flag has "
            "a transaction type (only the broker writes those; use TransactionProducer)"
        )
    mv = memoryview(records)
    body_at = [s + codec.CRC_START for s in starts]
    crcs = list(map(crc32c, map(mv.__getitem__, map(slice, body_at, ends))))
    if crcs != [h[2] for h in heads]:
        raise BatchRejected("a record fails its CRC: it was damaged on the way or mis-encoded")
    props_at = list(map(fixed.__add__, tpos))
    _check_tags_codes(batch, records, props_at, ends)
    if refused_flags:  # a producer's batch (the broker's own may carry what it sets)
        _check_broker_properties(records, props_at, ends)
        if any(batch.msg_ids):  # ids claimed ("" is none: records without UNIQ_KEY)
            _check_msg_ids(batch.msg_ids, records, props_at, ends)
    return crcs


# A property only the broker sets, first in a record's properties or after a separator.
_BROKER_NAMES: Final = b"|".join(re.escape(n.encode()) for n in sorted(P.BROKER_ONLY_PROPERTIES))
_BROKER_FIRST: Final = re.compile(b"(" + _BROKER_NAMES + b")\x01")
_BROKER_LATER: Final = re.compile(b"\x02(" + _BROKER_NAMES + b")\x01")
_BROKER_NEEDLES: Final = tuple(n.encode() + b"\x01" for n in sorted(P.BROKER_ONLY_PROPERTIES))
_UNIQ: Final[bytes] = P.UNIQ_KEY.encode() + b"\x01"
_UNIQ_LATER: Final[bytes] = b"\x02" + _UNIQ


def _check_broker_properties(records: bytes, props_at: list[int], ends: list[int]) -> None:
    """InvalidMessageError if a record of a producer's batch carries a property that
    only the broker sets (``BROKER_ONLY_PROPERTIES``: a raw put must not forge a retry's
    origin or a delayed message's destination). Two C-level regex maps."""
    firsts = list(map(_BROKER_FIRST.match, repeat(records), props_at, ends))
    laters = list(map(_BROKER_LATER.search, repeat(records), props_at, ends))
    if not any(firsts) and not any(laters):
        return
    bad, hit = next(
        (i, f or m) for i, (f, m) in enumerate(zip(firsts, laters, strict=True)) if f or m
    )
    name = cast(re.Match[bytes], hit).group(1).decode()
    raise InvalidMessageError(
        f"record {bad} of the batch carries property {name!r}, which is reserved: "
        f"{P.RESERVED_PROPERTIES[name]}; a producer may not set it",
        name=name,
    )


def _check_msg_ids(ids: list[str], records: bytes, props_at: list[int], ends: list[int]) -> None:
    """InvalidMessageError unless each record has exactly one UNIQ_KEY property and it is
    its msg id: the reply's ids are the batch's, so they must name the records stored.
    C-level maps over the properties only; the entries looked for are made with one join
    and one split (ids hold no NUL; one that does takes the per-record way)."""
    n = len(ids)
    firsts = list(map(records.startswith, repeat(_UNIQ), props_at))
    counts = list(map(records.count, repeat(_UNIQ_LATER), props_at, ends))
    if all(map((1).__eq__, map(int.__add__, counts, firsts))):
        anywhere = any(firsts)
        head = _UNIQ.decode() if anywhere else _UNIQ_LATER.decode()
        wants = (head + ("\x02\x00" + head).join(ids) + "\x02").encode().split(b"\x00")
        if len(wants) != n:
            wants = [(head + i + "\x02").encode() for i in ids]
        if not anywhere:  # UNIQ_KEY after TAGS or KEYS in every record (the encoder's)
            if min(map(records.find, wants, props_at, ends)) >= 0:
                return
        elif all(firsts):  # UNIQ_KEY first in every record (no TAGS or KEYS)
            if all(map(records.startswith, wants, props_at)):
                return
        elif all(
            records.startswith(w, p) if f else records.find(b"\x02" + w, p, e) >= 0
            for w, f, p, e in zip(wants, firsts, props_at, ends, strict=True)
        ):
            return
    raise InvalidMessageError(
        "the batch's msg_ids are not its records' UNIQ_KEY properties (one per record, in "
        "order): the reply would name other messages than those stored; encode batches "
        "with rayq.store.encode_batch"
    )


def _check_tags_codes(
    batch: EncodedBatch, records: bytes, props_at: list[int], ends: list[int]
) -> None:
    """The ``tags_codes`` column equals the Java hash of each record's TAGS (0 without).

    C-level maps only. Fast path (``_tags_plainly_match``, what encode_batch writes); else
    one anchored regex match per record's properties, its group, and a dict of known tag
    hashes (only tags not seen before are hashed in Python).
    """
    claimed = np.frombuffer(batch.tags_codes, dtype="<i8").tolist()
    if _tags_plainly_match(claimed, records, props_at, ends):
        return
    # Both patterns always match (their one group is optional).
    Matches = Iterator[re.Match[bytes]]
    matches = cast(Matches, map(_TAGS_FIRST.match, repeat(records), props_at, ends))
    values = list(map(re.Match.group, matches, repeat(1)))
    if None in values and _tags_later(records, props_at, ends):
        matches = cast(Matches, map(_TAGS_ANYWHERE.match, repeat(records), props_at, ends))
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
        (c, _TAGS + v + b"\x02")
        for c, v in set(zip(codes, values, strict=True))
        if v and c is not None  # c is not None: codes == claimed
    )


def _tags_plainly_match(
    claimed: list[int], records: bytes, props_at: list[int], ends: list[int]
) -> bool:
    """True when no record has a TAGS property and every code is 0, or every record's
    properties start with the TAGS property its code was last verified with. False proves
    nothing (a hash collision, a new tag, a mixed batch): the caller checks exactly."""
    if not any(claimed):
        return max(map(records.find, repeat(_TAGS), props_at, ends)) < 0
    prefixes = list(map(_tag_prefixes.get, claimed))
    if None in prefixes:
        return False
    return all(map(records.startswith, cast(list[bytes], prefixes), props_at, ends))


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
_STORE_BLOCK: Final = struct.Struct(">qqq8s")  # STORE_BLOCK_DTYPE's layout
_CRC: Final = struct.Struct(">I")
assert _STORE_BLOCK.size == codec.STORE_BLOCK_SIZE


def fill_store_block(
    records: bytes,
    starts: np.ndarray,
    producer_crcs: np.ndarray,
    first_queue_offset: int,
    first_commitlog_offset: int,
    store_timestamp: int,
    store_host: bytes,
) -> bytearray:
    """A copy of ``records`` with each store block filled in and each CRC finished
    (up to ``LOOP_MAX`` records one by one with ``struct`` and ``crc32c``, as
    crc_fold.py folds that few; more with numpy)."""
    out = bytearray(records)
    n = len(starts)
    if n <= LOOP_MAX:
        at_offset = first_commitlog_offset
        for i, (start, crc) in enumerate(zip(starts.tolist(), producer_crcs.tolist(), strict=True)):
            queue_offset, commitlog_offset = first_queue_offset + i, start + at_offset
            _fill_one(out, start, crc, queue_offset, commitlog_offset, store_timestamp, store_host)
        return out
    block = np.empty(n, dtype=STORE_BLOCK_DTYPE)
    block["queue_offset"] = np.arange(first_queue_offset, first_queue_offset + n)
    block["commitlog_offset"] = starts + first_commitlog_offset
    block["store_timestamp"] = store_timestamp
    block["store_host"] = store_host
    size = codec.STORE_BLOCK_SIZE
    blocks = block.view(np.uint8).reshape(n, size)
    crcs = fold_store_blocks(producer_crcs, blocks).astype(">u4")
    view = np.frombuffer(out, dtype=np.uint8)
    view[(starts + codec.STORE_BLOCK_OFFSET)[:, None] + _ARANGE[:size]] = blocks
    view[(starts + codec.CRC_OFFSET)[:, None] + _ARANGE[:4]] = crcs.view(np.uint8).reshape(n, 4)
    del view
    return out


def fill_one_store_block(
    record: bytes,
    producer_crc: int,
    queue_offset: int,
    commitlog_offset: int,
    store_timestamp: int,
    store_host: bytes,
) -> bytearray:
    """``fill_store_block`` of a batch of one record, without numpy."""
    out = bytearray(record)
    _fill_one(out, 0, producer_crc, queue_offset, commitlog_offset, store_timestamp, store_host)
    return out


def _fill_one(
    out: bytearray,
    start: int,
    crc: int,
    queue_offset: int,
    commitlog_offset: int,
    store_timestamp: int,
    store_host: bytes,
) -> None:
    """Fill the store block of the record at ``start`` of ``out`` and finish its CRC."""
    packed = _STORE_BLOCK.pack(queue_offset, commitlog_offset, store_timestamp, store_host)
    out[start + codec.STORE_BLOCK_OFFSET : start + codec.CRC_START] = packed
    _CRC.pack_into(out, start + codec.CRC_OFFSET, crc32c(packed, crc))


def split_by_queue(msgs: Sequence[InnerMessage]) -> tuple[list[list[InnerMessage]], list[int]]:
    """Messages grouped by (topic, queue) in order of first appearance, and the input
    position of each message in group order (to put per-message results back in order)."""
    groups: dict[tuple[str, int], list[int]] = {}
    for i, m in enumerate(msgs):
        groups.setdefault((m.topic, m.queue_id), []).append(i)
    order = [i for idx in groups.values() for i in idx]
    return [[msgs[i] for i in idx] for idx in groups.values()], order
