"""The Broker actor: a Ray shell over ``BrokerServer`` (actors/server/broker_server.py).

``spawn_broker`` makes it a named, restartable async Ray actor pinned to a node.
Its methods are the broker's client protocol, one typed method per operation
(actors/protocol.py), each checking its request at the boundary. Concurrency groups
keep held pulls and slow admin calls from starving sends: ``send`` (``put``,
``put_arrow``, ``put_half``, ``end_transaction``), ``pull`` (``pull``,
``pull_many``), ``admin`` (the other client operations and most internal calls),
``watch`` (the coordinator's never-returning ``park``) and ``ha`` (a slave's
``ha_fetch`` and ``ha_metadata``). The internal methods (``start_services``,
``broker_info``, ``broker_config``, ``flush_targets``, ``sync_metadata``, ``park``,
``ha_*``, ``put_arrow_stats``, ``ready``, ``shutdown``) are for the other rayq
actors and ``rayq.start`` only; the client transport does not reach them
(docs/ARCHITECTURE.md lists every operation). Restarted by Ray, ``__init__``
reopens (and so recovers) the store from disk, and the first call re-wires it to its
peers by name.

The shell adds what needs Ray: timers (persist, retention, heartbeat, delayed
delivery), notifying its PullHold of appends to watched queues, waiting for the
flusher under SYNC_FLUSH, and re-registering routes with the coordinator.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import msgspec
import ray

from rayq.actors.malloc import keep_freed_memory
from rayq.actors.metrics import REPORT_INTERVAL_S, BrokerMetrics
from rayq.actors.peers import PEER_LOST_ERRORS, Peer
from rayq.actors.protocol import (
    HOLD_REPLY_BYTES,
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
    MessagesReply,
    MetadataReply,
    MetadataRequest,
    OffsetByTimeRequest,
    OffsetReply,
    OffsetsReply,
    PageReadersReply,
    PageReadersRequest,
    Park,
    PullManyRequest,
    PullManyResponse,
    PullRequest,
    PullResponse,
    QueryMessageRequest,
    QueryOffsetsRequest,
    QueueBoundsReply,
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
    TransactionChecksReply,
    TransactionChecksRequest,
    UpdateGroupRequest,
    ViewMessageRequest,
    check,
    check_json,
    follow_up,
    follow_up_token,
    nothing_new,
    to_wire,
)
from rayq.actors.protocol.config import BrokerConfig
from rayq.actors.server import columnar
from rayq.actors.server.broker_server import BrokerServer
from rayq.actors.server.dedupe import Verdict
from rayq.actors.server.parked_pulls import ParkedPulls
from rayq.actors.server.schedule import SCHEDULE_TICK_MS
from rayq.actors.server.shared_rows import IDLE_S as SHARED_IDLE_S
from rayq.actors.server.shared_rows import SharedRows
from rayq.store import SYSTEM_CLOCK, EncodedBatch
from rayq.store.errors import ClosedError, InvalidRequestError
from rayq.store.names import is_dlq_topic

R = TypeVar("R")

logger = logging.getLogger(__name__)

REGISTER_TIMEOUT_S = 30.0
STATUS_PEER_TIMEOUT_S = 5.0  # broker_status: a flusher or hold service slower is reported
RETRY_S = 1.0  # a slave whose master is missing or unreachable tries again this often
REFUSED_RETRY_S = 5.0  # ... and this often when the master refused it
# How long ``put_arrow`` waits for a producer's earlier batches, and how often it looks.
REORDER_WAIT_S = 2.0
REORDER_POLL_S = 0.002
LINGER_BELOW = 1 << 20  # a slave of an ASYNC master waits ha_fetch_linger_ms after chunks
# smaller than this before it fetches again


class BrokerActor:
    """Ray shell around BrokerServer: timers, the hold and flusher, the coordinator.

    Its peers are found by name (on first need, and again after a failed call), and
    its constructor starts its timers and registers with the coordinator: a broker
    that Ray restarted serves and shows in the routes without anyone re-wiring it.
    """

    def __init__(
        self, config: BrokerConfig, store_dir: str, namespace: str, epoch: int = 0
    ) -> None:
        from rayq.actors.protocol import (
            COORDINATOR_NAME,
            broker_actor_name,
            flusher_actor_name,
            hold_actor_name,
        )

        keep_freed_memory()  # pages and put batches reuse freed buffers (malloc.py)
        node_id = self._node_id = ray.get_runtime_context().get_node_id()
        self.server = BrokerServer(config, store_dir, node_id)
        if epoch > self.server.epochs.current and self.server.master is not None:
            # promoted (actors/failover.py): what this store holds now starts the new epoch
            self.server.epochs.begin(epoch, self.server.store.written_offset)
            logger.warning(
                "broker %s: master in epoch %d from commit-log offset %d",
                config.broker_name,
                epoch,
                self.server.store.written_offset,
            )
        self.namespace = namespace
        replica = config.replica_name
        self._hold = Peer(hold_actor_name(replica), namespace)
        self._flusher = Peer(flusher_actor_name(replica), namespace)
        self._coordinator = Peer(COORDINATOR_NAME, namespace)
        self._master = Peer(broker_actor_name(config.broker_name), namespace)  # a slave's
        # the slaves' fetches waiting for an append: (their event loop, their event)
        self._fetching: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()
        self._tasks: list[asyncio.Task] = []
        self._closed = False
        self._parked = ParkedPulls()  # the hold service's pulls waiting for appends
        self._shared_rows = SharedRows()  # put_arrow's rows in slots of this node's executors
        self._delivering: set[asyncio.Future[None]] = set()  # answers sent, not yet acked
        self._stopped: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._metrics = BrokerMetrics(config.replica_name)
        # An async actor's __init__ runs on its event loop: start serving now.
        self._startup = asyncio.get_running_loop().create_task(self.start_services())

    async def start_services(self) -> bool:
        """Start the timers (once) and register with the coordinator now.

        Run by the constructor (so also after Ray restarted this actor: the store
        recovered from disk in ``__init__``, the peers are found again by name), and
        again by ``rayq.start`` and the coordinator, to register at once.
        """
        if not self._tasks:
            cfg = self.server.config
            self._tasks = [
                asyncio.create_task(
                    self._every(cfg.persist_offset_interval_ms, self.server.persist)
                ),
                asyncio.create_task(
                    self._every(cfg.retention_check_interval_ms, self.server.retention_tick)
                ),
                asyncio.create_task(self._heartbeat_loop(cfg.heartbeat_interval_ms)),
                asyncio.create_task(
                    self._every(int(REPORT_INTERVAL_S * 1000), self._report_metrics)
                ),
                asyncio.create_task(
                    self._every(int(SHARED_IDLE_S * 250), self._shared_rows.drop_idle)
                ),
            ]
            if self.server.slave is None:
                self._tasks += [
                    asyncio.create_task(self._schedule_loop()),
                    asyncio.create_task(self._transaction_loop()),
                ]
            else:
                self._tasks += [
                    asyncio.create_task(self._replicate_loop()),
                    asyncio.create_task(self._metadata_loop()),
                ]
        return await self._register()

    async def _register(self) -> bool:
        """Register (or heartbeat) with the coordinator; False if it is not reachable
        (logged; the next heartbeat tries again, looking it up anew)."""
        coordinator = self._coordinator.get()
        if coordinator is None:
            return False
        try:
            await asyncio.wait_for(
                coordinator.register_broker.remote(self.server.info()), REGISTER_TIMEOUT_S
            )
            return True
        except PEER_LOST_ERRORS as exc:
            logger.warning(
                "broker %s: coordinator unreachable (%s); registering again later",
                self.server.name,
                type(exc).__name__,
            )
            self._coordinator.forget()
        except TimeoutError:
            logger.warning(
                "broker %s: coordinator did not answer the registration in %.0f s",
                self.server.name,
                REGISTER_TIMEOUT_S,
            )
        return False

    async def _heartbeat_loop(self, interval_ms: int) -> None:
        while not self._closed:
            await asyncio.sleep(interval_ms / 1000)
            try:
                await self._register()
            except Exception:  # logged; the next heartbeat tries again
                logger.exception("broker %s: heartbeat failed", self.server.name)

    async def _every(self, interval_ms: int, fn: Any) -> None:
        while not self._closed:
            await asyncio.sleep(interval_ms / 1000)
            try:
                fn()
            except Exception:  # a failed tick is logged; the next one tries again
                logger.exception("broker %s: periodic %s failed", self.server.name, fn.__name__)

    def _report_metrics(self) -> None:
        """Hand the tallies to Ray and set the gauges (actors/metrics.py): consumer lag,
        parked pulls, disk usage, and a master's view of its slaves' lag."""
        now_ms = _now_ms()
        store = self.server.store
        store.disk.check(now_ms)
        master = self.server.master
        replicas = {
            str(r.broker_id): (r.lag_bytes, r.lag_ms / 1000)
            for r in (master.status(now_ms) if master is not None else [])
        }
        self._metrics.report(
            lags=self.server.group_lags(),
            parked=len(self._parked),
            disk_ratio=store.disk.ratio,
            replicas=replicas,
        )

    def _count_pull(self, req: PullRequest | PullManyRequest, reply: Any) -> None:
        """Tally the messages and bytes a pull answered, per topic."""
        pulls = self._metrics.pulls
        if isinstance(req, PullRequest):
            if reply.count:
                pulls.count((req.topic,), reply.count, len(reply.buffer))
            return
        for item, got in zip(req.items, reply.results, strict=False):
            if type(got) is PullResponse and got.count:
                pulls.count((item.topic,), got.count, len(got.buffer))

    async def _schedule_loop(self) -> None:
        """Deliver delayed messages when due and wake the long polls waiting for them."""
        while not self._closed:
            wait_ms = SCHEDULE_TICK_MS
            try:
                self._wake(self.server.schedule_tick())
                wait_ms = self.server.schedule.next_wait_ms()
            except Exception:  # logged; the next tick tries again
                logger.exception("broker %s: delayed delivery tick failed", self.server.name)
            await asyncio.sleep(wait_ms / 1000)

    def _wake(self, keys: Iterable[tuple[str, int]]) -> None:
        """Answer the pulls parked on ``keys`` (just appended to), and the slaves' fetches."""
        keys = tuple(keys)
        if keys:
            self._notify_append()
        for token, req in self._parked.take(keys):
            self._answer(token, req)

    def _notify_append(self) -> None:
        """Wake the slaves' parked fetches (each waits on its own group's event loop)."""
        for loop, event in list(self._fetching):
            loop.call_soon_threadsafe(event.set)

    def _read_for_hold(self, req: PullRequest | PullManyRequest) -> tuple[Any, bool]:
        """A read answered through the hold service (at most HOLD_REPLY_BYTES), and
        whether it found nothing new."""
        if isinstance(req, PullManyRequest):
            many = self.server.pull_many(req, HOLD_REPLY_BYTES)
            return many, nothing_new(many.results)
        one = self.server.pull(req, HOLD_REPLY_BYTES)
        return one, nothing_new([one])

    def _read(self, req: PullRequest | PullManyRequest) -> tuple[Any, bool] | None:
        """``_read_for_hold`` for a parked pull; None if it failed (logged: the waiting
        pull times out and is sent again)."""
        try:
            return self._read_for_hold(req)
        except Exception:
            logger.exception("broker %s: answering a parked pull failed", self.server.name)
            return None

    def _park(self, token: str, req: PullRequest | PullManyRequest) -> None:
        hold_s = self.server.config.hold_s(req.suspend_ms)
        self._parked.park(token, req, _keys_of(req), hold_s)

    def _park_and_read(
        self, token: str, req: PullRequest | PullManyRequest
    ) -> tuple[Any, bool, bool]:
        """Park ``req`` under ``token``, then read (park, then read; append, then take: an
        append either is seen by the read or finds the token). A read that found news,
        or failed, unparks it again. Returns the read, whether it found nothing new, and
        whether this call unparked it for its news (False: still parked, or an append
        took it meanwhile and answers it)."""
        self._park(token, req)
        try:
            reply, empty = self._read_for_hold(req)
        except BaseException:
            self._parked.drop(token)
            raise
        return reply, empty, not empty and self._parked.drop(token)

    def _answer(
        self, token: str, req: PullRequest | PullManyRequest, got: tuple[Any, bool] | None = None
    ) -> None:
        """Read for the parked pull ``token`` and send what it finds straight to the hold
        service. A pull that still finds nothing (another tag, a delayed message) stays
        parked. If the hold service's caller was waiting for it, the caller's next pull
        is parked here at once (``follow_up``, under ``follow_up_token``): the hold service
        hands it that pull without asking again, so a consumer that keeps up costs the
        broker no pull calls at all."""
        got = got or self._read(req)
        if got is None:
            return
        reply, empty = got
        if empty:
            self._park(token, req)
            return
        hold = self._hold.get()
        if hold is not None:
            self._count_pull(req, reply)
            answer = to_wire(reply) if type(reply) is PullResponse else reply
            task = asyncio.ensure_future(
                self._follow_up(hold.deliver.remote(token, answer), token, req, reply)
            )
            self._delivering.add(task)
            task.add_done_callback(self._delivering.discard)

    async def _follow_up(self, delivered: Any, token: str, req: Any, reply: Any) -> None:
        try:
            waited = await delivered
        except PEER_LOST_ERRORS:  # a hold service that restarts has nobody waiting
            self._hold.forget()
            return
        # With ACL on, each pull is checked as it comes: no follow-up is parked ahead of it.
        nxt = follow_up(req, reply) if waited is True and self.server.acl is None else None
        if nxt is None:
            return
        token = follow_up_token(token)
        try:
            reply, empty, found = self._park_and_read(token, nxt)
        except Exception:  # not parked: the caller's next pull goes to the broker
            logger.exception("broker %s: parking a follow-up pull failed", self.server.name)
            return
        if found:
            self._answer(token, nxt, (reply, empty))

    async def _sync_flush(self, written: int) -> SendStatus:
        """SYNC_FLUSH: acknowledge only once the flusher reports the append durable;
        FLUSH_DISK_TIMEOUT if it does not in time (or is unreachable)."""
        flusher = self._flusher.get()
        timeout = self.server.config.store.sync_flush_timeout_ms / 1000
        if flusher is not None:
            try:
                await asyncio.wait_for(flusher.sync.remote(written), timeout)
                return SendStatus.SEND_OK
            except PEER_LOST_ERRORS as exc:
                logger.warning(
                    "broker %s: flusher unreachable (%s)", self.server.name, type(exc).__name__
                )
                self._flusher.forget()
            except TimeoutError:
                pass
        return SendStatus.FLUSH_DISK_TIMEOUT

    async def _sync_slave(self, written: int) -> SendStatus:
        """SYNC_MASTER: acknowledge only once a slave has the append (every concurrent send
        waits on the same fetches: group commit); FLUSH_SLAVE_TIMEOUT if none has it in
        ``sync_flush_timeout_ms``, SLAVE_NOT_AVAILABLE if no slave is connected or one is
        more than ``ha_slave_fallbehind_max`` behind."""
        master = self.server.master
        assert master is not None
        if not master.slave_available(written, _now_ms()):
            return SendStatus.SLAVE_NOT_AVAILABLE
        acked = master.wait(written)
        try:
            await asyncio.wait_for(
                asyncio.wrap_future(acked), self.server.config.store.sync_flush_timeout_ms / 1000
            )
            return SendStatus.SEND_OK
        except TimeoutError:
            acked.cancel()
            return SendStatus.FLUSH_SLAVE_TIMEOUT

    async def _wait_safe(self, result: BatchSendResult) -> BatchSendResult:
        """The waits the flush type and the role ask for, side by side; the first status
        that is not SEND_OK (the disk's first) is the send's."""
        cfg = self.server.config
        written = self.server.store.written_offset
        waits = []
        if cfg.flush_disk_type.value == "SYNC_FLUSH":
            waits.append(self._sync_flush(written))
        if cfg.broker_role.value == "SYNC_MASTER":
            waits.append(self._sync_slave(written))
        if not waits:
            return result
        statuses = await asyncio.gather(*waits)
        bad = next((s for s in statuses if s is not SendStatus.SEND_OK), None)
        if bad is None:
            return result
        return msgspec.structs.replace(result, status=bad)

    @ray.method(concurrency_group="send")
    async def put(self, batch: EncodedBatch | bytes, *chunks: bytes) -> BatchSendResult | bytes:
        """Append one batch. Its records may come as ``chunks`` after it (each under
        Ray's inline limit, rayq/ray_transport.py ``inline_args``), joined here: one
        call, so the batch is appended whole or not at all. A batch sent as ``to_wire``
        bytes (as the Ray transport sends it) is answered in bytes too."""
        started = time.perf_counter()
        wire = type(batch) is bytes
        if wire:
            batch = check(batch, EncodedBatch)
        elif type(batch) is not EncodedBatch:
            raise InvalidRequestError(f"put takes an EncodedBatch, got {type(batch).__name__}")
        assert isinstance(batch, EncodedBatch)
        if chunks:
            if batch.records or any(type(c) is not bytes for c in chunks):
                raise InvalidRequestError(
                    "put takes the records either in the batch or as bytes chunks after a "
                    "batch whose records are empty, not both"
                )
            batch = msgspec.structs.replace(batch, records=b"".join(chunks))
        self.server.authorize("put", batch)  # signed whole, before it was split
        result = await self._append(batch, started)
        return to_wire(result) if wire else result

    @ray.method(concurrency_group="send")
    async def put_arrow(self, req: bytes, rows: bytes) -> bytes:
        """Rows from the JVM (connectors/jvm, Spark's rayq sink; a Ray cross-language call): the
        request as JSON (an ``ArrowPutRequest``), the rows as an Arrow IPC stream. They are
        encoded here column-wise (store/arrow_puts.py) and appended as idempotent batches,
        each as ``put`` appends one (a batch appended before is not appended again).
        Answers ``{"rows": n}`` as JSON. With ``rows_file``, the rows are read from that
        slot of an executor on this node instead (server/shared_rows.py; ``rows`` is
        empty), all of them before the first await; a slot this process cannot read
        answers ``{"rows": 0, "resend": true}`` (nothing appended)."""
        started = time.perf_counter()
        put = check_json(req, ArrowPutRequest)
        stream = self._shared_rows.rows_of(put.rows_file, put.rows_length, rows)
        if stream is None:
            return b'{"rows": 0, "resend": true}'
        batches = self.server.arrow_batches(put, stream)  # copied out of a slot
        del stream
        for i, batch in enumerate(batches):
            self.server.authorize("put", batch)
            if i == 0:
                await self._earlier_batches(batch)
            await self._append(batch, started, own=True)
        return b'{"rows": %d}' % sum(b.count for b in batches)

    def put_arrow_stats(self) -> dict[str, int]:
        """``put_arrow`` calls so far, by how their rows came: ``shared`` (a slot on this
        node) or ``inline`` (through Ray)."""
        return dict(self._shared_rows.puts)

    async def _earlier_batches(self, batch: EncodedBatch) -> None:
        """Wait (up to ``REORDER_WAIT_S``) for the batches of ``batch``'s producer that
        come before it: Ray may start a call before an earlier one of the same caller
        (whose rows are still on their way), and the JVM keeps several puts in flight.
        Past the wait, ``put`` refuses it as out of order and the JVM sends it again."""
        first, last = batch.first_sequence, batch.first_sequence + batch.count - 1
        key = (batch.producer_id, batch.topic, batch.queue_id)
        deadline = time.monotonic() + REORDER_WAIT_S
        while time.monotonic() < deadline:
            verdict, _ = self.server.sequences.check(*key, first, last)
            if verdict is not Verdict.OUT_OF_ORDER:
                return
            await asyncio.sleep(REORDER_POLL_S)

    async def _append(
        self, batch: EncodedBatch, started: float, own: bool = False
    ) -> BatchSendResult:
        """Append an authorized batch (``own``: encoded here), wake the pulls parked on
        its queue, answer when it is as safe as the flush and replication modes say."""
        known = batch.topic in self.server.tables.topics
        result = self.server.put(batch, own=own)
        self._notify_append()
        if not known:  # auto-created: routes must show it now, not at the next heartbeat
            await self._register()
        key = (batch.topic, batch.queue_id)
        if not batch.scheduled and self._parked.watched(key):
            asyncio.get_running_loop().call_soon(self._wake, (key,))  # after the reply
        result = await self._wait_safe(result)
        self._metrics.puts.count((batch.topic,), batch.count, len(batch.records))
        self._metrics.puts.observe((batch.topic,), time.perf_counter() - started)
        return result

    @ray.method(concurrency_group="send")
    async def put_half(self, req: HalfSendRequest | bytes) -> BatchSendResult:
        """A transactional send's half message(s) (actors/server/transactions.py): stored,
        in no queue yet; acknowledged as safe as a ``put`` is."""
        req = check(req, HalfSendRequest)
        self.server.authorize("put_half", req)
        result = self.server.put_half(req)
        self._notify_append()
        return await self._wait_safe(result)

    @ray.method(concurrency_group="send")
    async def end_transaction(self, req: EndTransactionRequest | bytes) -> EndTransactionReply:
        """Commit or roll back a transaction; a commit wakes the pulls parked on its queue."""
        req = check(req, EndTransactionRequest)
        self.server.authorize("end_transaction", req)
        reply = self.server.end_transaction(req)
        if reply.ended:
            self._notify_append()
        if reply.committed:
            asyncio.get_running_loop().call_soon(self._wake, ((req.topic, reply.queue_id),))
        return reply

    @ray.method(concurrency_group="admin")
    async def transaction_checks(self, req: TransactionChecksRequest) -> TransactionChecksReply:
        return await self._serve(self.server.transaction_checks, req, TransactionChecksRequest)

    async def _transaction_loop(self) -> None:
        """The transaction check service: every ``transaction_check_interval`` ms."""
        while not self._closed:
            await asyncio.sleep(self.server.config.transaction_check_interval / 1000)
            try:
                self._wake(self.server.transaction_tick())
            except Exception:  # logged; the next round tries again
                logger.exception("broker %s: transaction check round failed", self.server.name)

    @ray.method(concurrency_group="pull")
    async def pull(
        self, req: PullRequest | bytes, park: Park | bytes | None = None
    ) -> PullResponse | bytes:
        """Read without waiting (answered in bytes if asked in bytes). With ``park`` (the
        hold service's waiting pull), a read that finds nothing new leaves the pull
        parked: the next append to its queue answers it through
        ``PullHoldActor.deliver``."""
        started = time.perf_counter()
        wire = type(req) is bytes
        req = check(req, PullRequest)
        self.server.authorize("pull", req)  # also the hold service's: the client's request
        if park is None:
            resp = self.server.pull(req)
        else:
            resp, _, _ = self._park_and_read(check(park, Park).token, req)
        self._count_pull(req, resp)
        self._metrics.pulls.observe((), time.perf_counter() - started)
        return to_wire(resp) if wire else resp

    @ray.method(concurrency_group="pull")
    async def pull_many(
        self, req: PullManyRequest | bytes, park: Park | bytes | None = None
    ) -> PullManyResponse:
        """``pull`` for each queue of ``req``; a queue's error is its answer, not the call's.
        With ``park``: parked (on all its queues) if none of them has anything new."""
        started = time.perf_counter()
        req = check(req, PullManyRequest)
        self.server.authorize("pull_many", req)
        if req.commits:
            self.server.commit_pulled(req)
        if park is None:
            reply = self.server.pull_many(req)
        else:
            reply, _, _ = self._park_and_read(check(park, Park).token, req)
        self._count_pull(req, reply)
        self._metrics.pulls.observe((), time.perf_counter() - started)
        return reply

    # ------------------------------------------------ admin, offsets, locks
    # One typed method per operation (actors/protocol.py); each checks its request.

    @ray.method(concurrency_group="admin")
    async def create_topic(self, req: CreateTopicRequest) -> Done:
        return await self._serve(self.server.create_topic, req, CreateTopicRequest)

    @ray.method(concurrency_group="admin")
    async def delete_topic(self, req: TopicRequest) -> Done:
        return await self._serve(self.server.delete_topic, req, TopicRequest)

    @ray.method(concurrency_group="admin")
    async def topic_stats(self, req: TopicRequest) -> TopicStatsReply:
        return await self._serve(self.server.topic_stats, req, TopicRequest)

    @ray.method(concurrency_group="admin")
    async def queue_bounds(self, req: TopicRequest) -> QueueBoundsReply:
        return await self._serve(self.server.queue_bounds, req, TopicRequest)

    @ray.method(concurrency_group="admin")
    async def max_offset(self, req: MaxOffsetRequest) -> OffsetReply:
        return await self._serve(self.server.max_offset, req, MaxOffsetRequest)

    @ray.method(concurrency_group="admin")
    async def get_group(self, req: GroupRequest) -> GroupConfigReply:
        return await self._serve(self.server.get_group, req, GroupRequest)

    @ray.method(concurrency_group="admin")
    async def update_group(self, req: UpdateGroupRequest) -> GroupConfigReply:
        return await self._serve(self.server.update_group, req, UpdateGroupRequest)

    @ray.method(concurrency_group="admin")
    async def delete_group(self, req: DeleteGroupRequest) -> Done:
        return await self._serve(self.server.delete_group, req, DeleteGroupRequest)

    @ray.method(concurrency_group="admin")
    async def groups(self, req: ListGroupsRequest) -> GroupsReply:
        return await self._serve(self.server.groups, req, ListGroupsRequest)

    @ray.method(concurrency_group="admin")
    async def ensure_retry_topic(self, req: GroupRequest) -> Done:
        return await self._serve(self.server.ensure_retry_topic, req, GroupRequest)

    @ray.method(concurrency_group="admin")
    async def query_offsets(self, req: QueryOffsetsRequest) -> OffsetsReply:
        return await self._serve(self.server.query_offsets, req, QueryOffsetsRequest)

    @ray.method(concurrency_group="admin")
    async def commit_offsets(self, req: CommitOffsetsRequest) -> CommitOffsetsReply:
        return await self._serve(self.server.commit_offsets, req, CommitOffsetsRequest)

    @ray.method(concurrency_group="admin")
    async def compare_and_set_offsets(self, req: CompareAndSetOffsetsRequest) -> Done:
        return await self._serve(
            self.server.compare_and_set_offsets, req, CompareAndSetOffsetsRequest
        )

    @ray.method(concurrency_group="admin")
    async def reset_offsets(self, req: ResetOffsetsRequest) -> OffsetsReply:
        return await self._serve(self.server.reset_offsets, req, ResetOffsetsRequest)

    @ray.method(concurrency_group="admin")
    async def offset_by_time(self, req: OffsetByTimeRequest) -> OffsetReply:
        return await self._serve(self.server.offset_by_time, req, OffsetByTimeRequest)

    @ray.method(concurrency_group="admin")
    async def lock_queues(self, req: LockQueuesRequest) -> LockQueuesReply:
        return await self._serve(self.server.lock_queues, req, LockQueuesRequest)

    @ray.method(concurrency_group="admin")
    async def unlock_queues(self, req: LockQueuesRequest) -> LockQueuesReply:
        return await self._serve(self.server.unlock_queues, req, LockQueuesRequest)

    @ray.method(concurrency_group="admin")
    async def query_message(self, req: QueryMessageRequest) -> MessagesReply:
        return await self._serve(self.server.query_message, req, QueryMessageRequest)

    @ray.method(concurrency_group="admin")
    async def view_message(self, req: ViewMessageRequest) -> MessagesReply:
        return await self._serve(self.server.view_message, req, ViewMessageRequest)

    @ray.method(concurrency_group="admin")
    async def get_message(self, req: GetMessageRequest) -> MessagesReply:
        return await self._serve(self.server.get_message, req, GetMessageRequest)

    @ray.method(concurrency_group="admin")
    async def broker_status(self, req: BrokerStatusRequest) -> BrokerStatus:
        """This replica's state, with how far its flusher has made the log durable and
        whether its flusher and hold service answer (within STATUS_PEER_TIMEOUT_S)."""
        status = await self._serve(self.server.broker_status, req, BrokerStatusRequest)
        flushed, flusher_error = await self._ask_peer(self._flusher, "durable")
        _, hold_error = await self._ask_peer(self._hold, "ready")
        return msgspec.structs.replace(
            status,
            flushed_offset=flushed if isinstance(flushed, int) else -1,
            flusher_error=flusher_error,
            hold_error=hold_error,
        )

    async def _ask_peer(self, peer: Peer, method: str) -> tuple[Any, str]:
        """A peer's answer to ``method()``, and "" or why it did not answer."""
        handle = peer.get()
        if handle is None:
            return None, f"actor {peer.name} is not running"
        try:
            answer = await asyncio.wait_for(getattr(handle, method).remote(), STATUS_PEER_TIMEOUT_S)
            return answer, ""
        except PEER_LOST_ERRORS as exc:
            peer.forget()
            return None, f"actor {peer.name} is unreachable ({type(exc).__name__})"
        except TimeoutError:
            return None, f"actor {peer.name} did not answer in {STATUS_PEER_TIMEOUT_S:.0f} s"

    @ray.method(concurrency_group="admin")
    async def schedule_stats(self, req: ScheduleStatsRequest) -> ScheduleStats:
        return await self._serve(self.server.schedule_stats, req, ScheduleStatsRequest)

    @ray.method(concurrency_group="admin")
    async def replication(self, req: ReplicationRequest) -> ReplicationStats:
        return await self._serve(self.server.replication, req, ReplicationRequest)

    @ray.method(concurrency_group="admin")
    async def read_arrow(self, req: ReadArrowRequest) -> ArrowPage:
        return await self._serve(self.server.read_arrow, req, ReadArrowRequest)

    @ray.method(concurrency_group="admin")
    async def read_arrow_ipc(self, req: bytes) -> bytes:
        """``read_arrow`` for the JVM (a Ray cross-language call; Spark's rayq source asks
        the page readers, which answer the same: actors/page_reader.py): the request as
        JSON; the page as bytes: the next offset and the row count (little-endian int64s),
        then an Arrow IPC stream of the asked columns (none when no columns were asked
        for: a count)."""
        page = await self._serve(
            self.server.read_arrow, check_json(req, ReadArrowRequest), ReadArrowRequest
        )
        return columnar.page_bytes(page.batch, page.next_offset)

    @ray.method(concurrency_group="admin")
    async def page_readers(self, req: PageReadersRequest) -> PageReadersReply:
        """This replica's page readers (actors/page_reader.py: Spark's JVM reads its pages
        from them), started on the first call; answered once they run."""
        from rayq.actors.page_reader import spawn_page_readers

        reply = await self._serve(self.server.page_readers, req, PageReadersRequest)
        readers = spawn_page_readers(
            self.server.config, str(self.server.root), self.namespace, self._node_id
        )
        await asyncio.gather(*(r.ready.remote() for r in readers))
        return reply

    @ray.method(concurrency_group="admin")
    async def send_back(self, req: SendBackRequest) -> SendBackResult:
        req = check(req, SendBackRequest)
        result = await self._serve(self.server.send_back, req, SendBackRequest)
        self._wake((t, 0) for t in set(result.topics))
        dead = sum(1 for t in result.topics if is_dlq_topic(t))
        self._metrics.send_backs.count((req.group,), len(result.topics) - dead, dead)
        return result

    async def _serve(self, method: Callable[[Any], R], req: object, cls: type) -> R:
        """Check ``req`` at the boundary, run ``method``; routes are re-registered at once
        when the topic table changed (a created, deleted or auto-created topic)."""
        version = self.server.tables.topics.data_version
        req = check(req, cls)
        self.server.authorize(method.__name__, req)
        result = method(req)
        if self.server.tables.topics.data_version != version:
            await self._register()
        return result

    # ------------------------------------------------ replication (server-internal)

    @ray.method(concurrency_group="ha")
    async def ha_fetch(self, req: HaFetch | bytes) -> HaChunk:
        """A slave's fetch: the commit-log bytes from its offset, as soon as there are some
        (or empty after its ``wait_ms``). Its offset acknowledges everything below."""
        req = check(req, HaFetch)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + req.wait_ms / 1000
        waiting = (loop, asyncio.Event())
        self._fetching.add(waiting)  # before reading: an append either is read or wakes it
        try:
            while True:
                waiting[1].clear()
                chunk = self.server.ha_fetch(req)
                if chunk is not None:
                    return chunk
                left = deadline - loop.time()
                if left <= 0:
                    return HaChunk(
                        offset=req.offset,
                        master_offset=self.server.store.written_offset,
                        topics_version=self.server.tables.topics.data_version,
                    )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(waiting[1].wait(), left)
        finally:
            self._fetching.discard(waiting)

    @ray.method(concurrency_group="ha")
    async def ha_metadata(self, req: MetadataRequest | bytes) -> MetadataReply:
        """A slave's metadata sync: its committed offsets in, this master's tables out."""
        return self.server.ha_metadata(check(req, MetadataRequest))

    async def _replicate_loop(self) -> None:
        """A slave's life: fetch from the master, apply, fetch again (the fetch is its
        acknowledgement); a master that is missing or refuses is retried, logged."""
        name = self.server.config.replica_name
        while not self._closed:
            master = self._master.get()
            if master is None:
                self._replication_failed(
                    f"slave {name}: its master {self.server.name} is not running (no actor "
                    f"{self._master.name} in namespace {self.namespace}); "
                    f"retrying every {RETRY_S:.0f} s"
                )
                await asyncio.sleep(RETRY_S)
                continue
            slave = self.server.slave
            assert slave is not None
            linger = self.server.config.ha_fetch_linger_ms / 1000
            try:
                fetch = master.ha_fetch.remote(slave.request())
                while not self._closed:
                    chunk = await fetch
                    slave.write(chunk)
                    self.server.replication_error = ""
                    if chunk.sync or not chunk.data or len(chunk.data) >= LINGER_BELOW:
                        # the next fetch (the acknowledgement of these bytes) goes at once,
                        # and the records are dispatched while it travels
                        fetch = master.ha_fetch.remote(slave.request())
                        self._wake(slave.dispatch())
                    else:
                        # An ASYNC master waits for nobody: let the bytes gather a moment,
                        # so that a busy master is copied in fewer, larger fetches.
                        self._wake(slave.dispatch())
                        await asyncio.sleep(linger)
                        fetch = master.ha_fetch.remote(slave.request())
                    if chunk.topics_version != self.server.tables.topics.data_version:
                        await self.sync_metadata()  # a topic changed: now, not at the tick
            except PEER_LOST_ERRORS as exc:
                self._replication_failed(
                    f"slave {name}: master {self.server.name} unreachable "
                    f"({type(exc).__name__}); retrying every {RETRY_S:.0f} s"
                )
                self._master.forget()
                await asyncio.sleep(RETRY_S)
            except Exception as exc:  # refused (fencing), or bytes that fail their checks
                self._replication_failed(
                    f"slave {name}: replication from {self.server.name} failed: {exc}; "
                    f"retrying every {REFUSED_RETRY_S:.0f} s"
                )
                await asyncio.sleep(REFUSED_RETRY_S)

    def _replication_failed(self, why: str) -> None:
        """Log a slave's replication problem once (until it changes or clears) and keep it
        for ``replication`` (Admin, operators)."""
        if why != self.server.replication_error:
            logger.error("%s", why)
        self.server.replication_error = why

    async def _metadata_loop(self) -> None:
        """A slave copies its master's topics, groups and offsets every interval."""
        interval = self.server.config.slave_sync_metadata_interval_ms / 1000
        while not self._closed:
            try:
                await self.sync_metadata()
            except Exception as exc:
                logger.warning(
                    "slave %s: metadata sync failed (%s); next in %.0f s",
                    self.server.config.replica_name,
                    exc,
                    interval,
                )
            await asyncio.sleep(interval)

    @ray.method(concurrency_group="admin")
    async def sync_metadata(self) -> bool:
        """One metadata sync now (a slave; the loop runs it every interval). False if the
        master is not reachable."""
        master = self._master.get()
        if master is None or self.server.slave is None:
            return False
        req = self.server.metadata_request()
        try:
            reply = await master.ha_metadata.remote(req)
        except PEER_LOST_ERRORS:
            self._master.forget()
            return False
        version = self.server.tables.topics.data_version
        self.server.apply_metadata(req, reply)
        if self.server.tables.topics.data_version != version:
            await self._register()
        return True

    # ------------------------------------------------ internal (other actors)

    @ray.method(concurrency_group="admin")
    async def broker_info(self) -> BrokerInfo:
        """For the coordinator (and operators): this broker's topics, node and store."""
        return self.server.info()

    @ray.method(concurrency_group="admin")
    async def broker_config(self) -> BrokerConfig:
        """For the coordinator's failover: this replica's settings."""
        return self.server.config

    @ray.method(concurrency_group="admin")
    async def flush_targets(self) -> FlushTargets:
        """For the flusher: how far the files are written."""
        return self.server.flush_targets()

    @ray.method(concurrency_group="watch")
    async def park(self) -> None:
        """Never returns while the broker lives: the coordinator watches it for death.
        Raises ClosedError at ``shutdown`` (a parked call would hold the actor's exit)."""
        await asyncio.wrap_future(self._stopped)
        raise ClosedError(f"broker {self.server.name} was shut down")

    async def ready(self) -> str:
        return self.server.name

    async def shutdown(self) -> None:
        """Close the store cleanly, then end this actor for good (Ray does not restart
        it): a broker is never left alive with a closed store."""
        self._closed = True
        if not self._stopped.done():
            self._stopped.set_result(None)  # parked calls end (in their own event loops)
        for task in [self._startup, *self._tasks]:
            task.cancel()
        try:
            self.server.close()
        except Exception:
            logger.exception("broker %s: closing the store failed", self.server.name)
        ray.actor.exit_actor()


