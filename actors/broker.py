"""The Broker actor: one MessageStore on node-local disk, plus topic, group and offset tables.

``BrokerServer`` is an undecorated class (testable without Ray); ``spawn_broker``
makes it a named, restartable async Ray actor pinned to a node. Sends, pulls and
admin calls run in separate concurrency groups so held pulls and slow admin calls
cannot starve sends. Restarted by Ray, ``__init__`` reopens (and so recovers)
the store from disk, and the schedule service reloads its progress.

Concurrency groups run on threads of their own: every append (sends, delayed
deliveries, send-backs) holds ``BrokerServer.writing``, so one writer at a time.

Delayed delivery (store/schedule.py): a batch the producer marked ``scheduled`` is
routed through the schedule service; the actor ticks it (``SCHEDULE_TICK_MS``, or
sooner when something is due sooner) and notifies its PullHold of what was
delivered. Send-back (``send_back``, reached through ``call``): failed messages of
a consumer group go to ``%RETRY%<group>`` through the delay levels, or to
``%DLQ%<group>``, both created on first use with one queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
from pathlib import Path
from typing import Any

import ray

from rayq.actors.server import columnar
from rayq.actors.server.dedupe import Verdict, open_sequences
from rayq.actors.server.schedule import SCHEDULE_TICK_MS, ScheduleService, ScheduleStats
from rayq.actors.server.send_back import GROUP_TOPIC_QUEUE_NUMS, prepare_send_back
from rayq.actors.server.tables import (
    PERM_ALL,
    PERM_READ,
    PERM_WRITE,
    ConfigStore,
    SubscriptionGroupConfig,
    TopicConfig,
    is_readable,
    is_writeable,
)
from rayq.store import SYSTEM_CLOCK, EncodedBatch, MessageStore, PutStatus, TagFilter
from rayq.store.errors import (
    BrokerBusyError,
    DiskFullError,
    GroupNotFoundError,
    InvalidMessageError,
    InvalidOffsetError,
    MessageTooLargeError,
    PermissionDeniedError,
    RayqError,
    TopicNotFoundError,
)
from rayq.store.message import GetStatus, MessageExt, PutResult
from rayq.store.names import (
    check_client_write_topic,
    is_system_topic,
    validate_group,
    validate_topic,
)

from .config import BrokerConfig
from .protocol import (
    BatchSendResult,
    BrokerInfo,
    MessageQueue,
    PullManyRequest,
    PullRequest,
    PullResponse,
    PullStatus,
    QueueData,
    QueueStats,
    SendBackItem,
    SendBackRequest,
    SendBackResult,
    SendStatus,
)
from .server.queue_locks import QueueLocks

logger = logging.getLogger(__name__)

_PULL_STATUS = {
    GetStatus.FOUND: PullStatus.FOUND,
    GetStatus.NO_MATCHED_MESSAGE: PullStatus.NO_MATCHED_MSG,
    GetStatus.OFFSET_OVERFLOW_ONE: PullStatus.NO_NEW_MSG,
    GetStatus.NO_MESSAGE_IN_QUEUE: PullStatus.NO_NEW_MSG,
    GetStatus.OFFSET_FOUND_NULL: PullStatus.NO_NEW_MSG,
    GetStatus.MESSAGE_WAS_REMOVING: PullStatus.NO_NEW_MSG,
    GetStatus.NO_MATCHED_LOGIC_QUEUE: PullStatus.NO_NEW_MSG,
    GetStatus.OFFSET_TOO_SMALL: PullStatus.OFFSET_ILLEGAL,
    GetStatus.OFFSET_OVERFLOW_BADLY: PullStatus.OFFSET_ILLEGAL,
}


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
        self.store = MessageStore(self.root, config.store_config,
                                  store_host=local_host(config.listen_port),
                                  broker_name=self.name)  # fmt: skip
        self.tables = ConfigStore(self.root)
        self.locks = QueueLocks(config.rebalance_lock_max_live_time_ms)
        self._fences: dict[tuple[str, str, int], int] = {}  # (group, topic, queue) -> generation
        self.writing = threading.Lock()  # one appender at a time (see the module doc)
        self.schedule = ScheduleService(
            self.store, self.tables.delay_offsets, config.delay_levels,
            accept=self.tables.topics.__contains__,
        )  # fmt: skip
        self.sequences = open_sequences(self.tables.config_dir, self.store.commitlog,
                                        SYSTEM_CLOCK.now_ms())  # fmt: skip
        logger.info("broker %s serving store %s (recovery: %s)", self.name, self.root,
                    self.store.recovery)  # fmt: skip

    # ------------------------------------------------------------- topics
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
        return self.create_topic(topic, n, n, PERM_ALL)

    def create_topic(
        self, topic: str, read_queues: int, write_queues: int, perm: int
    ) -> TopicConfig:
        _check_not_system(topic)
        for name, n in (("read_queues", read_queues), ("write_queues", write_queues)):
            if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= 1024:
                raise InvalidOffsetError(f"{name} must be an int in 1..1024, got {n!r}")
        cfg = TopicConfig(topic_name=topic, read_queue_nums=read_queues,
                          write_queue_nums=write_queues, perm=perm)  # fmt: skip
        self.tables.topics.put(cfg)
        self.tables.topics.persist()
        return cfg

    def delete_topic(self, topic: str) -> bool:
        _check_not_system(topic)
        existed = self.tables.topics.delete(topic)
        self.tables.topics.persist()
        with self.writing:
            self.store.delete_topic(topic)
        self.tables.consumer_offsets.remove_topic(topic)
        return existed

    def topics(self) -> list[str]:
        return self.tables.topics.topics()

    def info(self) -> BrokerInfo:
        queues = {
            t.topic_name: QueueData(broker_name=self.name, read_queue_nums=t.read_queue_nums,
                                    write_queue_nums=t.write_queue_nums, perm=t.perm)
            for t in (self.tables.topics.get(n) for n in self.tables.topics.topics()) if t
        }  # fmt: skip
        return BrokerInfo(broker_name=self.name, node_id=self.node_id, store_dir=str(self.root),
                          topics=queues, data_version=self.tables.topics.data_version)  # fmt: skip

    # --------------------------------------------------------------- send
    def put(self, batch: EncodedBatch) -> BatchSendResult:
        """Append one producer batch; raises RayqErrors for what the sender must fix."""
        if not isinstance(batch, EncodedBatch):
            raise InvalidMessageError(f"expected an EncodedBatch, got {type(batch).__name__}")
        check_client_write_topic(validate_topic(batch.topic))  # send-back and delays: not here
        cfg = self.topic_config(batch.topic, create=True)
        if not is_writeable(cfg.perm):
            raise PermissionDeniedError(f"topic {batch.topic!r} is not writeable (perm={cfg.perm})")
        if not 0 <= batch.queue_id < cfg.write_queue_nums:
            raise InvalidOffsetError(
                f"queue {batch.queue_id} of topic {batch.topic!r} does not exist: it has "
                f"{cfg.write_queue_nums} write queues", queue_id=batch.queue_id,
            )  # fmt: skip
        last_seq = batch.first_sequence + batch.count - 1
        if batch.producer_id:  # idempotent produce: drop what was appended before
            pid, first = batch.producer_id, batch.first_sequence
            verdict, cached = self.sequences.check(pid, batch.topic, batch.queue_id, first,
                                                   last_seq)  # fmt: skip
            if verdict is Verdict.OVERLAP:
                raise InvalidMessageError(
                    f"sequences {first}..{last_seq} of producer {pid!r} overlap what "
                    f"{batch.topic}/{batch.queue_id} already has")  # fmt: skip
            if verdict is Verdict.OUT_OF_ORDER:
                raise BrokerBusyError(
                    f"sequence {first} of producer {pid!r} on {batch.topic}/{batch.queue_id} is "
                    "out of order: an earlier batch has not arrived yet; retry")  # fmt: skip
            if verdict is Verdict.DUPLICATE:
                return cached or BatchSendResult(status=SendStatus.SEND_OK, msg_ids=batch.msg_ids,
                                                 offset_msg_ids=[""] * batch.count,
                                                 queue_offsets=[-1] * batch.count)  # fmt: skip
        with self.writing:
            if batch.scheduled:  # some record has DELAY or __DELIVER_AT_MS: park those
                result = self.schedule.put_batch(batch)
            else:
                result = self.store.put_encoded(batch)
        raise_for_put(result)
        out = BatchSendResult(status=SendStatus.SEND_OK, msg_ids=result.msg_ids,
                              offset_msg_ids=result.offset_msg_ids,
                              queue_offsets=result.queue_offsets)  # fmt: skip
        if batch.producer_id:
            self.sequences.appended(batch.producer_id, batch.topic, batch.queue_id,
                                    batch.first_sequence, last_seq, out,
                                    result.store_timestamp)  # fmt: skip
        return out

    # --------------------------------------------------------------- pull
    def pull(self, req: PullRequest) -> PullResponse:
        """Non-blocking pull of up to ``req.max_nums`` messages (PullHold adds waiting)."""
        group = self.group_config(req.group, create=True)
        if not group.consume_enable:
            raise PermissionDeniedError(
                f"consumer group {req.group!r} may not consume (consume_enable is off); "
                "turn it on with Admin.update_group", group=req.group,
            )  # fmt: skip
        cfg = self.topic_config(req.topic, create=False)
        if not is_readable(cfg.perm):
            raise PermissionDeniedError(f"topic {req.topic!r} is not readable (perm={cfg.perm})")
        if not 0 <= req.queue_id < cfg.read_queue_nums:
            raise InvalidOffsetError(f"queue {req.queue_id} of topic {req.topic!r} does not exist")
        tag_filter = TagFilter.parse(req.expression)
        want = min(max(req.max_nums, 1), self.config.pull_max_messages)
        parts: list[bytes] = []
        count = size = 0
        offset = req.queue_offset
        got = self.store.get_messages(req.group, req.topic, req.queue_id, offset, want, tag_filter)
        first = got
        while got.status is GetStatus.FOUND or got.status is GetStatus.NO_MATCHED_MESSAGE:
            parts.append(got.buffer)
            count += got.count
            size += len(got.buffer)
            offset = got.next_begin_offset
            if count >= want or size >= self.config.pull_max_bytes or offset >= got.max_offset:
                break
            got = self.store.get_messages(req.group, req.topic, req.queue_id, offset,
                                          want - count, tag_filter)  # fmt: skip
        status = PullStatus.FOUND if count else _PULL_STATUS[first.status]
        next_offset = offset if count or first.status is GetStatus.NO_MATCHED_MESSAGE else (
            first.next_begin_offset)  # fmt: skip
        return PullResponse(status=status, next_offset=next_offset, min_offset=first.min_offset,
                            max_offset=max(first.max_offset, got.max_offset),
                            buffer=b"".join(parts), count=count)  # fmt: skip

    def max_offset(self, topic: str, queue_id: int) -> int:
        return self.store.max_offset(topic, queue_id)

    def read_arrow(self, topic: str, queue_id: int, start: int, end: int,
                   max_bytes: int) -> tuple[bytes, int]:  # fmt: skip
        """Offsets ``[start, end)`` as Arrow IPC bytes of decoded columns (store/columnar.py),
        one page of about ``max_bytes``; and the offset the next page starts at."""
        cfg = self.topic_config(topic, create=False)
        if not 0 <= queue_id < cfg.read_queue_nums:
            raise InvalidOffsetError(f"queue {queue_id} of topic {topic!r} does not exist")
        batch, nxt = columnar.read_columns(self.store, topic, queue_id, start, end, max_bytes,
                                           self.name)  # fmt: skip
        return columnar.to_ipc(batch), nxt

    def queue_bounds(self, topic: str) -> dict[int, tuple[int, int]]:
        """(min offset, max offset) of each read queue of ``topic``."""
        cfg = self.topic_config(topic, create=False)
        return {q: (self.store.min_offset(topic, q), self.store.max_offset(topic, q))
                for q in range(cfg.read_queue_nums)}  # fmt: skip

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
                "with Admin.create_group or enable auto_create_subscription_group", group=group,
            )  # fmt: skip
        return self.update_group(SubscriptionGroupConfig(group_name=group))

    def update_group(self, cfg: SubscriptionGroupConfig) -> SubscriptionGroupConfig:
        """Create or replace a subscription group's config."""
        if not isinstance(cfg, SubscriptionGroupConfig):
            raise InvalidMessageError(
                f"expected a SubscriptionGroupConfig, got {type(cfg).__name__}"
            )
        validate_group(cfg.group_name)
        self.tables.subscription_groups.put(cfg)
        self.tables.subscription_groups.persist()
        return cfg

    def delete_group(self, group: str, clean_offsets: bool = False) -> bool:
        """Remove a group's config (and with ``clean_offsets`` its committed offsets)."""
        validate_group(group)
        existed = self.tables.subscription_groups.delete(group)
        self.tables.subscription_groups.persist()
        if clean_offsets:
            existed = bool(self.tables.consumer_offsets.remove_group(group)) or existed
            self.tables.consumer_offsets.persist()
        return existed

    def groups(self) -> list[str]:
        return self.tables.subscription_groups.groups()

    # ------------------------------------------------------------ offsets
    def commit_offsets(self, group: str, topic: str, offsets: dict[int, int],
                       generation: int = -1) -> list[int]:  # fmt: skip
        """Commit next-offsets per queue; the queue ids refused as stale.

        A push consumer commits with its assignment's ``generation``: once a queue saw a
        commit of generation g, commits of older generations are refused, so a consumer
        that lost the queue in a rebalance cannot move the group's offset (in memory: a
        broker restart forgets the fences)."""
        self.group_config(group, create=True)
        validate_topic(topic)
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
        self.tables.consumer_offsets.commit_many(group, topic, offsets)
        return stale

    def lock_queues(self, group: str, client_id: str,
                    queues: list[tuple[str, int]]) -> list[tuple[str, int]]:  # fmt: skip
        """Orderly consumption: lock (or renew) queues for ``client_id``; the ones it holds."""
        validate_group(group)
        return self.locks.lock(group, client_id, [(t, q) for t, q in queues], _now_ms())

    def unlock_queues(self, group: str, client_id: str, queues: list[tuple[str, int]]) -> int:
        validate_group(group)
        return self.locks.unlock(group, client_id, [(t, q) for t, q in queues])

    def query_offsets(self, group: str, topic: str) -> dict[int, int]:
        validate_group(group)
        validate_topic(topic)
        return self.tables.consumer_offsets.query_all(group, topic)

    def offset_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        return self.store.offset_by_time(topic, queue_id, timestamp_ms)

    def reset_offsets(self, group: str, topic: str, timestamp_ms: int) -> dict[int, int]:
        cfg = self.topic_config(topic, create=False)
        offsets = {q: self.store.offset_by_time(topic, q, timestamp_ms)
                   for q in range(cfg.read_queue_nums)}  # fmt: skip
        self.tables.consumer_offsets.commit_many(group, topic, offsets)
        return offsets

    def compare_and_set_offsets(self, group: str, topic: str, expected: dict[int, int],
                                offsets: dict[int, int]) -> bool:  # fmt: skip
        """Commit ``offsets`` only if every queue's committed offset is ``expected`` (-1:
        none yet); all or nothing. A streaming batch commits this way."""
        validate_group(group)
        validate_topic(topic)
        table = self.tables.consumer_offsets
        if any(table.query(group, topic, q) != e for q, e in expected.items()):
            return False
        table.commit_many(group, topic, offsets)
        return True

    def groups_of(self, topic: str) -> list[str]:
        return sorted(self.tables.consumer_offsets.groups_of(topic))

    # -------------------------------------------------------------- admin
    def topic_stats(self, topic: str) -> list[QueueStats]:
        cfg = self.topic_config(topic, create=False)
        out = []
        for q in range(max(cfg.read_queue_nums, cfg.write_queue_nums)):
            hi = self.store.max_offset(topic, q)
            last = self.store.store_time_of(topic, q, hi - 1) if hi else None
            out.append(QueueStats(queue=MessageQueue(topic, self.name, q),
                                  min_offset=self.store.min_offset(topic, q), max_offset=hi,
                                  last_store_timestamp=last or 0))  # fmt: skip
        return out

    def query_message(self, topic: str, key: str, max_num: int, begin_ms: int,
                      end_ms: int | None) -> list[MessageExt]:  # fmt: skip
        return self.store.query_message(topic, key, max_num, begin_ms, end_ms)

    def view_message(self, msg_id: str) -> MessageExt | None:
        return self.store.view_message(msg_id)

    # ------------------------------------------------- delays and retries
    def send_back(self, request: SendBackRequest) -> SendBackResult:
        """Failed messages of a consumer group to its retry or dead-letter topic: one call
        per batch, all or none (store/send_back.py). Bad input raises a RayqError and
        writes nothing."""
        if not isinstance(request, SendBackRequest):
            raise InvalidMessageError(
                f"send_back takes a SendBackRequest, got {type(request).__name__}"
            )
        items = request.items if isinstance(request.items, list) else None
        if items is None or not all(isinstance(i, SendBackItem) for i in items):
            raise InvalidMessageError("SendBackRequest.items must be a list of SendBackItem")
        msgs = prepare_send_back(self.store, request.group,
                                 [(i.commitlog_offset, i.delay_level) for i in items],
                                 request.max_reconsume_times)  # fmt: skip
        for topic in {m.topic for m in msgs}:
            self.ensure_system_topic(topic, GROUP_TOPIC_QUEUE_NUMS)
        with self.writing:
            result = self.schedule.put(msgs)
        raise_for_put(result)
        return SendBackResult(topics=[m.topic for m in msgs], msg_ids=result.msg_ids,
                              reconsume_times=[m.reconsume_times for m in msgs])  # fmt: skip

    def schedule_tick(self) -> dict[tuple[str, int], int]:
        """Deliver due delayed messages: {(topic, queue): new max offset} of what was written."""
        with self.writing:
            return self.schedule.tick()

    def schedule_stats(self) -> ScheduleStats:
        """Delay-level progress (next offset, max offset) and the deliver-at backlog."""
        return self.schedule.stats()

    def ensure_system_topic(self, topic: str, queues: int) -> bool:
        """Create a retry or dead-letter topic (read and write) unless it exists; True if new.
        Created even when auto_create_topic_enable is off, as RocketMQ does."""
        if topic in self.tables.topics:
            return False
        self.create_topic(topic, queues, queues, PERM_READ | PERM_WRITE)
        return True

    # ------------------------------------------------------ housekeeping
    def flush_targets(self) -> tuple[int, int]:
        """(commit-log bytes written, offset below which queues and index are written)."""
        return self.store.written_offset, self.store.dispatched_offset

    def persist(self) -> None:
        with self.writing:
            self.schedule.sync_progress()
        self.tables.persist_all()
        self.sequences.persist(self.store.written_offset, SYSTEM_CLOCK.now_ms())

    def retention_tick(self) -> None:
        self.store.retention_tick()

    def close(self) -> None:
        with self.writing:
            self.schedule.sync_progress()
        self.tables.close()
        self.sequences.persist(self.store.written_offset, SYSTEM_CLOCK.now_ms())
        self.store.close()


