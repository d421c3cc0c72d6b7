"""``prepare_batch`` (rayq/producer/batch.py) is ``prepare`` per message, in bulk.

The oracle is the loop ``send_batch`` ran before: ``check_batch``, ``prepare`` of each
message, ``batch_topic``. For every batch the bulk path must give the same records
(ids and timestamps aside) or raise the same error class for the first bad message,
with the same text after "message <i>: ".
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Sequence
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rayq
from rayq.actors.protocol.config import ClientConfig
from rayq.producer.batch import prepare_batch
from rayq.producer.validation import batch_topic, check_batch, prepare
from rayq.store import InnerMessage, Message, UniqIdGenerator
from rayq.store import properties as P
from rayq.store.errors import (
    InvalidMessageError,
    InvalidTopicError,
    MessageTooLargeError,
    PermissionDeniedError,
    RayqError,
)

CONFIG = ClientConfig(batch_max_bytes=60_000)
T = "orders"
MiB = 1 << 20
NOW_MS = int(time.time() * 1000)

GOOD: list[Message] = [
    Message(T, b"plain"),
    Message(T, b"plain too"),
    Message(T, b"tagged", tags="TagA"),
    Message(T, b"empty tags", tags=""),
    Message(T, b"keyed", tags="TagB", keys=["k1"]),
    Message(T, b"two keys", keys=["k2", "k3"]),
    Message(T, b"tuple keys", keys=("k4",)),  # type: ignore[arg-type]
    Message(T, b"str keys", keys="k5"),  # type: ignore[arg-type]
    Message(T, b"props", properties={"color": "red", "ä": "ö"}),
    Message(T, b"falsy props", properties=None),  # type: ignore[arg-type]
    Message(T, b"delayed", delay_level=3),
    Message(T, b"timed", deliver_at_ms=NOW_MS + 60_000),
    Message(T, b"flagged", flag=-(2**31)),
    Message(T, b"flagged high", flag=2**31 - 1),
    Message(T, bytes(6000)),  # compressed
    Message(T, bytes(range(256)) * 20),  # above compress_over_bytes, barely compressible
    Message(T, b"long tags", tags="t" * 8000),  # check_properties_size must encode
    Message(T, b"long keys", keys=["k" * 9000]),
    Message(T, bytes(30_000)),  # two of these pass batch_max_bytes after compression only
]
BAD: list[tuple[str, Any, type[RayqError]]] = [
    ("not a Message", {"topic": T, "body": b"x"}, InvalidMessageError),
    ("bytes, not a Message", b"x", InvalidMessageError),
    ("a Message subclass is still checked", None, InvalidMessageError),  # set below
    ("topic with a space", Message("bad topic", b"x"), InvalidTopicError),
    ("topic not a str", Message(42, b"x"), InvalidTopicError),  # type: ignore[arg-type]
    ("another topic", Message("other", b"x"), InvalidMessageError),  # batch_topic's error
    ("system topic", Message("TBW102", b"x"), PermissionDeniedError),
    ("retry topic", Message("%RETRY%g", b"x"), PermissionDeniedError),
    ("empty body", Message(T, b""), InvalidMessageError),
    ("str body", Message(T, "text"), InvalidMessageError),  # type: ignore[arg-type]
    ("bytearray body", Message(T, bytearray(b"x")), InvalidMessageError),  # type: ignore[arg-type]
    ("body over the limit", Message(T, bytes(4 * MiB + 1)), MessageTooLargeError),
    ("tags not a str", Message(T, b"x", tags=5), InvalidMessageError),  # type: ignore[arg-type]
    ("tags a list", Message(T, b"x", tags=["a"]), InvalidMessageError),  # type: ignore[arg-type]
    ("tags with ||", Message(T, b"x", tags="a||b"), InvalidMessageError),
    ("tags with \\x02", Message(T, b"x", tags="a\x02"), InvalidMessageError),
    ("keys None", Message(T, b"x", keys=None), InvalidMessageError),  # type: ignore[arg-type]
    ("keys a dict", Message(T, b"x", keys={"k": 1}), InvalidMessageError),  # type: ignore[arg-type]
    ("key with a space", Message(T, b"x", keys=["a b"]), InvalidMessageError),
    ("empty key", Message(T, b"x", keys=["k", ""]), InvalidMessageError),
    ("key not a str", Message(T, b"x", keys=[1]), InvalidMessageError),  # type: ignore[list-item]
    ("key with \\x01", Message(T, b"x", keys=["k\x01"]), InvalidMessageError),
    ("empty str keys", Message(T, b"x", keys=""), InvalidMessageError),  # type: ignore[arg-type]
    ("properties a list", Message(T, b"x", properties=[("a", "b")]), InvalidMessageError),  # type: ignore[arg-type]
    ("property value not a str", Message(T, b"x", properties={"a": 1}), InvalidMessageError),  # type: ignore[dict-item]
    ("property with \\x02", Message(T, b"x", properties={"a": "b\x02"}), InvalidMessageError),
    ("reserved TAGS", Message(T, b"x", properties={"TAGS": "x"}), InvalidMessageError),
    (
        "reserved RETRY_TOPIC",
        Message(T, b"x", properties={"RETRY_TOPIC": "x"}),
        InvalidMessageError,
    ),
    (
        "properties over 32 KiB",
        Message(T, b"x", properties={"big": "x" * 40_000}),
        MessageTooLargeError,
    ),
    (
        "tags and keys over 32 KiB",
        Message(T, b"x", tags="t" * 17_000, keys=["k" * 17_000]),
        MessageTooLargeError,
    ),
    ("delay level 19", Message(T, b"x", delay_level=19), InvalidMessageError),
    ("delay level 0.0", Message(T, b"x", delay_level=0.0), InvalidMessageError),  # type: ignore[arg-type]
    ("delay level False", Message(T, b"x", delay_level=False), InvalidMessageError),
    ("delay level as str", Message(T, b"x", delay_level="3"), InvalidMessageError),  # type: ignore[arg-type]
    (
        "deliver 4 days ahead",
        Message(T, b"x", deliver_at_ms=NOW_MS + 4 * 86_400_000),
        InvalidMessageError,
    ),
    ("deliver_at_ms a float", Message(T, b"x", deliver_at_ms=1.0), InvalidMessageError),  # type: ignore[arg-type]
    (
        "delay and deliver_at_ms",
        Message(T, b"x", delay_level=2, deliver_at_ms=NOW_MS),
        InvalidMessageError,
    ),
    ("flag over 32 bits", Message(T, b"x", flag=2**31), InvalidMessageError),
    ("flag a bool", Message(T, b"x", flag=True), InvalidMessageError),
    ("flag a float", Message(T, b"x", flag=0.0), InvalidMessageError),  # type: ignore[arg-type]
]


class _Sub(Message):
    pass


BAD[2] = (BAD[2][0], _Sub(T, b""), InvalidMessageError)


def loop(msgs: Sequence[Any], ids: UniqIdGenerator) -> list[InnerMessage]:
    """What ``send_batch`` did before ``prepare_batch``, with the index in errors."""
    check_batch(msgs)
    inners = []
    for i, m in enumerate(msgs):
        try:
            inners.append(prepare(m, "pg", CONFIG, ids))
        except RayqError as exc:
            raise type(exc)(f"message {i}: {exc.message}", **exc.details) from None
    batch_topic(inners, CONFIG.batch_max_bytes)
    return inners


def outcome(fn: Any, msgs: Sequence[Any]) -> Any:
    """The records with ids and timestamps made equal, or the error's class, text, details."""
    try:
        inners = fn(msgs, UniqIdGenerator())
    except RayqError as exc:  # deliver_at_ms's error names the latest time allowed: now
        return type(exc), re.sub(r"<= \d+", "<= now", str(exc)), exc.details
    return [
        msgspec.structs.replace(m, uniq_key=str(i), born_timestamp=0) for i, m in enumerate(inners)
    ]


