"""The broker's JSON config files: topics, subscription groups, consumer and delay offsets.

On-disk layout (RocketMQ's ``store/config/``), all UTF-8 JSON, pretty-printed::

    <store root>/config/
        topics.json               TopicsFile: data_version, topic_config_table {name: TopicConfig}
        subscriptionGroup.json    SubscriptionGroupsFile: data_version, subscription_group_table
        consumerOffset.json       ConsumerOffsetFile: offset_table
                                      {"<topic>@<group>": {queue_id: queue_offset}}
        delayOffset.json          DelayOffsetFile: offset_table {delay_level: queue_offset},
                                      deliver_at {low_offset, last_due_ms, last_offset}
                                      (progress of the deliver-at queue, schedule.py)

Every ``<name>`` may have two siblings: ``<name>.tmp`` (a save in progress, never read) and
``<name>.bak`` (the previous good version). JSON object keys are strings, so queue ids and delay
levels are written as ``"0"``, ``"1"``...; the msgspec schemas turn them back into ints on load.

Write protocol (``JsonFile.save``)::

    1. serialize the value (a msgspec Struct) to bytes
    2. write <name>.tmp, fsync it
    3. if <name> exists: os.replace(<name>, <name>.bak)
    4. os.replace(<name>.tmp, <name>)
    5. fsync the directory

A crash before step 4 leaves ``<name>`` (or, between steps 3 and 4, only ``<name>.bak``)
holding the previous version, which load finds. An ``OSError`` on any step raises ``StoreError``;
the table stays dirty so the next ``persist()`` tries again.

Load protocol (``JsonFile.load``): read ``<name>``; if it is missing, empty, not valid JSON or
fails schema validation (wrong shape, negative offsets, a key that disagrees with its record),
log a warning and read ``<name>.bak`` instead; if that fails too, log a warning and start empty
(``None``). When neither file exists (a fresh store) nothing is logged. Loading never raises for
a damaged file.

The tables are plain in-memory objects, not thread-safe: their owner serialises calls. Each has a
``dirty`` flag, set by every real change, and ``persist()`` writes only when it is set.
"""

from __future__ import annotations

import logging
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any, Final, Generic, TypeVar

import msgspec
from msgspec import Meta

from rayq.store.config import NonNegative
from rayq.store.errors import (
    ClosedError,
    ConfigError,
    InvalidMessageError,
    InvalidOffsetError,
    StoreError,
)
from rayq.store.json_file import JsonFile
from rayq.store.names import SCHEDULE_TOPIC as SCHEDULE_TOPIC  # re-exported
from rayq.store.names import validate_group, validate_topic

logger = logging.getLogger(__name__)

CONFIG_DIR_NAME: Final[str] = "config"
TOPICS_FILE_NAME: Final[str] = "topics.json"
SUBSCRIPTION_GROUP_FILE_NAME: Final[str] = "subscriptionGroup.json"
CONSUMER_OFFSET_FILE_NAME: Final[str] = "consumerOffset.json"
DELAY_OFFSET_FILE_NAME: Final[str] = "delayOffset.json"

# RocketMQ PermName bits.
PERM_READ: Final[int] = 4
PERM_WRITE: Final[int] = 2
PERM_INHERIT: Final[int] = 1
PERM_ALL: Final[int] = PERM_READ | PERM_WRITE | PERM_INHERIT

# Delayed messages wait in queue (level - 1) of SCHEDULE_TOPIC (defined with the other
# system topic names in store/names.py); delayOffset.json tracks each queue.
DELAY_LEVEL_MIN: Final[int] = 1

# Consumer offset keys are "<topic>@<group>"; legal names (names.py) never contain the separator.
OFFSET_KEY_SEPARATOR: Final[str] = "@"
QUEUE_OFFSET_UNKNOWN: Final[int] = -1

Name = Annotated[str, Meta(min_length=1)]
Perm = Annotated[int, Meta(ge=0, le=PERM_ALL)]
DelayLevel = Annotated[int, Meta(ge=DELAY_LEVEL_MIN)]

T = TypeVar("T", bound=msgspec.Struct)
C = TypeVar("C", bound=msgspec.Struct)


def is_readable(perm: int) -> bool:
    return perm & PERM_READ == PERM_READ


def is_writeable(perm: int) -> bool:
    return perm & PERM_WRITE == PERM_WRITE


def delay_level_to_queue_id(level: int) -> int:
    """Delay level 1 lives in queue 0 of ``SCHEDULE_TOPIC``, level 2 in queue 1, ..."""
    return level - DELAY_LEVEL_MIN


def queue_id_to_delay_level(queue_id: int) -> int:
    return queue_id + DELAY_LEVEL_MIN


# --- records and file schemas ------------------------------------------------------------------


