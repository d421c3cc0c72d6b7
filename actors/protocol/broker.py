"""The broker's client protocol: one request Struct per operation, validated at the
boundary with ``check`` (types, unknown fields, ranges; names are checked by the
server), and one reply Struct each."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from rayq.actors.protocol.enums import MessageQueue, SendStatus, TransactionStatus
from rayq.actors.protocol.internal import BrokerInfo, ReplicaStatus
from rayq.actors.protocol.records import (
    AckedRanges,
    SubscriptionGroupConfig,
)
from rayq.actors.protocol.rows import PATH_PATTERN as ROWS_FILE_PATTERN
from rayq.actors.protocol.wire import (
    Perm,
    QueueCount,
    QueueId,
    QueueOffset,
    Text,
    TimestampMs,
    _Request,
)
from rayq.store.batch import EncodedBatch
from rayq.store.message import MessageExt


class SendResult(msgspec.Struct, frozen=True, kw_only=True):
    """A sent message's result. A transactional send (``send_in_transaction``) also
    carries its listener's ``local_state``, the ``transaction_id`` (the message's unique
    id) and the half message's ``transaction_offset`` (its key on the broker); its
    ``queue_offset`` is -1 (the half is in no queue)."""

    status: SendStatus
    msg_id: str
    queue: MessageQueue
    queue_offset: int
    offset_msg_id: str = ""
    local_state: TransactionStatus | None = None
    transaction_id: str = ""
    transaction_offset: int = -1


class BatchSendResult(msgspec.Struct, frozen=True, kw_only=True):
    """What a broker answers for one put: a status and per-message columns."""

    status: SendStatus
    msg_ids: list[str]
    offset_msg_ids: list[str]
    queue_offsets: list[int]


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


class SendBackItem(msgspec.Struct, frozen=True):
    """One failed message: its commit-log offset (``MessageExt.commitlog_offset``) and
    the delay level of its next attempt: 0 lets the broker pick ``3 + reconsume_times``,
    a negative level sends it straight to the dead-letter topic."""

    commitlog_offset: QueueOffset
    delay_level: Annotated[int, Meta(ge=-(2**31), le=2**31 - 1)] = 0


class SendBackRequest(_Request, frozen=True, kw_only=True):
    """Messages ``group`` failed to consume (``PullConsumer.send_back`` and push consumers).

    All items must be messages of the broker called (one call per broker and batch).
    """

    group: Text
    items: Annotated[list[SendBackItem], Meta(min_length=1, max_length=65536)]
    # -1: none given, the group's ``retry_max_times`` applies (RocketMQ's subscription group)
    max_reconsume_times: Annotated[int, Meta(ge=-1, le=1024)] = -1


class ResendDeadLetterRequest(_Request, frozen=True, kw_only=True):
    """Send the dead letter of ``group`` at ``commitlog_offset`` of the broker called to
    the group's retry topic, its reconsume count at 0 (``Admin.resend_dead_letter``)."""

    group: Text
    commitlog_offset: Annotated[int, Meta(ge=0, le=2**63 - 1)]


class ResendDeadLetterReply(msgspec.Struct, frozen=True, kw_only=True):
    """Where the resent copy went: the group's retry topic, its queue and offset."""

    topic: str
    msg_id: str
    queue_id: int
    queue_offset: int


class SendBackResult(msgspec.Struct, frozen=True, kw_only=True):
    """Per item, in order: the topic the copy went to (``%RETRY%<group>`` or
    ``%DLQ%<group>``), its msg id and its new reconsume times."""

    topics: list[str]
    msg_ids: list[str]
    reconsume_times: list[int]


class HalfSendRequest(_Request, frozen=True, kw_only=True):
    """A transactional send's half message(s), encoded as for ``put`` (actors/server/
    transactions.py); the broker stores them as halves no consumer sees yet."""

    group: Text  # the producer group: it is asked to check the transaction
    batch: EncodedBatch


class EndTransactionRequest(_Request, frozen=True, kw_only=True):
    """Commit or roll back the transaction whose half is at ``transaction_offset``
    (what the half's send returned); ``msg_id`` and ``topic`` must be its message's."""

    group: Text
    topic: Text
    transaction_offset: QueueOffset
    msg_id: Text
    commit: bool
    from_check: bool = False  # the answer to a check (logs), not the first end


