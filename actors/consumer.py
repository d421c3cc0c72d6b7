"""The Consumer actor: one per push consumer instance, running its consume service.

A thin Ray shell: it builds the service from a picklable factory (the service is
client logic in ``rayq.consumer.service``; this module never imports it), hands the
coordinator's ``assign``/``revoke`` calls through, and runs the timers: offset
commits, orderly lock renewal, membership heartbeats and the consume-timeout scan.
A restarted coordinator asks it to ``rejoin`` at once (no waiting for the heartbeat).
Every ``REPORT_INTERVAL_S`` it hands the service's tally (messages consumed and
failed per topic, listener call times) to Ray (actors/metrics.py).
``park`` never returns while the actor lives, so the coordinator learns of its
death from Ray at once and rebalances the group.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

import ray

from rayq.actors.metrics import REPORT_INTERVAL_S, record_tally

logger = logging.getLogger(__name__)

EXPIRED_SCAN_MAX_S = 60.0


class ConsumerActor:
    def __init__(self, factory: Callable[[], Any]) -> None:
        self.service = factory()
        self._tasks: list[asyncio.Task] = []

    async def start(self) -> bool:
        """Join the group; the coordinator then assigns queues."""
        cfg = self.service.config
        handle = ray.get_runtime_context().current_actor
        await self.service.start(handle)
        timers = [
            (cfg.auto_commit_interval_ms / 1000, self.service.commit),
            (cfg.member_heartbeat_interval_ms / 1000, self.service.heartbeat),
            (min(EXPIRED_SCAN_MAX_S, cfg.consume_timeout_ms / 4000), self.service.clean_expired),
        ]
        if self.service.orderly:
            timers.append((cfg.lock_renew_interval_ms / 1000, self.service.renew_locks))
        timers.append((REPORT_INTERVAL_S, self._report_metrics))
        self._tasks = [asyncio.create_task(self._every(s, fn)) for s, fn in timers]
        return True

    async def _every(self, interval_s: float, fn: Callable[[], Any]) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                await fn()
            except Exception:  # logged; the next tick tries again
                logger.exception("consumer timer %s failed", getattr(fn, "__name__", fn))

    async def _report_metrics(self) -> None:
        """Hand what the service tallied since the last report to Ray."""
        record_tally(
            self.service.tally,
            {"group": self.service.group},
            ("rayq_consumed_messages", "rayq_consume_failed_messages"),
            "rayq_listener_latency_seconds",
        )

    async def rejoin(self) -> bool:
        """Join the group again (asked by a coordinator that was restarted); False if
        this consumer is not started yet (its ``start`` joins) or already shut down."""
        if not self._tasks or self.service.closed:
            return False
        await self.service.join()
        return True

    async def assign(self, generation: int, queues: list[Any]) -> None:
        await self.service.assign(generation, queues)

    async def revoke(self, generation: int, queues: list[Any]) -> None:
        await self.service.revoke(generation, queues)

    async def park(self) -> None:
        await asyncio.Event().wait()

    async def stats(self) -> dict[str, Any]:
        return self.service.stats()

    async def shutdown(self) -> dict[str, Any]:
        """Stop consuming, commit, leave the group; the final stats."""
        for task in self._tasks:
            task.cancel()
        with contextlib.suppress(Exception):
            await self.service.commit()
        await self.service.shutdown()
        with contextlib.suppress(Exception):
            await self._report_metrics()
        return self.service.stats()


def spawn_consumer(factory: Callable[[], Any], namespace: str, name: str) -> Any:
    """Start a Consumer actor; it lives as long as the process that made it."""
    return (
        ray.remote(ConsumerActor)
        .options(
            name=name,
            namespace=namespace,
            max_concurrency=10_000,
            num_cpus=0,
            max_restarts=0,
        )
        .remote(factory)
    )
