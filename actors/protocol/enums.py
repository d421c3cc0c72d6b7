"""Enums of the client contract (RocketMQ's names) and the queue address."""

from __future__ import annotations

import enum

import msgspec


class ConsumeFromWhere(enum.Enum):
    """Where a group starts on a queue it has never committed an offset for."""

    FIRST_OFFSET = "FIRST_OFFSET"
    LAST_OFFSET = "LAST_OFFSET"
    TIMESTAMP = "TIMESTAMP"


class MessageModel(enum.Enum):
    CLUSTERING = "CLUSTERING"  # each message to one consumer of the group
    BROADCASTING = "BROADCASTING"  # every consumer gets every message


class AllocateStrategy(enum.Enum):
    """How a push-consumer group's queues are split among its members (allocation.py)."""

    AVERAGELY = "AVERAGELY"
    AVERAGELY_BY_CIRCLE = "AVERAGELY_BY_CIRCLE"
    CONSISTENT_HASH = "CONSISTENT_HASH"
    CONFIG = "CONFIG"


class SendStatus(enum.Enum):
    """A stored send's status (RocketMQ ``SendStatus``): anything but SEND_OK is stored on
    the master but not yet as safe as asked (not flushed; no slave has it)."""

    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"  # SYNC_MASTER: no slave had it in time
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"  # SYNC_MASTER: no slave connected or in sync


class TransactionStatus(enum.Enum):
    """A local transaction's state, as the ``TransactionProducer``'s listener answers it
    (rocketmq-client-python's names; RocketMQ ``LocalTransactionState``)."""

    COMMIT = "COMMIT"  # commit the half message: consumers see it
    ROLLBACK = "ROLLBACK"  # drop it
    UNKNOWN = "UNKNOWN"  # not known yet: the broker checks back later


class PullStatus(enum.Enum):
    """What a pull found (``PullResponse.next_offset`` is where to pull next):

    - FOUND: records;
    - NO_NEW_MSG: nothing past the offset yet; a long poll waits for news;
    - NO_MATCHED_MSG: nothing readable in what was scanned (tags that do not match, or
      damaged or removed records) but ``next_offset`` moved past it: answered at once,
      never held; pull again from there at once;
    - OFFSET_ILLEGAL: the offset is outside the queue; ``next_offset`` is where to read
      instead (RocketMQ's corrections: see ``BrokerServer.pull``).
    """

    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    NO_MATCHED_MSG = "NO_MATCHED_MSG"
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"


class MessageQueue(msgspec.Struct, frozen=True, order=True):
    """One queue of a topic on one broker."""

    topic: str
    broker_name: str
    queue_id: int
