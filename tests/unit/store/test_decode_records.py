"""decode_records hands out MessageExt whose properties and hosts stay raw until first used:
every field, equality, repr, pickling and to_inner must match an eager decode exactly."""

from __future__ import annotations

import copy
import pickle
import zlib
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rayq.store import codec
from rayq.store import properties as P
from rayq.store.message import COMPRESSED_FLAG, InnerMessage, MessageExt

# The fields of MessageExt, in constructor order (the public contract).
FIELDS = (
    "topic",
    "body",
    "tags",
    "keys",
    "properties",
    "msg_id",
    "offset_msg_id",
    "queue_id",
    "queue_offset",
    "commitlog_offset",
    "store_size",
    "born_timestamp",
    "store_timestamp",
    "born_host",
    "store_host",
    "reconsume_times",
    "flag",
    "sys_flag",
    "body_crc",
    "prepared_transaction_offset",
    "broker_name",
)
LAZY = ("keys", "properties", "msg_id", "offset_msg_id", "born_host", "store_host")
UNIQ = "7F000001179C3A305DD9000000010000"
STORE_HOST = "10.0.0.2:10911"


def eager_decode(buffer: bytes, *, broker_name: str = "", decompress: bool = True) -> list[Any]:
    """The reference: every field decoded up front, as decode_records did before it was lazy."""
    out, pos = [], 0
    while pos < len(buffer):
        (
            size,
            _magic,
            crc,
            queue_offset,
            commitlog_offset,
            store_ts,
            store_host,
            queue_id,
            flag,
            sys_flag,
            born_ts,
            born_host,
            reconsume,
            prepared,
            body_len,
        ) = codec.HEADER.unpack_from(buffer, pos)
        tpos = pos + codec.HEADER_SIZE + body_len
        body = buffer[pos + codec.HEADER_SIZE : tpos]
        if decompress and sys_flag & COMPRESSED_FLAG:
            body = zlib.decompress(body)
        ppos = tpos + 1 + buffer[tpos]
        props = P.decode_properties(buffer[ppos + 2 : pos + size].decode("utf-8"))
        omid = codec.offset_msg_id(store_host, commitlog_offset)
        out.append(
            MessageExt(
                topic=buffer[tpos + 1 : ppos].decode("ascii"),
                body=body,
                tags=props.get(P.TAGS),
                keys=P.split_keys(props.get(P.KEYS)),
                properties=props,
                msg_id=props.get(P.UNIQ_KEY) or omid,
                offset_msg_id=omid,
                queue_id=queue_id,
                queue_offset=queue_offset,
                commitlog_offset=commitlog_offset,
                store_size=size,
                born_timestamp=born_ts,
                store_timestamp=store_ts,
                born_host=codec.decode_host(born_host),
                store_host=codec.decode_host(store_host),
                reconsume_times=reconsume,
                flag=flag,
                sys_flag=sys_flag,
                body_crc=crc,
                prepared_transaction_offset=prepared,
                broker_name=broker_name,
            )
        )
        pos += size
    return out


def record(
    properties: str = "", *, body: bytes = b"body", compressed: bool = False, offset: int = 0
) -> bytes:
    """One stored record at commit-log ``offset`` with raw ``properties`` text."""
    return codec.encode_record(
        topic="orders",
        commitlog_offset=offset,
        body=zlib.compress(body) if compressed else body,
        properties=properties.encode("utf-8"),
        sys_flag=COMPRESSED_FLAG if compressed else 0,
        queue_id=3,
        queue_offset=offset // 10,
        flag=7,
        born_timestamp=1_700_000_000_000 + offset,
        born_host=codec.encode_host("10.0.0.1:1234"),
        store_timestamp=1_700_000_000_500 + offset,
        store_host=codec.encode_host(STORE_HOST),
        reconsume_times=2,
        prepared_transaction_offset=5,
    )


