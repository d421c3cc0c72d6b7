"""MessageStore with bad input: statuses or ClientErrors, nothing half-written, no path escapes."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest

from rayq.store import (
    ClosedError,
    EncodedBatch,
    FakeClock,
    GetStatus,
    InnerMessage,
    Message,
    MessageStore,
    PutStatus,
    StoreConfig,
    TagFilter,
    decode_records,
    encode_batch,
    java_string_hash,
)
from rayq.store import batch as batch_module
from rayq.store.batch import _TAGS_ANYWHERE
from rayq.store.errors import InvalidOffsetError, InvalidTopicError, StoreLockedError

KiB = 1024
CONFIG = StoreConfig.for_tests()
MAX_BODY = CONFIG.max_message_size_bytes  # 16 KiB
MAX_PROPS = CONFIG.max_properties_size_bytes  # 4 KiB


def msg(topic: Any = "T", queue_id: Any = 0, body: Any = b"payload", **fields: Any) -> InnerMessage:
    return InnerMessage(topic=topic, queue_id=queue_id, body=body, **fields)


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root`` with its bytes (None for directories)."""
    return {
        str(p.relative_to(root)): (None if p.is_dir() else p.read_bytes())
        for p in sorted(root.rglob("*"))
    }


def assert_still_works(store: MessageStore) -> None:
    """A good put and a get of it succeed."""
    before = store.max_offset("Healthy", 0)
    result = store.put_messages([msg("Healthy", 0, b"still fine", keys="hk")])
    assert result.status is PutStatus.PUT_OK, result.error
    got = store.get_messages("g", "Healthy", 0, before, 1)
    assert got.status is GetStatus.FOUND
    assert decode_records(got.buffer)[0].body == b"still fine"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def store(root: Path) -> Iterator[MessageStore]:
    """A store that already holds data over more than one segment."""
    s = MessageStore(root, CONFIG, clock=FakeClock(), disk_usage=lambda _p: 0.1)
    for i in range(90):
        assert s.put_messages([msg("T", i % 2, bytes([i]) * 1000, tags="TagA", keys=f"k{i}")]).ok
    yield s
    s.close()


# --------------------------------------------------------------------------- topics

BAD_TOPICS = [
    ("", "empty"),
    ("a/b", "may only contain"),
    ("../x", "may only contain"),
    ("..", "may only contain"),
    ("/abs", "may only contain"),
    ("a b", "may only contain"),
    ("tab\there", "may only contain"),
    ("é", "may only contain"),
    ("x" * 128, "127"),
    (5, "must be a str"),
    (None, "must be a str"),
    (b"bytes", "must be a str"),
    ("orders\n", "may only contain"),
    ("orders\r", "may only contain"),
    ("ord\ners", "may only contain"),
    ("orders\r\n", "may only contain"),
]
BAD_TOPIC_IDS = [
    "empty",
    "slash",
    "dotdot-x",
    "dotdot",
    "abs",
    "space",
    "tab",
    "non-ascii",
    "128-chars",
    "int",
    "none",
    "bytes",
    "trailing-newline",
    "trailing-cr",
    "inner-newline",
    "trailing-crlf",
]


@pytest.mark.parametrize(("topic", "fragment"), BAD_TOPICS, ids=BAD_TOPIC_IDS)
def test_put_with_invalid_topic_is_message_illegal_naming_the_problem(
    store: MessageStore, topic: Any, fragment: str
) -> None:
    """An invalid topic name is MESSAGE_ILLEGAL saying what is wrong; nothing is written."""
    written = store.written_offset
    result = store.put_messages([msg(topic)])
    assert result.status is PutStatus.MESSAGE_ILLEGAL
    assert fragment in result.error
    assert result.results == []
    assert store.written_offset == written
    assert_still_works(store)


@pytest.mark.parametrize(("topic", "fragment"), BAD_TOPICS, ids=BAD_TOPIC_IDS)
def test_reads_with_invalid_topic_raise_invalid_topic_error(
    store: MessageStore, topic: Any, fragment: str
) -> None:
    """get_messages, query_message and delete_topic raise InvalidTopicError for a bad name."""
    with pytest.raises(InvalidTopicError, match=fragment):
        store.get_messages("g", topic, 0, 0)
    with pytest.raises(InvalidTopicError):
        store.query_message(topic, "k1")
    with pytest.raises(InvalidTopicError):
        store.delete_topic(topic)
    assert_still_works(store)


