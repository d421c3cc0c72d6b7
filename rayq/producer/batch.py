"""``send_batch``'s messages checked and made into records in bulk: pure, no Ray, no I/O.

``prepare_batch(msgs, group, config, ids)`` equals this loop of produce_validation.py,
apart from unique ids and timestamps (one per batch)::

    check_batch(msgs)
    inners = [prepare(m, group, config, ids) for m in msgs]
    batch_topic(inners, config.batch_max_bytes)

and raises the same ClientError for the first bad message, its text prefixed with
the message's index (``message 3: body is empty; ...``).

How: ``_checked_columns`` turns every per-message check of ``prepare`` into a C-level
pass over the whole batch (``zip(*map(astuple, msgs))`` gives the columns; types are
checked as sets, body lengths with min/max, the topic and each distinct tag once, all
keys as one joined string). A batch that fails any of them goes through ``prepare``
message by message, which finds and reports the first bad message exactly as the loop
does. The property checks (user properties, delay, delivery time, encoded size) run
only for the messages that need them (``special``): the others carry nothing but the
producer group, in one dict shared by the batch's records. So a plain batch costs a
few C-level passes, one id block (``UniqIdGenerator.next_ids``) and one
``InnerMessage`` per message.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from itertools import chain
from typing import Final, NamedTuple, cast

import msgspec

from rayq.actors.protocol.config import ClientConfig
from rayq.producer.validation import (
    MAX_PROPERTIES_BYTES,
    PLAIN_PROPERTIES_CHARS,
    batch_topic,
    born_host,
    check_batch,
    check_batch_size,
    check_tags,
    check_topic,
    compressed,
    finish_properties,
    prepare,
    user_properties,
)
from rayq.store import InnerMessage, Message, UniqIdGenerator
from rayq.store import properties as P
from rayq.store.errors import RayqError

_NONE: Final = type(None)
_INT32_MIN: Final[int] = -(2**31)
_INT32_MAX: Final[int] = 2**31 - 1
_astuple: Final = msgspec.structs.astuple
# _checked_columns unpacks a Message's fields in this order.
_MESSAGE_FIELDS: Final = (
    "topic",
    "body",
    "tags",
    "keys",
    "properties",
    "flag",
    "delay_level",
    "deliver_at_ms",
)
assert Message.__struct_fields__ == _MESSAGE_FIELDS, "update _checked_columns"


def prepare_batch(
    msgs: Sequence[Message], group: str, config: ClientConfig, ids: UniqIdGenerator
) -> list[InnerMessage]:
    """``send_batch``'s messages as records for queue 0, after all of ``prepare``'s checks
    and ``batch_topic``'s (raises ClientErrors naming the bad message's index)."""
    check_batch(msgs)
    cols = _checked_columns(msgs, config.max_message_size_bytes)
    if cols is None:
        inners = [_prepare_nth(i, m, group, config, ids) for i, m in enumerate(msgs)]
        batch_topic(inners, config.batch_max_bytes)
        return inners
    return _built(cols, msgs, group, config, ids)


def _at(i: int, exc: RayqError) -> RayqError:
    """``exc`` again (same class and details), its text prefixed with a message index."""
    return type(exc)(f"message {i}: {exc.message}", **exc.details)


def _prepare_nth(
    i: int, msg: Message, group: str, config: ClientConfig, ids: UniqIdGenerator
) -> InnerMessage:
    try:
        return prepare(msg, group, config, ids)
    except RayqError as exc:
        raise _at(i, exc) from None


class _Columns(NamedTuple):
    """A batch that passed every bulk check, column by column."""

    topic: str
    bodies: tuple[bytes, ...]
    lengths: list[int]
    tags: Sequence[str | None]  # as check_tags returns them
    keys: list[str]  # as join_keys returns them
    flags: tuple[int, ...]
    special: list[int]  # messages whose properties need checks of their own


def _checked_columns(msgs: Sequence[Message], max_body_bytes: int) -> _Columns | None:
    """The batch's columns if every message passes ``prepare``'s checks (those of its
    properties aside, for the special ones), else None."""
    if set(map(type, msgs)) != {Message}:
        return None
    topics, bodies, tags, keys, props, flags, delays, delivers = zip(
        *map(_astuple, msgs), strict=True
    )
    topic = topics[0]
    if topics.count(topic) != len(topics) or not _writable(topic):
        return None
    if set(map(type, bodies)) != {bytes}:
        return None
    lengths = list(map(len, bodies))
    if min(lengths) < 1 or max(lengths) > max_body_bytes:
        return None
    if set(map(type, flags)) != {int}:
        return None
    if any(flags) and (min(flags) < _INT32_MIN or max(flags) > _INT32_MAX):
        return None
    checked_tags, checked_keys = _bulk_tags(tags), _bulk_keys(keys)
    if checked_tags is None or checked_keys is None:
        return None
    joined_keys, keys_chars = checked_keys
    special = _special(props, delays, delivers)
    if _may_be_long(checked_tags, joined_keys, keys_chars):
        special = list(range(len(msgs)))  # check_properties_size for each
    return _Columns(topic, bodies, lengths, checked_tags, joined_keys, flags, special)


def _may_be_long(tags: Sequence[str | None], keys: list[str], keys_chars: int) -> bool:
    """Whether the properties of a message with just the group might be too long
    (``check_properties_size`` answers exactly), from its tags and keys' lengths."""
    tags_chars = max(len(t or "") for t in set(tags))
    limit_chars = MAX_PROPERTIES_BYTES // 4 - PLAIN_PROPERTIES_CHARS - tags_chars
    return keys_chars > limit_chars and max(map(len, keys)) > limit_chars