class EndTransactionReply(msgspec.Struct, frozen=True, kw_only=True):
    """``ended`` False: the transaction had ended before (nothing written)."""

    ended: bool
    committed: bool = False
    queue_id: int = -1  # the committed message's queue and offset
    queue_offset: int = -1
    offset_msg_id: str = ""


class TransactionChecksRequest(_Request, frozen=True, kw_only=True):
    """A transactional producer's poll for the checks its group is asked."""

    group: Text
    max_num: Annotated[int, Meta(ge=1, le=1024)] = 32


class TransactionCheck(msgspec.Struct, frozen=True, kw_only=True):
    """One check: the half message as sent (its real topic and queue) and its key."""

    transaction_offset: int
    message: MessageExt


class TransactionChecksReply(msgspec.Struct, frozen=True, kw_only=True):
    checks: list[TransactionCheck]


class CreateTopicRequest(_Request, frozen=True, kw_only=True):
    topic: Text
    read_queue_nums: QueueCount
    write_queue_nums: QueueCount
    perm: Perm


class TopicRequest(_Request, frozen=True, kw_only=True):
    """One topic: ``delete_topic``, ``topic_stats``, ``queue_bounds``."""

    topic: Text


class GroupRequest(_Request, frozen=True, kw_only=True):
    """One consumer group: ``group_config``, ``ensure_retry_topic``."""

    group: Text


class ListGroupsRequest(_Request, frozen=True, kw_only=True):
    pass


class UpdateGroupRequest(_Request, frozen=True, kw_only=True):
    config: SubscriptionGroupConfig


class DeleteGroupRequest(_Request, frozen=True, kw_only=True):
    group: Text
    clean_offsets: bool = False


class QueryOffsetsRequest(_Request, frozen=True, kw_only=True):
    group: Text
    topic: Text


class CommitOffsetsRequest(_Request, frozen=True, kw_only=True):
    """Next offsets per queue id. A push consumer commits with its assignment's
    ``generation``; -1 (pull consumers, admin) is never fenced. ``acked``: per queue
    id, sorted ranges ``[start, end)`` past its offset that were consumed already (a
    queue without any keeps none)."""

    group: Text
    topic: Text
    offsets: dict[QueueId, QueueOffset]
    generation: Annotated[int, Meta(ge=-1)] = -1
    acked: dict[QueueId, AckedRanges] = {}


class CompareAndSetOffsetsRequest(_Request, frozen=True, kw_only=True):
    """Commit ``offsets`` only if every queue's committed offset is ``expected`` (-1: none)."""

    group: Text
    topic: Text
    expected: dict[QueueId, Annotated[int, Meta(ge=-1, le=2**63 - 1)]]
    offsets: dict[QueueId, QueueOffset]


class ResetOffsetsRequest(_Request, frozen=True, kw_only=True):
    group: Text
    topic: Text
    timestamp_ms: TimestampMs


class OffsetByTimeRequest(_Request, frozen=True, kw_only=True):
    topic: Text
    queue_id: QueueId
    timestamp_ms: TimestampMs


class QueueRef(msgspec.Struct, frozen=True, array_like=True):
    topic: Text
    queue_id: QueueId


class LockQueuesRequest(_Request, frozen=True, kw_only=True):
    """Orderly consumption: lock (or renew) / unlock ``queues`` for ``client_id``."""

    group: Text
    queues: list[QueueRef]


class QueryMessageRequest(_Request, frozen=True, kw_only=True):
    topic: Text
    key: Annotated[str, Meta(min_length=1, max_length=4096)]
    max_num: Annotated[int, Meta(ge=1, le=64 * 1024)] = 32
    begin_ms: TimestampMs = 0
    end_ms: TimestampMs | None = None


class ViewMessageRequest(_Request, frozen=True, kw_only=True):
    msg_id: Annotated[str, Meta(min_length=1, max_length=4096)]


class ScheduleStatsRequest(_Request, frozen=True, kw_only=True):
    pass