class TopicConfig(msgspec.Struct, frozen=True, kw_only=True):
    """One topic (RocketMQ ``TopicConfig``)."""

    topic_name: Name
    read_queue_nums: NonNegative = 4
    write_queue_nums: NonNegative = 4
    perm: Perm = PERM_READ | PERM_WRITE
    order: bool = False
    topic_sys_flag: NonNegative = 0


class SubscriptionGroupConfig(msgspec.Struct, frozen=True, kw_only=True):
    """One consumer group (RocketMQ ``SubscriptionGroupConfig``)."""

    group_name: Name
    consume_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: NonNegative = 1
    retry_max_times: NonNegative = 16
    broker_id: NonNegative = 0
    which_broker_when_consume_slowly: NonNegative = 1
    notify_consumer_ids_changed_enable: bool = True
    consume_message_orderly: bool = False


def _check_keys_match(pairs: Iterable[tuple[str, str]]) -> None:
    """Raise ValueError (a schema failure for msgspec) when a table key differs from its record."""
    for key, name in pairs:
        if key != name:
            raise ValueError(f"key {key!r} holds a record named {name!r}")


class TopicsFile(msgspec.Struct, kw_only=True):
    """Schema of topics.json."""

    data_version: NonNegative
    topic_config_table: dict[str, TopicConfig]

    def __post_init__(self) -> None:
        _check_keys_match((k, v.topic_name) for k, v in self.topic_config_table.items())


class SubscriptionGroupsFile(msgspec.Struct, kw_only=True):
    """Schema of subscriptionGroup.json."""

    data_version: NonNegative
    subscription_group_table: dict[str, SubscriptionGroupConfig]

    def __post_init__(self) -> None:
        _check_keys_match((k, v.group_name) for k, v in self.subscription_group_table.items())


class ConsumerOffsetFile(msgspec.Struct, kw_only=True):
    """Schema of consumerOffset.json."""

    offset_table: dict[str, dict[NonNegative, NonNegative]]

    def __post_init__(self) -> None:
        for key in self.offset_table:
            split_offset_key(key)


class DeliverAtProgress(msgspec.Struct, frozen=True, kw_only=True):
    """How far the deliver-at queue of ``SCHEDULE_TOPIC`` was delivered (schedule.py).

    Every message below ``low_offset`` was delivered; so was every message at or above
    it whose (due time, queue offset) is at most (``last_due_ms``, ``last_offset``).
    """

    low_offset: NonNegative = 0
    last_due_ms: NonNegative = 0
    last_offset: Annotated[int, Meta(ge=-1)] = -1


class DelayOffsetFile(msgspec.Struct, kw_only=True):
    """Schema of delayOffset.json (``deliver_at`` is absent from files of older versions)."""

    offset_table: dict[DelayLevel, NonNegative]
    deliver_at: DeliverAtProgress = msgspec.field(default_factory=DeliverAtProgress)


def offset_key(topic: str, group: str) -> str:
    """``"<topic>@<group>"``; raises InvalidTopicError/InvalidGroupError for an illegal name."""
    return f"{validate_topic(topic)}{OFFSET_KEY_SEPARATOR}{validate_group(group)}"


def split_offset_key(key: str) -> tuple[str, str]:
    """``"<topic>@<group>"`` -> ``(topic, group)``; ValueError when the key is malformed."""
    topic, sep, group = key.partition(OFFSET_KEY_SEPARATOR)
    if not sep or not topic or not group or OFFSET_KEY_SEPARATOR in group:
        raise ValueError(f"offset key {key!r} is not '<topic>@<group>'")
    return topic, group


# --- tables --------------------------------------------------------------------------------------


class _Table(ABC, Generic[T]):
    """In-memory table backed by one ``JsonFile``; ``persist()`` writes only when ``dirty``."""

    def __init__(self, path: str | os.PathLike[str], schema: type[T]) -> None:
        self.file = JsonFile(path, schema)
        self.dirty = False

    def load(self) -> None:
        """Replace the contents with what is on disk (empty when nothing usable is there)."""
        self._restore(self.file.load())
        self.dirty = False

    def persist(self) -> bool:
        """Save if dirty; True when a file was written."""
        if not self.dirty:
            return False
        snapshot = self._snapshot()
        self.dirty = False
        try:
            self.file.save(snapshot)
        except BaseException:
            self.dirty = True
            raise
        return True

    @abstractmethod
    def _snapshot(self) -> T: ...

    @abstractmethod
    def _restore(self, value: T | None) -> None: ...


def _validated(record: C) -> C:
    """Check the Meta constraints (only checked by msgspec on decode) of a record built in code."""
    try:
        return msgspec.convert(msgspec.to_builtins(record), type(record))
    except msgspec.ValidationError as exc:
        raise ConfigError(f"invalid {type(record).__name__}: {exc}", value=repr(record)) from None


