"""The bytes a producer sends are exactly those of the encoder before the bulk paths.

``reference_encode_batch`` below is store/batch.py's encoder as of commit 2ad4891
(before ``prepare_batch`` and the encoder's bulk paths), kept verbatim as an oracle:
Hypothesis draws batches of every shape (tags, keys, ids, shared and per-message
properties, reserved names in properties, scheduled, varying header fields, bad
values) and ``encode_batch`` must return the same ``EncodedBatch`` field by field, or
raise the same error. Through the producer's path, ``prepare_batch`` + ``encode_batch``
must give the bytes of ``prepare`` per message + the reference encoder (ids and
timestamps made equal).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate, chain, pairwise, repeat

import msgspec
import numpy as np
import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rayq.actors.protocol.config import ClientConfig
from rayq.producer.batch import prepare_batch
from rayq.producer.validation import MAX_PROPERTIES_BYTES, prepare
from rayq.store import InnerMessage, Message, UniqIdGenerator, codec, encode_batch
from rayq.store import properties as P
from rayq.store.batch import EncodedBatch
from rayq.store.errors import InvalidMessageError, MessageTooLargeError
from rayq.store.filters import tags_code
from rayq.store.index_file import topic_seed
from rayq.store.names import validate_topic

_RESERVED = (P.TAGS, P.KEYS, P.UNIQ_KEY)


# ----------------------------------------------- the reference (2ad4891)
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


def _property_texts(
    msgs: Sequence[InnerMessage],
) -> tuple[list[str], list[tuple], int, bool]:
    """Each message's property string, its (tags, keys, uniq), the entry count and
    whether any message is scheduled (has a DELAY or __DELIVER_AT_MS property)."""
    fast = _shared_property_texts(msgs)
    if fast is not None:
        return *fast, _is_scheduled(msgs[0].properties)
    texts, fields, entries, scheduled = [], [], 0, False
    for i, m in enumerate(msgs):
        tags, keys, uniq, others = _props_of(i, m)
        texts.append(P.encode_message_properties(tags, keys, uniq, others))
        fields.append((tags, keys, uniq))
        entries += P.count_entries(tags, keys, uniq, others)
        scheduled = scheduled or _is_scheduled(others)
    return texts, fields, entries, scheduled


def _shared_property_texts(
    msgs: Sequence[InnerMessage],
) -> tuple[list[str], list[tuple], int] | None:
    """The common case, one comprehension: every message has the same other properties
    (a producer adds its group to each) and str/None tags, keys and unique ids."""
    shared = msgs[0].properties
    if not all([m.properties is shared or m.properties == shared for m in msgs]):
        return None
    if any(name in shared for name in _RESERVED):
        return None
    kinds = {m.tags.__class__ for m in msgs} | {m.keys.__class__ for m in msgs}
    if not kinds <= {str, type(None)} or {m.uniq_key.__class__ for m in msgs} != {str}:
        return None
    try:
        P.check_properties(shared)
    except InvalidMessageError:
        return None  # the slow path reports it with the message's index
    suffix = P.encode_properties(shared)
    texts = [
        (f"TAGS\x01{m.tags}\x02" if m.tags else "")
        + (f"KEYS\x01{m.keys}\x02" if m.keys else "")
        + (f"UNIQ_KEY\x01{m.uniq_key}\x02" if m.uniq_key else "")
        + suffix
        for m in msgs
    ]
    fields = [(m.tags or None, m.keys or "", m.uniq_key) for m in msgs]
    entries = sum([bool(t) + bool(k) + bool(u) for t, k, u in fields]) + len(shared) * len(msgs)
    return texts, fields, entries


def _check_texts(texts: list[str], entries: int) -> None:
    joined = "".join(texts)
    if joined.count("\x01") != entries or joined.count("\x02") != entries:
        raise InvalidMessageError(
            "tags, keys and property values must not contain \\x01 or \\x02 "
            "(the property encoding reserves them)"
        )


def reference_encode_batch(
    msgs: Sequence[InnerMessage],
    *,
    max_body_bytes: int,
    max_properties_bytes: int,
) -> EncodedBatch:
    """Encode messages for one topic and queue (producer side). Raises ClientErrors."""
    if not msgs:
        raise InvalidMessageError("empty batch: nothing to send")
    if {m.__class__ for m in msgs} != {InnerMessage}:
        raise InvalidMessageError("batch items must be InnerMessage")
    topic, queue_id = msgs[0].topic, msgs[0].queue_id
    validate_topic(topic)
    if {m.topic for m in msgs} != {topic} or {m.queue_id for m in msgs} != {queue_id}:
        raise InvalidMessageError(
            "a batch goes to one topic and one queue; split it by topic and queue"
        )
    if queue_id.__class__ is not int or not 0 <= queue_id <= codec.QUEUE_ID_MAX:
        raise InvalidMessageError(f"queue_id {queue_id!r} is outside 0..{codec.QUEUE_ID_MAX}")
    bodies = [m.body for m in msgs]
    _check_bodies(bodies, max_body_bytes)
    texts, fields, entries, scheduled = _property_texts(msgs)
    _check_texts(texts, entries)
    raws = list(map(str.encode, texts))
    longest = max(map(len, raws))
    if longest > max_properties_bytes:
        i = [len(r) for r in raws].index(longest)
        raise MessageTooLargeError(
            f"message {i}: properties are {longest} bytes encoded; at most "
            f"{max_properties_bytes} (max_properties_size_bytes)",
            value=longest,
            limit=max_properties_bytes,
            field="properties",
        )
    return _assemble(msgs, topic, queue_id, bodies, raws, fields, scheduled)


def _check_bodies(bodies: list[bytes], max_body: int) -> None:
    if {b.__class__ for b in bodies} != {bytes}:
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


def _assemble(
    msgs: Sequence[InnerMessage],
    topic: str,
    queue_id: int,
    bodies: list[bytes],
    raws: list[bytes],
    fields: list[tuple],
    scheduled: bool,
) -> EncodedBatch:
    n = len(msgs)
    topic_field = codec.topic_field(topic)
    pack_len = codec.PROPS_LEN.pack
    tails = [topic_field + pack_len(len(r)) + r for r in raws]
    body_lens = list(map(len, bodies))
    sizes = [codec.HEADER_SIZE + b + len(t) for b, t in zip(body_lens, tails, strict=True)]
    hosts: dict[str, bytes] = {}
    born = [
        hosts.get(m.born_host) or hosts.setdefault(m.born_host, codec.encode_host(m.born_host))
        for m in msgs
    ]
    headers = map(
        codec.HEADER.pack,
        sizes,
        repeat(codec.MAGIC),
        repeat(0),
        repeat(0),
        repeat(0),
        repeat(0),
        repeat(bytes(8)),
        repeat(queue_id),
        [m.flag for m in msgs],
        [m.sys_flag for m in msgs],
        [m.born_timestamp for m in msgs],
        born,
        [m.reconsume_times for m in msgs],
        [m.prepared_transaction_offset for m in msgs],
        body_lens,
    )
    blob = bytearray(b"".join(chain.from_iterable(zip(headers, bodies, tails, strict=True))))
    starts = list(accumulate(sizes, initial=0))
    mv = memoryview(blob)
    crcs = [crc32c(mv[s + codec.CRC_START : e]) for s, e in pairwise(starts)]
    list(map(codec.CRC.pack_into, repeat(blob), [s + codec.CRC_OFFSET for s in starts], crcs))
    mv.release()
    hashes, owners = _index_columns(topic, fields)
    return EncodedBatch(
        topic=topic,
        queue_id=queue_id,
        count=n,
        records=bytes(blob),
        sizes=np.asarray(sizes, dtype="<i4").tobytes(),
        tags_codes=np.asarray([tags_code(f[0]) for f in fields], dtype="<i8").tobytes(),
        index_hashes=np.asarray(hashes, dtype="<i8").tobytes(),
        index_records=np.asarray(owners, dtype="<i4").tobytes(),
        msg_ids=[f[2] for f in fields],
        scheduled=scheduled,
    )


def _index_columns(topic: str, fields: list[tuple]) -> tuple[list[int], list[int]]:
    seed = topic_seed(topic)
    hashes: list[int] = []
    owners: list[int] = []
    if all(f[1] and " " not in f[1] for f in fields):  # one key each: no split needed
        hashes += [crc32c(f[1].encode(), seed) for f in fields]
        owners += range(len(fields))
    else:
        for i, f in enumerate(fields):
            for k in f[1].split(P.KEY_SEPARATOR) if f[1] else ():
                if not k:
                    continue
                hashes.append(crc32c(k.encode(), seed))
                owners.append(i)
    uniq = [i for i, f in enumerate(fields) if f[2]]
    hashes += [crc32c(fields[i][2].encode(), seed) for i in uniq]
    owners += uniq
    return hashes, owners


# ------------------------------------------------------------ batches
IDS = UniqIdGenerator().next_ids(64)
HOSTS = ["10.0.0.1:5", "127.0.0.1:0", "not-a-host:1"]
GOOD_PROPS: list[dict[str, str]] = [
    {},
    {P.PRODUCER_GROUP: "pg"},
    {P.PRODUCER_GROUP: "pg"},
    {P.PRODUCER_GROUP: "pg", "color": "red", "ä": "ö"},
    {P.PRODUCER_GROUP: "pg", P.DELAY: "3"},
    {P.PRODUCER_GROUP: "pg", P.DELIVER_AT_MS: "1700000000000"},
    {P.TAGS: "from-props", P.PRODUCER_GROUP: "pg"},  # reserved names: the general path
    {P.UNIQ_KEY: "U", P.KEYS: "pk", P.PRODUCER_GROUP: "pg"},
]
BAD_PROPS: list[dict[str, str]] = [
    {P.PRODUCER_GROUP: "pg", "bad": 1},  # type: ignore[dict-item]
    {P.PRODUCER_GROUP: "pg", "a\x01": "b"},
    {P.PRODUCER_GROUP: "pg", "big": "x" * 200},  # over the small properties limit
]
GOOD_TAGS = [None, "", "TagA", "TagA", "TagB", "täg"]
GOOD_KEYS = ["", "k1", "k1 k2", " k3", "k4  k5", "kä"]
BAD_TEXTS = ["t\x01", "k\x02", "x" * 300]


def rarely(
    draw: st.DrawFn, good: st.SearchStrategy, bad: st.SearchStrategy, one_in: int = 100
) -> object:
    """A good value, or one in ``one_in`` times a bad one."""
    return draw(bad) if draw(st.integers(1, one_in)) == one_in // 2 else draw(good)


@st.composite
def inner_batches(draw: st.DrawFn) -> tuple[list[InnerMessage], dict[str, int]]:
    """A batch of one of many shapes, mostly good, and the encoder's limits."""
    n = draw(st.integers(1, 10))
    shared = draw(st.sampled_from(GOOD_PROPS))
    own_props = draw(st.booleans())
    same_header = draw(st.booleans())
    topic = draw(st.sampled_from(["T", "orders-1"]))
    queue_id = rarely(draw, st.sampled_from([0, 3, 65535]), st.just(70_000), 20)
    odd_topic = rarely(draw, st.just(-1), st.integers(0, n - 1), 20)  # one message elsewhere
    msgs = []
    for i in range(n):
        header = (0, 0, 1_700_000_000_000, HOSTS[0], 0, 0)
        if not same_header:
            header = (
                draw(st.sampled_from([0, 1, -(2**31)])),
                draw(st.sampled_from([0, 1])),
                draw(st.integers(0, 2**62)),
                draw(st.sampled_from(HOSTS)),
                draw(st.integers(0, 16)),
                draw(st.sampled_from([0, 2**40])),
            )
        props = shared
        if own_props:
            props = dict(rarely(draw, st.sampled_from(GOOD_PROPS), st.sampled_from(BAD_PROPS), 30))
        msgs.append(
            InnerMessage(
                topic="other" if i == odd_topic else topic,
                queue_id=queue_id,
                body=rarely(draw, st.binary(min_size=1, max_size=200), st.just(b"x" * 151), 50),
                tags=rarely(draw, st.sampled_from(GOOD_TAGS), st.sampled_from(BAD_TEXTS)),
                keys=rarely(draw, st.sampled_from(GOOD_KEYS), st.sampled_from(BAD_TEXTS)),
                uniq_key=rarely(draw, st.sampled_from([IDS[i], IDS[i], ""]), st.just("u\x02")),
                properties=props,
                flag=header[0],
                sys_flag=header[1],
                born_timestamp=header[2],
                born_host=header[3],
                reconsume_times=header[4],
                prepared_transaction_offset=header[5],
            )
        )
    limits = {
        "max_body_bytes": draw(st.sampled_from([1 << 20] * 9 + [150])),
        "max_properties_bytes": draw(st.sampled_from([MAX_PROPERTIES_BYTES] * 9 + [180])),
    }
    return msgs, limits