@pytest.mark.parametrize("topic", ["../x", "..", "../../escape", "/tmp/abs", "a/../../b"])
def test_path_like_topic_creates_nothing_anywhere(
    store: MessageStore, root: Path, topic: str
) -> None:
    """No call with a path-like topic changes a byte under the store or creates a sibling."""
    store.flush()
    parent = root.parent
    before_store = snapshot(root)
    before_parent = snapshot(parent)
    before_grandparent = sorted(p.name for p in parent.parent.iterdir())

    assert store.put_messages([msg(topic)]).status is PutStatus.MESSAGE_ILLEGAL
    assert store.put_messages([msg("T", 0), msg(topic)]).status is PutStatus.MESSAGE_ILLEGAL
    for call in (
        lambda: store.get_messages("g", topic, 0, 0),
        lambda: store.query_message(topic, "k"),
        lambda: store.delete_topic(topic),
        lambda: store.view_message("UNIQ", topic=topic),
    ):
        with pytest.raises(InvalidTopicError):
            call()
    assert store.offset_by_time(topic, 0, 0) == 0
    assert store.max_offset(topic, 0) == 0
    assert store.min_offset(topic, 0) == 0
    assert store.queue_ids(topic) == []

    assert snapshot(root) == before_store
    assert snapshot(parent) == before_parent
    assert sorted(p.name for p in parent.parent.iterdir()) == before_grandparent
    assert_still_works(store)


@pytest.mark.parametrize("topic", ["orders\n", "orders\r", "orders\r\n", "\norders"])
def test_topic_with_a_line_break_never_becomes_a_directory(
    store: MessageStore, root: Path, topic: str
) -> None:
    """A name that a ``$``-anchored pattern would accept ("orders\\n") is refused everywhere."""
    assert store.put_messages([msg(topic)]).status is PutStatus.MESSAGE_ILLEGAL
    with pytest.raises(InvalidTopicError, match="may only contain"):
        store.get_messages("g", topic, 0, 0)
    assert store.queue_ids(topic) == []
    names = [p.name for p in (root / "consumequeue").iterdir()]
    assert not any("\n" in name or "\r" in name for name in names)
    assert_still_works(store)


def test_longest_legal_topic_is_accepted(store: MessageStore) -> None:
    """127 characters of letters, digits, '%', '|', '_' and '-' are fine."""
    topic = ("Ab9%|_-" * 20)[:127]
    assert store.put_messages([msg(topic)]).ok
    assert store.get_messages("g", topic, 0, 0).count == 1


# ----------------------------------------------------------------------------- bodies


@pytest.mark.parametrize(
    "body",
    [b"", "text", bytearray(b"x"), memoryview(b"x"), None, 5],
    ids=["empty", "str", "bytearray", "memoryview", "none", "int"],
)
def test_empty_or_non_bytes_body_is_message_illegal(store: MessageStore, body: Any) -> None:
    """Empty and non-bytes bodies are MESSAGE_ILLEGAL (error about the body); nothing is written."""
    written = store.written_offset
    result = store.put_messages([msg(body=body)])
    assert result.status is PutStatus.MESSAGE_ILLEGAL
    assert "body" in result.error
    assert store.written_offset == written
    assert_still_works(store)


def test_oversized_body_is_message_illegal_naming_the_limit(store: MessageStore) -> None:
    """A body over max_message_size_bytes is MESSAGE_ILLEGAL; the error gives size and limit."""
    written = store.written_offset
    result = store.put_messages([msg(body=b"x" * (MAX_BODY + 1))])
    assert result.status is PutStatus.MESSAGE_ILLEGAL
    assert str(MAX_BODY) in result.error
    assert str(MAX_BODY + 1) in result.error
    assert store.written_offset == written
    assert_still_works(store)


def test_body_of_exactly_max_message_size_is_accepted(store: MessageStore) -> None:
    """max_message_size_bytes itself is allowed."""
    result = store.put_messages([msg(body=b"m" * MAX_BODY)])
    assert result.ok, result.error
    got = store.lookup_message(result.results[0].commitlog_offset)
    assert got is not None
    assert got.body == b"m" * MAX_BODY


# ------------------------------------------------------------------------- properties


