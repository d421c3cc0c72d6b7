"""The broker's config tables in memory: topics, subscription groups, consumer and delay
offsets, each over one JSON file (layout, load policy and salvage in ``table_files.py``).

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
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Generic, TypeVar

import msgspec

from rayq.actors.server.table_files import (
    CONFIG_DIR_NAME,
    CONSUMER_OFFSET_FILE_NAME,
    DELAY_LEVEL_MAX,
    DELAY_LEVEL_MIN,
    DELAY_OFFSET_FILE_NAME,
    QUEUE_ID_MAX,
    QUEUE_OFFSET_MAX,
    QUEUE_OFFSET_UNKNOWN,
    SUBSCRIPTION_GROUP_FILE_NAME,
    TOPICS_FILE_NAME,
    ConsumerOffsetFile,
    DelayOffsetFile,
    DeliverAtProgress,
    SubscriptionGroupConfig,
    SubscriptionGroupsFile,
    TopicConfig,
    TopicsFile,
    check_acked_ranges,
    offset_key,
    salvage_consumer_offsets,
    salvage_delay_offsets,
    salvage_groups,
    salvage_topics,
    split_offset_key,
)
from rayq.store.config import check_fields
from rayq.store.errors import (
    ClosedError,
    ConfigError,
    InvalidMessageError,
    InvalidOffsetError,
    RayqError,
    StoreError,
)
from rayq.store.json_file import JsonFile, SalvageFn
from rayq.store.names import validate_group, validate_topic

logger = logging.getLogger(__name__)

T = TypeVar("T", bound=msgspec.Struct)
C = TypeVar("C", bound=msgspec.Struct)

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
        super().__init__(path, TopicsFile, salvage_topics)

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
        super().__init__(path, SubscriptionGroupsFile, salvage_groups)

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
    """consumerOffset.json: the next queue offset each group will consume, per topic and queue,
    and the ranges past it the group consumed already (``acked``, from push consumers)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__(path, ConsumerOffsetFile, salvage_consumer_offsets)
        self._offsets: dict[str, dict[int, int]] = {}
        self._acked: dict[str, dict[int, list[tuple[int, int]]]] = {}

    def commit(self, group: str, topic: str, queue_id: int, queue_offset: int) -> None:
        self.commit_many(group, topic, {queue_id: queue_offset})

    def commit_many(
        self,
        group: str,
        topic: str,
        queue_offsets: Mapping[int, int],
        acked: Mapping[int, Any] | None = None,
    ) -> None:
        """Set several queues of one topic at once (an offset may move backwards: a reset),
        each with its ``acked`` ranges past the offset (none given: none kept).

        All or nothing: InvalidOffsetError for any bad queue id, offset or range (or ranges
        of a queue not committed), before any change."""
        key = offset_key(topic, group)
        if not isinstance(queue_offsets, Mapping):
            raise InvalidOffsetError(
                f"queue offsets must be a mapping of queue id to offset, got "
                f"{type(queue_offsets).__name__}",
                value=repr(queue_offsets),
            )
        checked = {_check_queue_id(q): _check_queue_offset(o) for q, o in queue_offsets.items()}
        ranges = self._check_acked(checked, acked or {})
        if not checked:
            return
        queues = self._offsets.setdefault(key, {})
        kept = self._acked.setdefault(key, {})
        for queue_id, queue_offset in checked.items():
            if queues.get(queue_id) != queue_offset:
                queues[queue_id] = queue_offset
                self.dirty = True
            new = ranges.get(queue_id, [])
            if kept.get(queue_id, []) != new:
                self.dirty = True
                if new:
                    kept[queue_id] = new
                else:
                    kept.pop(queue_id, None)

    @staticmethod
    def _check_acked(
        offsets: dict[int, int], acked: Mapping[int, Any]
    ) -> dict[int, list[tuple[int, int]]]:
        out = {}
        for queue_id, ranges in acked.items():
            if queue_id not in offsets:
                raise InvalidOffsetError(
                    f"acked ranges for queue {queue_id!r} come without its offset; commit "
                    "them together",
                    value=repr(queue_id),
                )
            out[queue_id] = check_acked_ranges(offsets[queue_id], ranges, InvalidOffsetError)
        return {q: r for q, r in out.items() if r}

    def acked(self, group: str, topic: str) -> dict[int, list[tuple[int, int]]]:
        """Per queue id, the ranges past its committed offset the group consumed already."""
        return {q: list(r) for q, r in self._acked.get(offset_key(topic, group), {}).items()}

    def query(self, group: str, topic: str, queue_id: int) -> int:
        """The committed queue offset, or ``QUEUE_OFFSET_UNKNOWN`` (-1)."""
        queues = self._offsets.get(offset_key(topic, group), {})
        return queues.get(queue_id, QUEUE_OFFSET_UNKNOWN)

    def query_all(self, group: str, topic: str) -> dict[int, int]:
        return dict(self._offsets.get(offset_key(topic, group), {}))

    def entries(self) -> list[tuple[str, str, dict[int, int]]]:
        """Every (group, topic, {queue id: committed offset}) held."""
        out = []
        for key, queues in self._offsets.items():
            topic, group = split_offset_key(key)
            out.append((group, topic, dict(queues)))
        return out

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
            self._acked.pop(key, None)
        self.dirty = self.dirty or bool(doomed)
        return len(doomed)

    def _snapshot(self) -> ConsumerOffsetFile:
        table = {k: dict(sorted(q.items())) for k, q in sorted(self._offsets.items()) if q}
        acked = {
            k: {q: list(r) for q, r in sorted(qs.items())}
            for k, qs in sorted(self._acked.items())
            if qs and k in table
        }
        return ConsumerOffsetFile(offset_table=table, acked_table=acked)

    def _restore(self, value: ConsumerOffsetFile | None) -> None:
        table = value.offset_table if value else {}
        self._offsets = {key: dict(queues) for key, queues in table.items()}
        acked = value.acked_table if value else {}
        self._acked = {
            k: {q: [(lo, hi) for lo, hi in rs] for q, rs in qs.items()} for k, qs in acked.items()
        }


def _check_delay_level(level: object) -> int:
    return _checked_int(level, "delay level", DELAY_LEVEL_MIN, DELAY_LEVEL_MAX, InvalidMessageError)


class DelayOffsetTable(_Table[DelayOffsetFile]):
    """delayOffset.json: per delay level, the queue offset reached in ``SCHEDULE_TOPIC``'s queue."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__(path, DelayOffsetFile, salvage_delay_offsets)
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
