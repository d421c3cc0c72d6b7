"""What a producer checks before anything leaves the process: pure functions, no Ray, no I/O.

``prepare`` turns a user's ``Message`` into the ``InnerMessage`` the encoder takes
(queue 0 until a queue is picked), or raises a ``ClientError`` that says how to fix
the input:

* topic: a legal name (store/names.py) that a client may write: not a system topic
  (``TBW102``, ``SCHEDULE_TOPIC_XXXX``, ``rmq_sys_*``, ...) and not a ``%RETRY%`` or
  ``%DLQ%`` topic (PermissionDeniedError; only the broker writes those);
* body: non-empty bytes of at most ``max_message_size_bytes``; compressed (zlib)
  above ``compress_over_bytes`` when that makes it smaller;
* tags, keys, flag, ``delay_level`` / ``deliver_at_ms``;
* properties: str to str, and none of ``RESERVED_PROPERTIES`` (the names the producer
  or the broker set: a message that could carry its own ``RETRY_TOPIC`` or
  ``DLQ_ORIGIN_TOPIC`` would show a false origin in dead letters); encoded size at
  most ``MAX_PROPERTIES_BYTES``.

``send_batch`` takes the same checks in bulk (produce_batch.py: ``prepare_batch``,
which falls back to ``prepare`` per message to report a bad one).

The Arrow writer (arrow_io.py) shares the reserved names through
``check_written_properties``: it *drops* ``READ_BACK_PROPERTIES`` (what a read
returns, so that a read-then-write pipeline works) and *refuses* the rest.
"""

from __future__ import annotations

import functools
import socket
import time
import zlib
from operator import attrgetter
from typing import Any, Final

import msgspec

from rayq.actors.protocol.config import ClientConfig
from rayq.actors.protocol.limits import DELIVER_AT_MAX_AHEAD_MS
from rayq.store import DEFAULT_STORE_CONFIG, InnerMessage, Message, UniqIdGenerator
from rayq.store import properties as P
from rayq.store.errors import ConfigError, InvalidMessageError, MessageTooLargeError
from rayq.store.message import COMPRESSED_FLAG
from rayq.store.names import check_client_write_topic, validate_topic
from rayq.store.properties import READ_BACK_PROPERTIES, RESERVED_PROPERTIES

MAX_DELAY_LEVEL: Final[int] = 18  # the broker clamps to its own table (message_delay_level)
MAX_PROPERTIES_BYTES: Final[int] = DEFAULT_STORE_CONFIG.max_properties_size_bytes
_INT32: Final = range(-(2**31), 2**31)
# check_properties_size: bound of the characters besides tags, keys and properties
_FIXED_CHARS: Final[int] = 64  # TAGS, KEYS, UNIQ_KEY names and separators, a 32-digit id
_GROUP_CHARS: Final[int] = 300  # PGROUP alone: a group name has at most 255 characters
# Tags and keys of at most (MAX_PROPERTIES_BYTES / 4 - this) characters in all always fit
# with just the PGROUP property (UTF-8 takes at most 4 bytes per character).
PLAIN_PROPERTIES_CHARS: Final[int] = _FIXED_CHARS + _GROUP_CHARS
_TOPIC: Final = attrgetter("topic")
_BODY: Final = attrgetter("body")


@functools.cache
def born_host() -> str:
    try:
        return f"{socket.gethostbyname(socket.gethostname())}:0"
    except OSError:
        return "127.0.0.1:0"


def bad(text: str, **details: Any) -> InvalidMessageError:
    return InvalidMessageError(text, **details)


def too_large(what: str, size: int, limit: int, setting: str) -> MessageTooLargeError:
    return MessageTooLargeError(
        f"{what} is {size} bytes; at most {limit} ({setting})", value=size, limit=limit, field=what
    )


def int_at_least(name: str, value: Any, minimum: int) -> int:
    if value.__class__ is not int or value < minimum:
        raise ConfigError(f"{name} must be an int >= {minimum}, got {value!r}")
    return value