@pytest.mark.parametrize(
    "fields",
    [
        {"properties": {"P": "v" * MAX_PROPS}},
        {"keys": "k" * (MAX_PROPS + 1)},
        {"tags": "t" * MAX_PROPS, "properties": {"P": "v"}},
    ],
    ids=["one-property", "keys", "tags-plus-property"],
)
def test_properties_over_the_limit_are_properties_size_exceeded(
    store: MessageStore, fields: dict[str, Any]
) -> None:
    """Properties over max_properties_size_bytes: PROPERTIES_SIZE_EXCEEDED naming the limit."""
    written = store.written_offset
    result = store.put_messages([msg(**fields)])
    assert result.status is PutStatus.PROPERTIES_SIZE_EXCEEDED
    assert str(MAX_PROPS) in result.error
    assert store.written_offset == written
    assert_still_works(store)


def test_properties_of_exactly_the_limit_are_accepted(store: MessageStore) -> None:
    """'P\\x01' + value + '\\x02' of exactly max_properties_size_bytes is allowed."""
    result = store.put_messages([msg(properties={"P": "v" * (MAX_PROPS - 3)})])
    assert result.ok, result.error


@pytest.mark.parametrize(
    "fields",
    [
        {"properties": {"A": "x\x02TAGS\x01Injected"}},
        {"properties": {"A\x01B": "v"}},
        {"properties": {"A": 1}},
        {"properties": {"": "v"}},
        {"tags": "Tag\x02A"},
        {"keys": "k1\x01k2"},
        {"uniq_key": "U\x02"},
        {"tags": 5},
        {"keys": ["k1", "k2"]},
    ],
    ids=[
        "value-separator",
        "name-separator",
        "int-value",
        "empty-name",
        "tags-separator",
        "keys-separator",
        "uniq-separator",
        "int-tags",
        "list-keys",
    ],
)
def test_unencodable_properties_are_message_illegal(
    store: MessageStore, fields: dict[str, Any]
) -> None:
    """Separators, empty names and non-str values would corrupt the encoding: MESSAGE_ILLEGAL."""
    written = store.written_offset
    result = store.put_messages([msg(**fields)])
    assert result.status is PutStatus.MESSAGE_ILLEGAL
    assert result.error
    assert store.written_offset == written
    assert_still_works(store)


def test_reserved_property_names_are_refused_or_fully_honoured(store: MessageStore) -> None:
    """TAGS/KEYS/UNIQ_KEY given as plain properties are refused or act like the dedicated fields.

    Never a stored TAGS value that a tag filter cannot find, or keys the index does not know.
    """
    result = store.put_messages(
        [msg("Reserved", 0, b"r", properties={"TAGS": "TagR", "KEYS": "rk1 rk2", "UNIQ_KEY": "UR"})]
    )
    if result.status is PutStatus.MESSAGE_ILLEGAL:
        assert "TAGS" in result.error
        return
    assert result.ok, result.error
    assert result.results[0].msg_id == "UR"
    got = store.get_messages("g", "Reserved", 0, 0, 32, TagFilter.parse("TagR"))
    assert got.count == 1
    m = decode_records(got.buffer)[0]
    assert (m.tags, m.keys, m.msg_id) == ("TagR", ["rk1", "rk2"], "UR")
    assert [x.body for x in store.query_message("Reserved", "rk2")] == [b"r"]
    assert [x.body for x in store.query_message("Reserved", "UR")] == [b"r"]


# ---------------------------------------------------------------------- other fields


@pytest.mark.parametrize("queue_id", [-1, 65536, 70000, "1", 1.5, None])
def test_bad_queue_id_is_message_illegal(store: MessageStore, root: Path, queue_id: Any) -> None:
    """queue_id outside 0..65535 or not an int is MESSAGE_ILLEGAL naming the range."""
    written = store.written_offset
    result = store.put_messages([msg(queue_id=queue_id)])
    assert result.status is PutStatus.MESSAGE_ILLEGAL
    assert "queue_id" in result.error
    assert store.written_offset == written
    assert store.queue_ids("T") == [0, 1]
    assert sorted(p.name for p in (root / "consumequeue" / "T").iterdir()) == ["0", "1"]
    assert_still_works(store)


def test_largest_queue_id_is_accepted(store: MessageStore) -> None:
    """65535 is a legal queue id."""
    assert store.put_messages([msg(queue_id=65535)]).ok
    assert store.get_messages("g", "T", 65535, 0).count == 1