def outcome(encode: object, msgs: Sequence[InnerMessage], limits: dict[str, int]) -> object:
    """The EncodedBatch, or the class, text and details of the error raised."""
    try:
        return encode(msgs, **limits)  # type: ignore[operator]
    except Exception as exc:
        return type(exc), str(exc), getattr(exc, "details", None)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(inner_batches())
def test_encode_batch_equals_the_reference_encoder(batch: tuple) -> None:
    """Same records, columns and ids, or the same error, for batches of every shape."""
    msgs, limits = batch
    assert outcome(encode_batch, msgs, limits) == outcome(reference_encode_batch, msgs, limits)


@pytest.mark.parametrize("n", [1, 2, 100, 300])
def test_plain_batches_of_the_producer_equal_the_reference(n: int) -> None:
    """The common shapes (no tags or keys; one tag and a key each), equal bodies."""
    ids = UniqIdGenerator().next_ids(n)
    for tags, keys in ((None, ""), ("TagA", "k")):
        msgs = [
            InnerMessage(
                topic="bench",
                queue_id=1,
                body=bytes([i % 251]) * 128,
                tags=tags,
                keys=keys and f"{keys}{i}",
                uniq_key=ids[i],
                properties={P.PRODUCER_GROUP: "pg"},
                born_timestamp=1_700_000_000_000,
                born_host="10.1.2.3:0",
            )
            for i in range(n)
        ]
        limits = {"max_body_bytes": 4 << 20, "max_properties_bytes": MAX_PROPERTIES_BYTES}
        assert encode_batch(msgs, **limits) == reference_encode_batch(msgs, **limits)


