"""Validation of names that become directory names or index keys.

Checked before any path is built: a topic is a directory under ``consumequeue/``,
so ``../x`` must never reach the file system.

System topics use RocketMQ's names, which the pattern accepts: ``%RETRY%<group>``
(messages a consumer group failed and sent back, redelivered after a delay),
``%DLQ%<group>`` (messages that failed ``max_reconsume_times``) and
``SCHEDULE_TOPIC_XXXX`` (delayed messages waiting for their time; rayq.actors.server.schedule).

Which topics a client may write (RocketMQ's ``TopicValidator``): none of
``SYSTEM_TOPICS`` or a ``rmq_sys_`` name (the broker's own topics; RocketMQ's producer
says "The topic[...] is conflict with system topic"), and no ``%RETRY%``/``%DLQ%``
topic (only the broker's send-back writes those); ``RMQ_SYS_TRACE_TOPIC`` is the one
system topic clients write (message trace records). ``check_client_write_topic`` is the
one check, made by the producer, the Arrow writer and ``Broker.put``; the broker's
send-back and delayed delivery append through other paths and are not affected.
Consumers may still read retry and dead-letter topics.
"""

from __future__ import annotations

import re
from typing import Final

from .errors import (
    ConfigError,
    InvalidGroupError,
    InvalidTopicError,
    PermissionDeniedError,
)

# Use with ``fullmatch``: ``$`` would also match before a final newline ("orders\n").
NAME_PATTERN: Final[re.Pattern[str]] = re.compile(r"[%|a-zA-Z0-9_-]+")
TOPIC_MAX_LENGTH: Final[int] = 127
GROUP_MAX_LENGTH: Final[int] = 255
# A client instance name becomes one directory level (offset_store.py): RocketMQ's name
# characters plus '.', '@' and ':' (host names, pids), never a separator, '.' or '..'.
INSTANCE_NAME_PATTERN: Final[re.Pattern[str]] = re.compile(r"[%|a-zA-Z0-9_.@:-]+")
INSTANCE_NAME_MAX_LENGTH: Final[int] = 255
RETRY_GROUP_TOPIC_PREFIX: Final[str] = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX: Final[str] = "%DLQ%"
SCHEDULE_TOPIC: Final[str] = "SCHEDULE_TOPIC_XXXX"  # delayed messages wait here
SYSTEM_TOPIC_PREFIX: Final[str] = "rmq_sys_"
# Transactions (rayq.actors.server.transactions): half messages, the ops that end them, and
# halves checked too often. The first two are never dispatched to consume queues.
TRANS_HALF_TOPIC: Final[str] = "RMQ_SYS_TRANS_HALF_TOPIC"
TRANS_OP_HALF_TOPIC: Final[str] = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_CHECK_MAX_TIME_TOPIC: Final[str] = "TRANS_CHECK_MAX_TIME_TOPIC"
# Message trace records (rayq/trace/): a system topic that clients write, as RocketMQ's
# RMQ_SYS_TRACE_TOPIC is (it is not in RocketMQ's NOT_ALLOWED_SEND_TOPIC_SET).
TRACE_TOPIC: Final[str] = "RMQ_SYS_TRACE_TOPIC"
NO_QUEUE_TOPICS: Final[frozenset[str]] = frozenset({TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC})
# RocketMQ's TopicValidator.SYSTEM_TOPIC_SET: topics of the broker itself.
SYSTEM_TOPICS: Final[frozenset[str]] = frozenset(
    {
        "TBW102",  # the auto-create template topic
        SCHEDULE_TOPIC,
        "BenchmarkTest",
        "OFFSET_MOVED_EVENT",
        "SELF_TEST_TOPIC",
        TRANS_HALF_TOPIC,
        TRANS_OP_HALF_TOPIC,
        TRACE_TOPIC,
        TRANS_CHECK_MAX_TIME_TOPIC,
    }
)

_valid_topics: set[str] = set()


def validate_topic(topic: object) -> str:
    """Return ``topic`` if it is a legal topic name, else raise InvalidTopicError."""
    if topic.__class__ is str and topic in _valid_topics:
        return topic
    if not isinstance(topic, str):
        raise InvalidTopicError(
            f"topic must be a str, got {type(topic).__name__}", value=repr(topic)
        )
    if not topic:
        raise InvalidTopicError("topic must not be empty")
    if len(topic) > TOPIC_MAX_LENGTH:
        raise InvalidTopicError(
            f"topic {topic[:32]!r}... is {len(topic)} characters; at most {TOPIC_MAX_LENGTH}",
            value=topic,
            limit=TOPIC_MAX_LENGTH,
        )
    if not NAME_PATTERN.fullmatch(topic):
        raise InvalidTopicError(
            f"topic {topic!r} may only contain letters, digits, '%', '|', '_' and '-'",
            value=topic,
        )
    if len(_valid_topics) < 100_000:
        _valid_topics.add(topic)
    return topic


