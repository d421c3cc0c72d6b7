"""Records of the client contract that the broker also keeps on disk: topic and group
configs (RocketMQ ``TopicConfig``, ``SubscriptionGroupConfig``), permission bits, and
the ranges a consumer acknowledges past its committed offset. The broker's files that
hold them are described in ``rayq.actors.server.table_files``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any, Final

import msgspec
from msgspec import Meta

from rayq.store.errors import PermissionDeniedError

# RocketMQ PermName bits.
PERM_READ: Final[int] = 4
PERM_WRITE: Final[int] = 2
PERM_INHERIT: Final[int] = 1
PERM_ALL: Final[int] = PERM_READ | PERM_WRITE | PERM_INHERIT

QUEUE_ID_MAX: Final[int] = 2**31 - 1
QUEUE_OFFSET_MAX: Final[int] = 2**63 - 1

# A push consumer commits, with a queue's offset, the ranges [start, end) past it that it
# already consumed (so only the rest comes again after a crash): at most this many per queue.
ACKED_RANGES_MAX: Final[int] = 256

Name = Annotated[str, Meta(min_length=1)]
Perm = Annotated[int, Meta(ge=0, le=PERM_ALL)]
QueueId = Annotated[int, Meta(ge=0, le=QUEUE_ID_MAX)]
QueueOffset = Annotated[int, Meta(ge=0, le=QUEUE_OFFSET_MAX)]
Count = Annotated[int, Meta(ge=0, le=2**31 - 1)]  # queue numbers, retry counts, flags


def is_readable(perm: int) -> bool:
    return perm & PERM_READ == PERM_READ


def is_writeable(perm: int) -> bool:
    return perm & PERM_WRITE == PERM_WRITE


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


def check_broadcast(group: SubscriptionGroupConfig, broker: str) -> None:
    """PermissionDeniedError if ``group`` refuses broadcasting consumers."""
    if not group.consume_broadcast_enable:
        raise PermissionDeniedError(
            f"consumer group {group.group_name!r} does not allow broadcasting consumers "
            f"(consume_broadcast_enable is off on broker {broker}); consume with "
            "MessageModel.CLUSTERING or turn it on with Admin.update_group",
            group=group.group_name,
        )


AckedRange = tuple[QueueOffset, QueueOffset]  # [start, end) of queue offsets
AckedRanges = Annotated[list[AckedRange], Meta(max_length=ACKED_RANGES_MAX)]


def check_acked_ranges(
    queue_offset: int, ranges: Iterable[Any], error: type[Exception]
) -> list[tuple[int, int]]:
    """``ranges`` as a sorted list of ``(start, end)`` with ``queue_offset < start < end``,
    each starting past the previous one's end (adjacent ones merged); else ``error``
    naming the bad range. At most ``ACKED_RANGES_MAX``."""
    out: list[tuple[int, int]] = []
    low = queue_offset + 1
    for item in ranges:
        start, end = _range_pair(item, error)
        if not low <= start < end <= QUEUE_OFFSET_MAX:
            raise error(
                f"acked range [{start}, {end}) must start at or past {low} (past the committed "
                f"offset {queue_offset} and the previous range) and end after its start"
            )
        if out and out[-1][1] == start:
            out[-1] = (out[-1][0], end)
        else:
            out.append((start, end))
        low = end
    if len(out) > ACKED_RANGES_MAX:
        raise error(f"{len(out)} acked ranges, more than the {ACKED_RANGES_MAX} kept per queue")
    return out


def _range_pair(item: Any, error: type[Exception]) -> tuple[int, int]:
    ok = isinstance(item, list | tuple) and len(item) == 2
    ok = ok and all(type(v) is int for v in item)
    if not ok:
        raise error(f"an acked range must be a pair of ints (start, end), got {item!r}")
    return item[0], item[1]
