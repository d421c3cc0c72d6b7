"""A push consumer's work, run inside its Consumer actor (RocketMQ's
``DefaultMQPushConsumerImpl`` with ``ConsumeMessageConcurrentlyService`` and
``ConsumeMessageOrderlyService``).

The coordinator decides which queues this consumer owns (``assign``/``revoke``,
see ``rayq.actors.server.rebalance``). One asyncio loop per broker pulls the owned
queues of that broker (``rayq.consumer.pull_loop``: through its PullHold when caught up,
straight from the broker with a backlog) into a ``ProcessQueue`` per queue, with flow
control (``pull_threshold_for_queue`` messages, ``pull_threshold_size_for_queue_mib``,
and for concurrent listeners ``consume_concurrently_max_span``). The user's listener
runs in a pool of ``consume_thread`` threads:

- concurrent: each pulled batch is split into a few pool tasks (the pool's threads
  shared among the owned queues), each calling the listener on slices of
  ``consume_message_batch_max_size``; failed messages are sent back to the
  broker (``%RETRY%<group>`` with a delay, ``%DLQ%<group>`` past
  ``max_reconsume_times``); the committed offset is the smallest one still held,
  committed with the ranges past it already done (``ProcessQueue.commit_state``), so
  a slow message holds back no commit and a crash redelivers only what was held.
  Commits ride on the pulls (``PullManyRequest.commits``); the timer commits only what
  no pull took.
- orderly: one consume loop per queue, holding the broker's lock on the queue;
  SUSPEND (or an exception) retries the same messages after
  ``suspend_current_queue_time_millis``, counting reconsume times.

Broadcasting: every consumer owns every queue, offsets live in a local file and
failed messages are logged and dropped, as in RocketMQ.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rayq.actors.protocol import (
    ClientRequest,
    ConsumeFromWhere,
    GroupRequest,
    JoinGroupRequest,
    MemberRequest,
    MessageModel,
    MessageQueue,
    PullResponse,
    SendBackItem,
    SendBackRequest,
)
from rayq.actors.protocol.config import ClientConfig
from rayq.actors.protocol.coordinator import MemberSpec
from rayq.actors.protocol.enums import AllocateStrategy
from rayq.actors.protocol.records import check_broadcast
from rayq.consumer.listener import ListenerRunner
from rayq.consumer.offset_store import LocalOffsetStore, RemoteOffsetStore
from rayq.consumer.orderly import OrderlyConsumption, by_broker
from rayq.consumer.process_queue import ProcessQueue
from rayq.consumer.pull_loop import PullRounds
from rayq.consumer.selector import to_filter
from rayq.consumer.start_offsets import fresh_start_offsets
from rayq.metrics import RECORDER
from rayq.store import properties as P
from rayq.store.codec import decode_records
from rayq.store.errors import GroupNotFoundError
from rayq.store.message import MessageExt
from rayq.store.names import retry_topic
from rayq.store.tally import Tally
from rayq.trace.tracer import Tracer
from rayq.transport.base import Transport
from rayq.transport.context import ClientContext

logger = logging.getLogger(__name__)

REVOKE_WAIT_S = 10.0  # how long a revoked queue's in-flight work may take to finish
SEND_BACK_RETRY_S = 5.0  # RocketMQ re-consumes locally after a failed send-back


class ConsumeService(PullRounds, OrderlyConsumption):
    def __init__(
        self,
        *,
        group: str,
        client_id: str,
        subscriptions: dict[str, Any],
        listener: Callable[..., Any],
        orderly: bool,
        model: MessageModel,
        consume_from: ConsumeFromWhere,
        consume_timestamp_ms: int,
        max_reconsume_times: int,
        strategy: AllocateStrategy,
        allocation: list[MessageQueue],
        config: ClientConfig,
        namespace: str,
        transport: Transport | None = None,
        auto_commit: bool = True,
    ) -> None:
        self.group = group
        self.client_id = client_id
        self.orderly = orderly
        self.auto_commit = auto_commit  # orderly: False commits on COMMIT only
        self.model = model
        self.broadcasting = broadcasting = model is MessageModel.BROADCASTING
        self.transport = transport
        self.config = config
        self.namespace = namespace
        self.consume_from = consume_from
        self.consume_timestamp_ms = consume_timestamp_ms
        self.max_reconsume_times = max_reconsume_times
        self.retry_topic = retry_topic(group)
        subs = dict(subscriptions)
        if not broadcasting:
            subs[self.retry_topic] = "*"
        self.filters = {t: to_filter(e) for t, e in subs.items()}
        self.spec = MemberSpec(
            subscriptions=tuple(sorted((t, f.expression) for t, f in self.filters.items())),
            model=model,
            strategy=strategy,
            allocation=tuple(allocation),
        )
        # (topic,): consumed, failed; listener call times (the actor reports them)
        self.tally = Tally()
        self.runner = ListenerRunner(
            listener, orderly, config.consume_message_batch_max_size, self.tally, group
        )
        self.pool = ThreadPoolExecutor(config.consume_thread, thread_name_prefix=f"rayq-{group}")
        self.generation = -1
        self.queues: dict[MessageQueue, ProcessQueue] = {}
        self.assigned: set[MessageQueue] = set()  # the coordinator's last assignment
        self._lock_waiter: asyncio.Task | None = None  # orderly: queues locked elsewhere
        self.tasks: dict[MessageQueue, list[asyncio.Task]] = {}  # orderly consume loops
        self.broker_loops: dict[str, asyncio.Task] = {}  # one pull loop per broker
        self.freed: dict[str, asyncio.Event] = {}  # per broker: its queues' messages got done
        self.read_from: dict[str, str] = {}  # per broker: a slave it suggested (far behind)
        self.background: set[asyncio.Task] = set()
        self.history: list[tuple[MessageQueue, float, float]] = []  # (queue, owned from, to)
        self._owned_since: dict[MessageQueue, float] = {}
        self.consumed = 0
        self.ctx: Any = None
        self.offsets: Any = None
        self.handle: Any = None
        self.closed = False

    # ------------------------------------------------------------ members
    async def start(self, handle: Any) -> None:
        self.handle = handle
        await self.open()
        await self.join()

    async def open(self) -> None:
        """Everything ``start`` does but joining the group: the client context, the
        offset store, the retry topic. (Tests then ``assign`` queues themselves.)"""
        self.ctx = ClientContext(self.config, self.namespace, self.transport, self.client_id)
        self.runner.tracer = Tracer.open(  # message trace: each listener call
            self.config, self.group, self.client_id, self.namespace, self.transport
        )
        if self.broadcasting:
            await self._check_broadcast_allowed()
            self.offsets = LocalOffsetStore(
                self.config.offset_store_dir, self.config.instance_name, self.group
            )
        else:
            self.offsets = RemoteOffsetStore(self.ctx, self.group)
            await self._ensure_retry_topic()

    async def join(self) -> None:
        req = JoinGroupRequest(group=self.group, spec=self.spec, client_id=self.client_id)
        await self.ctx.coordinator.join_group(req)

    async def heartbeat(self) -> None:
        """Join again if the coordinator forgot this member (it was restarted)."""
        req = MemberRequest(group=self.group, client_id=self.client_id)
        if not self.closed and not (await self.ctx.coordinator.member_alive(req)).existed:
            logger.warning(
                "consumer %s: the coordinator forgot group %s; joining again",
                self.client_id,
                self.group,
            )
            await self.join()

    async def _check_broadcast_allowed(self) -> None:
        """PermissionDeniedError if a broker's config of the group refuses broadcasting
        consumers (``consume_broadcast_enable`` off; a group not created yet allows them)."""
        req = GroupRequest(group=self.group, client_id=self.client_id)
        found = await self.ctx.broker_calls_async(
            {b: lambda c: c.get_group(req) for b in await self._brokers()},
            return_exceptions=True,
        )
        for broker, reply in found.items():
            if isinstance(reply, GroupNotFoundError):
                continue
            if isinstance(reply, BaseException):
                raise reply
            check_broadcast(reply.config, broker)

    async def _ensure_retry_topic(self) -> None:
        req = GroupRequest(group=self.group, client_id=self.client_id)
        calls = {b: lambda c: c.ensure_retry_topic(req) for b in await self._brokers()}
        await self.ctx.broker_calls_async(calls)

    async def _brokers(self) -> list[str]:
        """The names of the brokers the coordinator knows."""
        return (await self.ctx.coordinator.brokers(ClientRequest(client_id=self.client_id))).names

    # --------------------------------------------------------- assignment
    async def assign(self, generation: int, queues: list[MessageQueue]) -> None:
        """Own exactly ``queues`` from now on (the coordinator revoked the others first)."""
        if self.closed:
            return
        self.generation = max(self.generation, generation)
        self.assigned = set(queues)
        gone = [mq for mq in self.queues if mq not in self.assigned]
        if gone:
            await self.revoke(generation, gone)
        new = [mq for mq in queues if mq not in self.queues]
        if new:
            await self._take_over(new)

    async def _take_over(self, mqs: list[MessageQueue]) -> None:
        """Start consuming ``mqs`` (orderly: the ones locked first) where the group is."""
        new = await self._lock_first(mqs)
        starts = await self._start_offsets(new) if new else {}
        new = [mq for mq in new if mq in self.assigned and mq not in self.queues]
        if self.closed or not new:
            return
        now = time.monotonic()
        for mq in new:
            pq = ProcessQueue(self._freed(mq.broker_name))
            pq.next_pull = starts[mq]
            pq.set_skip(self.offsets.acked(mq))
            if self.orderly:
                pq.locked_at = now  # _lock_first locked it (broadcasting: no lock)
            self._note(mq, pq)
            self.queues[mq] = pq
            self._owned_since[mq] = time.monotonic()
            if self.orderly:
                self.tasks[mq] = [asyncio.create_task(self._orderly_loop(mq, pq))]
        for broker in sorted({mq.broker_name for mq in new}):
            self._restart_pulls(broker)
        logger.info(
            "consumer %s now owns %d queues (generation %d)",
            self.client_id,
            len(self.queues),
            self.generation,
        )

    async def revoke(self, generation: int, queues: list[MessageQueue]) -> None:
        """Give ``queues`` up: stop pulling, let in-flight work finish, commit, unlock."""
        self.assigned.difference_update(queues)
        mqs = [mq for mq in queues if mq in self.queues]
        for mq in mqs:
            self.queues[mq].pulling = False  # its broker's pull loop leaves it out now
        deadline = time.monotonic() + REVOKE_WAIT_S
        for mq in mqs:
            pq = self.queues[mq]
            while pq.inflight and time.monotonic() < deadline:
                pq.changed.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(pq.changed.wait(), 0.1)
            self._note(mq, pq)
        if mqs:
            try:
                await self.offsets.persist(mqs, self.generation)
            except Exception as exc:  # released all the same: never left half-revoked
                logger.warning(
                    "consumer %s: committing the offsets of %d revoked queues failed (%s); "
                    "their next owner starts from the last offsets committed",
                    self.client_id,
                    len(mqs),
                    exc,
                )
        for mq in mqs:
            pq = self.queues.pop(mq)
            pq.drop()
            RECORDER.drop_lag(self.group, mq)
            for task in self.tasks.pop(mq, []):
                task.cancel()
            self.offsets.forget(mq)
            self.history.append((mq, self._owned_since.pop(mq, 0.0), time.monotonic()))
        for broker in sorted({mq.broker_name for mq in mqs}):
            if not any(q.broker_name == broker for q in self.queues):
                loop = self.broker_loops.pop(broker, None)
                if loop is not None:
                    loop.cancel()
        if self.orderly and mqs and not self.broadcasting:
            await self._unlock(mqs)

    async def _start_offsets(self, mqs: list[MessageQueue]) -> dict[MessageQueue, int]:
        """Committed offsets, else where ``consume_from`` says (retry queues: from the
        first message)."""
        found = await self.offsets.read(mqs)
        fresh = [mq for mq in mqs if mq not in found]
        retry = [mq for mq in fresh if mq.topic == self.retry_topic]
        other = [mq for mq in fresh if mq.topic != self.retry_topic]
        found.update(
            await asyncio.to_thread(
                fresh_start_offsets, self.ctx, retry, ConsumeFromWhere.FIRST_OFFSET, 0
            )
        )
        found.update(
            await asyncio.to_thread(
                fresh_start_offsets, self.ctx, other, self.consume_from, self.consume_timestamp_ms
            )
        )
        return found

    # --------------------------------------------------------- dispatch
    def _dispatch(self, mq: MessageQueue, pq: ProcessQueue, resp: PullResponse) -> None:
        msgs = self._prepare(mq, decode_records(resp.buffer, broker_name=mq.broker_name))
        msgs = pq.put(msgs, resp.next_offset)
        if msgs and not self.orderly:
            for part in self._split(msgs):
                self._hand_off(mq, pq, part)

    def _prepare(self, mq: MessageQueue, msgs: list[MessageExt]) -> list[MessageExt]:
        """Exact tag check, and retried messages get their original topic back."""
        tag_filter = self.filters[mq.topic]
        if tag_filter.tags is not None:
            msgs = [m for m in msgs if tag_filter.matches_tags(m.tags)]
        if mq.topic == self.retry_topic:
            for m in msgs:
                m.topic = m.properties.get(P.RETRY_TOPIC, m.topic)
        return msgs

    def _split(self, msgs: list[MessageExt]) -> list[list[MessageExt]]:
        """One pulled batch as pool tasks: the pool's threads shared among the owned
        queues, slices of at least ``consume_message_batch_max_size`` (a slow message
        holds up its own slice, not the whole pull; fast listeners pay few hand-offs)."""
        parts = max(1, self.config.consume_thread // max(1, len(self.queues)))
        size = max(self.config.consume_message_batch_max_size, -(-len(msgs) // parts))
        return [msgs[i : i + size] for i in range(0, len(msgs), size)]

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    # --------------------------------------------------------- concurrent
    def _hand_off(self, mq: MessageQueue, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        """One pool task for ``msgs`` (the listener sees them in slices of
        ``consume_message_batch_max_size``); what they did is settled on the loop."""
        if pq.dropped:
            return
        pq.inflight += 1
        batch = pq.mark_started(msgs)
        running = asyncio.wrap_future(self.pool.submit(self.runner.run_concurrently, msgs))
        self._spawn(self._consumed(mq, pq, msgs, batch, running))

    async def _consumed(
        self,
        mq: MessageQueue,
        pq: ProcessQueue,
        msgs: list[MessageExt],
        batch: int,
        running: asyncio.Future,
    ) -> None:
        """After the listener: drop what succeeded (or was sent back) from ``pq`` and
        move its commit offset; what could not be sent back is consumed again here."""
        try:
            failed = await running
        finally:
            pq.inflight -= 1
            pq.mark_finished(batch)
        if pq.dropped:
            return
        self.consumed += len(msgs) - len(failed)
        self.tally.count((mq.topic,), len(msgs) - len(failed), len(failed))
        kept: list[MessageExt] = []
        if failed and not self.broadcasting:
            kept = await self._send_back(failed)
        elif failed:
            logger.warning(
                "consumer %s: %d broadcast messages failed and are dropped",
                self.client_id,
                len(failed),
            )
        if kept:
            keep = {m.queue_offset for m in kept}
            pq.remove(m.queue_offset for m in msgs if m.queue_offset not in keep)
        else:
            pq.remove(m.queue_offset for m in msgs)
        if kept:
            for m in kept:
                m.reconsume_times += 1
            await asyncio.sleep(SEND_BACK_RETRY_S)
            if not pq.dropped:
                self._hand_off(mq, pq, kept)

    async def _send_back(self, msgs: list[MessageExt], *, dlq: bool = False) -> list[MessageExt]:
        """Send failed messages back to their brokers (one call per broker); the ones
        that could not be sent back (to be consumed again here)."""
        kept: list[MessageExt] = []
        for broker, batch in by_broker(msgs).items():
            req = SendBackRequest(
                group=self.group,
                max_reconsume_times=self.max_reconsume_times,
                client_id=self.client_id,
                items=[SendBackItem(m.commitlog_offset, -1 if dlq else 0) for m in batch],
            )
            try:
                await self.ctx.broker(broker).send_back(req)
            except Exception as exc:
                logger.warning(
                    "consumer %s: send-back of %d messages to %s failed (%s); "
                    "consuming them again here",
                    self.client_id,
                    len(batch),
                    broker,
                    exc,
                )
                kept.extend(batch)
        return kept

    async def clean_expired(self) -> None:
        """Send back messages stuck in the listener past ``consume_timeout_ms``."""
        if self.orderly or self.broadcasting:
            return
        for mq, pq in list(self.queues.items()):
            stuck = pq.expired(self.config.consume_timeout_ms / 1000)
            if stuck and not await self._send_back(stuck):
                logger.warning(
                    "consumer %s: %d messages of %s took longer than %d ms; sent back",
                    self.client_id,
                    len(stuck),
                    mq,
                    self.config.consume_timeout_ms,
                )
                pq.remove(m.queue_offset for m in stuck)

    # ------------------------------------------------------------ offsets
    def _note(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        """Hand ``pq``'s commit state (offset and acked ranges) to the offset store."""
        self.offsets.update(mq, *pq.commit_state())

    async def commit(self) -> None:
        """Commit what changed since the last commit (inside a pull, or here when no pull
        went out since: the consumer actor's timer)."""
        if self.offsets is not None:
            for mq, pq in list(self.queues.items()):
                self._note(mq, pq)
            await self.offsets.persist(None, self.generation)

    async def shutdown(self) -> None:
        """Stop, let in-flight work finish, commit, and leave the group (others rebalance)."""
        if self.closed:
            return
        self.closed = True  # assignments from now on are ignored
        if self.ctx is not None:
            await self.revoke(self.generation, list(self.queues))
            await self.commit()
            with contextlib.suppress(Exception):
                await self.ctx.coordinator.leave_group(
                    MemberRequest(group=self.group, client_id=self.client_id)
                )
        for task in [*self.background, *self.broker_loops.values(), self._lock_waiter]:
            if task is not None:
                task.cancel()
        self.pool.shutdown(wait=False, cancel_futures=True)
        if self.runner.tracer is not None:
            await asyncio.to_thread(self.runner.tracer.close)  # its records written first

    def stats(self) -> dict[str, Any]:
        return {
            "client_id": self.client_id,
            "consumed": self.consumed,
            "queues": sorted(self.queues),
            "generation": self.generation,
            "history": list(self.history),
            "owned_since": dict(self._owned_since),
        }
