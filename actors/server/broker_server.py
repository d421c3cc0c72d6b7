"""The broker's logic over its store, without Ray (``BrokerActor`` in actors/broker.py wraps it).

``BrokerServer`` serves the broker's client protocol (actors/protocol.py): each
public method takes one request Struct, already checked at the boundary with
``protocol.check``, and returns one reply Struct. Everything else here (topic and
group lookups, flush targets, persistence, ticks, close) is for the actor shell
only and is not reachable through the client transport.

Every append (sends, delayed deliveries, send-backs) holds ``writing``: the actor
runs concurrency groups on threads of their own, so one writer at a time.

Delayed delivery (actors/server/schedule.py): a batch the producer marked
``scheduled`` is routed through the schedule service, which the actor ticks.
Send-back (``send_back``): failed messages of a consumer group go to
``%RETRY%<group>`` through the delay levels, or to ``%DLQ%<group>``, both created
on first use with one queue.
"""

from __future__ import annotations

import logging
import socket
import struct
import threading
from pathlib import Path
from typing import Any

import msgspec
import pyarrow as pa

from rayq.actors.protocol import (
    PAGE_READERS,
    ArrowPage,
    ArrowPutRequest,
    BatchSendResult,
    BrokerInfo,
    BrokerStatus,
    BrokerStatusRequest,
    CommitOffsetsReply,
    CommitOffsetsRequest,
    CompareAndSetOffsetsRequest,
    CreateTopicRequest,
    DeleteGroupRequest,
    Done,
    EndTransactionReply,
    EndTransactionRequest,
    FlushTargets,
    GetMessageRequest,
    GroupConfigReply,
    GroupRequest,
    GroupsReply,
    HaChunk,
    HaFetch,
    HalfSendRequest,
    ListGroupsRequest,
    LockQueuesReply,
    LockQueuesRequest,
    MaxOffsetRequest,
    MessageQueue,
    MessagesReply,
    MetadataReply,
    MetadataRequest,
    OffsetByTimeRequest,
    OffsetReply,
    OffsetsReply,
    PageReadersReply,
    PageReadersRequest,
    PullManyRequest,
    PullManyResponse,
    PullRequest,
    PullResponse,
    PullStatus,
    QueryMessageRequest,
    QueryOffsetsRequest,
    QueueBoundsReply,
    QueueCommit,
    QueueData,
    QueueRef,
    QueueStats,
    ReadArrowRequest,
    ReplicationRequest,
    ReplicationStats,
    ResetOffsetsRequest,
    ScheduleStats,
    ScheduleStatsRequest,
    SendBackRequest,
    SendBackResult,
    SendStatus,
    TopicRequest,
    TopicStatsReply,
    TransactionCheck,
    TransactionChecksReply,
    TransactionChecksRequest,
    UpdateGroupRequest,
    ViewMessageRequest,
    page_reader_actor_name,
)
from rayq.actors.protocol.config import BrokerConfig, ClientConfig, replica_name
from rayq.actors.server import columnar
from rayq.actors.server.acl import AclService
from rayq.actors.server.dedupe import Verdict, open_sequences
from rayq.actors.server.put_rate import PutRate
from rayq.actors.server.queue_locks import QueueLocks
from rayq.actors.server.replication import (
    MasterReplication,
    SlaveReplication,
    apply_tables,
    merge_slave_offsets,
    snapshot_tables,
)
from rayq.actors.server.schedule import ScheduleService
from rayq.actors.server.send_back import GROUP_TOPIC_QUEUE_NUMS, prepare_send_back
from rayq.actors.server.table_files import (
    CONFIG_DIR_NAME,
    PERM_ALL,
    PERM_READ,
    PERM_WRITE,
    SubscriptionGroupConfig,
    TopicConfig,
    check_broadcast,
    is_readable,
    is_writeable,
    offset_key,
)
from rayq.actors.server.tables import ConfigStore
from rayq.actors.server.transactions import TransactionService
from rayq.store import SYSTEM_CLOCK, EncodedBatch, MessageStore, PutStatus, TagFilter
from rayq.store.arrow_puts import Columns, check_bodies, check_columns, encoded_puts
from rayq.store.batch import BatchRejected, check_encoded
from rayq.store.codec import decode_records
from rayq.store.epochs import EpochHistory
from rayq.store.errors import (
    BrokerBusyError,
    DiskFullError,
    GroupNotFoundError,
    InvalidFilterError,
    InvalidMessageError,
    InvalidOffsetError,
    InvalidRequestError,
    MessageTooLargeError,
    PermissionDeniedError,
    RayqError,
    ReplicationError,
    TopicNotFoundError,
)
from rayq.store.message import GetResult, GetStatus, PutResult
from rayq.store.names import (
    TRANS_CHECK_MAX_TIME_TOPIC,
    TRANS_HALF_TOPIC,
    check_client_write_topic,
    is_system_topic,
    retry_topic,
    validate_group,
    validate_topic,
)
from rayq.store.sql92 import SqlFilter, compile_sql, sql_filter_records

ACL_FILE_NAME = "plain_acl.toml"  # in <store dir>/config/ unless acl_file says


def acl_service(config: BrokerConfig, store_dir: Path) -> AclService | None:
    """A broker's ACL (None when off): the rules of ``acl_file``, or of
    ``<store dir>/config/plain_acl.toml``; its page readers check with the same."""
    if not config.acl_enable:
        return None
    acl_file = config.acl_file or str(store_dir / CONFIG_DIR_NAME / ACL_FILE_NAME)
    return AclService(acl_file, config.acl_timestamp_window_ms)


# Records per batch that ``put_arrow`` appends (as a producer's batches).
ARROW_PUT_BYTES = ClientConfig().batch_max_bytes

logger = logging.getLogger(__name__)

