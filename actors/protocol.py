"""Types that cross actor boundaries: requests and replies (the protocol module).

Everything here is a msgspec Struct; new fields go at the end and have defaults.
Message batches travel as ``rayq.store.EncodedBatch`` (encoded once by the
producer), pulled messages as raw commit-log records (``buffer``) that the
consumer decodes with ``rayq.store.decode_records``.
"""

from __future__ import annotations

import enum
import functools
from typing import Annotated, Any, Literal, TypeVar

import msgspec
from msgspec import Meta

from rayq.actors.server.shared_rows import PATH_PATTERN as ROWS_FILE_PATTERN
from rayq.actors.server.table_files import (
    AckedRanges,
    SubscriptionGroupConfig,
    is_readable,
    is_writeable,
)
from rayq.store.batch import EncodedBatch, RequestAuth
from rayq.store.errors import InvalidRequestError
from rayq.store.message import MessageExt

COORDINATOR_NAME = "rayq-coordinator"
BROKER_ACTOR_PREFIX = "rayq-broker-"
CONSUMER_ACTOR_PREFIX = "rayq-consumer-"


def broker_actor_name(broker_name: str) -> str:
    return f"{BROKER_ACTOR_PREFIX}{broker_name}"


def flusher_actor_name(broker_name: str) -> str:
    return f"rayq-flusher-{broker_name}"


def hold_actor_name(broker_name: str) -> str:
    return f"rayq-pullhold-{broker_name}"


PAGE_READER_ACTOR_PREFIX = "rayq-reader-"


PAGE_READERS = 2  # per replica: the cores a node gives one Spark scan's page building


def page_reader_actor_name(broker_name: str, index: int) -> str:
    """A replica's page reader ``index`` (actors/page_reader.py)."""
    return f"{PAGE_READER_ACTOR_PREFIX}{broker_name}-{index}"


def replica_actor_names(broker_name: str) -> list[str]:
    """Every actor of one replica: broker, flusher, hold service, page readers."""
    return [
        broker_actor_name(broker_name),
        flusher_actor_name(broker_name),
        hold_actor_name(broker_name),
        *(page_reader_actor_name(broker_name, i) for i in range(PAGE_READERS)),
    ]


QueueId = Annotated[int, Meta(ge=0, le=2**31 - 1)]
QueueOffset = Annotated[int, Meta(ge=0, le=2**63 - 1)]
TimestampMs = Annotated[int, Meta(ge=0, le=2**63 - 1)]
QueueCount = Annotated[int, Meta(ge=1, le=1024)]
Perm = Annotated[int, Meta(ge=0, le=7)]
FilterType = Literal["TAG", "SQL92"]
Text = Annotated[str, Meta(max_length=4096)]