class _NamedConfigTable(_Table[T], Generic[T, C]):
    """Records keyed by their name, with a ``data_version`` bumped on every change."""

    def __init__(self, path: str | os.PathLike[str], schema: type[T]) -> None:
        super().__init__(path, schema)
        self._records: dict[str, C] = {}
        self.data_version = 0

    @staticmethod
    @abstractmethod
    def _name_of(record: C) -> str: ...

    def get(self, name: str) -> C | None:
        return self._records.get(name)

    def put(self, record: C) -> None:
        """Create or update; putting an identical record is not a change."""
        record = _validated(record)
        name = self._name_of(record)
        if self._records.get(name) == record:
            return
        self._records[name] = record
        self._changed()

    def delete(self, name: str) -> bool:
        if self._records.pop(name, None) is None:
            return False
        self._changed()
        return True

    def names(self) -> list[str]:
        return sorted(self._records)

    def __contains__(self, name: object) -> bool:
        return name in self._records

    def __len__(self) -> int:
        return len(self._records)

    def _changed(self) -> None:
        self.data_version += 1
        self.dirty = True

    def _sorted_records(self) -> dict[str, C]:
        return dict(sorted(self._records.items()))


class TopicConfigTable(_NamedConfigTable[TopicsFile, TopicConfig]):
    """topics.json: ``get(topic)``, ``put(cfg)``, ``delete(topic)``, ``topics()``."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__(path, TopicsFile)

    @staticmethod
    def _name_of(record: TopicConfig) -> str:
        return validate_topic(record.topic_name)

    def topics(self) -> list[str]:
        return self.names()

    def _snapshot(self) -> TopicsFile:
        return TopicsFile(data_version=self.data_version, topic_config_table=self._sorted_records())

    def _restore(self, value: TopicsFile | None) -> None:
        self._records = dict(value.topic_config_table) if value else {}
        self.data_version = value.data_version if value else 0


class SubscriptionGroupTable(_NamedConfigTable[SubscriptionGroupsFile, SubscriptionGroupConfig]):
    """subscriptionGroup.json: ``get(group)``, ``put(cfg)``, ``delete(group)``, ``groups()``."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__(path, SubscriptionGroupsFile)

    @staticmethod
    def _name_of(record: SubscriptionGroupConfig) -> str:
        return validate_group(record.group_name)

    def groups(self) -> list[str]:
        return self.names()

    def _snapshot(self) -> SubscriptionGroupsFile:
        table = self._sorted_records()
        return SubscriptionGroupsFile(
            data_version=self.data_version, subscription_group_table=table
        )

    def _restore(self, value: SubscriptionGroupsFile | None) -> None:
        self._records = dict(value.subscription_group_table) if value else {}
        self.data_version = value.data_version if value else 0


def _check_queue_offset(queue_offset: int, *, what: str = "queue_offset") -> None:
    if queue_offset < 0:
        raise InvalidOffsetError(f"{what}={queue_offset} must be >= 0", value=queue_offset, limit=0)


class ConsumerOffsetTable(_Table[ConsumerOffsetFile]):
    """consumerOffset.json: the next queue offset each group will consume, per topic and queue."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__(path, ConsumerOffsetFile)
        self._offsets: dict[str, dict[int, int]] = {}

    def commit(self, group: str, topic: str, queue_id: int, queue_offset: int) -> None:
        self.commit_many(group, topic, {queue_id: queue_offset})

    def commit_many(self, group: str, topic: str, queue_offsets: Mapping[int, int]) -> None:
        """Set several queues of one topic at once (an offset may move backwards: a reset)."""
        key = offset_key(topic, group)
        for queue_id, queue_offset in queue_offsets.items():
            _check_queue_offset(queue_id, what="queue_id")
            _check_queue_offset(queue_offset)
        if not queue_offsets:
            return
        queues = self._offsets.setdefault(key, {})
        for queue_id, queue_offset in queue_offsets.items():
            if queues.get(queue_id) != queue_offset:
                queues[queue_id] = queue_offset
                self.dirty = True

    def query(self, group: str, topic: str, queue_id: int) -> int:
        """The committed queue offset, or ``QUEUE_OFFSET_UNKNOWN`` (-1)."""
        queues = self._offsets.get(offset_key(topic, group), {})
        return queues.get(queue_id, QUEUE_OFFSET_UNKNOWN)

    def query_all(self, group: str, topic: str) -> dict[int, int]:
        return dict(self._offsets.get(offset_key(topic, group), {}))

    def compare_and_set(
        self, group: str, topic: str, queue_id: int, expected: int, new: int
    ) -> bool:
        """Commit ``new`` only if the current value is ``expected`` (-1: never committed)."""
        if self.query(group, topic, queue_id) != expected:
            return False
        self.commit(group, topic, queue_id, new)
        return True

    def groups_of(self, topic: str) -> list[str]:
        return sorted({g for t, g in map(split_offset_key, self._offsets) if t == topic})

    def topics_of(self, group: str) -> list[str]:
        return sorted({t for t, g in map(split_offset_key, self._offsets) if g == group})

    def remove_group(self, group: str) -> int:
        """Forget every topic's offsets of ``group``; returns how many topics were removed."""
        return self._remove_where(lambda _topic, g: g == group)

    def remove_topic(self, topic: str) -> int:
        """Forget every group's offsets on ``topic``; returns how many groups were removed."""
        return self._remove_where(lambda t, _group: t == topic)

    def _remove_where(self, matches: Callable[[str, str], bool]) -> int:
        doomed = [key for key in self._offsets if matches(*split_offset_key(key))]
        for key in doomed:
            del self._offsets[key]
        self.dirty = self.dirty or bool(doomed)
        return len(doomed)

    def _snapshot(self) -> ConsumerOffsetFile:
        table = {k: dict(sorted(q.items())) for k, q in sorted(self._offsets.items()) if q}
        return ConsumerOffsetFile(offset_table=table)

    def _restore(self, value: ConsumerOffsetFile | None) -> None:
        table = value.offset_table if value else {}
        self._offsets = {key: dict(queues) for key, queues in table.items()}