_TOTAL_SIZE = struct.Struct(">i")  # at a record's start (store/codec.py)
_QUEUE_OFFSET = struct.Struct(">12xq")
# Nothing readable in what the store scanned (tag mismatches; damaged, quarantined or
# removed records) while the offset moved past it: NO_MATCHED_MSG, answered at once and
# never parked, so the consumer pulls again from the moved offset (RocketMQ answers
# these PULL_RETRY_IMMEDIATELY, which its client sees as NO_MATCHED_MSG).
_PULL_STATUS = {
    GetStatus.FOUND: PullStatus.FOUND,
    GetStatus.NO_MATCHED_MESSAGE: PullStatus.NO_MATCHED_MSG,
    GetStatus.OFFSET_FOUND_NULL: PullStatus.NO_MATCHED_MSG,
    GetStatus.MESSAGE_WAS_REMOVING: PullStatus.NO_MATCHED_MSG,
    GetStatus.OFFSET_OVERFLOW_ONE: PullStatus.NO_NEW_MSG,
    GetStatus.NO_MESSAGE_IN_QUEUE: PullStatus.NO_NEW_MSG,
    GetStatus.NO_MATCHED_LOGIC_QUEUE: PullStatus.NO_NEW_MSG,
    GetStatus.OFFSET_TOO_SMALL: PullStatus.OFFSET_ILLEGAL,
    GetStatus.OFFSET_OVERFLOW_BADLY: PullStatus.OFFSET_ILLEGAL,
}
_EMPTY_QUEUE = (GetStatus.NO_MESSAGE_IN_QUEUE, GetStatus.NO_MATCHED_LOGIC_QUEUE)


def local_host(port: int = 10911) -> str:
    try:
        ip = socket.gethostbyname(socket.gethostname())
    except OSError:
        ip = "127.0.0.1"
    return f"{ip}:{port}"