def _check_not_system(topic: str) -> None:
    """Topic admin, routes and pulls: refuse the broker's own topics (store/names.py).
    Retry and dead-letter topics pass: consumers read them and send-back creates them;
    ``put`` refuses them for clients with ``check_client_write_topic``."""
    validate_topic(topic)
    if is_system_topic(topic):
        check_client_write_topic(topic)  # raises PermissionDeniedError saying why


def raise_for_put(result: PutResult) -> None:
    """The RayqError for a failed append (nothing was written)."""
    if result.status is PutStatus.DISK_FULL:
        raise DiskFullError(result.error)
    if result.status is PutStatus.PROPERTIES_SIZE_EXCEEDED:
        raise MessageTooLargeError(result.error)
    if not result.ok:
        raise InvalidMessageError(result.error)


class BrokerActor:
    """Ray shell around BrokerServer: timers, the hold and flusher, the coordinator."""

    def __init__(self, config: BrokerConfig, store_dir: str, namespace: str) -> None:
        node_id = ray.get_runtime_context().get_node_id()
        self.server = BrokerServer(config, store_dir, node_id)
        self.namespace = namespace
        self._hold: Any = None
        self._flusher: Any = None
        self._coordinator: Any = None
        self._tasks: list[asyncio.Task] = []
        self._closed = False
        self._started = False
        self._watched: set[tuple[str, int]] = set()  # queues a held pull may wait on

    async def start_services(self) -> bool:
        """Find the hold service, flusher and coordinator by name, register, start timers.

        Called by ``rayq.start`` and, after Ray restarted this actor, by the
        coordinator (a restart re-runs ``__init__``: the store recovers from disk, the
        rest is found again by name).
        """
        from .protocol import COORDINATOR_NAME, flusher_actor_name, hold_actor_name

        self._started = True
        name = self.server.name
        self._hold = _lookup(hold_actor_name(name), self.namespace)
        self._flusher = _lookup(flusher_actor_name(name), self.namespace)
        self._coordinator = _lookup(COORDINATOR_NAME, self.namespace)
        if not self._tasks:
            cfg = self.server.config
            self._tasks = [
                asyncio.create_task(
                    self._every(cfg.persist_offset_interval_ms, self.server.persist)
                ),
                asyncio.create_task(self._every(cfg.retention_check_interval_ms,
                                                self.server.retention_tick)),
                asyncio.create_task(self._every(cfg.heartbeat_interval_ms, self._heartbeat_sync)),
                asyncio.create_task(self._schedule_loop()),
            ]  # fmt: skip
        await self._register()
        return True

    async def _register(self) -> None:
        if self._coordinator is not None:
            await self._coordinator.register_broker.remote(self.server.info())

    def _heartbeat_sync(self) -> None:
        if self._coordinator is not None:
            self._coordinator.register_broker.remote(self.server.info())

    async def _every(self, interval_ms: int, fn: Any) -> None:
        while not self._closed:
            await asyncio.sleep(interval_ms / 1000)
            try:
                fn()
            except Exception:  # a failed tick is logged; the next one tries again
                logger.exception("broker %s: periodic %s failed", self.server.name, fn.__name__)

    async def _schedule_loop(self) -> None:
        """Deliver delayed messages when due and wake the long polls waiting for them."""
        while not self._closed:
            wait_ms = SCHEDULE_TICK_MS
            try:
                self._notify(self.server.schedule_tick())
                wait_ms = self.server.schedule.next_wait_ms()
            except Exception:  # logged; the next tick tries again
                logger.exception("broker %s: delayed delivery tick failed", self.server.name)
            await asyncio.sleep(wait_ms / 1000)

    def _notify(self, touched: dict[tuple[str, int], int]) -> None:
        if self._hold is not None:
            for (topic, queue_id), max_offset in touched.items():
                self._hold.notify.remote(topic, queue_id, max_offset)

    async def _ensure_started(self) -> None:
        """After a restart, the first call (the flusher's, within a flush interval) re-wires
        and re-registers this broker, whoever else notices the restart."""
        if not self._started:
            await self.start_services()

    @ray.method(concurrency_group="send")
    async def put(self, batch: EncodedBatch) -> BatchSendResult:
        await self._ensure_started()
        known = (
            batch.topic in self.server.tables.topics if isinstance(batch, EncodedBatch) else True
        )
        result = self.server.put(batch)
        if not known:  # auto-created: routes must show it now, not at the next heartbeat
            await self._register()
        key = (batch.topic, batch.queue_id)
        if self._hold is not None and key in self._watched and not batch.scheduled:
            self._watched.discard(key)
            self._hold.notify.remote(batch.topic, batch.queue_id, result.queue_offsets[-1] + 1)
        if self.server.config.flush_disk_type.value == "SYNC_FLUSH" and self._flusher is not None:
            written = self.server.store.written_offset
            timeout = self.server.config.store.sync_flush_timeout_ms / 1000
            try:
                await asyncio.wait_for(self._flusher.sync.remote(written), timeout)
            except TimeoutError:
                return BatchSendResult(status=SendStatus.FLUSH_DISK_TIMEOUT, msg_ids=result.msg_ids,
                                       offset_msg_ids=result.offset_msg_ids,
                                       queue_offsets=result.queue_offsets)  # fmt: skip
        return result

    @ray.method(concurrency_group="pull")
    async def pull(self, req: PullRequest) -> PullResponse:
        """A pull that may wait (``suspend_ms`` > 0: the hold service's) marks its queue
        as watched before reading, so the next put to it notifies the hold service; puts
        to queues nobody waits on send no notification. (Mark, then read; append, then
        check: a put either is seen by the read or sees the mark.)"""
        await self._ensure_started()
        if req.suspend_ms > 0:
            self._watched.add((req.topic, req.queue_id))
        return self.server.pull(req)

    @ray.method(concurrency_group="pull")
    async def pull_many(self, req: PullManyRequest) -> list[PullResponse | RayqError]:
        """``pull`` for each queue of ``req``; a queue's error is its answer, not the call's."""
        await self._ensure_started()
        if not isinstance(req, PullManyRequest):
            raise InvalidMessageError(f"expected a PullManyRequest, got {type(req).__name__}")
        out: list[PullResponse | RayqError] = []
        for item in req.items:
            if req.suspend_ms > 0:
                self._watched.add((item.topic, item.queue_id))
            try:
                out.append(self.server.pull(req.request(item)))
            except RayqError as exc:
                out.append(exc)
        return out

    @ray.method(concurrency_group="admin")
    async def call(self, method: str, *args: Any) -> Any:
        """Admin and offset calls (kept in their own concurrency group)."""
        if method.startswith("_") or not hasattr(BrokerServer, method):
            raise InvalidMessageError(f"broker has no method {method!r}")
        await self._ensure_started()
        version = self.server.tables.topics.data_version
        result = getattr(self.server, method)(*args)
        changed = self.server.tables.topics.data_version != version  # e.g. a new %RETRY%
        if changed or method in ("create_topic", "delete_topic"):  # routes must show it now
            await self._register()
        if isinstance(result, SendBackResult):  # dead letters are appended at once
            self._notify({(t, 0): self.server.max_offset(t, 0) for t in set(result.topics)})
        return result

    @ray.method(concurrency_group="admin")
    async def park(self) -> None:
        """Never returns while the broker lives: the coordinator watches it for death."""
        await asyncio.Event().wait()

    async def ready(self) -> str:
        return self.server.name

    async def shutdown(self) -> None:
        self._closed = True
        for task in self._tasks:
            task.cancel()
        with contextlib.suppress(Exception):
            self.server.close()


def _now_ms() -> int:
    return SYSTEM_CLOCK.now_ms()


def _lookup(actor_name: str, namespace: str) -> Any:
    try:
        return ray.get_actor(actor_name, namespace=namespace)
    except ValueError:
        logger.warning("actor %s not found in namespace %s", actor_name, namespace)
        return None


def spawn_broker(config: BrokerConfig, store_dir: str, namespace: str, node_id: str) -> Any:
    """Start (or get) the named broker actor pinned to ``node_id``."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from .protocol import broker_actor_name

    os.makedirs(store_dir, exist_ok=True)
    cls = ray.remote(concurrency_groups={"send": 64, "pull": 256, "admin": 16})(BrokerActor)
    return cls.options(
        name=broker_actor_name(config.broker_name), namespace=namespace, get_if_exists=True,
        lifetime="detached", max_restarts=-1, max_task_retries=0, num_cpus=0,
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node_id, soft=False),
    ).remote(config, store_dir, namespace)  # fmt: skip
