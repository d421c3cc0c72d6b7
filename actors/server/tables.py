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
    3. if <name> exists (and load did not find it damaged): os.replace(<name>, <name>.bak)
    4. os.replace(<name>.tmp, <name>)
    5. fsync the directory

A crash before step 4 leaves ``<name>`` (or, between steps 3 and 4, only ``<name>.bak``)
holding the previous version, which load finds. An ``OSError`` on any step raises ``StoreError``;
the table stays dirty so the next ``persist()`` tries again.

Load protocol (``JsonFile.load``, policy in ``rayq.store.json_file``): read ``<name>``; if it
is missing, empty, not valid JSON or fails schema validation, log a warning, copy it aside as
``<name>.damaged-<ms>`` and read ``<name>.bak``. If ``.bak`` fails too, a table **never silently
starts empty** (one bad commit once erased every group's offsets this way). Instead:

- both damaged files are copied aside (``<name>.damaged-<ms>``, ``<name>.bak.damaged-<ms>``);
- each table salvages entry by entry (``_salvage_*`` below: a topic, a group, one queue's
  offset, one delay level), from ``<name>`` first, else ``.bak``: valid entries are kept, each
  bad one is dropped and logged at ERROR with the file name, and the table is marked dirty so
  the salvaged content is written back on the next persist;
- if nothing at all can be salvaged from the existing file(s), loading raises ``StoreError``
  naming the files, the kept copies and the fix (restore a copy as ``<name>``, or delete
  ``<name>`` and ``<name>.bak`` to start empty on purpose), and the broker does not start.

When neither file exists (a fresh store) the table starts empty and nothing is logged.

Mutators validate before changing anything, so nothing a load would refuse is ever persisted:
queue ids are ints in 0..2**31-1 and queue offsets ints in 0..2**63-1 (bool and float refused,
``InvalidOffsetError``); a batch (``commit_many``) is all or nothing; records passed to ``put``
must be the table's record type and meet its constraints (``ConfigError``).

The tables are plain in-memory objects, not thread-safe: their owner serialises calls. Each has a
``dirty`` flag, set by every real change, and ``persist()`` writes only when it is set.
"""

from __future__ import annotations

import logging
import operator
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any, Final, Generic, TypeVar

import msgspec
from msgspec import Meta

from rayq.store.config import NonNegative, check_fields
from rayq.store.errors import (
    ClosedError,
    ConfigError,
    InvalidMessageError,
    InvalidOffsetError,
    RayqError,
    StoreError,
)
from rayq.store.json_file import JsonFile, Salvaged, SalvageFn
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

# Delayed messages wait in queue (level - 1) of this topic; delayOffset.json tracks each queue.
SCHEDULE_TOPIC: Final[str] = "SCHEDULE_TOPIC_XXXX"
DELAY_LEVEL_MIN: Final[int] = 1
DELAY_LEVEL_MAX: Final[int] = 2**31 - 1
QUEUE_ID_MAX: Final[int] = 2**31 - 1
QUEUE_OFFSET_MAX: Final[int] = 2**63 - 1

# Consumer offset keys are "<topic>@<group>"; legal names (names.py) never contain the separator.
OFFSET_KEY_SEPARATOR: Final[str] = "@"
QUEUE_OFFSET_UNKNOWN: Final[int] = -1

Name = Annotated[str, Meta(min_length=1)]
Perm = Annotated[int, Meta(ge=0, le=PERM_ALL)]
DelayLevel = Annotated[int, Meta(ge=DELAY_LEVEL_MIN, le=DELAY_LEVEL_MAX)]
QueueId = Annotated[int, Meta(ge=0, le=QUEUE_ID_MAX)]
QueueOffset = Annotated[int, Meta(ge=0, le=QUEUE_OFFSET_MAX)]
Count = Annotated[int, Meta(ge=0, le=2**31 - 1)]  # queue numbers, retry counts, flags

T = TypeVar("T", bound=msgspec.Struct)
C = TypeVar("C", bound=msgspec.Struct)


def is_readable(perm: int) -> bool:
    return perm & PERM_READ == PERM_READ


def is_writeable(perm: int) -> bool:
    return perm & PERM_WRITE == PERM_WRITE


# --- records and file schemas ------------------------------------------------------------------


class TopicConfig(msgspec.Struct, frozen=True, kw_only=True):
    """One topic (RocketMQ ``TopicConfig``)."""

    topic_name: Name
    read_queue_nums: Count = 4
    write_queue_nums: Count = 4
    perm: Perm = PERM_READ | PERM_WRITE
    order: bool = False
    topic_sys_flag: Count = 0


class SubscriptionGroupConfig(msgspec.Struct, frozen=True, kw_only=True):
    """One consumer group (RocketMQ ``SubscriptionGroupConfig``)."""

    group_name: Name
    consume_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: Count = 1
    retry_max_times: Count = 16
    broker_id: Count = 0
    which_broker_when_consume_slowly: Count = 1
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

    offset_table: dict[str, dict[QueueId, QueueOffset]]

    def __post_init__(self) -> None:
        for key in self.offset_table:
            split_offset_key(key)


class DeliverAtProgress(msgspec.Struct, frozen=True, kw_only=True):
    """How far the deliver-at queue of ``SCHEDULE_TOPIC`` was delivered (schedule.py).

    Every message below ``low_offset`` was delivered; so was every message at or above
    it whose (due time, queue offset) is at most (``last_due_ms``, ``last_offset``).
    """

    low_offset: QueueOffset = 0
    last_due_ms: QueueOffset = 0
    last_offset: Annotated[int, Meta(ge=-1, le=QUEUE_OFFSET_MAX)] = -1


class DelayOffsetFile(msgspec.Struct, kw_only=True):
    """Schema of delayOffset.json (``deliver_at`` is absent from files of older versions)."""

    offset_table: dict[DelayLevel, QueueOffset]
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

    def __init__(
        self, path: str | os.PathLike[str], schema: type[T], salvage: SalvageFn[T]
    ) -> None:
        self.file = JsonFile(path, schema, salvage=salvage)
        self.dirty = False

    def load(self) -> None:
        """Replace the contents with what is on disk: empty only for a fresh store; salvaged
        (and dirty, to be written back) or StoreError when both files are damaged."""
        self._restore(self.file.load())
        self.dirty = self.file.needs_rewrite

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


def _validated(record: C, record_type: type[C]) -> C:
    """``record`` if it is a ``record_type`` meeting its Meta constraints (msgspec checks them
    only on decode, not for a record built in code), else ConfigError naming the field."""
    if not isinstance(record, record_type):
        raise ConfigError(
            f"expected a {record_type.__name__}, got {type(record).__name__}", value=repr(record)
        )
    check_fields(record)
    return record


class _NamedConfigTable(_Table[T], Generic[T, C]):
    """Records keyed by their name, with a ``data_version`` bumped on every change."""

    record_type: type[C]

    def __init__(
        self, path: str | os.PathLike[str], schema: type[T], salvage: SalvageFn[T]
    ) -> None:
        super().__init__(path, schema, salvage)
        self._records: dict[str, C] = {}
        self.data_version = 0

    @staticmethod
    @abstractmethod
    def _name_of(record: C) -> str: ...

    def get(self, name: str) -> C | None:
        return self._records.get(name)

    def put(self, record: C) -> None:
        """Create or update; putting an identical record is not a change."""
        record = _validated(record, self.record_type)
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

    record_type = TopicConfig

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__(path, TopicsFile, _salvage_topics)

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

    record_type = SubscriptionGroupConfig

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__(path, SubscriptionGroupsFile, _salvage_groups)

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


def _checked_int(value: object, what: str, low: int, high: int, error: type[RayqError]) -> int:
    """``value`` as a plain int in ``low..high`` (numpy ints too; bool, float and str refused)."""
    try:
        number = None if isinstance(value, bool) else operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        number = None
    if number is None or not low <= number <= high:
        raise error(
            f"{what} must be an int in {low}..{high}, got {type(value).__name__} {value!r}",
            value=repr(value),
            limit=high,
        )
    return number


def _check_queue_id(queue_id: object) -> int:
    return _checked_int(queue_id, "queue_id", 0, QUEUE_ID_MAX, InvalidOffsetError)


def _check_queue_offset(queue_offset: object) -> int:
    return _checked_int(queue_offset, "queue_offset", 0, QUEUE_OFFSET_MAX, InvalidOffsetError)


class ConsumerOffsetTable(_Table[ConsumerOffsetFile]):
    """consumerOffset.json: the next queue offset each group will consume, per topic and queue."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__(path, ConsumerOffsetFile, _salvage_consumer_offsets)
        self._offsets: dict[str, dict[int, int]] = {}

    def commit(self, group: str, topic: str, queue_id: int, queue_offset: int) -> None:
        self.commit_many(group, topic, {queue_id: queue_offset})

    def commit_many(self, group: str, topic: str, queue_offsets: Mapping[int, int]) -> None:
        """Set several queues of one topic at once (an offset may move backwards: a reset).

        All or nothing: InvalidOffsetError for any bad queue id or offset, before any change."""
        key = offset_key(topic, group)
        if not isinstance(queue_offsets, Mapping):
            raise InvalidOffsetError(
                f"queue offsets must be a mapping of queue id to offset, got "
                f"{type(queue_offsets).__name__}",
                value=repr(queue_offsets),
            )
        checked = {_check_queue_id(q): _check_queue_offset(o) for q, o in queue_offsets.items()}
        if not checked:
            return
        queues = self._offsets.setdefault(key, {})
        for queue_id, queue_offset in checked.items():
            if queues.get(queue_id) != queue_offset:
                queues[queue_id] = queue_offset
                self.dirty = True

    def query(self, group: str, topic: str, queue_id: int) -> int:
        """The committed queue offset, or ``QUEUE_OFFSET_UNKNOWN`` (-1)."""
        queues = self._offsets.get(offset_key(topic, group), {})
        return queues.get(queue_id, QUEUE_OFFSET_UNKNOWN)

    def query_all(self, group: str, topic: str) -> dict[int, int]:
        return dict(self._offsets.get(offset_key(topic, group), {}))

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


def _check_delay_level(level: object) -> int:
    return _checked_int(level, "delay level", DELAY_LEVEL_MIN, DELAY_LEVEL_MAX, InvalidMessageError)


class DelayOffsetTable(_Table[DelayOffsetFile]):
    """delayOffset.json: per delay level, the queue offset reached in ``SCHEDULE_TOPIC``'s queue."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__(path, DelayOffsetFile, _salvage_delay_offsets)
        self._offsets: dict[int, int] = {}
        self._deliver_at = DeliverAtProgress()

    def get(self, level: int) -> int:
        """The queue offset reached for ``level``; 0 when unknown."""
        return self._offsets.get(_check_delay_level(level), 0)

    def set(self, level: int, queue_offset: int) -> None:
        level = _check_delay_level(level)
        queue_offset = _check_queue_offset(queue_offset)
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
        progress = _validated(progress, DeliverAtProgress)
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


# --- salvage (both files damaged; see the module docstring) ------------------------------------


def _salvage_topics(document: Any) -> Salvaged[TopicsFile] | None:
    kept, dropped, version = _salvage_named(
        document, "topic_config_table", TopicConfig, "topic_name", validate_topic
    )
    if kept is None:
        return None
    value = TopicsFile(data_version=version, topic_config_table=kept)
    return Salvaged(value, len(kept), dropped)


def _salvage_groups(document: Any) -> Salvaged[SubscriptionGroupsFile] | None:
    kept, dropped, version = _salvage_named(
        document, "subscription_group_table", SubscriptionGroupConfig, "group_name", validate_group
    )
    if kept is None:
        return None
    value = SubscriptionGroupsFile(data_version=version, subscription_group_table=kept)
    return Salvaged(value, len(kept), dropped)


def _salvage_named(
    document: Any,
    table_field: str,
    record_type: type[C],
    name_field: str,
    validate_name: Callable[[object], str],
) -> tuple[dict[str, C] | None, list[str], int]:
    """Valid records of ``document[table_field]`` by name, reasons for the dropped ones, and a
    data version one past the file's (so clients see a change)."""
    table = document.get(table_field) if isinstance(document, dict) else None
    if not isinstance(table, dict):
        return None, [], 0
    kept: dict[str, C] = {}
    dropped: list[str] = []
    for key, raw in table.items():
        try:
            record = msgspec.convert(raw, record_type)
            validate_name(key)
            if getattr(record, name_field) != key:
                raise ValueError(
                    f"key {key!r} holds a record named {getattr(record, name_field)!r}"
                )
        except (msgspec.ValidationError, RayqError, ValueError) as exc:
            dropped.append(f"{table_field}[{key!r}] = {raw!r}: {exc}")
            continue
        kept[key] = record
    version = document.get("data_version")
    version = version + 1 if type(version) is int and 0 <= version < 2**62 else 1
    return kept, dropped, version


def _salvage_consumer_offsets(document: Any) -> Salvaged[ConsumerOffsetFile] | None:
    table = document.get("offset_table") if isinstance(document, dict) else None
    if not isinstance(table, dict):
        return None
    kept: dict[str, dict[int, int]] = {}
    dropped: list[str] = []
    for key, queues in table.items():
        try:
            topic, group = split_offset_key(key)
            offset_key(topic, group)
            if not isinstance(queues, dict):
                raise ValueError(f"expected {{queue id: offset}}, got {type(queues).__name__}")
        except (RayqError, ValueError) as exc:
            dropped.append(f"offset_table[{key!r}]: {exc}")
            continue
        good = _salvage_int_map(queues, QUEUE_ID_MAX, f"offset_table[{key!r}]", dropped)
        if good:
            kept[key] = good
    count = sum(len(queues) for queues in kept.values())
    return Salvaged(ConsumerOffsetFile(offset_table=kept), count, dropped)


def _salvage_delay_offsets(document: Any) -> Salvaged[DelayOffsetFile] | None:
    table = document.get("offset_table") if isinstance(document, dict) else None
    if not isinstance(table, dict):
        return None
    dropped: list[str] = []
    levels = _salvage_int_map(table, DELAY_LEVEL_MAX, "offset_table", dropped, low=DELAY_LEVEL_MIN)
    progress = DeliverAtProgress()
    count = len(levels)
    if "deliver_at" in document:
        try:
            progress = msgspec.convert(document["deliver_at"], DeliverAtProgress)
            count += 1
        except msgspec.ValidationError as exc:
            dropped.append(f"deliver_at = {document['deliver_at']!r}: {exc} (restarts at 0)")
    return Salvaged(DelayOffsetFile(offset_table=levels, deliver_at=progress), count, dropped)


def _salvage_int_map(
    raw: dict[Any, Any], key_max: int, where: str, dropped: list[str], *, low: int = 0
) -> dict[int, int]:
    """The valid ``{"<int key>": offset}`` entries of ``raw``; the rest go to ``dropped``."""
    good: dict[int, int] = {}
    for text, value in raw.items():
        key = int(text) if isinstance(text, str) and text.isascii() and text.isdigit() else -1
        offset_ok = type(value) is int and 0 <= value <= QUEUE_OFFSET_MAX
        if not low <= key <= key_max or not offset_ok:
            dropped.append(f"{where}[{text!r}] = {value!r}: not an int key in {low}..{key_max} "
                           f"with an int offset in 0..{QUEUE_OFFSET_MAX}")  # fmt: skip
            continue
        good[key] = value
    return good


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