def bulk(msgs: Sequence[Any], ids: UniqIdGenerator) -> list[InnerMessage]:
    return prepare_batch(msgs, "pg", CONFIG, ids)


def test_a_mixed_batch_gives_prepares_records_field_by_field() -> None:
    msgs = GOOD[:-1]
    ours, theirs = outcome(bulk, msgs), outcome(loop, msgs)
    assert isinstance(ours, list)
    for mine, reference in zip(ours, theirs, strict=True):
        for field in InnerMessage.__struct_fields__:
            assert getattr(mine, field) == getattr(reference, field), field


@pytest.mark.parametrize(
    ("msg", "error"), [(m, e) for _, m, e in BAD], ids=[name for name, _, _ in BAD]
)
@pytest.mark.parametrize("at", [0, 3, 7])
def test_a_bad_message_anywhere_raises_prepares_error_with_its_index(
    msg: Any, error: type[RayqError], at: int
) -> None:
    msgs = [*GOOD[:7]]
    msgs.insert(at, msg)
    with pytest.raises(error) as info:
        bulk(msgs, UniqIdGenerator())
    assert outcome(bulk, msgs) == outcome(loop, msgs)
    if "another topic" not in str(info.value) and "one topic" not in str(info.value):
        assert str(info.value).startswith(f"message {at}: ")


