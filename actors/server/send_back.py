"""Send-back of messages a consumer failed: RocketMQ's ``consumerSendMessageBack``.

A consumer group that could not consume a message sends it back (by commit-log
offset). The broker appends a copy, with ``reconsume_times`` one higher, to

* ``%DLQ%<group>`` (queue 0) when that count exceeds ``max_reconsume_times`` or the
  consumer asked for a negative delay level: the message is dead;
* otherwise ``%RETRY%<group>`` with a DELAY of the level asked for, or of
  ``3 + reconsume_times`` (the old count) when the level asked for is 0. The delay
  service parks it first (schedule.py), so it reaches the retry topic when due. The
  retry topic has the group's ``retry_queue_nums`` queues (a message goes to queue
  ``queue_offset % retry_queues``); with 0 the broker drops failed messages (logged).

The copy keeps body, flags, tags, keys, UNIQ_KEY (so its msg id), born time and host.
It carries the original topic in ``RETRY_TOPIC`` and the first msg id in
``ORIGIN_MESSAGE_ID`` (both set on the first send-back and kept after), so the
consumer can show the message as it was first sent; a dead letter also carries
``DLQ_ORIGIN_TOPIC`` and ``DLQ_ORIGIN_MESSAGE_ID`` (RocketMQ 5's names).

``prepare_send_back`` checks a whole request and builds every record before anything
is written; the broker then creates the topics and appends them in one batch (the
retry copies through the schedule service), so a bad item writes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import msgspec

from rayq.actors.protocol.limits import DEFAULT_MAX_RECONSUME_TIMES as DEFAULT_MAX_RECONSUME_TIMES
from rayq.actors.server.table_files import SCHEDULE_TOPIC
from rayq.store import properties as P
from rayq.store.errors import InvalidMessageError, InvalidOffsetError
from rayq.store.message import InnerMessage, MessageExt
from rayq.store.message_store import MessageStore
from rayq.store.names import dlq_topic, retry_topic, validate_group

RETRY_DELAY_LEVEL_BASE: Final[int] = 3  # RocketMQ: first retry after level 3 (10 s)
# Retry and dead-letter topics have one queue (RocketMQ retryQueueNums, DLQ_NUMS_PER_GROUP).
GROUP_TOPIC_QUEUE_NUMS: Final[int] = 1
SEND_BACK_MAX_ITEMS: Final[int] = 4096
_PARKING: Final = (P.DELAY, P.DELIVER_AT_MS, P.REAL_TOPIC, P.REAL_QID)


def is_dead(reconsume_times: int, delay_level: int, max_reconsume_times: int) -> bool:
    """Whether a message consumed ``reconsume_times`` times so far goes to the DLQ now."""
    return delay_level < 0 or reconsume_times + 1 > max_reconsume_times


def send_back_message(
    msg: MessageExt, group: str, delay_level: int, max_reconsume_times: int, retry_queues: int = 1
) -> InnerMessage:
    """The record to append for ``msg``, which ``group`` failed to consume.

    ``msg`` should be read with ``decompress=False`` (a compressed body stays so).
    Raises InvalidGroupError for a group name that cannot make a topic name.
    """
    inner = msg.to_inner()
    props = inner.properties  # a fresh dict
    for name in _PARKING:
        props.pop(name, None)
    origin_topic = props.setdefault(P.RETRY_TOPIC, msg.topic)
    origin_id = props.get(P.ORIGIN_MESSAGE_ID) or msg.msg_id
    props[P.ORIGIN_MESSAGE_ID] = origin_id
    queue_id = 0
    if is_dead(msg.reconsume_times, delay_level, max_reconsume_times):
        topic = dlq_topic(group)
        props[P.DLQ_ORIGIN_TOPIC] = origin_topic
        props[P.DLQ_ORIGIN_MESSAGE_ID] = origin_id
    else:
        topic = retry_topic(group)
        level = delay_level if delay_level > 0 else RETRY_DELAY_LEVEL_BASE + msg.reconsume_times
        props[P.DELAY] = str(level)
        queue_id = msg.queue_offset % max(retry_queues, 1)
    return msgspec.structs.replace(
        inner,
        topic=topic,
        queue_id=queue_id,
        properties=props,
        reconsume_times=msg.reconsume_times + 1,
    )


def resend_message(msg: MessageExt, retry: str, retry_queues: int) -> InnerMessage:
    """The record that sends the dead letter ``msg`` to the retry topic ``retry`` of its
    group: due at once (no delay level), its reconsume count at 0, the DLQ's marks
    removed and the original topic and first msg id kept (``RETRY_TOPIC``,
    ``ORIGIN_MESSAGE_ID``), so the group's consumers see the message as first sent."""
    inner = msg.to_inner()
    props = inner.properties
    for name in (*_PARKING, P.DLQ_ORIGIN_TOPIC, P.DLQ_ORIGIN_MESSAGE_ID):
        props.pop(name, None)
    return msgspec.structs.replace(
        inner,
        topic=retry,
        queue_id=msg.queue_offset % max(retry_queues, 1),
        properties=props,
        reconsume_times=0,
    )


def prepare_send_back(
    store: MessageStore,
    group: str,
    items: Sequence[tuple[int, int]],
    max_reconsume_times: int,
    retry_queues: int = 1,
) -> list[InnerMessage]:
    """The records to append for ``items`` (commit-log offset, delay level) that ``group``
    failed; raises InvalidGroupError, InvalidMessageError or InvalidOffsetError."""
    validate_group(group)
    retry_topic(group)  # the group must also make legal topic names
    if not _is_int(max_reconsume_times) or not 0 <= max_reconsume_times < 2**31:
        raise InvalidMessageError(
            f"max_reconsume_times must be an int >= 0, got {max_reconsume_times!r}",
            value=repr(max_reconsume_times),
        )
    if not items:
        raise InvalidMessageError("send_back needs at least one item")
    if len(items) > SEND_BACK_MAX_ITEMS:
        raise InvalidMessageError(
            f"send_back takes at most {SEND_BACK_MAX_ITEMS} items per call, got {len(items)}",
            limit=SEND_BACK_MAX_ITEMS,
        )
    out = []
    for i, (offset, level) in enumerate(items):
        if not _is_int(offset) or offset < 0:
            raise InvalidOffsetError(
                f"item {i}: commitlog_offset must be an int >= 0, got {offset!r}",
                value=repr(offset),
            )
        if not _is_int(level) or not -(2**31) <= level < 2**31:
            raise InvalidMessageError(
                f"item {i}: delay_level must be an int, got {level!r}", value=repr(level)
            )
        msg = store.lookup_message(offset, decompress=False)
        if msg is None or msg.commitlog_offset != offset:
            raise InvalidOffsetError(
                f"item {i}: no message starts at commit-log offset {offset} on this broker",
                value=offset,
            )
        if msg.topic == SCHEDULE_TOPIC:
            raise InvalidOffsetError(
                f"item {i}: commit-log offset {offset} holds a delayed "
                "message that was not delivered yet",
                value=offset,
            )
        out.append(send_back_message(msg, group, level, max_reconsume_times, retry_queues))
    return out


def _is_int(value: object) -> bool:
    return value.__class__ is int