def validate_group(group: object) -> str:
    """Return ``group`` if it is a legal group name, else raise InvalidGroupError."""
    if not isinstance(group, str):
        raise InvalidGroupError(
            f"group must be a str, got {type(group).__name__}", value=repr(group)
        )
    if not group:
        raise InvalidGroupError("group must not be empty")
    if len(group) > GROUP_MAX_LENGTH:
        raise InvalidGroupError(
            f"group is {len(group)} characters; at most {GROUP_MAX_LENGTH}",
            value=group,
            limit=GROUP_MAX_LENGTH,
        )
    if not NAME_PATTERN.fullmatch(group):
        raise InvalidGroupError(
            f"group {group!r} may only contain letters, digits, '%', '|', '_' and '-'",
            value=group,
        )
    return group


def validate_instance_name(name: object) -> str:
    """Return ``name`` if it is a legal client instance name (one path level), else ConfigError."""
    if not isinstance(name, str):
        raise ConfigError(
            f"instance_name must be a str, got {type(name).__name__}", value=repr(name)
        )
    if len(name) > INSTANCE_NAME_MAX_LENGTH:
        raise ConfigError(
            f"instance_name is {len(name)} characters; at most {INSTANCE_NAME_MAX_LENGTH}",
            value=name,
            limit=INSTANCE_NAME_MAX_LENGTH,
        )
    if name in (".", "..") or not INSTANCE_NAME_PATTERN.fullmatch(name):
        raise ConfigError(
            f"instance_name {name!r} must be a non-empty name of letters, digits and "
            "'%|_.@:-' (no '/', not '.' or '..'): it names a directory under offset_store_dir",
            value=name,
        )
    return name


def check_trace_topic(topic: object) -> str:
    """Return ``topic`` if trace records may go there (``ClientConfig.trace_topic``): a
    legal name a client may write (``RMQ_SYS_TRACE_TOPIC`` or a topic of the user's
    own), else raise ConfigError naming the field."""
    try:
        return check_client_write_topic(validate_topic(topic))
    except (InvalidTopicError, PermissionDeniedError) as exc:
        raise ConfigError(
            f"trace_topic={topic!r} cannot hold trace records: {exc}; use the default "
            f"{TRACE_TOPIC!r} or a topic name of your own",
            field="trace_topic",
            value=repr(topic),
        ) from None


def retry_topic(group: str) -> str:
    """``%RETRY%<group>``: where ``group``'s failed messages wait to be consumed again."""
    return _group_topic(RETRY_GROUP_TOPIC_PREFIX, group)


def dlq_topic(group: str) -> str:
    """``%DLQ%<group>``: the dead-letter topic of ``group``."""
    return _group_topic(DLQ_GROUP_TOPIC_PREFIX, group)


def is_retry_topic(topic: str) -> bool:
    return topic.startswith(RETRY_GROUP_TOPIC_PREFIX)


def is_dlq_topic(topic: str) -> bool:
    return topic.startswith(DLQ_GROUP_TOPIC_PREFIX)


def is_system_topic(topic: str) -> bool:
    """One of the broker's own topics (``SYSTEM_TOPICS`` or a ``rmq_sys_`` name)."""
    return topic in SYSTEM_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIX)


def is_internal_topic(topic: str) -> bool:
    """A topic only the broker writes: a system, retry or dead-letter topic."""
    return is_system_topic(topic) or is_retry_topic(topic) or is_dlq_topic(topic)


def check_client_write_topic(topic: str) -> str:
    """Return ``topic`` if a client may send to it, else raise PermissionDeniedError."""
    if is_retry_topic(topic) or is_dlq_topic(topic):
        raise PermissionDeniedError(
            f"topic {topic!r} is a retry or dead-letter topic: only the broker writes it, "
            "when a consumer sends a message back; send to a topic of your own",
            topic=topic,
        )
    if is_system_topic(topic) and topic != TRACE_TOPIC:
        raise PermissionDeniedError(
            f"the topic {topic!r} is conflict with system topic (RocketMQ's words): the "
            f"broker uses it (system topics are {sorted(SYSTEM_TOPICS)} and "
            f"{SYSTEM_TOPIC_PREFIX}*); send to a topic of your own, and for delayed delivery "
            "set Message.delay_level or Message.deliver_at_ms",
            topic=topic,
        )
    return topic


def _group_topic(prefix: str, group: str) -> str:
    validate_group(group)
    topic = prefix + group
    if len(topic) > TOPIC_MAX_LENGTH:
        raise InvalidGroupError(
            f"group {group[:32]!r}... is too long for its topic {prefix}<group>: at most "
            f"{TOPIC_MAX_LENGTH - len(prefix)} characters",
            value=group,
            limit=TOPIC_MAX_LENGTH - len(prefix),
        )
    return validate_topic(topic)