def test_the_first_bad_message_wins_whichever_check_finds_it() -> None:
    """A bad property early and a bad body later: the early message's error, as the loop."""
    bad_props, bad_body = Message(T, b"x", properties={"TAGS": "t"}), Message(T, b"")
    for msgs in (
        [GOOD[0], bad_props, bad_body],
        [GOOD[0], bad_body, bad_props],
        [bad_props, Message("other", b"x")],
        [Message("other", b"x"), bad_body],
    ):
        assert outcome(bulk, msgs) == outcome(loop, msgs)
    with pytest.raises(InvalidMessageError, match=r"^message 1: property name 'TAGS'"):
        bulk([GOOD[0], bad_props, bad_body], UniqIdGenerator())


def test_batch_size_counts_compressed_bodies() -> None:
    assert isinstance(outcome(bulk, [GOOD[-1], GOOD[-1]]), list)  # 60 000 bytes raw
    too_big = [Message(T, random.Random(i).randbytes(25_000)) for i in range(3)]  # incompressible
    assert outcome(bulk, too_big) == outcome(loop, too_big)
    with pytest.raises(MessageTooLargeError, match="batch_max_bytes"):
        bulk(too_big, UniqIdGenerator())


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.sampled_from(GOOD) | st.sampled_from([m for _, m, _ in BAD]), min_size=1, max_size=12
    )
)
def test_any_batch_gives_what_the_loop_gives(msgs: list[Any]) -> None:
    assert outcome(bulk, msgs) == outcome(loop, msgs)


@pytest.mark.parametrize("msgs", [[], (), None, Message(T, b"x"), "abc"])
def test_not_a_list_of_messages_is_refused(msgs: Any) -> None:
    with pytest.raises(InvalidMessageError, match="non-empty list"):
        bulk(msgs, UniqIdGenerator())


def test_plain_records_share_the_group_property_and_take_consecutive_ids() -> None:
    inners = bulk([GOOD[0]] * 300, UniqIdGenerator())
    assert all(m.properties is inners[0].properties for m in inners)
    assert inners[0].properties == {P.PRODUCER_GROUP: "pg"}
    positions = [int(m.uniq_key[20:], 16) for m in inners]
    assert positions == list(range(positions[0], positions[0] + 300))
    assert len({m.born_timestamp for m in inners}) == 1


class _NoRemoteCalls:
    """A transport that fails the test on any use."""

    namespace = "rayq-none"

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"a remote call ({name}) before the bad input was refused")


@pytest.mark.parametrize(
    ("msg", "error"), [(m, e) for _, m, e in BAD[:12]], ids=[name for name, _, _ in BAD[:12]]
)
def test_send_batch_refuses_bad_input_anywhere_before_any_remote_call(
    msg: Any, error: type[RayqError]
) -> None:
    producer = rayq.Producer("pg", transport=_NoRemoteCalls())  # type: ignore[arg-type]
    for at in (0, 50, 99):
        msgs = [Message(T, b"x" * 128)] * 99
        msgs.insert(at, msg)
        with pytest.raises(error):
            producer.send_batch(msgs)
