"""The broker's JSON config files on disk: their layout, schemas and salvage.

On-disk layout (RocketMQ's ``store/config/``), all UTF-8 JSON, pretty-printed::

    <store root>/config/
        topics.json               TopicsFile: data_version, topic_config_table {name: TopicConfig}
        subscriptionGroup.json    SubscriptionGroupsFile: data_version, subscription_group_table
        consumerOffset.json       ConsumerOffsetFile: offset_table
                                      {"<topic>@<group>": {queue_id: queue_offset}},
                                      acked_table {"<topic>@<group>": {queue_id:
                                      [[start, end], ...]}} (absent in older files)
        delayOffset.json          DelayOffsetFile: offset_table {delay_level: queue_offset},
                                      deliver_at {low_offset, last_due_ms, last_offset}
                                      (progress of the deliver-at queue, schedule.py)

Every ``<name>`` may have two siblings: ``<name>.tmp`` (a save in progress, never read) and
``<name>.bak`` (the previous good version). JSON object keys are strings, so queue ids and delay
levels are written as ``"0"``, ``"1"``...; the msgspec schemas turn them back into ints on load.

Writes go through ``rayq.store.json_file.JsonFile.save`` (``.tmp``, fsync, rotate to
``.bak``, rename, fsync the directory; its module docstring has the steps and what a crash
at each leaves). An ``OSError`` raises ``StoreError``; the table stays dirty so the next
``persist()`` tries again.

Load protocol (``JsonFile.load``, policy in ``rayq.store.json_file``): read ``<name>``; if it
is missing, empty, not valid JSON or fails schema validation, log a warning, copy it aside as
``<name>.damaged-<ms>`` and read ``<name>.bak``. If ``.bak`` fails too, a table **never silently
starts empty** (one bad commit once erased every group's offsets this way). Instead:

- both damaged files are copied aside (``<name>.damaged-<ms>``, ``<name>.bak.damaged-<ms>``);
- each table salvages entry by entry (``salvage_*`` below: a topic, a group, one queue's
  offset, one delay level), from ``<name>`` first, else ``.bak``: valid entries are kept, each
  bad one is dropped and logged at ERROR with the file name, and the table is marked dirty so
  the salvaged content is written back on the next persist;
- if nothing at all can be salvaged from the existing file(s), loading raises ``StoreError``
  naming the files, the kept copies and the fix (restore a copy as ``<name>``, or delete
  ``<name>`` and ``<name>.bak`` to start empty on purpose), and the broker does not start.

When neither file exists (a fresh store) the table starts empty and nothing is logged.

The in-memory tables over these files are in ``tables.py``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Annotated, Any, Final, TypeVar

import msgspec
from msgspec import Meta

from rayq.actors.protocol.records import (
    ACKED_RANGES_MAX as ACKED_RANGES_MAX,
)
from rayq.actors.protocol.records import (
    PERM_ALL as PERM_ALL,
)
from rayq.actors.protocol.records import (
    PERM_INHERIT as PERM_INHERIT,
)
from rayq.actors.protocol.records import (
    PERM_READ as PERM_READ,
)
from rayq.actors.protocol.records import (
    PERM_WRITE as PERM_WRITE,
)
from rayq.actors.protocol.records import (
    QUEUE_ID_MAX as QUEUE_ID_MAX,
)
from rayq.actors.protocol.records import (
    QUEUE_OFFSET_MAX as QUEUE_OFFSET_MAX,
)
from rayq.actors.protocol.records import (
    AckedRange as AckedRange,
)
from rayq.actors.protocol.records import (
    AckedRanges as AckedRanges,
)
from rayq.actors.protocol.records import (
    Count as Count,
)
from rayq.actors.protocol.records import (
    Name as Name,
)
from rayq.actors.protocol.records import (
    Perm as Perm,
)
from rayq.actors.protocol.records import (
    QueueId as QueueId,
)
from rayq.actors.protocol.records import (
    QueueOffset as QueueOffset,
)
from rayq.actors.protocol.records import (
    SubscriptionGroupConfig as SubscriptionGroupConfig,
)
from rayq.actors.protocol.records import (
    TopicConfig as TopicConfig,
)
from rayq.actors.protocol.records import (
    check_acked_ranges as check_acked_ranges,
)
from rayq.actors.protocol.records import (
    check_broadcast as check_broadcast,
)
from rayq.actors.protocol.records import (
    is_readable as is_readable,
)
from rayq.actors.protocol.records import (
    is_writeable as is_writeable,
)
from rayq.store.config import NonNegative
from rayq.store.errors import RayqError
from rayq.store.json_file import Salvaged
from rayq.store.names import SCHEDULE_TOPIC as SCHEDULE_TOPIC  # re-exported
from rayq.store.names import validate_group, validate_topic

logger = logging.getLogger(__name__)

CONFIG_DIR_NAME: Final[str] = "config"
TOPICS_FILE_NAME: Final[str] = "topics.json"
SUBSCRIPTION_GROUP_FILE_NAME: Final[str] = "subscriptionGroup.json"
CONSUMER_OFFSET_FILE_NAME: Final[str] = "consumerOffset.json"
DELAY_OFFSET_FILE_NAME: Final[str] = "delayOffset.json"


# Delayed messages wait in queue (level - 1) of this topic; delayOffset.json tracks each queue.
DELAY_LEVEL_MIN: Final[int] = 1
DELAY_LEVEL_MAX: Final[int] = 2**31 - 1


# Consumer offset keys are "<topic>@<group>"; legal names (names.py) never contain the separator.
OFFSET_KEY_SEPARATOR: Final[str] = "@"
QUEUE_OFFSET_UNKNOWN: Final[int] = -1

DelayLevel = Annotated[int, Meta(ge=DELAY_LEVEL_MIN, le=DELAY_LEVEL_MAX)]

T = TypeVar("T", bound=msgspec.Struct)
C = TypeVar("C", bound=msgspec.Struct)


# --- records and file schemas ------------------------------------------------------------------


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
    """Schema of consumerOffset.json (``acked_table`` is absent from files of older
    versions): per queue, the next offset to consume and the ranges past it consumed
    already (``check_acked_ranges``)."""

    offset_table: dict[str, dict[QueueId, QueueOffset]]
    acked_table: dict[str, dict[QueueId, AckedRanges]] = {}

    def __post_init__(self) -> None:
        for key in self.offset_table:
            split_offset_key(key)
        for key, queues in self.acked_table.items():
            offsets = self.offset_table.get(key, {})
            for queue_id, ranges in queues.items():
                if queue_id not in offsets:
                    raise ValueError(f"acked_table[{key!r}][{queue_id}] has no offset")
                check_acked_ranges(offsets[queue_id], ranges, ValueError)


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


# --- salvage (both files damaged; see the module docstring) ------------------------------------


def salvage_topics(document: Any) -> Salvaged[TopicsFile] | None:
    kept, dropped, version = _salvage_named(
        document, "topic_config_table", TopicConfig, "topic_name", validate_topic
    )
    if kept is None:
        return None
    value = TopicsFile(data_version=version, topic_config_table=kept)
    return Salvaged(value, len(kept), dropped)


def salvage_groups(document: Any) -> Salvaged[SubscriptionGroupsFile] | None:
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


def salvage_consumer_offsets(document: Any) -> Salvaged[ConsumerOffsetFile] | None:
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
    acked = _salvage_acked(document.get("acked_table"), kept, dropped)
    return Salvaged(ConsumerOffsetFile(offset_table=kept, acked_table=acked), count, dropped)


def _salvage_acked(
    raw: Any, offsets: dict[str, dict[int, int]], dropped: list[str]
) -> dict[str, dict[int, list[tuple[int, int]]]]:
    """The valid acked ranges of ``raw`` for queues kept in ``offsets`` (a dropped one only
    means its messages past the offset come again)."""
    kept: dict[str, dict[int, list[tuple[int, int]]]] = {}
    for key, queues in raw.items() if isinstance(raw, dict) else ():
        for text, ranges in queues.items() if isinstance(queues, dict) else ():
            queue_id = int(text) if isinstance(text, str) and text.isdigit() else -1
            try:
                if queue_id not in offsets.get(key, {}):
                    raise ValueError("no offset kept for this queue")
                good = check_acked_ranges(offsets[key][queue_id], ranges, ValueError)
            except ValueError as exc:
                dropped.append(f"acked_table[{key!r}][{text!r}]: {exc}")
                continue
            kept.setdefault(key, {})[queue_id] = good
    return kept


def salvage_delay_offsets(document: Any) -> Salvaged[DelayOffsetFile] | None:
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
            dropped.append(
                f"{where}[{text!r}] = {value!r}: not an int key in {low}..{key_max} "
                f"with an int offset in 0..{QUEUE_OFFSET_MAX}"
            )
            continue
        good[key] = value
    return good