def fields(m: MessageExt) -> dict[str, Any]:
    return {name: getattr(m, name) for name in FIELDS}


PROPERTY_TEXTS = {
    "none": "",
    "tags keys uniq": f"TAGS\x01TagA\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01{UNIQ}\x02PGROUP\x01pg\x02",
    "no uniq key": "TAGS\x01TagA\x02KEYS\x01k1\x02",
    "keys only": "KEYS\x01  k1   k2 \x02",
    "tags not first": "a\x01b\x02TAGS\x01TagB\x02",
    "tags twice": "TAGS\x01TagA\x02TAGS\x01TagB\x02",
    "tags in a value": "TAGS\x01TagA\x02note\x01TAGS\x02",
    "tags with no value separator": "TAGS\x01TagA\x02TAGS\x02",
    "value with a name separator": "TAGS\x01a\x01b\x02",
    "no final separator": "TAGS\x01TagA\x02KEYS\x01k",
    "empty tags": "TAGS\x01\x02",
    "unicode": "TAGS\x01标签\x02KEYS\x01ключ\x02città\x01naïve ☃\x02",
    "empty items": "\x02\x02TAGS\x01A\x02\x02",
}


@pytest.mark.parametrize("text", PROPERTY_TEXTS.values(), ids=PROPERTY_TEXTS.keys())
@pytest.mark.parametrize("compressed", [False, True])
@pytest.mark.parametrize("decompress", [False, True])
def test_decoded_message_equals_the_eager_decode_field_by_field(
    text: str, compressed: bool, decompress: bool
) -> None:
    """Every field of a lazily decoded record is what an eager decode gives."""
    raw = record(text, compressed=compressed)
    (got,) = codec.decode_records(raw, broker_name="broker-a", decompress=decompress)
    (want,) = eager_decode(raw, broker_name="broker-a", decompress=decompress)
    assert fields(got) == fields(want)
    assert got == want
    assert type(got) is MessageExt


def test_a_compressed_body_is_inflated_unless_decompress_is_false() -> None:
    raw = record("TAGS\x01A\x02", body=b"x" * 5000, compressed=True)
    assert codec.decode_records(raw)[0].body == b"x" * 5000
    kept = codec.decode_records(raw, decompress=False)[0]
    assert (kept.body, kept.sys_flag) == (zlib.compress(b"x" * 5000), COMPRESSED_FLAG)
    assert kept.to_inner().body == kept.body


def test_many_records_decode_in_order_with_their_own_fields() -> None:
    """A buffer of many records of every kind decodes to one message each, in order."""
    texts = list(PROPERTY_TEXTS.values()) * 25
    parts, offsets = [], [0]
    for i, text in enumerate(texts):
        parts.append(
            record(text, body=bytes([i % 251]) * i, compressed=i % 3 == 0, offset=offsets[-1])
        )
        offsets.append(offsets[-1] + len(parts[-1]))
    buffer = b"".join(parts)
    got = codec.decode_records(buffer, broker_name="b")
    assert [fields(m) for m in got] == [fields(m) for m in eager_decode(buffer, broker_name="b")]
    assert [m.commitlog_offset for m in got] == offsets[:-1]


def test_decode_record_reads_one_record_inside_a_buffer() -> None:
    first, second = record("TAGS\x01A\x02"), record("KEYS\x01k\x02", offset=500)
    buffer = first + second
    got = codec.decode_record(memoryview(buffer), len(first), broker_name="b")
    assert got == eager_decode(buffer, broker_name="b")[1]


# ------------------------------------------------------------ order of first use


@pytest.mark.parametrize("first", LAZY)
def test_any_first_access_gives_every_field_its_eager_value(first: str) -> None:
    raw = record(PROPERTY_TEXTS["tags keys uniq"])
    (m,) = codec.decode_records(raw)
    (want,) = eager_decode(raw)
    assert getattr(m, first) == getattr(want, first)
    assert fields(m) == fields(want)