class BrokerServer:
    """A broker's logic over its store; the actor wrapper adds scheduling and timers."""

    def __init__(self, config: BrokerConfig, store_dir: str, node_id: str = "") -> None:
        self.config = config
        self.name = config.broker_name
        self.root = Path(store_dir)
        self.node_id = node_id
        self.store = MessageStore(
            self.root,
            config.store_config,
            store_host=local_host(config.listen_port),
            broker_name=self.name,
        )
        self.tables = ConfigStore(self.root)
        self.locks = QueueLocks(config.rebalance_lock_max_live_time_ms)
        self._fences: dict[tuple[str, str, int], int] = {}  # (group, topic, queue) -> generation
        self.writing = threading.Lock()  # one appender at a time (see the module doc)
        self.schedule = ScheduleService(
            self.store,
            self.tables.delay_offsets,
            config.delay_levels,
            accept=self.tables.topics.__contains__,
        )
        self.sequences = open_sequences(
            self.tables.config_dir, self.store.commitlog, SYSTEM_CLOCK.now_ms()
        )
        self.transactions = TransactionService(
            self.store,
            self.tables.config_dir,
            timeout_ms=config.transaction_timeout,
            check_interval_ms=config.transaction_check_interval,
            check_max=config.transaction_check_max,
        )
        self.transactions.recover()
        self.role = config.broker_role
        self.epochs = EpochHistory(self.tables.config_dir)
        self.master: MasterReplication | None = None
        self.slave: SlaveReplication | None = None
        if self.role.is_master:
            self.master = MasterReplication(
                self.store, self.epochs, config, lambda: self.tables.topics.data_version
            )
        else:
            self.slave = SlaveReplication(self.store, self.epochs, config)
            self.slave.transactions = self.transactions
        # consumer offsets committed here while a slave: they go to the master at the next
        # metadata sync ("topic@group" -> queue -> offset)
        self.slave_commits: dict[str, dict[int, int]] = {}
        self.acl = acl_service(config, self.root)
        self.replication_error = ""  # a slave: why it is not replicating now
        self.put_rate = PutRate()
        logger.info(
            "broker %s serving store %s (recovery: %s)", self.name, self.root, self.store.recovery
        )

    # ------------------------------------------------------------- topics

    def authorize(self, method: str, request: Any) -> None:
        """ACL (actors/server/acl.py): nothing if ACL is off or ``request`` may call the
        client method ``method``; else PermissionDeniedError. Called at the boundary (the
        broker actor, the fake cluster) once per client request, after ``check``."""
        if self.acl is not None:
            self.acl.check(method, request)

    def topic_config(self, topic: str, create: bool = False) -> TopicConfig:
        _check_not_system(topic)
        cfg = self.tables.topics.get(topic)
        if cfg is not None:
            return cfg
        if not create or not self.config.auto_create_topic_enable:
            raise TopicNotFoundError(
                f"topic {topic!r} does not exist on broker {self.name}; create it with "
                "Admin.create_topic or enable auto_create_topic_enable",
                topic=topic,
            )
        n = self.config.default_topic_queue_nums
        return self._create_topic(topic, n, n, PERM_ALL)

    def create_topic(self, req: CreateTopicRequest) -> Done:
        """Create or overwrite a topic (admin)."""
        existed = req.topic in self.tables.topics
        self._create_topic(req.topic, req.read_queue_nums, req.write_queue_nums, req.perm)
        return Done(existed=existed)

    def _create_topic(
        self, topic: str, read_queues: int, write_queues: int, perm: int
    ) -> TopicConfig:
        _check_not_system(topic)
        for name, n in (("read_queues", read_queues), ("write_queues", write_queues)):
            if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= 1024:
                raise InvalidOffsetError(f"{name} must be an int in 1..1024, got {n!r}")
        cfg = TopicConfig(
            topic_name=topic, read_queue_nums=read_queues, write_queue_nums=write_queues, perm=perm
        )
        self.tables.topics.put(cfg)
        self.tables.topics.persist()
        return cfg

    def delete_topic(self, req: TopicRequest) -> Done:
        topic = req.topic
        _check_not_system(topic)
        existed = self.tables.topics.delete(topic)
        self.tables.topics.persist()
        with self.writing:
            self.store.delete_topic(topic)
        self.tables.consumer_offsets.remove_topic(topic)
        return Done(existed=existed)

    def info(self) -> BrokerInfo:
        queues = {
            t.topic_name: QueueData(
                broker_name=self.name,
                read_queue_nums=t.read_queue_nums,
                write_queue_nums=t.write_queue_nums,
                perm=t.perm,
                property_filter=self.config.enable_property_filter,
            )
            for t in (self.tables.topics.get(n) for n in self.tables.topics.topics())
            if t
        }
        now = SYSTEM_CLOCK.now_ms()
        return BrokerInfo(
            broker_name=self.name,
            node_id=self.node_id,
            store_dir=str(self.root),
            topics=queues,
            data_version=self.tables.topics.data_version,
            broker_id=self.config.broker_id,
            role=self.role.value,
            epoch=self.epochs.current,
            written_offset=self.store.written_offset,
            replicas=self.master.status(now) if self.master else [],
            auto_failover=self.config.auto_failover,
            disk_ratio=self.store.disk.ratio,
            put_tps=self.put_rate.per_second(now),
        )

    # --------------------------------------------------------------- send
    def put(self, batch: EncodedBatch, *, own: bool = False) -> BatchSendResult:
        """Append one producer batch; raises RayqErrors for what the sender must fix.
        ``own``: encoded by this broker (``put_arrow``): its records are not re-checked,
        and the answer has no per-message columns."""
        self._check_put(batch, "sends")
        cached = self._duplicate(batch, batch.topic)
        if cached is not None:
            return cached
        with self.writing:
            if batch.scheduled:  # some record has DELAY or __DELIVER_AT_MS: park those
                result = self.schedule.put_batch(batch)
            else:
                result = self.store.put_encoded(batch, own=own)
        return self._sent(batch, batch.topic, result, columns=not own)

    def _check_put(self, batch: EncodedBatch, what: str) -> None:
        """The checks of a producer's batch before anything is appended."""
        if not isinstance(batch, EncodedBatch):
            raise InvalidMessageError(f"expected an EncodedBatch, got {type(batch).__name__}")
        self._check_master(f"takes no {what}")
        check_client_write_topic(validate_topic(batch.topic))  # send-back and delays: not here
        cfg = self.topic_config(batch.topic, create=True)
        if not is_writeable(cfg.perm):
            raise PermissionDeniedError(f"topic {batch.topic!r} is not writeable (perm={cfg.perm})")
        if not 0 <= batch.queue_id < cfg.write_queue_nums:
            raise InvalidOffsetError(
                f"queue {batch.queue_id} of topic {batch.topic!r} does not exist: it has "
                f"{cfg.write_queue_nums} write queues",
                queue_id=batch.queue_id,
            )

    def _duplicate(self, batch: EncodedBatch, topic: str) -> BatchSendResult | None:
        """Idempotent produce (dedupe.py, keyed on ``topic``): the answer to a batch that
        was appended before, or None to append it; raises for overlaps and gaps."""
        if not batch.producer_id:
            return None
        pid, first = batch.producer_id, batch.first_sequence
        last_seq = first + batch.count - 1
        verdict, cached = self.sequences.check(pid, topic, batch.queue_id, first, last_seq)
        if verdict is Verdict.OVERLAP:
            raise InvalidMessageError(
                f"sequences {first}..{last_seq} of producer {pid!r} overlap what "
                f"{batch.topic}/{batch.queue_id} already has"
            )
        if verdict is Verdict.OUT_OF_ORDER:
            raise BrokerBusyError(
                f"sequence {first} of producer {pid!r} on {batch.topic}/{batch.queue_id} is "
                "out of order: an earlier batch has not arrived yet; retry"
            )
        if verdict is Verdict.DUPLICATE:
            return cached or BatchSendResult(
                status=SendStatus.SEND_OK,
                msg_ids=batch.msg_ids,
                offset_msg_ids=[""] * batch.count,
                queue_offsets=[-1] * batch.count,
            )
        return None

    def _sent(
        self, batch: EncodedBatch, topic: str, result: PutResult, columns: bool = True
    ) -> BatchSendResult:
        """The answer to an appended batch (and the producer's sequences moved on). Without
        ``columns`` (the broker's own batches: ``put_arrow`` answers a row count) it has no
        per-message ids and offsets, which cost ~0.5 us a message to format."""
        raise_for_put(result)
        self.put_rate.add(batch.count, SYSTEM_CLOCK.now_ms())
        if columns:
            out = BatchSendResult(
                status=SendStatus.SEND_OK,
                msg_ids=result.msg_ids,
                offset_msg_ids=result.offset_msg_ids,
                queue_offsets=result.queue_offsets,
            )
        else:
            out = BatchSendResult(
                status=SendStatus.SEND_OK, msg_ids=[], offset_msg_ids=[], queue_offsets=[]
            )
        if batch.producer_id:
            self.sequences.appended(
                batch.producer_id,
                topic,
                batch.queue_id,
                batch.first_sequence,
                batch.first_sequence + batch.count - 1,
                out,
                result.store_timestamp,
            )
        return out

    # ------------------------------------------------------- transactions
    def put_half(self, req: HalfSendRequest) -> BatchSendResult:
        """Store a transactional send's messages as half messages (transactions.py): in
        no consume queue until ``end_transaction`` commits them. The answer's offset
        message ids carry each half's commit-log offset (the transaction's key); its
        queue offsets are -1. Idempotent produce applies (keyed on the half topic)."""
        batch = req.batch
        self._check_put(batch, "transactional sends")
        validate_group(req.group)
        if batch.scheduled:
            raise InvalidMessageError(
                "a transactional message cannot be delayed (DELAY or __DELIVER_AT_MS): "
                "send it without a delay"
            )
        cached = self._duplicate(batch, TRANS_HALF_TOPIC)
        if cached is not None:
            return cached
        cfg = self.config.store
        try:
            check_encoded(batch, cfg.max_message_size_bytes, cfg.max_properties_size_bytes)
        except BatchRejected as exc:
            raise InvalidMessageError(str(exc)) from None
        msgs = decode_records(batch.records, decompress=False)
        with self.writing:
            result = self.transactions.put_halves(msgs, req.group)
        out = self._sent(batch, TRANS_HALF_TOPIC, result)
        return msgspec.structs.replace(out, queue_offsets=[-1] * len(msgs))

    def end_transaction(self, req: EndTransactionRequest) -> EndTransactionReply:
        """Commit (the message appended to its real queue) or roll back a transaction;
        an end of a transaction that ended before changes nothing (``ended`` False)."""
        self._check_master("takes no transaction ends")
        validate_group(req.group)
        validate_topic(req.topic)
        with self.writing:
            done = self.transactions.end(
                req.transaction_offset,
                req.group,
                req.msg_id,
                req.topic,
                req.commit,
                self._check_commit_target,
            )
        if done.put is not None:
            raise_for_put(done.put)
        if not done.ended or not done.committed or done.put is None:
            return EndTransactionReply(ended=done.ended, committed=False)
        return EndTransactionReply(
            ended=True,
            committed=True,
            queue_id=done.queue_id,
            queue_offset=done.put.queue_offsets[0],
            offset_msg_id=done.put.offset_msg_ids[0],
        )

    def _check_commit_target(self, topic: str, queue_id: int) -> None:
        cfg = self.topic_config(topic, create=False)
        if not is_writeable(cfg.perm) or not 0 <= queue_id < cfg.write_queue_nums:
            raise PermissionDeniedError(
                f"cannot commit to {topic}/{queue_id} now: the topic is not writeable "
                f"(perm={cfg.perm}) or has {cfg.write_queue_nums} write queues; the "
                "transaction stays open and is checked again",
                topic=topic,
            )

    def transaction_checks(self, req: TransactionChecksRequest) -> TransactionChecksReply:
        """The checks queued for the producer group (each handed out once; a check not
        answered comes again at a later tick)."""
        validate_group(req.group)
        with self.writing:
            taken = self.transactions.take_checks(req.group, req.max_num)
        return TransactionChecksReply(
            checks=[TransactionCheck(transaction_offset=key, message=msg) for key, msg in taken]
        )

    def transaction_tick(self) -> list[tuple[str, int]]:
        """The check service's round (a master's; the actor runs it every
        ``transaction_check_interval``): the queues appended to."""
        if self.slave is not None:
            return []
        if TRANS_CHECK_MAX_TIME_TOPIC not in self.tables.topics and self.transactions.open:
            self.ensure_system_topic(TRANS_CHECK_MAX_TIME_TOPIC, 1)
        with self.writing:
            return self.transactions.tick(SYSTEM_CLOCK.now_ms())

    # --------------------------------------------------------------- pull
    def pull(self, req: PullRequest, max_bytes: int | None = None) -> PullResponse:
        """Non-blocking pull of up to ``req.max_nums`` messages (PullHold adds waiting),
        at most ``pull_max_bytes`` of records, or ``max_bytes`` if less (then only whole
        records that fit, but at least one)."""
        group = self.group_config(req.group, create=True)
        if not group.consume_enable:
            raise PermissionDeniedError(
                f"consumer group {req.group!r} may not consume (consume_enable is off); "
                "turn it on with Admin.update_group",
                group=req.group,
            )
        cfg = self.topic_config(req.topic, create=False)
        if not is_readable(cfg.perm):
            raise PermissionDeniedError(f"topic {req.topic!r} is not readable (perm={cfg.perm})")
        if not 0 <= req.queue_id < cfg.read_queue_nums:
            raise InvalidOffsetError(f"queue {req.queue_id} of topic {req.topic!r} does not exist")
        tag_filter, sql = self._filters(req)
        want = min(max(req.max_nums, 1), self.config.pull_max_messages)
        parts: list[bytes] = []
        count = size = 0
        offset = req.queue_offset
        budget = (
            self.config.pull_max_bytes
            if max_bytes is None
            else min(max_bytes, self.config.pull_max_bytes)
        )
        got = self.store.get_messages(req.group, req.topic, req.queue_id, offset, want, tag_filter)
        first = got
        scan_limit = req.queue_offset + self.config.store.max_filter_scan_entries
        while got.status is GetStatus.FOUND or got.status is GetStatus.NO_MATCHED_MESSAGE:
            buffer, n, offset = got.buffer, got.count, got.next_begin_offset
            if sql is not None and n:
                buffer, n, offset = sql_filter_records(buffer, sql, got.next_begin_offset)
                got = msgspec.structs.replace(got, count=n, buffer=buffer)
                if not n and offset < got.max_offset and offset < scan_limit:
                    got = self.store.get_messages(
                        req.group, req.topic, req.queue_id, offset, want - count, tag_filter
                    )
                    continue
            if n and size + len(buffer) > budget and max_bytes is not None:
                buffer, n, offset = _fit(buffer, budget - size, offset, at_least_one=not count)
            parts.append(buffer)
            count += n
            size += len(buffer)
            if n < got.count:  # the budget is full
                break
            if count >= want or size >= budget or offset >= got.max_offset:
                break
            got = self.store.get_messages(
                req.group, req.topic, req.queue_id, offset, want - count, tag_filter
            )
        suggest = self._suggest_replica(group, first.suggest_pull_from_slave)
        status = PullStatus.FOUND if count else _PULL_STATUS[first.status]
        if not count and sql is not None and first.status is GetStatus.FOUND:
            first = msgspec.structs.replace(first, status=GetStatus.NO_MATCHED_MESSAGE)
            status = PullStatus.NO_MATCHED_MSG  # every record scanned failed the SQL92 filter
        next_offset = (
            offset
            if count or first.status is GetStatus.NO_MATCHED_MESSAGE
            else (first.next_begin_offset)
        )
        if status is PullStatus.NO_MATCHED_MSG and next_offset <= req.queue_offset:
            status = PullStatus.NO_NEW_MSG  # nothing scanned (a missing file): wait for news
        if not count:
            status, next_offset = self._corrected(first, req.queue_offset, status, next_offset)
        return PullResponse(
            status=status,
            next_offset=next_offset,
            min_offset=first.min_offset,
            max_offset=max(first.max_offset, got.max_offset),
            buffer=b"".join(parts),
            count=count,
            suggest_replica=suggest,
        )

    def _corrected(
        self, got: GetResult, queue_offset: int, status: PullStatus, next_offset: int
    ) -> tuple[PullStatus, int]:
        """RocketMQ's PullMessageProcessor: a queue with nothing in it (or none at all)
        moves a pull at an offset other than 0 to 0 (OFFSET_ILLEGAL; at 0 it waits for
        news). A slave may lag its master, so it corrects nothing backwards: such a pull
        waits there, and one past its end moves to its end, never back to its start."""
        if got.status in _EMPTY_QUEUE and queue_offset != 0:
            if self.slave is None:
                return PullStatus.OFFSET_ILLEGAL, 0
            return PullStatus.NO_NEW_MSG, queue_offset
        if got.status is GetStatus.OFFSET_OVERFLOW_BADLY and self.slave is not None:
            return status, got.max_offset
        return status, next_offset

    def _filters(self, req: PullRequest) -> tuple[TagFilter | None, SqlFilter | None]:
        """The pull's tag filter, or its compiled SQL92 filter (compiled once per text)."""
        if req.expression_type != "SQL92":
            return TagFilter.parse(req.expression), None
        if not self.config.enable_property_filter:
            raise InvalidFilterError(
                f"broker {self.name} does not evaluate SQL92 filters: turn on "
                "BrokerConfig.enable_property_filter, or subscribe by tag",
                broker=self.name,
            )
        return None, compile_sql(req.expression)

    def _suggest_replica(self, group: SubscriptionGroupConfig, far_behind: bool) -> str:
        """RocketMQ's suggestWhichBrokerId: with ``slave_read_enable``, a pull far behind
        is pointed at the group's ``which_broker_when_consume_slowly`` slave (or another
        connected one); a slave keeps such a pull and sends one that caught up back."""
        if not self.config.slave_read_enable or not far_behind:
            return ""
        if self.slave is not None:
            return self.config.replica_name
        assert self.master is not None
        connected = [r.broker_id for r in self.master.status(SYSTEM_CLOCK.now_ms()) if r.connected]
        if not connected:
            return ""
        wanted = group.which_broker_when_consume_slowly
        return replica_name(self.name, wanted if wanted in connected else connected[0])

    def pull_many(self, req: PullManyRequest, max_bytes: int | None = None) -> PullManyResponse:
        """``pull`` for each queue of ``req``; a queue's error is its answer, not the call's.
        ``max_bytes``: of records in all (the queues in order, each at least one record).
        A broadcasting consumer's pull is refused (PermissionDeniedError) if its group has
        ``consume_broadcast_enable`` off."""
        if req.broadcasting:
            check_broadcast(self.group_config(req.group, create=True), self.name)
        out: list[PullResponse | RayqError] = []
        left = max_bytes
        for item in req.items:
            try:
                resp = self.pull(req.request(item), None if left is None else max(left, 1))
                out.append(resp)
                if left is not None:
                    left -= len(resp.buffer)
            except RayqError as exc:
                out.append(exc)
        return PullManyResponse(results=out)

    def max_offset(self, req: MaxOffsetRequest) -> OffsetReply:
        self.topic_config(req.topic, create=False)
        return OffsetReply(offset=self.store.max_offset(req.topic, req.queue_id))

    def arrow_batches(self, req: ArrowPutRequest, rows: object) -> list[EncodedBatch]:
        """The rows of a ``put_arrow`` (an Arrow IPC stream from Spark's JVM: ``bytes``, or
        a ``memoryview`` of a shared slot) as the idempotent batches of
        ``req.producer_id`` (store/arrow_puts.py), all encoded before any is appended (and
        copied out of ``rows``): a bad row (a null body, one over the store's limits, a
        reserved property) raises and leaves nothing appended by this call."""
        cols = Columns(req.body, req.keys, req.tags, req.properties)
        data = pa.py_buffer(rows) if type(rows) in (bytes, memoryview) else b""
        try:
            table = pa.ipc.open_stream(data).read_all()
        except (pa.ArrowInvalid, OSError) as exc:
            raise InvalidRequestError(
                f"put_arrow: rows are not an Arrow IPC stream: {exc}", request="ArrowPutRequest"
            ) from None
        check_columns(table.schema, cols)
        check_bodies(table, cols)
        limits = self.store.config
        return list(
            encoded_puts(
                table.to_batches(),
                req.topic,
                req.queue_id,
                req.producer_id,
                cols,
                req.group,
                ARROW_PUT_BYTES,
                req.first_sequence,
                limits.max_message_size_bytes,
                limits.max_properties_size_bytes,
            )
        )

    def read_arrow(self, req: ReadArrowRequest) -> ArrowPage:
        """Offsets ``[start, end)`` as one record batch of decoded columns (columnar.py),
        one page of about ``max_bytes``; and the offset the next page starts at."""
        topic, queue_id = req.topic, req.queue_id
        cfg = self.topic_config(topic, create=False)
        if not 0 <= queue_id < cfg.read_queue_nums:
            raise InvalidOffsetError(f"queue {queue_id} of topic {topic!r} does not exist")
        batch, nxt = columnar.read_columns(
            self.store, topic, queue_id, req.start, req.end, req.max_bytes, self.name, req.columns
        )
        return ArrowPage(batch=batch, next_offset=nxt)

    def queue_bounds(self, req: TopicRequest) -> QueueBoundsReply:
        """(min offset, max offset) of each read queue of the topic."""
        topic = req.topic
        cfg = self.topic_config(topic, create=False)
        return QueueBoundsReply(
            bounds={
                q: (self.store.min_offset(topic, q), self.store.max_offset(topic, q))
                for q in range(cfg.read_queue_nums)
            }
        )

    # ------------------------------------------------------------- groups
    def group_config(self, group: str, create: bool = False) -> SubscriptionGroupConfig:
        """The subscription group's config; auto-created (defaults) on a group's first pull
        or commit when ``auto_create_subscription_group`` is on, as RocketMQ does."""
        validate_group(group)
        cfg = self.tables.subscription_groups.get(group)
        if cfg is not None:
            return cfg
        if not create or not self.config.auto_create_subscription_group:
            raise GroupNotFoundError(
                f"consumer group {group!r} does not exist on broker {self.name}; create it "
                "with Admin.create_group or enable auto_create_subscription_group",
                group=group,
            )
        return self._put_group(SubscriptionGroupConfig(group_name=group))

    def group_or_defaults(self, group: str) -> SubscriptionGroupConfig:
        """The group's config, or RocketMQ's defaults for a group not created (yet)."""
        validate_group(group)
        found = self.tables.subscription_groups.get(group)
        return found if found is not None else SubscriptionGroupConfig(group_name=group)

    def get_group(self, req: GroupRequest) -> GroupConfigReply:
        """The config of an existing group (GroupNotFoundError if there is none)."""
        return GroupConfigReply(config=self.group_config(req.group))

    def update_group(self, req: UpdateGroupRequest) -> GroupConfigReply:
        """Create or replace a subscription group's config."""
        return GroupConfigReply(config=self._put_group(req.config))

    def _put_group(self, cfg: SubscriptionGroupConfig) -> SubscriptionGroupConfig:
        validate_group(cfg.group_name)
        self.tables.subscription_groups.put(cfg)
        self.tables.subscription_groups.persist()
        return cfg

    def delete_group(self, req: DeleteGroupRequest) -> Done:
        """Remove a group's config (and with ``clean_offsets`` its committed offsets)."""
        group, clean_offsets = req.group, req.clean_offsets
        validate_group(group)
        existed = self.tables.subscription_groups.delete(group)
        self.tables.subscription_groups.persist()
        if clean_offsets:
            existed = bool(self.tables.consumer_offsets.remove_group(group)) or existed
            self.tables.consumer_offsets.persist()
        return Done(existed=existed)

    def groups(self, req: ListGroupsRequest) -> GroupsReply:
        return GroupsReply(groups=self.tables.subscription_groups.groups())

    # ------------------------------------------------------------ offsets
    def commit_offsets(self, req: CommitOffsetsRequest) -> CommitOffsetsReply:
        """Commit next-offsets per queue (with the ranges past them consumed already);
        the queue ids refused as stale.

        A push consumer commits with its assignment's ``generation``: once a queue saw a
        commit of generation g, commits of older generations are refused, so a consumer
        that lost the queue in a rebalance cannot move the group's offset (in memory: a
        broker restart forgets the fences)."""
        return self._commit(req.group, req.topic, dict(req.offsets), req.generation, req.acked)

    def commit_pulled(self, req: PullManyRequest) -> None:
        """The commits a push consumer's pull carries (``PullManyRequest.commits``), made
        when the pull arrives (never again when a parked pull is read)."""
        by_topic: dict[str, list[QueueCommit]] = {}
        for c in req.commits:
            by_topic.setdefault(c.topic, []).append(c)
        for topic, commits in by_topic.items():
            offsets = {c.queue_id: c.queue_offset for c in commits}
            acked = {c.queue_id: c.acked for c in commits if c.acked}
            self._commit(req.group, topic, offsets, req.generation, acked)

    def _commit(
        self,
        group: str,
        topic: str,
        offsets: dict[int, int],
        generation: int,
        acked: dict[int, Any],
    ) -> CommitOffsetsReply:
        self.group_config(group, create=True)
        validate_topic(topic)
        alone = sorted(set(acked) - set(offsets))
        if alone:
            raise InvalidOffsetError(
                f"acked ranges for queue(s) {alone} of topic {topic!r} come without their "
                "offsets; commit each queue's offset with its ranges",
                value=repr(alone),
            )
        stale: list[int] = []
        if generation >= 0:
            fresh = {}
            for qid, offset in offsets.items():
                key = (group, topic, qid)
                if generation < self._fences.get(key, -1):
                    stale.append(qid)
                else:
                    self._fences[key] = generation
                    fresh[qid] = offset
            offsets = fresh
        acked = {q: r for q, r in acked.items() if q in offsets}
        self.tables.consumer_offsets.commit_many(group, topic, offsets, acked)
        if self.slave is not None and offsets:
            self.slave_commits.setdefault(offset_key(topic, group), {}).update(offsets)
        return CommitOffsetsReply(stale=stale)

    def lock_queues(self, req: LockQueuesRequest) -> LockQueuesReply:
        """Orderly consumption: lock (or renew) queues for the caller; the ones it holds."""
        validate_group(req.group)
        _check_client(req.client_id)
        queues = [(q.topic, q.queue_id) for q in req.queues]
        held = self.locks.lock(req.group, req.client_id, queues, SYSTEM_CLOCK.now_ms())
        return LockQueuesReply(locked=[QueueRef(t, q) for t, q in held])

    def unlock_queues(self, req: LockQueuesRequest) -> LockQueuesReply:
        validate_group(req.group)
        _check_client(req.client_id)
        n = self.locks.unlock(req.group, req.client_id, [(q.topic, q.queue_id) for q in req.queues])
        return LockQueuesReply(released=n)

    def query_offsets(self, req: QueryOffsetsRequest) -> OffsetsReply:
        validate_group(req.group)
        validate_topic(req.topic)
        table = self.tables.consumer_offsets
        return OffsetsReply(
            offsets=table.query_all(req.group, req.topic), acked=table.acked(req.group, req.topic)
        )

    def offset_by_time(self, req: OffsetByTimeRequest) -> OffsetReply:
        self.topic_config(req.topic, create=False)
        return OffsetReply(
            offset=self.store.offset_by_time(req.topic, req.queue_id, req.timestamp_ms)
        )

    def reset_offsets(self, req: ResetOffsetsRequest) -> OffsetsReply:
        group, topic = req.group, req.topic
        validate_group(group)
        cfg = self.topic_config(topic, create=False)
        offsets = {
            q: self.store.offset_by_time(topic, q, req.timestamp_ms)
            for q in range(cfg.read_queue_nums)
        }
        self.tables.consumer_offsets.commit_many(group, topic, offsets)
        return OffsetsReply(offsets=offsets)

    def compare_and_set_offsets(self, req: CompareAndSetOffsetsRequest) -> Done:
        """Commit ``offsets`` only if every queue's committed offset is ``expected`` (-1:
        none yet); all or nothing (``existed`` False: refused). A streaming batch commits
        this way."""
        group, topic = req.group, req.topic
        validate_group(group)
        validate_topic(topic)
        table = self.tables.consumer_offsets
        if any(table.query(group, topic, q) != e for q, e in req.expected.items()):
            return Done(existed=False)
        table.commit_many(group, topic, dict(req.offsets))
        return Done(existed=True)

    # -------------------------------------------------------------- admin
    def topic_stats(self, req: TopicRequest) -> TopicStatsReply:
        topic = req.topic
        cfg = self.topic_config(topic, create=False)
        out = []
        for q in range(max(cfg.read_queue_nums, cfg.write_queue_nums)):
            hi = self.store.max_offset(topic, q)
            last = self.store.store_time_of(topic, q, hi - 1) if hi else None
            out.append(
                QueueStats(
                    queue=MessageQueue(topic, self.name, q),
                    min_offset=self.store.min_offset(topic, q),
                    max_offset=hi,
                    last_store_timestamp=last or 0,
                )
            )
        return TopicStatsReply(queues=out)

    def query_message(self, req: QueryMessageRequest) -> MessagesReply:
        validate_topic(req.topic)
        found = self.store.query_message(req.topic, req.key, req.max_num, req.begin_ms, req.end_ms)
        return MessagesReply(messages=found)

    def view_message(self, req: ViewMessageRequest) -> MessagesReply:
        """The message with this id ([] if none)."""
        found = self.store.view_message(req.msg_id)
        return MessagesReply(messages=[found] if found is not None else [])

    def get_message(self, req: GetMessageRequest) -> MessagesReply:
        """The message at ``queue_offset`` of a queue ([] if none is there: past the end,
        removed by retention, or damaged)."""
        cfg = self.topic_config(req.topic, create=False)
        if not 0 <= req.queue_id < max(cfg.read_queue_nums, cfg.write_queue_nums):
            raise InvalidOffsetError(
                f"queue {req.queue_id} of topic {req.topic!r} does not exist (it has "
                f"{cfg.read_queue_nums} queues)",
                value=str(req.queue_id),
            )
        got = self.store.get_messages("", req.topic, req.queue_id, req.queue_offset, 1)
        if got.status is not GetStatus.FOUND or not got.count:
            return MessagesReply(messages=[])
        found = decode_records(got.buffer, broker_name=self.name)
        return MessagesReply(messages=[m for m in found if m.queue_offset == req.queue_offset])

    def page_readers(self, req: PageReadersRequest) -> PageReadersReply:
        """The names of this replica's page readers (the actor starts them first)."""
        return PageReadersReply(
            names=[page_reader_actor_name(self.config.replica_name, i) for i in range(PAGE_READERS)]
        )

    def broker_status(self, req: BrokerStatusRequest) -> BrokerStatus:
        """This replica's info with a fresh disk measurement, its limits and settings (the
        actor adds what its flusher and hold service answer)."""
        now = SYSTEM_CLOCK.now_ms()
        self.store.disk.measure(now)
        store = self.config.store_config
        return BrokerStatus(
            info=self.info(),
            replication_error=self.replication_error,
            disk_clean_ratio=store.disk_max_used_space_ratio,
            disk_full_ratio=store.disk_warning_ratio,
            heartbeat_interval_ms=self.config.heartbeat_interval_ms,
            config=msgspec.to_builtins(self.config),
        )

    # ------------------------------------------------- delays and retries
    def send_back(self, request: SendBackRequest) -> SendBackResult:
        """Failed messages of a consumer group to its retry or dead-letter topic: one call
        per batch, all or none (store/send_back.py). Bad input raises a RayqError and
        writes nothing. The group's config applies: ``retry_max_times`` when the request
        gives no ``max_reconsume_times`` (-1), ``retry_queue_nums`` queues for the retry
        topic, and with ``retry_queue_nums`` 0 the messages are dropped (logged)."""
        items = request.items
        self._check_master("takes no send-backs")
        group = self.group_or_defaults(request.group)
        most = request.max_reconsume_times
        retry = retry_topic(request.group)
        known = self.tables.topics.get(retry)
        queues = (
            group.retry_queue_nums
            if known is None
            else min(group.retry_queue_nums, known.write_queue_nums)
        )
        msgs = prepare_send_back(
            self.store,
            request.group,
            [(i.commitlog_offset, i.delay_level) for i in items],
            group.retry_max_times if most < 0 else most,
            queues,
        )
        if group.retry_queue_nums <= 0:
            logger.warning(
                "broker %s: group %s has retry_queue_nums 0: %d failed messages "
                "dropped, neither retried nor dead-lettered",
                self.name,
                request.group,
                len(msgs),
            )
            return SendBackResult(
                topics=[""] * len(msgs),
                msg_ids=[""] * len(msgs),
                reconsume_times=[m.reconsume_times for m in msgs],
            )
        for topic in {m.topic for m in msgs}:
            n = group.retry_queue_nums if topic == retry else GROUP_TOPIC_QUEUE_NUMS
            self.ensure_system_topic(topic, n)
        with self.writing:
            result = self.schedule.put(msgs)
        raise_for_put(result)
        return SendBackResult(
            topics=[m.topic for m in msgs],
            msg_ids=result.msg_ids,
            reconsume_times=[m.reconsume_times for m in msgs],
        )

    def schedule_tick(self) -> dict[tuple[str, int], int]:
        """Deliver due delayed messages: {(topic, queue): new max offset} of what was written.
        A slave delivers nothing: its master does, and the slave copies the result."""
        if self.slave is not None:
            return {}
        with self.writing:
            return self.schedule.tick()

    def schedule_stats(self, req: ScheduleStatsRequest) -> ScheduleStats:
        """Delay-level progress (next offset, max offset) and the deliver-at backlog."""
        return self.schedule.stats()

    def ensure_retry_topic(self, req: GroupRequest) -> Done:
        """Create ``%RETRY%<group>`` unless it exists (a push consumer does at start)."""
        group = self.group_or_defaults(req.group)
        queues = max(group.retry_queue_nums, GROUP_TOPIC_QUEUE_NUMS)
        created = self.ensure_system_topic(retry_topic(req.group), queues)
        return Done(existed=not created)

    def ensure_system_topic(self, topic: str, queues: int) -> bool:
        """Create a retry or dead-letter topic (read and write) unless it exists; True if new.
        Created even when auto_create_topic_enable is off, as RocketMQ does."""
        if topic in self.tables.topics:
            return False
        self._create_topic(topic, queues, queues, PERM_READ | PERM_WRITE)
        return True

    # ------------------------------------------------------ housekeeping
    def flush_targets(self) -> FlushTargets:
        """Commit-log bytes written, and the offset below which queues and index are."""
        return FlushTargets(
            written=self.store.written_offset, dispatched=self.store.dispatched_offset
        )

    def persist(self) -> None:
        if self.slave is None:  # a slave's delay offsets are its master's (metadata sync)
            with self.writing:
                self.schedule.sync_progress()
        self.tables.persist_all()
        self.sequences.persist(self.store.written_offset, SYSTEM_CLOCK.now_ms())
        with self.writing:
            self.transactions.persist(self._transactions_cover())

    def _transactions_cover(self) -> int:
        """How far the transaction table has seen the log: all of it on a master; on a
        slave, the records dispatched so far (they are applied as they are)."""
        return self.store.written_offset if self.slave is None else self.store.replica_dispatched

    def group_lags(self) -> dict[tuple[str, str], int]:
        """Consumer lag per (group, topic): max offset minus committed offset, summed over
        the queues the group committed on (RocketMQ exporter's ``rocketmq_group_diff``)."""
        lags: dict[tuple[str, str], int] = {}
        for group, topic, queues in self.tables.consumer_offsets.entries():
            if topic in self.tables.topics:
                lags[(group, topic)] = sum(
                    max(self.store.max_offset(topic, q) - committed, 0)
                    for q, committed in queues.items()
                )
        return lags

    def retention_tick(self) -> None:
        self.store.retention_tick()

    def close(self) -> None:
        if self.slave is None:
            with self.writing:
                self.schedule.sync_progress()
        self.tables.close()
        self.sequences.persist(self.store.written_offset, SYSTEM_CLOCK.now_ms())
        self.transactions.persist(self._transactions_cover())
        self.store.close()

    # ------------------------------------------------------- replication
    def _check_master(self, what: str) -> None:
        if self.slave is not None:
            raise PermissionDeniedError(
                f"broker {self.config.replica_name} is a SLAVE: it {what}; they go to its "
                f"master {self.name}",
                broker=self.config.replica_name,
            )

    def ha_fetch(self, req: HaFetch) -> HaChunk | None:
        """A slave's fetch (None: it has everything; the actor parks it)."""
        if self.master is None:
            raise ReplicationError(
                f"broker {self.config.replica_name} is a SLAVE, not a master: slave "
                f"{req.broker_id} fetches from the wrong broker",
                offset=req.offset,
            )
        return self.master.fetch(req, SYSTEM_CLOCK.now_ms())

    def replication(self, req: ReplicationRequest) -> ReplicationStats:
        """This broker's role, epoch and written offset; a master's slaves and their lag."""
        slaves = self.master.status(SYSTEM_CLOCK.now_ms()) if self.master else []
        return ReplicationStats(
            broker_name=self.name,
            broker_id=self.config.broker_id,
            role=self.role.value,
            epoch=self.epochs.current,
            written_offset=self.store.written_offset,
            replicas=slaves,
            error=self.replication_error,
        )

    def ha_metadata(self, req: MetadataRequest) -> MetadataReply:
        """A slave's metadata sync: merge the offsets committed on it, answer the tables."""
        if self.master is None:
            raise ReplicationError(f"broker {self.config.replica_name} is a SLAVE, not a master")
        if merge_slave_offsets(self.tables, req):
            self.tables.consumer_offsets.persist()
        return snapshot_tables(self.tables)

    def metadata_request(self) -> MetadataRequest:
        assert self.slave is not None
        return MetadataRequest(
            broker_id=self.config.broker_id,
            offsets={k: dict(v) for k, v in self.slave_commits.items()},
        )

    def apply_metadata(self, sent: MetadataRequest, reply: MetadataReply) -> None:
        """Take the master's tables; the offsets committed here since ``sent`` stay."""
        keep: dict[str, dict[int, int]] = {}
        for key, queues in self.slave_commits.items():
            newer = {q: o for q, o in queues.items() if sent.offsets.get(key, {}).get(q) != o}
            if newer:
                keep[key] = newer
        self.slave_commits = {k: dict(v) for k, v in keep.items()}
        apply_tables(self.tables, reply, keep)


