"""A push consumer's work, run inside its Consumer actor (RocketMQ's
``DefaultMQPushConsumerImpl`` with ``ConsumeMessageConcurrentlyService`` and
``ConsumeMessageOrderlyService``).

The coordinator decides which queues this consumer owns (``assign``/``revoke``,
see ``rayq.actors.server.rebalance``). For each owned queue an asyncio task pulls through
the broker's PullHold (long polling) into a ``ProcessQueue``, with flow control
(``pull_threshold_for_queue`` messages, ``pull_threshold_size_for_queue_mib``, and
for concurrent listeners ``consume_concurrently_max_span``). The user's listener
runs in a pool of ``consume_thread`` threads:

- concurrent: each pulled batch is one pool task that calls the listener on slices
  of ``consume_message_batch_max_size``; failed messages are sent back to the
  broker (``%RETRY%<group>`` with a delay, ``%DLQ%<group>`` past
  ``max_reconsume_times``); the committed offset is the smallest one still held.
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

from rayq.actors.config import ClientConfig
from rayq.actors.protocol import (
    ClientRequest,
    ConsumeFromWhere,
    GroupRequest,
    JoinGroupRequest,
    MemberRequest,
    MessageModel,
    MessageQueue,
    PullItem,
    PullManyRequest,
    PullResponse,
    PullStatus,
    SendBackItem,
    SendBackRequest,
)
from rayq.actors.server.allocation import AllocateStrategy
from rayq.actors.server.rebalance import MemberSpec
from rayq.client import ClientContext
from rayq.consume_listener import ListenerRunner
from rayq.consume_orderly import OrderlyConsumption, by_broker
from rayq.offset_store import LocalOffsetStore, RemoteOffsetStore
from rayq.process_queue import ProcessQueue
from rayq.start_offsets import fresh_start_offsets
from rayq.store import properties as P
from rayq.store.codec import decode_records
from rayq.store.filters import TagFilter
from rayq.store.message import MessageExt
from rayq.store.names import retry_topic
from rayq.transport import Transport

logger = logging.getLogger(__name__)

REVOKE_WAIT_S = 10.0  # how long a revoked queue's in-flight work may take to finish
SEND_BACK_RETRY_S = 5.0  # RocketMQ re-consumes locally after a failed send-back


class ConsumeService(OrderlyConsumption):
    def __init__(self, *, group: str, client_id: str, subscriptions: dict[str, str],
                 listener: Callable[..., Any], orderly: bool, model: MessageModel,
                 consume_from: ConsumeFromWhere, consume_timestamp_ms: int,
                 max_reconsume_times: int, strategy: AllocateStrategy,
                 allocation: list[MessageQueue], config: ClientConfig, namespace: str,
                 transport: Transport | None = None) -> None:  # fmt: skip
        self.group = group
        self.client_id = client_id
        self.orderly = orderly
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
        self.filters = {t: TagFilter.parse(e) for t, e in subs.items()}
        self.spec = MemberSpec(
            subscriptions=tuple(sorted(subs.items())),
            model=model,
            strategy=strategy, allocation=tuple(allocation),
        )  # fmt: skip
        self.runner = ListenerRunner(listener, orderly, config.consume_message_batch_max_size)
        self.pool = ThreadPoolExecutor(config.consume_thread, thread_name_prefix=f"rayq-{group}")
        self.generation = -1
        self.queues: dict[MessageQueue, ProcessQueue] = {}
        self.tasks: dict[MessageQueue, list[asyncio.Task]] = {}  # orderly consume loops
        self.broker_loops: dict[str, asyncio.Task] = {}  # one pull loop per broker
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
        self.ctx = ClientContext(self.config, self.namespace, self.transport, self.client_id)
        if self.broadcasting:
            self.offsets = LocalOffsetStore(self.config.offset_store_dir,
                                            self.config.instance_name, self.group)  # fmt: skip
        else:
            self.offsets = RemoteOffsetStore(self.ctx, self.group)
            await self._ensure_retry_topic()
        await self.join()

    async def join(self) -> None:
        req = JoinGroupRequest(group=self.group, spec=self.spec, client_id=self.client_id)
        await self.ctx.coordinator.join_group(req)

    async def heartbeat(self) -> None:
        """Join again if the coordinator forgot this member (it was restarted)."""
        req = MemberRequest(group=self.group, client_id=self.client_id)
        if not self.closed and not (await self.ctx.coordinator.member_alive(req)).existed:
            logger.warning("consumer %s: the coordinator forgot group %s; joining again",
                           self.client_id, self.group)  # fmt: skip
            await self.join()

    async def _ensure_retry_topic(self) -> None:
        brokers = (
            await self.ctx.coordinator.brokers(ClientRequest(client_id=self.client_id))
        ).names
        req = GroupRequest(group=self.group, client_id=self.client_id)
        await self.ctx.broker_calls_async({b: lambda c: c.ensure_retry_topic(req) for b in brokers})

    # --------------------------------------------------------- assignment
    async def assign(self, generation: int, queues: list[MessageQueue]) -> None:
        """Own exactly ``queues`` from now on (the coordinator revoked the others first)."""
        if self.closed:
            return
        self.generation = max(self.generation, generation)
        gone = [mq for mq in self.queues if mq not in set(queues)]
        if gone:
            await self.revoke(generation, gone)
        new = [mq for mq in queues if mq not in self.queues]
        if not new:
            return
        starts = await self._start_offsets(new)
        for mq in new:
            pq = ProcessQueue()
            pq.next_pull = starts[mq]
            self.offsets.update(mq, starts[mq])
            self.queues[mq] = pq
            self._owned_since[mq] = time.monotonic()
            if self.orderly:
                self.tasks[mq] = [asyncio.create_task(self._orderly_loop(mq, pq))]
        for broker in sorted({mq.broker_name for mq in new}):
            self._restart_pulls(broker)
        logger.info("consumer %s now owns %d queues (generation %d)", self.client_id,
                    len(self.queues), generation)  # fmt: skip

    async def revoke(self, generation: int, queues: list[MessageQueue]) -> None:
        """Give ``queues`` up: stop pulling, let in-flight work finish, commit, unlock."""
        mqs = [mq for mq in queues if mq in self.queues]
        for mq in mqs:
            self.queues[mq].pulling = False  # its broker's pull loop leaves it out now
        deadline = time.monotonic() + REVOKE_WAIT_S
        for mq in mqs:
            pq = self.queues[mq]
            while (pq.inflight or pq.taken) and time.monotonic() < deadline:
                pq.changed.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(pq.changed.wait(), 0.1)
            self.offsets.update(mq, pq.commit_offset())
        if mqs:
            await self.offsets.persist(mqs, self.generation)
        for mq in mqs:
            pq = self.queues.pop(mq)
            pq.drop()
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
        found.update(await asyncio.to_thread(fresh_start_offsets, self.ctx, retry,
                                             ConsumeFromWhere.FIRST_OFFSET, 0))  # fmt: skip
        found.update(await asyncio.to_thread(fresh_start_offsets, self.ctx, other,
                                             self.consume_from,
                                             self.consume_timestamp_ms))  # fmt: skip
        return found

    # --------------------------------------------------------------- pull
    def _restart_pulls(self, broker: str) -> None:
        """(Re)start the one pull loop of ``broker`` for the queues owned there now."""
        old = self.broker_loops.pop(broker, None)
        if old is not None:
            old.cancel()  # a pull in flight is dropped; its queues restart at next_pull
        if any(mq.broker_name == broker for mq in self.queues):
            self.broker_loops[broker] = asyncio.create_task(self._pull_broker(broker))

    def _pullable(self, pq: ProcessQueue, now: float) -> bool:
        cfg = self.config
        return (pq.pulling and now >= pq.retry_at
                and pq.count < cfg.pull_threshold_for_queue
                and pq.bytes < cfg.pull_threshold_size_for_queue_mib * 1024 * 1024
                and (self.orderly or pq.span <= cfg.consume_concurrently_max_span))  # fmt: skip

    async def _pull_broker(self, broker: str) -> None:
        """Pull every owned queue of ``broker`` in one call per round (``pull_batch_size``
        from each): straight from the broker while any has a backlog, else through its
        hold service, which answers when any of them gets a message. The next round is
        sent before this one's messages are decoded, so decoding overlaps the call."""
        cfg = self.config
        inflight: tuple[Any, list[tuple[MessageQueue, ProcessQueue]]] | None = None
        while True:
            if inflight is None:
                inflight = self._send_pull(broker)
                if inflight is None:
                    if not any(mq.broker_name == broker and pq.pulling
                               for mq, pq in self.queues.items()):  # fmt: skip
                        return
                    await asyncio.sleep(cfg.pull_time_delay_when_flow_control_ms / 1000)
                    continue
            ref, ready = inflight
            inflight = None
            try:
                resps = (await ref).results
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                logger.warning("consumer %s: pull from %s failed (%s); again in %.1f s",
                               self.client_id, broker, exc,
                               cfg.pull_time_delay_when_exception_ms / 1000)  # fmt: skip
                self.ctx.forget(broker)
                await asyncio.sleep(cfg.pull_time_delay_when_exception_ms / 1000)
                continue
            pulled = [(mq, pq, r) for (mq, pq), r in zip(ready, resps, strict=True) if pq.pulling]
            for mq, pq, resp in pulled:
                self._advance(mq, pq, resp)
            inflight = self._send_pull(broker)
            for mq, pq, resp in pulled:
                if isinstance(resp, PullResponse) and resp.status is PullStatus.FOUND:
                    self._dispatch(mq, pq, resp)

    def _send_pull(self, broker: str) -> tuple[Any, list[tuple[MessageQueue, ProcessQueue]]] | None:
        """Send one round for the owned queues of ``broker`` that may be pulled now."""
        cfg = self.config
        now = time.monotonic()
        ready = [(mq, pq) for mq, pq in self.queues.items()
                 if mq.broker_name == broker and self._pullable(pq, now)]  # fmt: skip
        if not ready:
            return None
        backlog = any(pq.backlog for _, pq in ready)
        req = PullManyRequest(
            group=self.group, max_nums=cfg.pull_batch_size, client_id=self.client_id,
            suspend_ms=0 if backlog else cfg.broker_suspend_max_ms,
            items=[PullItem(mq.topic, mq.queue_id, pq.next_pull,
                            self.filters[mq.topic].expression) for mq, pq in ready],
        )  # fmt: skip
        target = self.ctx.broker(broker) if backlog else self.ctx.hold(broker)
        return target.pull_many(req), ready

    def _advance(self, mq: MessageQueue, pq: ProcessQueue, resp: Any) -> None:
        """A queue's answer: its next offset now (its messages are decoded after the next
        round is sent)."""
        if not isinstance(resp, PullResponse):
            logger.warning("consumer %s: pull of %s failed (%s); again in %.1f s",
                           self.client_id, mq, resp,
                           self.config.pull_time_delay_when_exception_ms / 1000)  # fmt: skip
            pq.retry_at = time.monotonic() + self.config.pull_time_delay_when_exception_ms / 1000
            pq.backlog = False
            return
        pq.backlog = resp.status is PullStatus.FOUND and resp.next_offset < resp.max_offset
        if resp.status is PullStatus.OFFSET_ILLEGAL:
            logger.warning("%s: offset %d is outside %d..%d; moving to %d", mq, pq.next_pull,
                           resp.min_offset, resp.max_offset, resp.next_offset)  # fmt: skip
        pq.next_pull = resp.next_offset
        if resp.status is not PullStatus.FOUND and not pq.count:
            self.offsets.update(mq, pq.commit_offset())

    def _dispatch(self, mq: MessageQueue, pq: ProcessQueue, resp: PullResponse) -> None:
        msgs = self._prepare(decode_records(resp.buffer, broker_name=mq.broker_name),
                             self.filters[mq.topic])  # fmt: skip
        pq.put(msgs, resp.next_offset)
        if msgs and not self.orderly:
            for part in self._split(msgs):
                self._spawn(self._consume_concurrently(mq, pq, part))
        if not pq.count:
            self.offsets.update(mq, pq.commit_offset())

    def _prepare(self, msgs: list[MessageExt], tag_filter: TagFilter) -> list[MessageExt]:
        """Exact tag check, and retried messages get their original topic back."""
        if tag_filter.tags is not None:
            msgs = [m for m in msgs if tag_filter.matches_tags(m.tags)]
        for m in msgs:
            if m.topic == self.retry_topic:
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
    async def _consume_concurrently(self, mq: MessageQueue, pq: ProcessQueue,
                                    msgs: list[MessageExt]) -> None:  # fmt: skip
        pq.inflight += 1
        pq.mark_started(msgs)
        try:
            failed = await asyncio.get_running_loop().run_in_executor(
                self.pool, self.runner.run_concurrently, msgs
            )
        finally:
            pq.inflight -= 1
        if pq.dropped:
            return
        self.consumed += len(msgs) - len(failed)
        kept: list[MessageExt] = []
        if failed and not self.broadcasting:
            kept = await self._send_back(failed)
        elif failed:
            logger.warning("consumer %s: %d broadcast messages failed and are dropped",
                           self.client_id, len(failed))  # fmt: skip
        keep = {m.queue_offset for m in kept}
        pq.remove(m.queue_offset for m in msgs if m.queue_offset not in keep)
        self.offsets.update(mq, pq.commit_offset())
        if kept:
            for m in kept:
                m.reconsume_times += 1
            await asyncio.sleep(SEND_BACK_RETRY_S)
            if not pq.dropped:
                self._spawn(self._consume_concurrently(mq, pq, kept))

    async def _send_back(self, msgs: list[MessageExt], *, dlq: bool = False) -> list[MessageExt]:
        """Send failed messages back to their brokers (one call per broker); the ones
        that could not be sent back (to be consumed again here)."""
        kept: list[MessageExt] = []
        for broker, batch in by_broker(msgs).items():
            req = SendBackRequest(
                group=self.group, max_reconsume_times=self.max_reconsume_times,
                client_id=self.client_id,
                items=[SendBackItem(m.commitlog_offset, -1 if dlq else 0) for m in batch],
            )  # fmt: skip
            try:
                await self.ctx.broker(broker).send_back(req)
            except Exception as exc:
                logger.warning("consumer %s: send-back of %d messages to %s failed (%s); "
                               "consuming them again here", self.client_id, len(batch),
                               broker, exc)  # fmt: skip
                kept.extend(batch)
        return kept

    async def clean_expired(self) -> None:
        """Send back messages stuck in the listener past ``consume_timeout_ms``."""
        if self.orderly or self.broadcasting:
            return
        for mq, pq in list(self.queues.items()):
            stuck = pq.expired(self.config.consume_timeout_ms / 1000)
            if stuck and not await self._send_back(stuck):
                logger.warning("consumer %s: %d messages of %s took longer than %d ms; sent "
                               "back", self.client_id, len(stuck), mq,
                               self.config.consume_timeout_ms)  # fmt: skip
                pq.remove(m.queue_offset for m in stuck)
                self.offsets.update(mq, pq.commit_offset())

    # ------------------------------------------------------------ offsets
    async def commit(self) -> None:
        if self.offsets is not None:
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
        for task in [*self.background, *self.broker_loops.values()]:
            task.cancel()
        self.pool.shutdown(wait=False, cancel_futures=True)

    def stats(self) -> dict[str, Any]:
        return {"client_id": self.client_id, "consumed": self.consumed,
                "queues": sorted(self.queues), "generation": self.generation,
                "history": list(self.history), "owned_since": dict(self._owned_since)}  # fmt: skip
