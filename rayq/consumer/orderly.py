"""Orderly consumption (RocketMQ ``ConsumeMessageOrderlyService``), a part of
``ConsumeService``.

A queue is locked on its broker before its process queue is created (a queue whose
lock is held by another consumer is tried again every ``LOCK_RETRY_S`` and taken on
once its lock is free).
Each owned queue has one consume loop, so at most one batch of a queue is in the
listener at a time. The loop consumes only while this consumer holds the broker's
lock on the queue (``lock_queues``: a lease of ``rebalance_lock_max_live_time_ms``,
renewed every ``lock_renew_interval_ms``; a lock not renewed within ``lock_stale_ms``
counts as lost). After ``MAX_TIME_CONSUME_CONTINUOUSLY_S`` of consuming one queue
without a pause, its loop yields a moment and makes sure of its lock on the broker
before it goes on.

SUSPEND (or an exception) puts the batch back in front and retries it after
``suspend_current_queue_time_millis`` (clamped to 10 ms .. 30 s, as RocketMQ does),
counting reconsume times; past ``max_reconsume_times`` (-1, the default: never) a
message goes to the dead-letter topic. With ``auto_commit=False`` SUCCESS only
acknowledges a batch: COMMIT commits everything consumed so far, ROLLBACK consumes
everything since the last commit again (after the suspend time); with
``auto_commit=True`` (the default) those two count as SUCCESS, with a warning.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Iterable
from typing import Any, Final, TypeVar

from rayq.actors.protocol import LockQueuesRequest, MessageQueue, QueueRef
from rayq.consumer.listener import ConsumeOrderlyStatus
from rayq.consumer.process_queue import ProcessQueue
from rayq.store.message import MessageExt

logger = logging.getLogger(__name__)

LOCK_RETRY_S = 1.0
SUSPEND_MIN_MS: Final[int] = 10  # RocketMQ clamps the suspend time to 10 ms .. 30 s
SUSPEND_MAX_MS: Final[int] = 30_000
# RocketMQ's MAX_TIME_CONSUME_CONTINUOUSLY: a queue consumed this long without a pause
# yields (YIELD_S, RocketMQ's 10 ms) and checks its lock on the broker again.
MAX_TIME_CONSUME_CONTINUOUSLY_S = 60.0
YIELD_S = 0.01

B = TypeVar("B", MessageQueue, MessageExt)


def by_broker(items: Iterable[B]) -> dict[str, list[B]]:
    """Queues or messages grouped by their ``broker_name`` (one call per broker)."""
    out: dict[str, list[B]] = {}
    for item in items:
        out.setdefault(item.broker_name, []).append(item)
    return out


def suspend_ms(configured_ms: int) -> int:
    """``suspend_current_queue_time_millis`` as used: within 10 ms .. 30 s."""
    return min(max(configured_ms, SUSPEND_MIN_MS), SUSPEND_MAX_MS)


def reconsume_limit(max_reconsume_times: int) -> float:
    """How often an orderly message may be consumed again (-1: without limit)."""
    return math.inf if max_reconsume_times < 0 else max_reconsume_times


class OrderlyConsumption:
    """Mixed into ``ConsumeService``: uses its queues, pool, runner, context and offsets."""

    queues: dict[MessageQueue, ProcessQueue]
    config: Any
    ctx: Any
    offsets: Any
    pool: Any
    runner: Any
    group: str
    client_id: str
    orderly: bool
    auto_commit: bool
    broadcasting: bool
    max_reconsume_times: int
    consumed: int
    tally: Any

    assigned: set[MessageQueue]
    closed: bool
    _lock_waiter: asyncio.Task | None

    async def _send_back(self, msgs: list, *, dlq: bool = False) -> list:
        raise NotImplementedError  # ConsumeService's

    async def _take_over(self, mqs: list[MessageQueue]) -> None: ...

    async def _orderly_loop(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        cfg = self.config
        loop = asyncio.get_running_loop()
        began = time.monotonic()
        while not pq.dropped:
            if time.monotonic() - began > MAX_TIME_CONSUME_CONTINUOUSLY_S:
                await asyncio.sleep(YIELD_S)  # the other queues' turn
                began = time.monotonic()
                pq.locked_at = 0.0  # make sure of the lock before going on
            stale = time.monotonic() - pq.locked_at > cfg.lock_stale_ms / 1000
            if not self.broadcasting and stale and not await self._lock([mq]):
                await asyncio.sleep(LOCK_RETRY_S)
                continue
            pq.changed.clear()
            msgs = pq.take(cfg.consume_message_batch_max_size, more=not self.auto_commit)
            if not msgs:
                await pq.changed.wait()
                began = time.monotonic()
                continue
            pq.inflight += 1
            try:
                status = await loop.run_in_executor(self.pool, self.runner.consume_orderly, msgs)
                ok = status in (ConsumeOrderlyStatus.SUCCESS, ConsumeOrderlyStatus.COMMIT)
                failed = status is ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
                self.tally.count((mq.topic,), len(msgs) if ok else 0, len(msgs) if failed else 0)
                pause_s = await self._settle_orderly(pq, msgs, status)
            finally:
                pq.inflight -= 1
                pq.changed.set()
            if pause_s:
                await asyncio.sleep(pause_s)

    async def _settle_orderly(
        self, pq: ProcessQueue, msgs: list[MessageExt], status: ConsumeOrderlyStatus
    ) -> float:
        """What the listener's ``status`` does to the batch ``msgs`` (see the module doc);
        how long the queue pauses then."""
        s = ConsumeOrderlyStatus
        if self.auto_commit and status in (s.COMMIT, s.ROLLBACK):
            logger.warning(
                "orderly listener returned %s, which needs auto_commit=False; taken as SUCCESS",
                status.name,
            )
            status = s.SUCCESS
        if status is s.SUCCESS and not self.auto_commit:
            return 0.0  # acknowledged; committed by a later COMMIT
        if status is s.SUCCESS or status is s.COMMIT:
            self.consumed += len(pq.taken)
            pq.commit_taken()
            return 0.0
        pause_s = suspend_ms(self.config.suspend_current_queue_time_millis) / 1000
        if status is s.ROLLBACK:
            pq.rollback_taken()
            return pause_s
        for m in msgs:
            m.reconsume_times += 1
        limit = reconsume_limit(self.max_reconsume_times)
        over = [m for m in msgs if m.reconsume_times > limit]
        if over and (self.broadcasting or not await self._send_back(over, dlq=True)):
            pq.discard_taken(over)
        rest = [m for m in msgs if m.queue_offset in pq.taken]
        if rest:
            pq.give_back(rest)
            return pause_s
        self.consumed += len(pq.taken)
        pq.commit_taken()
        return 0.0

    async def _lock(self, mqs: list[MessageQueue]) -> bool:
        """Lock (or renew) ``mqs`` on their brokers; True if all were locked."""
        held = await self._lock_held(mqs)
        now = time.monotonic()
        for q in held:
            if q in self.queues:
                self.queues[q].locked_at = now
        return len(held) == len(set(mqs))

    async def _lock_held(self, mqs: list[MessageQueue]) -> set[MessageQueue]:
        """Lock (or renew) ``mqs`` on their brokers; the ones this consumer holds now."""
        out: set[MessageQueue] = set()
        for broker, qs in by_broker(mqs).items():
            try:
                got = await self.ctx.broker(broker).lock_queues(self._lock_request(qs))
            except Exception as exc:
                logger.warning(
                    "consumer %s: locking queues on %s failed: %s", self.client_id, broker, exc
                )
                continue
            held = {(g.topic, g.queue_id) for g in got.locked}
            out.update(q for q in qs if (q.topic, q.queue_id) in held)
        return out

    async def _unlock(self, mqs: list[MessageQueue]) -> None:
        for broker, qs in by_broker(mqs).items():
            with contextlib.suppress(Exception):
                await self.ctx.broker(broker).unlock_queues(self._lock_request(qs))

    def _lock_request(self, qs: list[MessageQueue]) -> LockQueuesRequest:
        return LockQueuesRequest(
            group=self.group,
            client_id=self.client_id,
            queues=[QueueRef(q.topic, q.queue_id) for q in qs],
        )

    async def renew_locks(self) -> None:
        """Renew the locks of the owned queues; lock and take on the queues assigned but
        locked by another consumer until now (the timer, every lock_renew_interval_ms)."""
        if not self.orderly or self.broadcasting:
            return
        if self.queues:
            await self._lock(list(self.queues))
        waiting = sorted(mq for mq in self.assigned if mq not in self.queues)
        if waiting:
            await self._take_over(waiting)

    async def _lock_first(self, mqs: list[MessageQueue]) -> list[MessageQueue]:
        """Of queues about to be taken on, the ones to take on now: all of them, but for
        orderly clustering consumption the ones locked on their brokers (RocketMQ: a queue
        is locked before its process queue is created; the others wait for the next
        ``renew_locks``)."""
        if not self.orderly or self.broadcasting:
            return mqs
        held = await self._lock_held(mqs)
        left = [mq for mq in mqs if mq not in held]
        if left:
            logger.warning(
                "consumer %s: %d assigned queues are locked by another consumer; "
                "taking them on once their locks are free: %s",
                self.client_id,
                len(left),
                left,
            )
            if self._lock_waiter is None or self._lock_waiter.done():
                self._lock_waiter = asyncio.create_task(self._wait_for_locks())
        return [mq for mq in mqs if mq in held]

    async def _wait_for_locks(self) -> None:
        """Every LOCK_RETRY_S, try to lock and take on the assigned queues not taken on
        yet (a dead consumer's lock runs out within its lease); ends when none is left."""
        while not self.closed:
            await asyncio.sleep(LOCK_RETRY_S)
            waiting = sorted(mq for mq in self.assigned if mq not in self.queues)
            if not waiting:
                return
            await self._take_over(waiting)