class ReplicationRequest(_Request, frozen=True, kw_only=True):
    pass


class ReplicationStats(msgspec.Struct, frozen=True, kw_only=True):
    """A broker's replication: its role and epoch, how far its log is written, and for a
    master each slave's acknowledged offset and lag in bytes and in time."""

    broker_name: str
    broker_id: int
    role: str
    epoch: int
    written_offset: int
    replicas: list[ReplicaStatus] = []
    error: str = ""  # a slave: why it is not replicating now ("" while it is)
    # a SYNC_MASTER: its sends are acknowledged up to here (min_in_sync_replicas slaves
    # have it); a slave: the highest such offset its master told it; -1: none
    acked_offset: int = -1


class GetMessageRequest(_Request, frozen=True, kw_only=True):
    """The one message at ``queue_offset`` of a queue (``rayq message get``)."""

    topic: Text
    queue_id: QueueId
    queue_offset: QueueOffset


class BrokerStatusRequest(_Request, frozen=True, kw_only=True):
    pass


class PageReadersRequest(_Request, frozen=True, kw_only=True):
    """Where Spark's JVM reads a broker's pages: ``page_readers``."""


class PageReadersReply(msgspec.Struct, frozen=True, kw_only=True):
    """The actor names of the replica's page readers (actors/page_reader.py), running."""

    names: list[str]


class BrokerStatus(msgspec.Struct, frozen=True, kw_only=True):
    """A broker replica's state now (``rayq broker status``, ``Admin.health``): its info,
    how far its flusher has made the commit log durable (-1: the flusher did not
    answer), why its flusher or hold service did not answer ("" when they did), its
    disk limits and its settings (``BrokerConfig`` as plain values)."""

    info: BrokerInfo
    flushed_offset: int = -1
    flusher_error: str = ""
    hold_error: str = ""
    replication_error: str = ""
    disk_clean_ratio: float = 0.75  # retention deletes files past this ratio
    disk_full_ratio: float = 0.90  # puts are refused past this ratio
    heartbeat_interval_ms: int = 30_000
    config: dict[str, Any] = {}


# The columns of a read page (actors/server/columnar.py SCHEMA).
ColumnName = Literal[
    "topic",
    "broker",
    "queue_id",
    "queue_offset",
    "msg_id",
    "tags",
    "keys",
    "body",
    "properties",
    "born_timestamp",
    "store_timestamp",
    "reconsume_times",
]


class ReadGrant(_Request, frozen=True, kw_only=True):
    """Leave to read offsets ``[start, end)`` of one queue, signed once by a client with
    ACL credentials (method ``read_grant``) and carried by every page request of that
    range (``ReadArrowRequest.grant``): Spark's JVM tasks, which do not sign, read a
    micro-batch's ranges with the grants its driver planned (connectors/stream_source.py).
    Good for the ACL's timestamp window from when it was signed."""

    topic: Text
    queue_id: QueueId
    start: QueueOffset
    end: QueueOffset


class ReadArrowRequest(_Request, frozen=True, kw_only=True):
    """Offsets ``[start, end)`` of one queue as Arrow, one page of ~``max_bytes``: all
    columns, or only ``columns`` (in that order; an empty list: the row count alone).
    ``local_node``: the caller's Ray node id; a page reader on that node may answer with
    the records' places in its commit-log files instead of their bodies
    (``columnar.refs_page``), which the caller reads and checks itself (the broker
    always sends whole pages)."""

    topic: Text
    queue_id: QueueId
    start: QueueOffset
    end: QueueOffset
    max_bytes: Annotated[int, Meta(ge=1, le=1 << 30)]
    columns: Annotated[list[ColumnName], Meta(max_length=12)] | None = None
    local_node: Annotated[str, Meta(max_length=64, pattern="^[0-9a-fA-F]*$")] = ""
    grant: ReadGrant | None = None  # instead of a signature (ACL): a range signed once


