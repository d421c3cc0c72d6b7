"""Orderly consumption (RocketMQ ``ConsumeMessageOrderlyService``), a part of
``ConsumeService``.

Each owned queue has one consume loop, so at most one batch of a queue is in the
listener at a time. The loop consumes only while this consumer holds the broker's
lock on the queue (``lock_queues``: a lease of ``rebalance_lock_max_live_time_ms``,
renewed every ``lock_renew_interval_ms``; a lock not renewed within ``lock_stale_ms``
counts as lost). SUSPEND (or an exception) puts the batch back in front and retries
it after ``suspend_current_queue_time_millis``, counting reconsume times; past
``max_reconsume_times`` a message goes to the dead-letter topic.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable
from typing import Any, TypeVar

from rayq.actors.protocol import LockQueuesRequest, MessageQueue, QueueRef
from rayq.process_queue import ProcessQueue
from rayq.store.message import MessageExt

logger = logging.getLogger(__name__)

LOCK_RETRY_S = 1.0

B = TypeVar("B", MessageQueue, MessageExt)


def by_broker(items: Iterable[B]) -> dict[str, list[B]]:
    """Queues or messages grouped by their ``broker_name`` (one call per broker)."""
    out: dict[str, list[B]] = {}
    for item in items:
        out.setdefault(item.broker_name, []).append(item)
    return out


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
    broadcasting: bool
    max_reconsume_times: int
    consumed: int

    async def _send_back(self, msgs: list, *, dlq: bool = False) -> list: ...

    async def _orderly_loop(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        cfg = self.config
        loop = asyncio.get_running_loop()
        while not pq.dropped:
            stale = time.monotonic() - pq.locked_at > cfg.lock_stale_ms / 1000
            if not self.broadcasting and stale and not await self._lock([mq]):
                await asyncio.sleep(LOCK_RETRY_S)
                continue
            pq.changed.clear()
            msgs = pq.take(cfg.consume_message_batch_max_size)
            if not msgs:
                await pq.changed.wait()
                continue
            ok = await loop.run_in_executor(self.pool, self.runner.run_orderly, msgs)
            if ok:
                self.consumed += len(msgs)
                pq.commit_taken()
                continue
            for m in msgs:
                m.reconsume_times += 1
            over = [m for m in msgs if m.reconsume_times > self.max_reconsume_times]
            if over and (self.broadcasting or not await self._send_back(over, dlq=True)):
                for m in over:
                    pq.taken.pop(m.queue_offset, None)
                    pq.bytes -= len(m.body)
            if pq.taken:
                pq.rollback_taken()
                await asyncio.sleep(cfg.suspend_current_queue_time_millis / 1000)
            else:
                pq.commit_taken()

    async def _lock(self, mqs: list[MessageQueue]) -> bool:
        """Lock (or renew) ``mqs`` on their brokers; True if all were locked."""
        all_ok = True
        for broker, qs in by_broker(mqs).items():
            try:
                got = await self.ctx.broker(broker).lock_queues(self._lock_request(qs))
            except Exception as exc:
                logger.warning("consumer %s: locking queues on %s failed: %s", self.client_id,
                               broker, exc)  # fmt: skip
                all_ok = False
                continue
            now = time.monotonic()
            held = {(g.topic, g.queue_id) for g in got.locked}
            for q in qs:
                if (q.topic, q.queue_id) in held and q in self.queues:
                    self.queues[q].locked_at = now
                else:
                    all_ok = False
        return all_ok

    async def _unlock(self, mqs: list[MessageQueue]) -> None:
        for broker, qs in by_broker(mqs).items():
            with contextlib.suppress(Exception):
                await self.ctx.broker(broker).unlock_queues(self._lock_request(qs))

    def _lock_request(self, qs: list[MessageQueue]) -> LockQueuesRequest:
        return LockQueuesRequest(group=self.group, client_id=self.client_id,
                                 queues=[QueueRef(q.topic, q.queue_id) for q in qs])  # fmt: skip

    async def renew_locks(self) -> None:
        if self.orderly and not self.broadcasting and self.queues:
            await self._lock(list(self.queues))