def _check_not_system(topic: str) -> None:
    """Topic admin, routes and pulls: refuse the broker's own topics (store/names.py).
    Retry and dead-letter topics pass: consumers read them and send-back creates them;
    so does TRANS_CHECK_MAX_TIME_TOPIC (discarded transactions, for operators to read);
    ``put`` refuses them for clients with ``check_client_write_topic``."""
    validate_topic(topic)
    if is_system_topic(topic) and topic != TRANS_CHECK_MAX_TIME_TOPIC:
        check_client_write_topic(topic)  # raises PermissionDeniedError saying why


def _check_client(client_id: str) -> None:
    if not client_id:
        raise InvalidRequestError("this request needs the caller's client_id (the lock owner)")


def _fit(buffer: bytes, room: int, next_offset: int, at_least_one: bool) -> tuple[bytes, int, int]:
    """The whole records at the head of ``buffer`` that fit in ``room`` bytes (one more
    if ``at_least_one`` and none fits), how many, and the queue offset of the first
    record left out (``next_offset`` if none is). Records carry their queue offset, so
    this holds with tag filtering too."""
    end = count = 0
    while end < len(buffer):
        (total,) = _TOTAL_SIZE.unpack_from(buffer, end)
        if end + total > room and (count or not at_least_one):
            (queue_offset,) = _QUEUE_OFFSET.unpack_from(buffer, end)
            return buffer[:end], count, queue_offset
        end += total
        count += 1
    return buffer, count, next_offset


def raise_for_put(result: PutResult) -> None:
    """The RayqError for a failed append (nothing was written)."""
    if result.status is PutStatus.DISK_FULL:
        raise DiskFullError(result.error)
    if result.status is PutStatus.PROPERTIES_SIZE_EXCEEDED:
        raise MessageTooLargeError(result.error)
    if not result.ok:
        raise InvalidMessageError(result.error)
