"""Which queue a batch goes to: cached write queues, round robin, fault avoidance.

RocketMQ's ``MQFaultStrategy``: queues are picked round robin, skipping brokers that
failed or answered slower than ``SLOW_CALL_S`` within ``broker_fault_backoff_ms``
(unless every broker is avoided, then one is picked anyway). A topic's write queues
are cached for ``route_refresh_interval_ms`` and dropped when a put says the route
is stale. The routes themselves come from the caller's ``ClientContext``; nothing
here makes a remote call of its own.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable
from typing import Final, Protocol

from rayq.actors.protocol import MessageQueue, TopicRoute
from rayq.store.errors import BrokerUnavailableError, PermissionDeniedError

logger = logging.getLogger(__name__)

SLOW_CALL_S: Final[float] = 1.0


class RouteSource(Protocol):
    """What the selector needs from a ClientContext."""

    def write_queues(self, topic: str, *, refresh: bool = False) -> list[MessageQueue]: ...

    def route(self, topic: str, *, refresh: bool = False) -> TopicRoute | None: ...


class FaultTable:
    """Brokers to avoid until a deadline (RocketMQ's latency fault tolerance)."""

    def __init__(self, backoff_ms: int) -> None:
        self._backoff_s = backoff_ms / 1000
        self._until: dict[str, float] = {}

    def ok(self, broker: str) -> bool:
        until = self._until.get(broker)
        return until is None or until <= time.monotonic()

    def record(self, broker: str, latency_s: float) -> None:
        if latency_s > SLOW_CALL_S:
            logger.info("broker %s answered in %.1f s: avoiding it for a while", broker, latency_s)
            self.fail(broker)

    def fail(self, broker: str) -> None:
        self._until[broker] = time.monotonic() + self._backoff_s


class QueueSelector:
    """Write queues per topic (cached) and the round-robin pick with fault avoidance."""

    def __init__(
        self, routes: Callable[[], RouteSource], refresh_ms: int, fault_backoff_ms: int
    ) -> None:
        self._routes = routes
        self._refresh_s = refresh_ms / 1000
        self.faults = FaultTable(fault_backoff_ms)
        self.queues: dict[str, tuple[list[MessageQueue], float]] = {}  # topic -> (queues, expiry)
        self._rr = itertools.count()

    def write_queues(self, topic: str) -> list[MessageQueue]:
        """The topic's write queues, sorted; cached for ``route_refresh_interval_ms``."""
        cached = self.queues.get(topic)
        if cached is not None and cached[1] > time.monotonic():
            return cached[0]
        routes = self._routes()
        queues = sorted(routes.write_queues(topic, refresh=True))
        if not queues:
            route = routes.route(topic)
            if route is not None and not any(q.read_from for q in route.queues):
                raise PermissionDeniedError(f"topic {topic!r} has no writeable queue")
            raise BrokerUnavailableError(f"no live broker can take topic {topic!r}", topic=topic)
        self.queues[topic] = (queues, time.monotonic() + self._refresh_s)
        return queues

    def forget(self, topic: str) -> None:
        """The cached queues are stale: fetch them again next time."""
        self.queues.pop(topic, None)

    def pick(self, topic: str, avoid: set[str] | frozenset[str] = frozenset()) -> MessageQueue:
        """Round robin, skipping brokers in ``avoid`` and recently faulty ones if possible."""
        queues = self.write_queues(topic)
        n, start = len(queues), next(self._rr)
        fallback = None
        for i in range(n):
            queue = queues[(start + i) % n]
            if queue.broker_name in avoid:
                continue
            if self.faults.ok(queue.broker_name):
                return queue
            fallback = fallback or queue
        return fallback or queues[start % n]