@pytest.mark.parametrize("name", LAZY)
def test_assigning_a_lazy_field_first_keeps_the_others_from_the_record(name: str) -> None:
    """Fields are independent, as in an eager record: writing one decodes the rest as stored."""
    raw = record(PROPERTY_TEXTS["no uniq key"])
    (m,) = codec.decode_records(raw)
    (want,) = eager_decode(raw)
    setattr(m, name, "assigned")
    setattr(want, name, "assigned")
    assert fields(m) == fields(want)


def test_mutating_properties_changes_no_other_field() -> None:
    raw = record(PROPERTY_TEXTS["tags keys uniq"])
    (m,) = codec.decode_records(raw)
    m.properties[P.KEYS] = "other"
    m.properties[P.UNIQ_KEY] = "other"
    assert (m.keys, m.msg_id) == (["k1", "k2"], UNIQ)


def test_changing_header_fields_first_leaves_the_offset_msg_id_of_the_record() -> None:
    """offset_msg_id is the stored record's, even if commitlog_offset is changed before."""
    raw = record(PROPERTY_TEXTS["no uniq key"], offset=4096)
    (m,) = codec.decode_records(raw)
    m.commitlog_offset = 1
    assert m.offset_msg_id == m.msg_id == codec.offset_msg_id(codec.encode_host(STORE_HOST), 4096)


def test_tags_can_be_set_and_the_topic_changed_as_consumers_do() -> None:
    (m,) = codec.decode_records(record(PROPERTY_TEXTS["tags keys uniq"]))
    m.topic = "orders-again"
    m.tags = None
    assert (m.topic, m.tags, m.properties[P.TAGS]) == ("orders-again", None, "TagA")


# ------------------------------------------------ equality, repr, pickling, copies


def constructed(**changes: Any) -> MessageExt:
    base: dict[str, Any] = {
        "topic": "t",
        "body": b"x",
        "tags": "A",
        "keys": ["k"],
        "properties": {},
        "msg_id": "m",
        "offset_msg_id": "o",
        "queue_id": 0,
        "queue_offset": 1,
        "commitlog_offset": 2,
        "store_size": 3,
        "born_timestamp": 4,
        "store_timestamp": 5,
        "born_host": "h",
        "store_host": "h",
        "reconsume_times": 0,
    }
    return MessageExt(**{**base, **changes})


def test_repr_lists_every_field_as_the_msgspec_struct_did() -> None:
    assert repr(constructed()) == (
        "MessageExt(topic='t', body=b'x', tags='A', keys=['k'], properties={}, msg_id='m', "
        "offset_msg_id='o', queue_id=0, queue_offset=1, commitlog_offset=2, store_size=3, "
        "born_timestamp=4, store_timestamp=5, born_host='h', store_host='h', reconsume_times=0, "
        "flag=0, sys_flag=0, body_crc=0, prepared_transaction_offset=0, broker_name='')"
    )


def test_repr_of_a_decoded_message_shows_decoded_fields() -> None:
    raw = record(PROPERTY_TEXTS["unicode"])
    assert repr(codec.decode_records(raw)[0]) == repr(eager_decode(raw)[0])


@pytest.mark.parametrize("name", FIELDS)
def test_messages_differing_in_one_field_are_unequal(name: str) -> None:
    (m,) = codec.decode_records(record(PROPERTY_TEXTS["tags keys uniq"]))
    (other,) = codec.decode_records(record(PROPERTY_TEXTS["tags keys uniq"]))
    assert m == other
    setattr(other, name, object())
    assert m != other
    assert other != m


def test_equality_needs_the_same_type_and_a_message_is_unhashable() -> None:
    class Sub(MessageExt):
        __slots__ = ()

    m = constructed()
    assert m == constructed()
    assert m != Sub(**fields(m))
    assert m != fields(m)
    assert m.__eq__(object()) is NotImplemented
    with pytest.raises(TypeError, match="unhashable"):
        hash(m)