def producer_config(
    config: object, send_timeout_ms: object, retries: object, namespace: object, idempotent: object
) -> ClientConfig:
    """The producer's ClientConfig with its keyword options applied (ConfigErrors)."""
    if not isinstance(idempotent, bool):
        raise ConfigError(f"idempotent must be a bool, got {idempotent!r}")
    if config is not None and not isinstance(config, ClientConfig):
        raise ConfigError(f"config must be a rayq.ClientConfig, got {type(config).__name__}")
    if namespace is not None and not isinstance(namespace, str):
        raise ConfigError(f"namespace must be a str or None, got {namespace!r}")
    return msgspec.structs.replace(
        config or ClientConfig(),
        send_timeout_ms=int_at_least("send_timeout_ms", send_timeout_ms, 1),
        retries=int_at_least("retries", retries, 0),
    )


# ------------------------------------------------------------ fields
def check_topic(topic: object) -> str:
    """A legal topic name a client may send to (InvalidTopicError, PermissionDeniedError)."""
    return check_client_write_topic(validate_topic(topic))


def check_body(body: object, limit: int) -> bytes:
    if not isinstance(body, bytes):
        raise bad(f"body must be bytes, got {type(body).__name__}; encode text with .encode()")
    if not body:
        raise bad("body is empty; a message needs at least one byte")
    if len(body) > limit:
        raise too_large("body", len(body), limit, "max_message_size_bytes")
    return body if body.__class__ is bytes else bytes(body)


def check_text(what: str, text: str) -> None:
    if "\x01" in text or "\x02" in text:
        raise bad(f"{what} {text!r} contains \\x01 or \\x02, which property encoding reserves")


def check_tags(tags: object) -> str | None:
    if tags is None or tags == "":
        return None
    if not isinstance(tags, str):
        raise bad(f"tags must be a str or None, got {type(tags).__name__}")
    if "||" in tags:
        raise bad(f"tags {tags!r} must not contain '||' (it separates tags in subscriptions)")
    check_text("tags", tags)
    return tags


def join_keys(keys: object) -> str:
    keys = [keys] if isinstance(keys, str) else keys
    if not isinstance(keys, list | tuple):
        raise bad(f"keys must be a list of str, got {type(keys).__name__}")
    for key in keys:
        if not isinstance(key, str) or not key:
            raise bad(f"each key must be a non-empty str, got {key!r}")
        if P.KEY_SEPARATOR in key:
            raise bad(f"key {key!r} contains a space, which separates keys; pass a list")
        check_text("key", key)
    return P.KEY_SEPARATOR.join(keys)


def check_sharding_key(sharding_key: object) -> str:
    if not isinstance(sharding_key, str) or not sharding_key:
        raise bad(f"sharding_key must be a non-empty str, got {sharding_key!r}")
    check_text("sharding_key", sharding_key)
    return sharding_key


# -------------------------------------------------------- properties
def user_properties(props: object) -> dict[str, str]:
    """A copy of a message's own properties; InvalidMessageError naming a reserved one."""
    if not isinstance(props, dict):
        raise bad(f"properties must be a dict[str, str], got {type(props).__name__}")
    P.check_properties(props)
    for name in props:
        if name in RESERVED_PROPERTIES:
            raise bad(f"property name {name!r} is reserved: {RESERVED_PROPERTIES[name]}", name=name)
    return dict(props)


def check_written_properties(props: dict[str, str]) -> dict[str, str]:
    """An Arrow row's properties without ``READ_BACK_PROPERTIES`` (dropped: a row read
    from rayq carries them); InvalidMessageError for another reserved name."""
    kept: dict[str, str] = {}
    for name, value in props.items():
        if name in READ_BACK_PROPERTIES:
            continue
        if name in RESERVED_PROPERTIES:
            raise bad(
                f"property name {name!r} is reserved: {RESERVED_PROPERTIES[name]}; remove it "
                "from the properties column (Arrow writes do not schedule delivery)",
                name=name,
            )
        kept[name] = value
    return kept


def add_schedule(props: dict[str, str], delay_level: object, deliver_at_ms: object) -> None:
    if delay_level.__class__ is not int or delay_level not in range(MAX_DELAY_LEVEL + 1):
        raise bad(f"delay_level must be an int in 0..{MAX_DELAY_LEVEL}, got {delay_level!r}")
    if delay_level:
        props[P.DELAY] = str(delay_level)
    if deliver_at_ms is None:
        return
    latest = time.time_ns() // 1_000_000 + DELIVER_AT_MAX_AHEAD_MS
    if deliver_at_ms.__class__ is not int or not 0 <= deliver_at_ms <= latest:
        raise bad(
            f"deliver_at_ms must be None or epoch ms at most 3 days ahead (<= {latest}), "
            f"got {deliver_at_ms!r}"
        )
    if delay_level:
        raise bad("set delay_level or deliver_at_ms, not both")
    props[P.DELIVER_AT_MS] = str(deliver_at_ms)


