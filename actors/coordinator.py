"""The Coordinator actor (RocketMQ's NameServer role): brokers, routes and clients.

Soft state only: brokers register on start and re-register (heartbeat) every
``heartbeat_interval_ms``; a broker silent for ``BROKER_EXPIRY_MS`` is dropped by a
scan every ``SCAN_INTERVAL_MS``, and one whose actor Ray reports dead is dropped at
once (the coordinator keeps a never-returning call open on each broker). Restarted,
the coordinator rebuilds everything from the next registrations.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import ray

from rayq.store.clock import SYSTEM_CLOCK
from rayq.store.config_files import is_readable

from .allocation import allocate_averagely
from .stream_plans import StreamPlans
from .wire import BrokerInfo, MessageQueue, QueueData, TopicRoute, broker_actor_name

logger = logging.getLogger(__name__)

BROKER_EXPIRY_MS = 120_000
SCAN_INTERVAL_MS = 10_000
RESTART_WAIT_S = 60.0


class RouteTable:
    """Brokers and their topics (no Ray): the data behind routing."""

    def __init__(self) -> None:
        self.brokers: dict[str, BrokerInfo] = {}
        self.last_seen_ms: dict[str, int] = {}

    def register(self, info: BrokerInfo, now_ms: int) -> bool:
        """Record a registration; True if the broker is new."""
        new = info.broker_name not in self.brokers
        self.brokers[info.broker_name] = info
        self.last_seen_ms[info.broker_name] = now_ms
        return new

    def remove(self, broker_name: str) -> None:
        self.brokers.pop(broker_name, None)
        self.last_seen_ms.pop(broker_name, None)

    def expire(self, now_ms: int, expiry_ms: int = BROKER_EXPIRY_MS) -> list[str]:
        gone = [b for b, seen in self.last_seen_ms.items() if now_ms - seen > expiry_ms]
        for b in gone:
            self.remove(b)
        return gone

    def route(self, topic: str) -> TopicRoute | None:
        queues: list[QueueData] = [
            info.topics[topic] for info in self.brokers.values() if topic in info.topics
        ]
        if not queues:
            return None
        return TopicRoute(topic=topic, queues=sorted(queues, key=lambda q: q.broker_name))

    def topics(self) -> list[str]:
        return sorted({t for info in self.brokers.values() for t in info.topics})


class GroupTable:
    """Members of each consumer group per topic, with when each was last heard from."""

    def __init__(self) -> None:
        self.seen: dict[tuple[str, str], dict[str, int]] = {}

    def touch(self, group: str, topic: str, client_id: str, now_ms: int,
              expiry_ms: int) -> list[str]:  # fmt: skip
        """Record ``client_id`` as alive; the sorted live members of group/topic."""
        members = self.seen.setdefault((group, topic), {})
        members[client_id] = now_ms
        for cid in [c for c, t in members.items() if now_ms - t > expiry_ms]:
            del members[cid]
        return sorted(members)

    def leave(self, client_id: str) -> None:
        for members in self.seen.values():
            members.pop(client_id, None)


class CoordinatorActor:
    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self.table = RouteTable()
        self.clients: dict[str, tuple[str, str]] = {}
        self.groups = GroupTable()
        self._watches: dict[str, asyncio.Task] = {}
        self._scan: asyncio.Task | None = None
        self.stream_plans = StreamPlans()
        self.lost: dict[str, BrokerInfo] = {}  # died or went silent, not back yet

    async def register_broker(self, info: BrokerInfo) -> bool:
        if self._scan is None:
            self._scan = asyncio.create_task(self._scan_loop())
        new = self.table.register(info, _now_ms())
        self.lost.pop(info.broker_name, None)
        watch = self._watches.get(info.broker_name)
        if watch is None or watch.done():
            self._watches[info.broker_name] = asyncio.create_task(self._watch(info.broker_name))
        return new

    async def _watch(self, broker_name: str) -> None:
        """Drop a broker as soon as Ray reports it dead; re-wire it when Ray restarts it."""
        try:
            handle = ray.get_actor(broker_actor_name(broker_name), namespace=self.namespace)
        except ValueError:
            return
        while True:
            try:
                await handle.park.remote()
            except Exception:
                logger.warning("broker %s died; dropping it until it is back", broker_name)
                self._lose(broker_name)
            try:  # restarted by Ray (max_restarts): wire it up again
                await asyncio.wait_for(handle.start_services.remote(), RESTART_WAIT_S)
            except Exception:
                return  # killed for good: a later registration starts a new watch

    async def _scan_loop(self) -> None:
        while True:
            await asyncio.sleep(SCAN_INTERVAL_MS / 1000)
            for gone in self.table.expire(_now_ms()):
                logger.warning("broker %s missed its heartbeats; dropping it", gone)
                self.lost.setdefault(gone, BrokerInfo(broker_name=gone, node_id="", store_dir="",
                                                      topics={}))  # fmt: skip

    async def unregister_broker(self, broker_name: str) -> None:
        self.table.remove(broker_name)

    async def route(self, topic: str) -> TopicRoute | None:
        return self.table.route(topic)

    async def routes(self, topics: list[str]) -> dict[str, TopicRoute | None]:
        return {t: self.table.route(t) for t in topics}

    async def topics(self) -> list[str]:
        return self.table.topics()

    async def brokers(self) -> list[str]:
        return sorted(self.table.brokers)

    async def register_client(self, client_id: str, kind: str, group: str) -> None:
        self.clients[client_id] = (kind, group)

    async def unregister_client(self, client_id: str) -> None:
        self.clients.pop(client_id, None)
        self.groups.leave(client_id)

    async def group_share(self, group: str, client_id: str, topic: str,
                          expiry_ms: int) -> list[MessageQueue] | None:  # fmt: skip
        """``client_id``'s share of ``topic``'s queues among the group's live members
        (averagely); members not heard from for ``expiry_ms`` no longer count."""
        route = self.table.route(topic)
        if route is None:
            return None
        queues = [MessageQueue(topic, d.broker_name, q) for d in route.queues
                  if is_readable(d.perm) for q in range(d.read_queue_nums)]  # fmt: skip
        members = self.groups.touch(group, topic, client_id, _now_ms(), expiry_ms)
        return allocate_averagely(queues, members)[client_id]

    async def ready(self) -> bool:
        return True

    def _lose(self, broker_name: str) -> None:
        info = self.table.brokers.get(broker_name)
        if info is not None:
            self.lost[broker_name] = info
        self.table.remove(broker_name)

    async def lost_brokers(self, topic: str | None = None) -> list[str]:
        """Brokers that died or went silent and are not back (holding ``topic``, if given):
        their queues are unavailable, not gone."""
        return sorted(b for b, info in self.lost.items()
                      if topic is None or topic in info.topics or not info.topics)  # fmt: skip

    # Streaming batches in flight (stream_plans.py), for rayq/streaming.py.
    async def stream_plan(self, group: str, topic: str) -> tuple[int, Any] | None:
        return self.stream_plans.get(group, topic)

    async def record_stream_plan(self, group: str, topic: str, ranges: Any) -> int:
        return self.stream_plans.record(group, topic, ranges)

    async def finish_stream_plan(self, group: str, topic: str, batch_id: int) -> bool:
        return self.stream_plans.finish(group, topic, batch_id)


def _now_ms() -> int:
    return SYSTEM_CLOCK.now_ms()


def spawn_coordinator(namespace: str, node_id: str | None = None) -> Any:
    """Start (or get) the coordinator; pinned to ``node_id`` (the head) when given."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from .wire import COORDINATOR_NAME

    where = NodeAffinitySchedulingStrategy(node_id, soft=False) if node_id else "DEFAULT"
    return ray.remote(CoordinatorActor).options(
        name=COORDINATOR_NAME, namespace=namespace, get_if_exists=True, lifetime="detached",
        max_restarts=-1, num_cpus=0, max_concurrency=1000, scheduling_strategy=where,
    ).remote(namespace)  # fmt: skip