def test_fields_are_keyword_only_with_the_struct_defaults() -> None:
    m = constructed()
    assert (m.flag, m.sys_flag, m.body_crc, m.prepared_transaction_offset, m.broker_name) == (
        0,
        0,
        0,
        0,
        "",
    )
    with pytest.raises(TypeError):
        MessageExt("t", b"x")  # type: ignore[misc]
    with pytest.raises(TypeError):
        constructed(not_a_field=1)


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
@pytest.mark.parametrize("touched", [False, True])
def test_pickling_round_trips_decoded_messages(protocol: int, touched: bool) -> None:
    """Before or after first use, with every protocol (Ray pickles messages to listeners)."""
    raw = record(PROPERTY_TEXTS["tags keys uniq"]) + record(PROPERTY_TEXTS["unicode"], offset=400)
    msgs = codec.decode_records(raw, broker_name="b")
    if touched:
        assert msgs[0].properties
    back = pickle.loads(pickle.dumps(msgs, protocol=protocol))
    assert back == eager_decode(raw, broker_name="b")
    assert [fields(m) for m in back] == [fields(m) for m in msgs]


def test_pickling_keeps_assigned_and_mutated_fields() -> None:
    (m,) = codec.decode_records(record(PROPERTY_TEXTS["tags keys uniq"]))
    m.properties["extra"] = "1"
    m.msg_id = "mine"
    back = pickle.loads(pickle.dumps(m))
    assert (back.properties["extra"], back.msg_id, back.keys) == ("1", "mine", ["k1", "k2"])


@pytest.mark.parametrize("copier", [copy.copy, copy.deepcopy])
def test_copies_equal_the_original(copier: Callable[[Any], Any]) -> None:
    (m,) = codec.decode_records(record(PROPERTY_TEXTS["tags keys uniq"]))
    twin = copier(m)
    assert twin == m
    assert fields(twin) == fields(m)
    twin.topic = "changed"
    assert m.topic == "orders"


def test_to_inner_of_a_decoded_message_matches_the_eager_one() -> None:
    raw = record(PROPERTY_TEXTS["tags keys uniq"] + "DELAY\x013\x02")
    inner = codec.decode_records(raw)[0].to_inner()
    assert inner == eager_decode(raw)[0].to_inner()
    assert isinstance(inner, InnerMessage)
    assert (inner.tags, inner.keys, inner.uniq_key) == ("TagA", "k1 k2", UNIQ)
    assert inner.properties == {"PGROUP": "pg", "DELAY": "3"}


def test_user_properties_of_a_decoded_message() -> None:
    (m,) = codec.decode_records(record(PROPERTY_TEXTS["tags keys uniq"]))
    assert m.user_properties() == {"PGROUP": "pg"}


# --------------------------------------------------------------------- generated


_chars = st.characters(exclude_characters="\x01\x02", exclude_categories=("Cs",))
_names = st.text(_chars, min_size=1, max_size=8)
_values = st.text(_chars, max_size=12)
_reserved = st.sampled_from([P.TAGS, P.KEYS, P.UNIQ_KEY])


@settings(max_examples=150, deadline=None)
@given(
    items=st.lists(st.tuples(st.one_of(_reserved, _names), _values), max_size=6),
    compressed=st.booleans(),
    body=st.binary(max_size=64),
)
def test_any_properties_decode_as_eagerly(
    items: list[tuple[str, str]], compressed: bool, body: bytes
) -> None:
    """Any property text our encoder can write, TAGS/KEYS/UNIQ_KEY anywhere or repeated."""
    text = "".join(f"{name}\x01{value}\x02" for name, value in items)
    raw = record(text, body=body, compressed=compressed) + record(text, offset=777)
    assert [fields(m) for m in codec.decode_records(raw)] == [fields(m) for m in eager_decode(raw)]