def _check_delay_level(level: int) -> None:
    if level < DELAY_LEVEL_MIN:
        raise InvalidMessageError(
            f"delay level {level} must be >= {DELAY_LEVEL_MIN}", value=level, limit=DELAY_LEVEL_MIN
        )


class DelayOffsetTable(_Table[DelayOffsetFile]):
    """delayOffset.json: per delay level, the queue offset reached in ``SCHEDULE_TOPIC``'s queue."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__(path, DelayOffsetFile)
        self._offsets: dict[int, int] = {}
        self._deliver_at = DeliverAtProgress()

    def get(self, level: int) -> int:
        """The queue offset reached for ``level``; 0 when unknown."""
        _check_delay_level(level)
        return self._offsets.get(level, 0)

    def set(self, level: int, queue_offset: int) -> None:
        _check_delay_level(level)
        _check_queue_offset(queue_offset)
        if self._offsets.get(level) != queue_offset:
            self._offsets[level] = queue_offset
            self.dirty = True

    def levels(self) -> list[int]:
        return sorted(self._offsets)

    @property
    def deliver_at(self) -> DeliverAtProgress:
        """Progress of the deliver-at queue (all zero on a fresh store)."""
        return self._deliver_at

    def set_deliver_at(self, progress: DeliverAtProgress) -> None:
        progress = _validated(progress)
        if progress != self._deliver_at:
            self._deliver_at = progress
            self.dirty = True

    def _snapshot(self) -> DelayOffsetFile:
        return DelayOffsetFile(
            offset_table=dict(sorted(self._offsets.items())), deliver_at=self._deliver_at
        )

    def _restore(self, value: DelayOffsetFile | None) -> None:
        self._offsets = dict(value.offset_table) if value else {}
        self._deliver_at = value.deliver_at if value else DeliverAtProgress()


# --- facade --------------------------------------------------------------------------------------


class ConfigStore:
    """``<root>/config/`` and its four tables, loaded on construction."""

    def __init__(self, root_dir: str | os.PathLike[str]) -> None:
        config_dir = self.config_dir = Path(root_dir) / CONFIG_DIR_NAME
        try:
            config_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create {config_dir}: {exc}", path=str(config_dir)) from exc
        self.topics = TopicConfigTable(config_dir / TOPICS_FILE_NAME)
        self.subscription_groups = SubscriptionGroupTable(config_dir / SUBSCRIPTION_GROUP_FILE_NAME)
        self.consumer_offsets = ConsumerOffsetTable(config_dir / CONSUMER_OFFSET_FILE_NAME)
        self.delay_offsets = DelayOffsetTable(config_dir / DELAY_OFFSET_FILE_NAME)
        self._closed = False
        for table in self._tables():
            table.load()

    def _tables(self) -> tuple[_Table[Any], ...]:
        return (self.topics, self.subscription_groups, self.consumer_offsets, self.delay_offsets)

    def persist_all(self) -> int:
        """Write every dirty table; returns how many files were written."""
        if self._closed:
            raise ClosedError(f"config store {self.config_dir} is closed")
        return sum(table.persist() for table in self._tables())

    def close(self) -> None:
        """Persist what is dirty, then refuse further ``persist_all``; closing twice is harmless."""
        if self._closed:
            return
        self.persist_all()
        self._closed = True

    def __enter__(self) -> ConfigStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