@pytest.mark.parametrize(
    "fields",
    [
        {"flag": 2**31},
        {"flag": "x"},
        {"born_timestamp": "now"},
        {"born_timestamp": 2**63},
        {"reconsume_times": 2**40},
        {"sys_flag": None},
        {"prepared_transaction_offset": -(2**63) - 1},
        {"born_host": 5},
    ],
    ids=[
        "flag-int32-overflow",
        "flag-str",
        "born-str",
        "born-int64-overflow",
        "reconsume-overflow",
        "sys-flag-none",
        "prepared-underflow",
        "born-host-int",
    ],
)
def test_unencodable_header_fields_are_message_illegal(
    store: MessageStore, fields: dict[str, Any]
) -> None:
    """A header field that does not fit its int32/int64 slot (or is no int) is MESSAGE_ILLEGAL."""
    written = store.written_offset
    result = store.put_messages([msg(**fields)])
    assert result.status is PutStatus.MESSAGE_ILLEGAL
    assert result.error
    assert store.written_offset == written
    assert_still_works(store)


@pytest.mark.parametrize(
    "item",
    [{"topic": "T", "queue_id": 0, "body": b"x"}, Message("T", b"x"), None, b"x"],
    ids=["dict", "Message", "None", "bytes"],
)
def test_batch_item_that_is_not_an_inner_message_is_message_illegal(
    store: MessageStore, item: Any
) -> None:
    """Only InnerMessage instances can be appended."""
    result = store.put_messages([item])
    assert result.status is PutStatus.MESSAGE_ILLEGAL
    assert "InnerMessage" in result.error
    assert_still_works(store)


def test_empty_batch_is_message_illegal(store: MessageStore) -> None:
    """An empty batch appends nothing and says so."""
    result = store.put_messages([])
    assert result.status is PutStatus.MESSAGE_ILLEGAL
    assert "empty" in result.error
    assert_still_works(store)


# ----------------------------------------------------------------------- all or nothing

BAD_MESSAGES: list[tuple[str, Callable[[], InnerMessage]]] = [
    ("topic", lambda: msg("../x")),
    ("empty-body", lambda: msg(body=b"")),
    ("oversized-body", lambda: msg(body=b"x" * (MAX_BODY + 1))),
    ("str-body", lambda: msg(body="text")),
    ("queue-id", lambda: msg(queue_id=70000)),
    ("properties-size", lambda: msg(properties={"P": "v" * MAX_PROPS})),
    ("property-separator", lambda: msg(properties={"A": "x\x02B\x01y"})),
    ("flag-overflow", lambda: msg(flag=2**31)),
    ("born-str", lambda: msg(born_timestamp="now")),
    ("not-inner-message", lambda: Message("T", b"x")),  # type: ignore[return-value]
]


@pytest.mark.parametrize("position", ["first", "middle", "last"])
@pytest.mark.parametrize(("kind", "make_bad"), BAD_MESSAGES, ids=[k for k, _ in BAD_MESSAGES])
def test_batch_with_one_bad_message_appends_nothing(
    store: MessageStore, root: Path, kind: str, make_bad: Callable[[], InnerMessage], position: str
) -> None:
    """One bad message anywhere in a batch that rolls segments and opens queues: nothing changes."""
    store.flush()
    good = [
        msg(
            ("T", "Fresh")[i % 2],
            i % 5,
            bytes([i]) * 1500,
            tags="TagB",
            keys=f"b{i}",
            uniq_key=f"U{i}",
        )
        for i in range(100)
    ]
    at = {"first": 0, "middle": 50, "last": len(good)}[position]
    batch = [*good[:at], make_bad(), *good[at:]]
    before = snapshot(root)
    offsets = {(t, q): store.max_offset(t, q) for t in store.topics() for q in store.queue_ids(t)}
    written = store.written_offset

    result = store.put_messages(batch)

    assert result.status in (PutStatus.MESSAGE_ILLEGAL, PutStatus.PROPERTIES_SIZE_EXCEEDED), kind
    assert result.results == []
    assert store.written_offset == written
    assert {
        (t, q): store.max_offset(t, q) for t in store.topics() for q in store.queue_ids(t)
    } == offsets
    assert store.topics() == ["T"]
    assert store.get_messages("g", "Fresh", 1, 0).status is GetStatus.NO_MATCHED_LOGIC_QUEUE
    assert store.query_message("T", "b0") == []
    store.flush()
    assert snapshot(root) == before
    # The same good messages then go in at the offsets they would have had.
    result = store.put_messages(good)
    assert result.ok, result.error
    assert result.results[0].commitlog_offset == written
    assert result.results[0].queue_offset == offsets[("T", 0)]


