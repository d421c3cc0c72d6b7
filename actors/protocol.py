"""Types that cross actor boundaries: requests and replies (the protocol module).

Everything here is a msgspec Struct; new fields go at the end and have defaults.
Message batches travel as ``rayq.store.EncodedBatch`` (encoded once by the
producer), pulled messages as raw commit-log records (``buffer``) that the
consumer decodes with ``rayq.store.decode_records``.
"""

from __future__ import annotations

import enum

import msgspec

from rayq.actors.server.send_back import DEFAULT_MAX_RECONSUME_TIMES
from rayq.actors.server.tables import is_readable, is_writeable

COORDINATOR_NAME = "rayq-coordinator"
BROKER_ACTOR_PREFIX = "rayq-broker-"
CONSUMER_ACTOR_PREFIX = "rayq-consumer-"


def broker_actor_name(broker_name: str) -> str:
    return f"{BROKER_ACTOR_PREFIX}{broker_name}"


def flusher_actor_name(broker_name: str) -> str:
    return f"rayq-flusher-{broker_name}"


def hold_actor_name(broker_name: str) -> str:
    return f"rayq-pullhold-{broker_name}"


def consumer_actor_name(member_id: str) -> str:
    return f"{CONSUMER_ACTOR_PREFIX}{member_id}"


class SendStatus(enum.Enum):
    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"


class PullStatus(enum.Enum):
    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    NO_MATCHED_MSG = "NO_MATCHED_MSG"
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"


class MessageQueue(msgspec.Struct, frozen=True, order=True):
    """One queue of a topic on one broker."""

    topic: str
    broker_name: str
    queue_id: int


class SendResult(msgspec.Struct, frozen=True, kw_only=True):
    status: SendStatus
    msg_id: str
    queue: MessageQueue
    queue_offset: int
    offset_msg_id: str = ""


class BatchSendResult(msgspec.Struct, frozen=True, kw_only=True):
    """What a broker answers for one put: a status and per-message columns."""

    status: SendStatus
    msg_ids: list[str]
    offset_msg_ids: list[str]
    queue_offsets: list[int]


class PullRequest(msgspec.Struct, frozen=True, kw_only=True):
    group: str
    topic: str
    queue_id: int
    queue_offset: int
    max_nums: int = 32
    expression: str = "*"
    suspend_ms: int = 15_000


class PullItem(msgspec.Struct, frozen=True, array_like=True):
    """One queue of a ``PullManyRequest``."""

    topic: str
    queue_id: int
    queue_offset: int
    expression: str = "*"


class PullManyRequest(msgspec.Struct, frozen=True, kw_only=True):
    """Several queues of one broker in one call (a push consumer's pull per broker):
    up to ``max_nums`` messages from each; with ``suspend_ms`` > 0 the hold service
    waits until any of them has something new."""

    group: str
    items: list[PullItem]
    max_nums: int = 32
    suspend_ms: int = 15_000

    def request(self, item: PullItem) -> PullRequest:
        return PullRequest(group=self.group, topic=item.topic, queue_id=item.queue_id,
                           queue_offset=item.queue_offset, max_nums=self.max_nums,
                           expression=item.expression, suspend_ms=self.suspend_ms)  # fmt: skip


class PullResponse(msgspec.Struct, frozen=True, kw_only=True):
    status: PullStatus
    next_offset: int
    min_offset: int
    max_offset: int
    buffer: bytes = b""
    count: int = 0


class QueueData(msgspec.Struct, frozen=True, kw_only=True):
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int


class TopicRoute(msgspec.Struct, frozen=True, kw_only=True):
    topic: str
    queues: list[QueueData]

    def read_queues(self) -> list[MessageQueue]:
        """Every queue consumers may read, on the brokers whose permission allows it."""
        return [MessageQueue(self.topic, d.broker_name, q) for d in self.queues
                if is_readable(d.perm) for q in range(d.read_queue_nums)]  # fmt: skip

    def write_queues(self) -> list[MessageQueue]:
        """Every queue producers may send to, on the brokers whose permission allows it."""
        return [MessageQueue(self.topic, d.broker_name, q) for d in self.queues
                if is_writeable(d.perm) for q in range(d.write_queue_nums)]  # fmt: skip


class QueueStats(msgspec.Struct, frozen=True, kw_only=True):
    queue: MessageQueue
    min_offset: int
    max_offset: int
    last_store_timestamp: int


class QueueProgress(msgspec.Struct, frozen=True, kw_only=True):
    queue: MessageQueue
    committed_offset: int
    max_offset: int
    lag: int


class BrokerInfo(msgspec.Struct, frozen=True, kw_only=True):
    """What a broker tells the coordinator when it registers or heartbeats."""

    broker_name: str
    node_id: str
    store_dir: str
    topics: dict[str, QueueData]
    data_version: int = 0


class FlushTargets(msgspec.Struct, frozen=True, kw_only=True):
    """What the flusher asks its broker each round (server-internal): commit-log bytes
    written, and the offset below which consume queues and index are written."""

    written: int
    dispatched: int


class SendBackItem(msgspec.Struct, frozen=True):
    """One failed message: its commit-log offset (``MessageExt.commitlog_offset``) and
    the delay level of its next attempt: 0 lets the broker pick ``3 + reconsume_times``,
    a negative level sends it straight to the dead-letter topic."""

    commitlog_offset: int
    delay_level: int = 0


class SendBackRequest(msgspec.Struct, frozen=True, kw_only=True):
    """Messages ``group`` failed to consume, for ``Broker.call("send_back", request)``.

    All items must be messages of the broker called (one call per broker and batch).
    """

    group: str
    items: list[SendBackItem]
    max_reconsume_times: int = DEFAULT_MAX_RECONSUME_TIMES


class SendBackResult(msgspec.Struct, frozen=True, kw_only=True):
    """Per item, in order: the topic the copy went to (``%RETRY%<group>`` or
    ``%DLQ%<group>``), its msg id and its new reconsume times."""

    topics: list[str]
    msg_ids: list[str]
    reconsume_times: list[int]