class _Request(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Base of client requests: ``client_id`` names the caller (producer, consumer or
    admin instance), for logs; ``auth`` carries a signed request's credentials (ACL)."""

    client_id: Text = ""
    auth: RequestAuth | None = None  # signed credentials (ACL, actors/server/acl.py)


class ConsumeFromWhere(enum.Enum):
    """Where a group starts on a queue it has never committed an offset for."""

    FIRST_OFFSET = "FIRST_OFFSET"
    LAST_OFFSET = "LAST_OFFSET"
    TIMESTAMP = "TIMESTAMP"


class MessageModel(enum.Enum):
    CLUSTERING = "CLUSTERING"  # each message to one consumer of the group
    BROADCASTING = "BROADCASTING"  # every consumer gets every message


def consumer_actor_name(client_id: str) -> str:
    return f"{CONSUMER_ACTOR_PREFIX}{client_id}"


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


class PullRequest(_Request, frozen=True, kw_only=True):
    group: Text
    topic: Text
    queue_id: QueueId
    queue_offset: QueueOffset
    max_nums: Annotated[int, Meta(ge=1, le=1 << 20)] = 32
    expression: Text = "*"
    suspend_ms: Annotated[int, Meta(ge=0, le=3_600_000)] = 15_000
    expression_type: FilterType = "TAG"  # "SQL92": ``expression`` filters by properties


class PullItem(msgspec.Struct, frozen=True, array_like=True):
    """One queue of a ``PullManyRequest``."""

    topic: Text
    queue_id: QueueId
    queue_offset: QueueOffset
    expression: Text = "*"
    expression_type: FilterType = "TAG"


class QueueCommit(msgspec.Struct, frozen=True, array_like=True):
    """A queue's offset committed inside a pull (RocketMQ's commit-offset flag on
    PullRequest), with the ranges past it already consumed (``acked``)."""

    topic: Text
    queue_id: QueueId
    queue_offset: QueueOffset
    acked: AckedRanges = []


class PullManyRequest(_Request, frozen=True, kw_only=True):
    """Several queues of one broker in one call (a push consumer's pull per broker):
    up to ``max_nums`` messages from each; with ``suspend_ms`` > 0 the hold service
    waits until any of them has something new. ``commits``: offsets the broker commits
    (as ``CommitOffsetsRequest`` with ``generation``) when the pull arrives, so a push
    consumer needs a separate commit call only while no pull goes out."""

    group: Text
    items: Annotated[list[PullItem], Meta(min_length=1, max_length=4096)]
    max_nums: Annotated[int, Meta(ge=1, le=1 << 20)] = 32
    suspend_ms: Annotated[int, Meta(ge=0, le=3_600_000)] = 15_000
    commits: Annotated[list[QueueCommit], Meta(max_length=4096)] = []
    generation: Annotated[int, Meta(ge=-1)] = -1
    # a broadcasting consumer's pull: refused if the group has consume_broadcast_enable off
    broadcasting: bool = False

    def request(self, item: PullItem) -> PullRequest:
        return PullRequest(
            group=self.group,
            topic=item.topic,
            queue_id=item.queue_id,
            queue_offset=item.queue_offset,
            max_nums=self.max_nums,
            expression=item.expression,
            suspend_ms=self.suspend_ms,
            expression_type=item.expression_type,
            client_id=self.client_id,
        )


# What a pull answered through the hold service carries at most (whole records, at
# least one): with its framing it stays under Ray's 100 KiB inline limit, so the
# answer travels inside the call instead of through the object store. The rest is
# read from the broker directly (the answer shows records left).
HOLD_REPLY_BYTES = 100 * 1024 - 4096


class Park(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The hold service's mark on a pull that may wait (internal, hold -> broker): if the
    pull finds nothing new, the broker keeps it under ``token`` for ``hold_ms`` and, when
    it appends to one of its queues, sends the answer to the hold service
    (``PullHoldActor.deliver``) instead of waiting to be asked again."""

    token: Annotated[str, Meta(min_length=1, max_length=128)]
    hold_ms: Annotated[int, Meta(ge=0, le=3_600_000)]


class PullResponse(msgspec.Struct, frozen=True, kw_only=True):
    status: PullStatus
    next_offset: int
    min_offset: int
    max_offset: int
    buffer: bytes = b""
    count: int = 0
    # RocketMQ's suggestWhichBrokerId: the replica to pull this queue from next ("<name>#<id>"
    # for a slave, "" for the master): a consumer far behind reads from a slave when the
    # broker has slave_read_enable on.
    suggest_replica: str = ""

    @property
    def records_left(self) -> bool:
        """The queue holds records past this answer: the consumer reads the broker
        directly next, not through the hold service."""
        return self.next_offset < self.max_offset


def nothing_new(results: list[Any]) -> bool:
    """No queue of a pull has news: every answer is NO_NEW_MSG (no records, no moved
    offset, no error) -- the pulls the hold service waits on."""
    return all(type(r) is PullResponse and r.status is PullStatus.NO_NEW_MSG for r in results)


def follow_up(req: Any, answer: Any) -> Any | None:
    """The pull a consumer sends after ``req`` got ``answer`` (a PullRequest or a
    PullManyRequest moved to the next offsets), or None if it cannot be told (an error
    answered) or the consumer reads the broker directly next (records were left). The
    broker parks it ahead of time for the hold service, which hands it the consumer's
    next pull if that is exactly this one (actors/pull_hold.py)."""
    if type(req) is PullRequest:
        if type(answer) is not PullResponse or answer.records_left:
            return None  # more is there: the consumer reads it from the broker directly
        return msgspec.structs.replace(req, queue_offset=answer.next_offset)
    # A follow-up commits nothing (a pull that commits always reaches the broker).
    results = answer.results if type(answer) is PullManyResponse else None
    if type(req) is not PullManyRequest or results is None:
        return None
    if any(type(r) is not PullResponse or r.records_left for r in results):
        return None
    if len(results) != len(req.items):
        return None
    items = [
        msgspec.structs.replace(i, queue_offset=r.next_offset)
        for i, r in zip(req.items, results, strict=True)
    ]
    return msgspec.structs.replace(req, items=items, commits=[])


def follow_up_token(token: str) -> str:
    """The token of the follow-up of the pull parked under ``token``: ``t`` -> ``t#1``
    -> ``t#2``... (both the broker and the hold service derive it)."""
    base, sep, n = token.rpartition("#")
    return f"{base}#{int(n) + 1}" if sep and n.isdigit() else f"{token}#1"


class QueueData(msgspec.Struct, frozen=True, kw_only=True):
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    # While the broker's master is lost and a slave serves its reads: that slave's
    # replica name (``<name>#<id>``); the queues are then read-only.
    read_from: str = ""
    property_filter: bool = False  # the broker evaluates SQL92 subscriptions


class TopicRoute(msgspec.Struct, frozen=True, kw_only=True):
    topic: str
    queues: list[QueueData]

    def read_queues(self) -> list[MessageQueue]:
        """Every queue consumers may read, on the brokers whose permission allows it."""
        return [
            MessageQueue(self.topic, d.broker_name, q)
            for d in self.queues
            if is_readable(d.perm)
            for q in range(d.read_queue_nums)
        ]

    def write_queues(self) -> list[MessageQueue]:
        """Every queue producers may send to, on the brokers whose permission allows it."""
        return [
            MessageQueue(self.topic, d.broker_name, q)
            for d in self.queues
            if is_writeable(d.perm)
            for q in range(d.write_queue_nums)
        ]


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


class ReplicaStatus(msgspec.Struct, frozen=True, kw_only=True):
    """A slave as its master sees it: how far it has the commit log, and how far behind."""

    broker_id: int
    acked_offset: int  # the slave has every commit-log byte below this
    lag_bytes: int  # the master's written offset minus acked_offset
    lag_ms: int  # how long ago the oldest record the slave lacks was stored (0: none)
    connected: bool  # fetched within ha_housekeeping_ms


class BrokerInfo(msgspec.Struct, frozen=True, kw_only=True):
    """What a broker replica tells the coordinator when it registers or heartbeats."""

    broker_name: str
    node_id: str
    store_dir: str
    topics: dict[str, QueueData]
    data_version: int = 0
    broker_id: int = 0  # 0: the master
    role: str = "ASYNC_MASTER"
    epoch: int = 0
    written_offset: int = 0
    replicas: list[ReplicaStatus] = []  # a master's slaves
    auto_failover: bool = True
    disk_ratio: float = 0.0  # the store disk's last measured used-space ratio
    put_tps: float = 0.0  # messages stored per second, over the last few seconds


class HaFetch(msgspec.Struct, frozen=True, kw_only=True):
    """A slave's fetch from its master (server-internal): it holds the commit log up to
    ``offset`` in ``epoch`` (so every byte below is acknowledged) and asks for the bytes
    from there, waiting up to ``wait_ms`` for some."""

    broker_id: Annotated[int, Meta(ge=1)]
    offset: Annotated[int, Meta(ge=0)]
    epoch: Annotated[int, Meta(ge=0)]
    max_bytes: Annotated[int, Meta(gt=0)]
    wait_ms: Annotated[int, Meta(ge=0)] = 0


class HaChunk(msgspec.Struct, frozen=True, kw_only=True):
    """The master's answer: commit-log bytes from ``offset`` (maybe none). With
    ``truncate_to`` >= 0 the slave's log diverged: it cuts it there first (after checking
    that its bytes just below equal ``tail``); ``epochs`` is the master's epoch history,
    sent when the slave's differs."""

    offset: int
    data: bytes = b""
    master_offset: int
    epochs: list[tuple[int, int]] = []
    truncate_to: int = -1
    tail: bytes = b""
    topics_version: int = 0  # the master's topic table version: a slave behind syncs at once
    sync: bool = False  # the master is a SYNC_MASTER: sends wait for the slave's next fetch


class MetadataRequest(msgspec.Struct, frozen=True, kw_only=True):
    """A slave's periodic metadata sync (server-internal), carrying the consumer offsets
    committed on it since the last sync ("topic@group" -> queue -> offset)."""

    broker_id: Annotated[int, Meta(ge=1)]
    offsets: dict[str, dict[int, int]] = {}


class MetadataReply(msgspec.Struct, frozen=True, kw_only=True):
    """The master's config tables, each as its JSON file's bytes."""

    topics: bytes
    groups: bytes
    consumer_offsets: bytes
    delay_offsets: bytes


class FlushTargets(msgspec.Struct, frozen=True, kw_only=True):
    """What the flusher asks its broker each round (server-internal): commit-log bytes
    written, and the offset below which consume queues and index are written."""

    written: int
    dispatched: int


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


class SendBackResult(msgspec.Struct, frozen=True, kw_only=True):
    """Per item, in order: the topic the copy went to (``%RETRY%<group>`` or
    ``%DLQ%<group>``), its msg id and its new reconsume times."""

    topics: list[str]
    msg_ids: list[str]
    reconsume_times: list[int]


# ---------------------------------------------------------------------------------------
# The broker's client protocol: one request Struct per operation, validated at the actor
# boundary with ``check`` (types, unknown fields, ranges); names are checked by the server.


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


class ArrowPutRequest(_Request, frozen=True, kw_only=True):
    """Rows for one queue, as Arrow (Spark's JVM writes: rayq/jvm), appended as the
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


class MaxOffsetRequest(_Request, frozen=True, kw_only=True):
    topic: Text
    queue_id: QueueId


# Replies: one Struct each.


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


class PullManyResponse(msgspec.Struct, frozen=True, kw_only=True):
    """Per item of a ``PullManyRequest``, in order: its response or its RayqError."""

    results: list[Any]


_encoder = msgspec.msgpack.Encoder()


@functools.cache
def _decoder(cls: type) -> msgspec.msgpack.Decoder:
    return msgspec.msgpack.Decoder(cls)


R = TypeVar("R", bound=msgspec.Struct)


def to_wire(struct: msgspec.Struct) -> bytes:
    """A request or reply as msgpack: what the Ray transport sends instead of the Struct
    (Ray pickles a Struct with cloudpickle, ~0.1 ms a call more than plain bytes)."""
    return _encoder.encode(struct)


def from_wire(data: bytes | R, cls: type[R]) -> R:
    """The ``cls`` a peer sent (as ``to_wire`` bytes or as the Struct itself)."""
    return data if type(data) is cls else _decoder(cls).decode(data)  # type: ignore[return-value]


def check(request: object, cls: type[R]) -> R:
    """``request`` (a ``cls``, or its ``to_wire`` bytes) validated as ``cls`` (types,
    unknown fields, ranges), else InvalidRequestError. Structs built in code skip
    msgspec's checks; this is the boundary where a request from any driver is checked
    before anything is done."""
    if type(request) is bytes:  # as the client transport sends it (``to_wire``)
        return _decoded(_decoder(cls), request, cls)
    if type(request) is not cls:
        raise InvalidRequestError(
            f"expected a {cls.__name__}, got {type(request).__name__}", request=cls.__name__
        )
    try:
        return _decoder(cls).decode(_encoder.encode(request))
    except (msgspec.ValidationError, msgspec.EncodeError, TypeError, OverflowError) as exc:
        raise InvalidRequestError(
            f"malformed {cls.__name__}: {exc}", request=cls.__name__
        ) from None


@functools.cache
def _json_decoder(cls: type) -> msgspec.json.Decoder:
    return msgspec.json.Decoder(cls)


def check_json(request: object, cls: type[R]) -> R:
    """``request`` (JSON bytes, as the JVM sends it: rayq/jvm) validated as ``cls``, else
    InvalidRequestError."""
    if type(request) is not bytes:
        raise InvalidRequestError(
            f"expected a {cls.__name__} as JSON bytes, got {type(request).__name__}",
            request=cls.__name__,
        )
    return _decoded(_json_decoder(cls), request, cls)


def _decoded(decoder: Any, data: bytes, cls: type[R]) -> R:
    """``data`` decoded by ``decoder`` (which validates it as ``cls``), else
    InvalidRequestError."""
    try:
        return decoder.decode(data)  # type: ignore[no-any-return]
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise InvalidRequestError(
            f"malformed {cls.__name__}: {exc}", request=cls.__name__
        ) from None


# ---------------------------------------------------------------------------------------
# The coordinator's client protocol.


class MemberSpec(msgspec.Struct, frozen=True):
    """What a push consumer declares when it joins its group."""

    subscriptions: tuple[tuple[Text, Text], ...]  # sorted (topic, expression)
    model: MessageModel = MessageModel.CLUSTERING
    strategy: AllocateStrategy = AllocateStrategy.AVERAGELY
    allocation: tuple[MessageQueue, ...] = ()  # this member's queues, for CONFIG

    @property
    def topics(self) -> list[str]:
        return [t for t, _ in self.subscriptions]

    def same_group_settings(self, other: MemberSpec) -> bool:
        return (self.subscriptions, self.model, self.strategy) == (
            other.subscriptions,
            other.model,
            other.strategy,
        )


class ClientRequest(_Request, frozen=True, kw_only=True):
    """Just the caller: ``topics``, ``brokers``, ``leave_shares``."""


class RouteRequest(_Request, frozen=True, kw_only=True):
    topic: Text


class RoutesRequest(_Request, frozen=True, kw_only=True):
    topics: Annotated[list[Text], Meta(max_length=1 << 20)]


class ReadReplicaRequest(_Request, frozen=True, kw_only=True):
    """Which replica of ``broker_name`` serves calls now."""

    broker_name: Text


class ReadReplicaReply(msgspec.Struct, frozen=True, kw_only=True):
    """The replica to call: the broker name while its master serves, a slave's
    ``<name>#<id>`` while the master is lost and that slave serves reads."""

    replica: str


class LostBrokersRequest(_Request, frozen=True, kw_only=True):
    """Brokers that died or went silent (holding ``topic``, if given)."""

    topic: Text | None = None


class GroupShareRequest(_Request, frozen=True, kw_only=True):
    """A pull consumer's share of ``topic`` among its group's live members, allocated
    with ``strategy`` (every live member must use the same one); ``allocation``: the
    caller's queues, for CONFIG."""

    group: Text
    topic: Text
    expiry_ms: Annotated[int, Meta(ge=1, le=2**31 - 1)]
    strategy: AllocateStrategy = AllocateStrategy.AVERAGELY
    allocation: Annotated[list[MessageQueue], Meta(max_length=1 << 16)] = []


class JoinGroupRequest(_Request, frozen=True, kw_only=True):
    """A push consumer (the Consumer actor named after ``client_id``) joins ``group``."""

    group: Text
    spec: MemberSpec


class MemberRequest(_Request, frozen=True, kw_only=True):
    """The caller as a member of ``group``: ``leave_group``, ``member_alive``,
    ``group_members``."""

    group: Text


class StreamPlanRequest(_Request, frozen=True, kw_only=True):
    group: Text
    topic: Text


class RecordStreamPlanRequest(_Request, frozen=True, kw_only=True):
    """A streaming batch's offset ranges, recorded before it runs (opaque to the
    coordinator: ``rayq.ranges.OffsetRange`` fields)."""

    group: Text
    topic: Text
    ranges: Annotated[list[Any], Meta(max_length=1 << 20)]


class FinishStreamPlanRequest(_Request, frozen=True, kw_only=True):
    group: Text
    topic: Text
    batch_id: Annotated[int, Meta(ge=0)]


class RouteReply(msgspec.Struct, frozen=True, kw_only=True):
    route: TopicRoute | None


class RoutesReply(msgspec.Struct, frozen=True, kw_only=True):
    routes: dict[str, TopicRoute | None]


class NamesReply(msgspec.Struct, frozen=True, kw_only=True):
    """Topic or broker names, sorted."""

    names: list[str]


class ShareReply(msgspec.Struct, frozen=True, kw_only=True):
    """The caller's queues (None: no such topic)."""

    queues: list[MessageQueue] | None


class MembersReply(msgspec.Struct, frozen=True, kw_only=True):
    """Each member of a push-consumer group and the queues it owns now."""

    members: dict[str, list[MessageQueue]]


class BrokerEntry(msgspec.Struct, frozen=True, kw_only=True):
    """A broker replica the coordinator knows: its last registration or heartbeat, and
    whether it is lost (died or went silent, not back yet)."""

    broker_name: str
    broker_id: int
    role: str
    node_id: str
    last_heartbeat_ms: int
    lost: bool = False


class BrokerTableReply(msgspec.Struct, frozen=True, kw_only=True):
    brokers: list[BrokerEntry]


class CountReply(msgspec.Struct, frozen=True, kw_only=True):
    count: int


class StreamPlanReply(msgspec.Struct, frozen=True, kw_only=True):
    """The unfinished plan of (group, topic): its batch id and ranges (-1: none)."""

    batch_id: int = -1
    ranges: list[Any] = []