# --------------------------------------------------------------------------- raw batches


def _tags_codes(*codes: int) -> bytes:
    return np.asarray(codes, dtype="<i8").tobytes()


def _tagged_batch() -> EncodedBatch:
    msgs = [msg("T", 0, b"a", tags="TagA"), msg("T", 0, b"b", tags="TagB"), msg("T", 0, b"c")]
    return encode_batch(msgs, max_body_bytes=MAX_BODY, max_properties_bytes=MAX_PROPS)


TAMPERED_TAGS = {
    "all-zero": lambda b: _tags_codes(0, 0, 0),
    "swapped": lambda b: _tags_codes(java_string_hash("TagB"), java_string_hash("TagA"), 0),
    "code-without-tags": lambda b: _tags_codes(
        java_string_hash("TagA"), java_string_hash("TagB"), java_string_hash("TagA")
    ),
    "off-by-one": lambda b: _tags_codes(java_string_hash("TagA") + 1, java_string_hash("TagB"), 0),
}


@pytest.mark.parametrize("tamper", TAMPERED_TAGS.values(), ids=TAMPERED_TAGS.keys())
def test_put_encoded_with_tag_codes_that_disagree_with_tags_is_message_illegal(
    store: MessageStore, root: Path, tamper: Callable[[EncodedBatch], bytes]
) -> None:
    """The consume queue's tag hashes must be what recovery computes from TAGS (with the
    known-tags cache warm from an identical good batch, and cold)."""
    good = _tagged_batch()
    assert store.put_encoded(good).ok
    store.flush()
    before = snapshot(root)
    tampered = msgspec.structs.replace(good, tags_codes=tamper(good))

    for cache in ("warm", "cold"):
        if cache == "cold":
            batch_module._tag_codes.clear()
            batch_module._tag_codes[None] = 0
            batch_module._tag_prefixes.clear()
        result = store.put_encoded(tampered)

        assert result.status is PutStatus.MESSAGE_ILLEGAL, cache
        assert "tag hash" in result.error and "TAGS property" in result.error
        store.flush()
        assert snapshot(root) == before
    assert store.put_encoded(good).ok
    assert_still_works(store)


def test_put_encoded_accepts_non_ascii_and_repeated_tags(store: MessageStore) -> None:
    msgs = [msg("T", 1, b"x", tags=t) for t in ("标签", "Tag A", "TagA", "TagA", "é" * 40)]
    batch = encode_batch(msgs, max_body_bytes=MAX_BODY, max_properties_bytes=MAX_PROPS)

    assert store.put_encoded(batch).ok


def test_put_encoded_of_a_batch_marked_scheduled_is_message_illegal(
    store: MessageStore, root: Path
) -> None:
    """Appended as is, a delayed record would be delivered at once: the broker parks them."""
    store.flush()
    before = snapshot(root)
    tampered = msgspec.structs.replace(_tagged_batch(), scheduled=True)

    result = store.put_encoded(tampered)

    assert result.status is PutStatus.MESSAGE_ILLEGAL
    assert "scheduled" in result.error
    store.flush()
    assert snapshot(root) == before


@pytest.mark.parametrize(
    ("properties", "tags"),
    [
        (b"TAGS\x01A\x02KEYS\x01k\x02", b"A"),
        (b"KEYS\x01k\x02TAGS\x01B\x02", b"B"),
        (b"KEYS\x01k\x02XTAGS\x01C\x02", None),
        (b"", None),
    ],
)
def test_tags_are_found_where_recovery_finds_them(properties: bytes, tags: bytes | None) -> None:
    """TAGS first (the encoder's order) or after other properties; not inside another name."""
    data = b"hdr" + properties
    assert _TAGS_ANYWHERE.match(data, 3, len(data)).group(1) == tags


def test_rejected_batch_does_not_survive_a_crash(store: MessageStore, root: Path) -> None:
    """After a rejected batch and a crash, recovery finds exactly the earlier messages."""
    store.flush()
    written = store.written_offset
    bad_batch = [msg("T", 0, b"g" * 1500) for _ in range(80)] + [msg(flag=2**31)]
    assert store.put_messages(bad_batch).status is PutStatus.MESSAGE_ILLEGAL
    store.crash()
    reopened = MessageStore(root, CONFIG, clock=FakeClock(), disk_usage=lambda _p: 0.1)
    try:
        assert reopened.written_offset == written
        assert reopened.max_offset("T", 0) == 45
    finally:
        reopened.close()