def _keys_of(req: PullRequest | PullManyRequest) -> tuple[tuple[str, int], ...]:
    if isinstance(req, PullManyRequest):
        return tuple((item.topic, item.queue_id) for item in req.items)
    return ((req.topic, req.queue_id),)


def _now_ms() -> int:
    return SYSTEM_CLOCK.now_ms()


def spawn_broker(
    config: BrokerConfig, store_dir: str, namespace: str, node_id: str, epoch: int = 0
) -> Any:
    """Start (or get) the named broker actor pinned to ``node_id`` (named after its
    replica: the master under the broker name, a slave under ``<name>#<id>``)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from rayq.actors.protocol import broker_actor_name

    os.makedirs(store_dir, exist_ok=True)
    # "watch": the coordinator's never-returning park calls; one per coordinator life, so
    # they get a group of their own and cannot use up the admin slots.
    groups = {"send": 64, "pull": 256, "admin": 16, "watch": 1024, "ha": 16}
    cls = ray.remote(concurrency_groups=groups)(BrokerActor)
    return cls.options(
        name=broker_actor_name(config.replica_name),
        namespace=namespace,
        get_if_exists=True,
        lifetime="detached",
        max_restarts=-1,
        max_task_retries=0,
        num_cpus=0,
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node_id, soft=False),
    ).remote(config, store_dir, namespace, epoch)