def _writable(topic: object) -> bool:
    try:
        check_topic(topic)
    except RayqError:
        return False
    return True


def _bulk_tags(tags: tuple[object, ...]) -> Sequence[str | None] | None:
    """``check_tags`` of each message, once per distinct value; None if one fails."""
    kinds = set(map(type, tags))
    checked = cast("tuple[str | None, ...]", tags)  # if kinds <= {str, NoneType}, below
    if kinds == {_NONE}:
        return checked
    if not kinds <= {str, _NONE}:
        return None
    distinct = set(tags)
    try:
        for value in distinct:
            check_tags(value)
    except RayqError:
        return None
    return [t or None for t in checked] if "" in distinct else checked


def _bulk_keys(keys: tuple[object, ...]) -> tuple[list[str], int] | None:
    """``join_keys`` of each message (lists or tuples of keys) and the characters of
    all keys and their separators (at least those of the longest message's keys);
    None if one fails."""
    if not set(map(type, keys)) <= {list, tuple}:
        return None
    if not any(keys):
        return [""] * len(keys), 0
    seqs = cast("tuple[Sequence[str], ...]", keys)  # lists or tuples; of str: checked next
    flat = list(chain.from_iterable(seqs))
    if set(map(type, flat)) != {str} or not all(flat):
        return None
    joined = "".join(flat)
    if P.KEY_SEPARATOR in joined or "\x01" in joined or "\x02" in joined:
        return None
    return list(map(P.KEY_SEPARATOR.join, seqs)), len(joined) + len(flat)


def _special(
    props: tuple[object, ...], delays: tuple[object, ...], delivers: tuple[object, ...]
) -> list[int]:
    """Indexes of the messages with properties (truthy, as ``prepare`` tests them), a
    delay that is not the int 0, or a delivery time."""
    if (
        not any(props)
        and set(map(type, delays)) == {int}
        and not any(delays)
        and set(map(type, delivers)) == {_NONE}
    ):
        return []
    return [
        i
        for i, (p, d, t) in enumerate(zip(props, delays, delivers, strict=True))
        if p or d.__class__ is not int or d or t is not None
    ]


def _built(
    cols: _Columns,
    msgs: Sequence[Message],
    group: str,
    config: ClientConfig,
    ids: UniqIdGenerator,
) -> list[InnerMessage]:
    """The records of a batch that passed ``_checked_columns``, after the checks of its
    special messages' properties and of the batch size (which raise here)."""
    n = len(cols.bodies)
    props: list[dict[str, str]] = [{P.PRODUCER_GROUP: group}] * n
    for i in cols.special:
        msg = msgs[i]
        try:
            own = user_properties(msg.properties) if msg.properties else {}
            props[i] = finish_properties(own, msg, group, cols.tags[i], cols.keys[i])
        except RayqError as exc:
            raise _at(i, exc) from None
    bodies: Sequence[bytes] = cols.bodies
    sys_flags: Sequence[int] = [0] * n
    size, over = sum(cols.lengths), config.compress_over_bytes
    if max(cols.lengths) > over:
        bodies, sys_flags = zip(*[compressed(b, over) for b in bodies], strict=True)
        size = sum(map(len, bodies))
    check_batch_size(size, config.batch_max_bytes)  # batch_topic's check (one topic here)
    return _records(cols, bodies, sys_flags, props, ids.next_ids(n))


def _records(
    cols: _Columns,
    bodies: Sequence[bytes],
    sys_flags: Sequence[int],
    props: list[dict[str, str]],
    uniq_keys: list[str],
) -> list[InnerMessage]:
    """One record per message, born now (one timestamp for the batch)."""
    topic, born, host = cols.topic, time.time_ns() // 1_000_000, born_host()
    if not (cols.special or any(sys_flags) or any(cols.tags) or any(cols.keys) or any(cols.flags)):
        shared = props[0]  # only bodies and ids differ: the other fields keep their defaults
        return [
            InnerMessage(
                topic=topic,
                queue_id=0,
                body=b,
                uniq_key=u,
                properties=shared,
                born_timestamp=born,
                born_host=host,
            )
            for b, u in zip(bodies, uniq_keys, strict=True)
        ]
    columns = zip(
        bodies, cols.tags, cols.keys, uniq_keys, props, cols.flags, sys_flags, strict=True
    )
    return [
        InnerMessage(
            topic=topic,
            queue_id=0,
            body=b,
            tags=t,
            keys=k,
            uniq_key=u,
            properties=p,
            flag=f,
            sys_flag=s,
            born_timestamp=born,
            born_host=host,
        )
        for b, t, k, u, p, f, s in columns
    ]