# ------------------------------------------------------------------- get arguments


@pytest.mark.parametrize(
    ("queue_id", "offset", "max_nums"),
    [
        (0, -1, 32),
        (0, True, 32),
        (0, False, 32),
        (0, "0", 32),
        (0, 1.0, 32),
        (0, None, 32),
        (0, 2**63, 32),
        (0, 0, 0),
        (0, 0, -1),
        (0, 0, True),
        (0, 0, "32"),
        (-1, 0, 32),
        (65536, 0, 32),
        ("0", 0, 32),
        (True, 0, 32),
    ],
)
def test_get_with_bad_offset_queue_or_max_nums_raises_invalid_offset_error(
    store: MessageStore, queue_id: Any, offset: Any, max_nums: Any
) -> None:
    """Negative, bool, non-int offsets/queue ids and max_nums < 1 raise InvalidOffsetError."""
    with pytest.raises(InvalidOffsetError):
        store.get_messages("g", "T", queue_id, offset, max_nums)
    assert_still_works(store)


def test_get_with_unknown_topic_creates_nothing(store: MessageStore, root: Path) -> None:
    """An unknown (valid) topic is NO_MATCHED_LOGIC_QUEUE and leaves no directory behind."""
    r = store.get_messages("g", "Unknown", 3, 0, 32, TagFilter.parse("TagA"))
    assert r.status is GetStatus.NO_MATCHED_LOGIC_QUEUE
    assert not (root / "consumequeue" / "Unknown").exists()
    assert "Unknown" not in store.topics()
    assert store.query_message("Unknown", "k1") == []
    assert not (root / "consumequeue" / "Unknown").exists()
    assert_still_works(store)


def test_lookup_message_with_bad_offset_raises_invalid_offset_error(store: MessageStore) -> None:
    """A negative or non-int commit-log offset is a ClientError, not a crash."""
    for bad in (-1, "0", True):
        with pytest.raises(InvalidOffsetError):
            store.lookup_message(bad)  # type: ignore[arg-type]
    assert_still_works(store)


# ---------------------------------------------------------------------- after close

AFTER_CLOSE: list[tuple[str, Callable[[MessageStore], object]]] = [
    ("put_messages", lambda s: s.put_messages([msg()])),
    ("put_message", lambda s: s.put_message(msg())),
    ("get_messages", lambda s: s.get_messages("g", "T", 0, 0)),
    ("query_message", lambda s: s.query_message("T", "k1")),
    ("view_message", lambda s: s.view_message("UNIQ")),
    ("lookup_message", lambda s: s.lookup_message(0)),
    ("offset_by_time", lambda s: s.offset_by_time("T", 0, 0)),
    ("store_time_of", lambda s: s.store_time_of("T", 0, 0)),
    ("min_offset", lambda s: s.min_offset("T", 0)),
    ("max_offset", lambda s: s.max_offset("T", 0)),
    ("topics", lambda s: s.topics()),
    ("queue_ids", lambda s: s.queue_ids("T")),
    ("delete_topic", lambda s: s.delete_topic("T")),
    ("flush", lambda s: s.flush()),
    ("retention_tick", lambda s: s.retention_tick()),
]


@pytest.mark.parametrize(("name", "call"), AFTER_CLOSE, ids=[n for n, _ in AFTER_CLOSE])
def test_calls_after_close_raise_closed_error(
    root: Path, name: str, call: Callable[[MessageStore], object]
) -> None:
    """Every data call on a closed store raises ClosedError (close itself is idempotent)."""
    s = MessageStore(root, CONFIG, clock=FakeClock(), disk_usage=lambda _p: 0.1)
    assert s.put_messages([msg(keys="k1")]).ok
    s.close()
    s.close()
    with pytest.raises(ClosedError):
        call(s)


def test_second_store_on_the_same_directory_is_refused(store: MessageStore, root: Path) -> None:
    """The directory lock: a second MessageStore on an open root raises StoreLockedError."""
    with pytest.raises(StoreLockedError, match="already open"):
        MessageStore(root, CONFIG)
    assert_still_works(store)