# ---------------------------------------------- through the producer's path
CONFIG = ClientConfig()
MESSAGES = [
    Message("orders", b"plain"),
    Message("orders", b"tagged", tags="TagA", keys=["k1"]),
    Message("orders", b"two keys", tags="", keys=("k2", "k3")),
    Message("orders", b"props", properties={"color": "red", "ä": "ö"}),
    Message("orders", b"delayed", delay_level=3, flag=7),
    Message("orders", b"timed", deliver_at_ms=1_700_000_000_000),
    Message("orders", bytes(10_000)),  # compressed
    Message("orders", bytes(range(256)) * 20),  # over compress_over_bytes, incompressible-ish
    Message("orders", b"single key", keys="solo"),  # type: ignore[arg-type]  # str keys
]


def _same_ids(inners: list[InnerMessage]) -> list[InnerMessage]:
    return [
        msgspec.structs.replace(m, uniq_key=IDS[i], born_timestamp=1_700_000_000_000)
        for i, m in enumerate(inners)
    ]


@pytest.mark.parametrize("picks", [[0] * 5, [1, 1, 2], [0, 3, 0, 4, 5], list(range(9)), [6, 7, 0]])
def test_prepare_batch_and_encode_send_the_bytes_of_prepare_and_the_reference(
    picks: list[int],
) -> None:
    msgs = [MESSAGES[i] for i in picks]
    ids = UniqIdGenerator()
    ours = _same_ids(prepare_batch(msgs, "pg", CONFIG, ids))
    theirs = _same_ids([prepare(m, "pg", CONFIG, ids) for m in msgs])
    assert ours == theirs
    limits = {
        "max_body_bytes": CONFIG.max_message_size_bytes,
        "max_properties_bytes": MAX_PROPERTIES_BYTES,
    }
    assert encode_batch(ours, **limits) == reference_encode_batch(theirs, **limits)