def check_properties_size(tags: str | None, keys: str, props: dict[str, str]) -> None:
    bound = _FIXED_CHARS + len(tags or "") + len(keys)
    if len(props) == 1:  # just PGROUP
        bound += _GROUP_CHARS
    else:
        bound += 2 * len(props) + sum(map(len, props)) + sum(map(len, props.values()))
    if 4 * bound <= MAX_PROPERTIES_BYTES:  # UTF-8 takes at most 4 bytes per character
        return
    size = len(P.encode_message_properties(tags, keys, "0" * 32, props).encode())
    if size > MAX_PROPERTIES_BYTES:
        raise too_large("properties", size, MAX_PROPERTIES_BYTES, "tags, keys and properties")


# ----------------------------------------------------------- message
def prepare(
    msg: Message,
    group: str,
    config: ClientConfig,
    ids: UniqIdGenerator,
    extra: dict[str, str] | None = None,
) -> InnerMessage:
    """Check a message and turn it into a record for queue 0 (raises ClientErrors)."""
    if not isinstance(msg, Message):
        raise bad(
            f"expected a rayq.Message, got {type(msg).__name__}: "
            "build one with rayq.Message(topic, body)"
        )
    topic = check_topic(msg.topic)
    body = check_body(msg.body, config.max_message_size_bytes)
    tags, keys = check_tags(msg.tags), join_keys(msg.keys)
    props = user_properties(msg.properties) if msg.properties else {}
    if msg.flag.__class__ is not int or msg.flag not in _INT32:
        raise bad(f"flag must be a 32-bit int, got {msg.flag!r}")
    finish_properties(props, msg, group, tags, keys, extra)
    body, sys_flag = compressed(body, config.compress_over_bytes)
    return InnerMessage(
        topic=topic,
        queue_id=0,
        body=body,
        tags=tags,
        keys=keys,
        uniq_key=ids.next_id(),
        properties=props,
        flag=msg.flag,
        sys_flag=sys_flag,
        born_timestamp=time.time_ns() // 1_000_000,
        born_host=born_host(),
    )


def finish_properties(
    props: dict[str, str],
    msg: Message,
    group: str,
    tags: str | None,
    keys: str,
    extra: dict[str, str] | None = None,
) -> dict[str, str]:
    """``props`` (the message's own, checked) with its schedule, the producer group and
    ``extra`` added, at most ``MAX_PROPERTIES_BYTES`` encoded with tags and keys."""
    add_schedule(props, msg.delay_level, msg.deliver_at_ms)
    props[P.PRODUCER_GROUP] = group
    props.update(extra or ())
    check_properties_size(tags, keys, props)
    return props


def compressed(body: bytes, compress_over_bytes: int) -> tuple[bytes, int]:
    """``body`` zlib-compressed above ``compress_over_bytes`` (with its sys flag) when
    that makes it smaller; an incompressible body travels as it is."""
    if len(body) > compress_over_bytes:
        packed = zlib.compress(body, 5)
        if len(packed) < len(body):
            return packed, COMPRESSED_FLAG
    return body, 0


def check_batch(msgs: object) -> None:
    """``send_batch``'s argument: a non-empty list or tuple (of messages, checked one by one)."""
    if not isinstance(msgs, list | tuple) or not msgs:
        raise bad("send_batch takes a non-empty list of rayq.Message")


def batch_topic(inners: list[InnerMessage], batch_max_bytes: int) -> str:
    """The one topic of a batch, whose bodies fit ``batch_max_bytes``."""
    topics = sorted(set(map(_TOPIC, inners)))
    if len(topics) > 1:
        raise bad(f"a batch goes to one topic, got {topics}; send one batch per topic")
    check_batch_size(sum(map(len, map(_BODY, inners))), batch_max_bytes)
    return topics[0]


def check_batch_size(size: int, batch_max_bytes: int) -> None:
    """A batch's bodies (``size`` bytes, as sent) fit ``batch_max_bytes``."""
    if size > batch_max_bytes:
        raise too_large("batch", size, batch_max_bytes, "batch_max_bytes")
