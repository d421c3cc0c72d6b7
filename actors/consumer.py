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
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import ray

from rayq.actors.metrics import CONSUMER_COUNTERS, REPORT_INTERVAL_S, ZeroSeeds, record_tally
from rayq.actors.protocol import MessageQueue

logger = logging.getLogger(__name__)

EXPIRED_SCAN_MAX_S = 60.0


class ConsumerActor:
    def __init__(self, factory: Callable[[], Any]) -> None:
        self.service = factory()
        self._tasks: list[asyncio.Task] = []

    async def start(self) -> bool:
        """Join the group; the coordinator then assigns queues."""
        await self.service.start(ray.get_runtime_context().current_actor)
        seed_counters(self.service)
        self._tasks = [asyncio.create_task(every(s, fn)) for s, fn in timers(self.service)]
        return True

    async def rejoin(self) -> bool:
        """Join the group again (asked by a coordinator that was restarted); False if
        this consumer is not started yet (its ``start`` joins) or already shut down."""
        if not self._tasks or self.service.closed:
            return False
        await self.service.join()
        return True

    async def assign(self, generation: int, queues: list[MessageQueue]) -> None:
        await self.service.assign(generation, queues)

    async def revoke(self, generation: int, queues: list[MessageQueue]) -> None:
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
            await report_metrics(self.service)
        return self.service.stats()


def timers(service: Any) -> list[tuple[float, Callable[[], Awaitable[Any]]]]:
    """The service's timers: (interval in seconds, what to run)."""
    cfg = service.config
    found: list[tuple[float, Callable[[], Awaitable[Any]]]] = [
        (cfg.auto_commit_interval_ms / 1000, service.commit),
        (cfg.member_heartbeat_interval_ms / 1000, service.heartbeat),
        (min(EXPIRED_SCAN_MAX_S, cfg.consume_timeout_ms / 4000), service.clean_expired),
    ]
    if service.orderly:
        found.append((cfg.lock_renew_interval_ms / 1000, service.renew_locks))
    found.append((REPORT_INTERVAL_S, functools.partial(report_metrics, service)))
    return found


async def every(interval_s: float, fn: Callable[[], Awaitable[Any]]) -> None:
    """Run ``fn`` every ``interval_s``; a failure is logged and the next tick tries again."""
    while True:
        await asyncio.sleep(interval_s)
        try:
            await fn()
        except Exception:
            logger.exception("consumer timer %s failed", getattr(fn, "__name__", fn))


def seed_counters(service: Any) -> None:
    """The consumed and failed counters of each subscribed topic, at 0 from the start."""
    try:
        ZeroSeeds({"group": service.group}).seed(
            CONSUMER_COUNTERS, ((topic,) for topic in service.filters)
        )
    except Exception:  # metrics must never stop a consumer
        logger.exception("consumer %s: could not create its counters", service.group)


async def report_metrics(service: Any) -> None:
    """Hand what the service tallied since the last report to Ray."""
    record_tally(
        service.tally,
        {"group": service.group},
        ("rayq_consumed_messages", "rayq_consume_failed_messages"),
        "rayq_listener_latency_seconds",
    )


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