class WriteGrant(_Request, frozen=True, kw_only=True):
    """Leave to append to one queue as the producer ``producer_id`` or any of its epochs
    (``<producer_id>~<epoch>``, actors/server/dedupe.py), signed once by a client with
    ACL credentials (method ``write_grant``, which needs PUB on the topic) and carried by
    every ``put_arrow`` of that producer (``ArrowPutRequest.grant``): Spark's JVM tasks,
    which do not sign, write a micro-batch with the grants its driver planned
    (connectors/stream_sink.py). Good for the ACL's timestamp window from when it was
    signed."""

    topic: Text
    queue_id: QueueId
    producer_id: Annotated[str, Meta(min_length=1, max_length=128)]


class ArrowPutRequest(_Request, frozen=True, kw_only=True):
    """Rows for one queue, as Arrow (Spark's JVM writes: rayq/connectors/jvm), appended as the
    idempotent batches of ``producer_id`` from sequence ``first_sequence``
    (store/arrow_puts.py); ``body`` .. ``properties`` name the columns of a message.
    ``rows_file``: the rows are the first ``rows_length`` bytes of this shared-memory
    file on the broker's node, not the call's second argument (server/shared_rows.py)."""

    topic: Text
    queue_id: QueueId
    producer_id: Annotated[str, Meta(min_length=1, max_length=128)]
    first_sequence: Annotated[int, Meta(ge=0, le=2**62)]
    group: Text
    body: Text
    keys: Text | None = None
    tags: Text | None = None
    properties: Text | None = None
    rows_file: Annotated[str, Meta(max_length=64, pattern=ROWS_FILE_PATTERN)] = ""
    rows_length: Annotated[int, Meta(ge=0, le=1 << 31)] = 0
    grant: WriteGrant | None = None  # ACL: the producer's queue, signed once (the JVM's)


class MaxOffsetRequest(_Request, frozen=True, kw_only=True):
    topic: Text
    queue_id: QueueId


class ScheduleStats(msgspec.Struct, frozen=True, kw_only=True):
    """Delayed delivery: per delay level (next offset to deliver, max offset) of its
    queue in SCHEDULE_TOPIC_XXXX; the deliver-at backlog."""

    levels: dict[int, tuple[int, int]]
    deliver_at_pending: int
    deliver_at_max_offset: int


class GroupConfigReply(msgspec.Struct, frozen=True, kw_only=True):
    config: SubscriptionGroupConfig


class Done(msgspec.Struct, frozen=True, kw_only=True):
    """A change was applied; ``existed``: the thing was there before (deletes)."""

    existed: bool = True


class TopicStatsReply(msgspec.Struct, frozen=True, kw_only=True):
    queues: list[QueueStats]


class QueueBoundsReply(msgspec.Struct, frozen=True, kw_only=True):
    """(min offset, max offset) of each read queue."""

    bounds: dict[int, tuple[int, int]]


class GroupsReply(msgspec.Struct, frozen=True, kw_only=True):
    groups: list[str]


class OffsetsReply(msgspec.Struct, frozen=True, kw_only=True):
    """Queue id -> offset (committed, reset or found); for committed offsets also the
    ranges past them consumed already (``CommitOffsetsRequest.acked``)."""

    offsets: dict[int, int]
    acked: dict[int, list[tuple[int, int]]] = {}


class CommitOffsetsReply(msgspec.Struct, frozen=True, kw_only=True):
    """Queue ids whose commit was refused as stale (a newer owner committed)."""

    stale: list[int]


class OffsetReply(msgspec.Struct, frozen=True, kw_only=True):
    offset: int


class LockQueuesReply(msgspec.Struct, frozen=True, kw_only=True):
    """Queues the caller holds now (lock), or how many were released (unlock)."""

    locked: list[QueueRef] = []
    released: int = 0


class MessagesReply(msgspec.Struct, frozen=True, kw_only=True):
    messages: list[MessageExt]


class ArrowPage(msgspec.Struct, frozen=True, kw_only=True):
    """Decoded columns (a ``pyarrow.RecordBatch`` of ``columnar.SCHEMA``) and the offset
    the next page starts at. Ray pickles the batch with its buffers out of band: they
    are copied once into the object store and read in place by the caller (no IPC
    stream, no bytes object). ``data`` (Arrow IPC bytes) is what older brokers sent."""

    data: bytes = b""
    next_offset: int
    batch: Any = None
