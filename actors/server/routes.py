"""The coordinator's tables, without Ray: brokers and their topics (routing), and the
pull-consumer members of each group per topic (group shares)."""

from __future__ import annotations

from rayq.actors.protocol import (
    AllocateStrategy,
    BrokerInfo,
    GroupShareRequest,
    MessageQueue,
    QueueData,
    TopicRoute,
)
from rayq.actors.protocol.config import replica_name
from rayq.actors.server.allocation import STRATEGIES, allocate_by_config
from rayq.actors.server.table_files import PERM_WRITE
from rayq.store.errors import ConfigError


class RouteTable:
    """Brokers and their topics (no Ray): the data behind routing."""

    def __init__(self) -> None:
        self.brokers: dict[str, BrokerInfo] = {}
        self.last_seen_ms: dict[str, int] = {}
        # Brokers whose master is lost, and the slave serving their reads meanwhile.
        self.read_only: dict[str, BrokerInfo] = {}

    def register(self, info: BrokerInfo, now_ms: int) -> bool:
        """Record a registration; True if the broker is new."""
        new = info.broker_name not in self.brokers
        self.brokers[info.broker_name] = info
        self.last_seen_ms[info.broker_name] = now_ms
        return new

    def remove(self, broker_name: str) -> None:
        self.brokers.pop(broker_name, None)
        self.last_seen_ms.pop(broker_name, None)

    def route(self, topic: str) -> TopicRoute | None:
        queues: list[QueueData] = [
            info.topics[topic] for info in self.brokers.values() if topic in info.topics
        ]
        for name, slave in self.read_only.items():
            q = slave.topics.get(topic)
            if q is not None and name not in self.brokers:
                queues.append(
                    QueueData(
                        broker_name=name,
                        read_queue_nums=q.read_queue_nums,
                        write_queue_nums=0,
                        perm=q.perm & ~PERM_WRITE,
                        read_from=replica_name(name, slave.broker_id),
                    )
                )
        if not queues:
            return None
        return TopicRoute(topic=topic, queues=sorted(queues, key=lambda q: q.broker_name))

    def replica(self, broker_name: str) -> str:
        """The replica that serves ``broker_name``'s calls now (see ``read_only``)."""
        slave = self.read_only.get(broker_name)
        if slave is None or broker_name in self.brokers:
            return broker_name
        return replica_name(broker_name, slave.broker_id)

    def topics(self) -> list[str]:
        return sorted(
            {t for info in [*self.brokers.values(), *self.read_only.values()] for t in info.topics}
        )


class GroupTable:
    """Members of each consumer group per topic, with when each was last heard from and
    how it allocates (strategy, and its queues for CONFIG)."""

    def __init__(self) -> None:
        self.seen: dict[tuple[str, str], dict[str, int]] = {}
        self.specs: dict[tuple[str, str], dict[str, GroupShareRequest]] = {}

    def touch(
        self, group: str, topic: str, client_id: str, now_ms: int, expiry_ms: int
    ) -> list[str]:
        """Record ``client_id`` as alive; the sorted live members of group/topic."""
        members = self.seen.setdefault((group, topic), {})
        members[client_id] = now_ms
        specs = self.specs.setdefault((group, topic), {})
        for cid in [c for c, t in members.items() if now_ms - t > expiry_ms]:
            del members[cid]
            specs.pop(cid, None)
        return sorted(members)

    def share(
        self, req: GroupShareRequest, queues: list[MessageQueue], now_ms: int
    ) -> list[MessageQueue]:
        """The caller's share of ``queues`` (the topic's readable ones) among the live
        members of its group, by its strategy. ConfigError if another live member
        allocates otherwise, or (CONFIG) names one of the same queues."""
        key = (req.group, req.topic)
        members = self.touch(req.group, req.topic, req.client_id, now_ms, req.expiry_ms)
        specs = self.specs[key]
        for cid, other in specs.items():
            if cid != req.client_id and other.strategy is not req.strategy:
                self.seen[key].pop(req.client_id, None)
                raise ConfigError(
                    f"pull consumer {req.client_id} of group {req.group!r} allocates "
                    f"{req.topic!r} {req.strategy.value} but member {cid} "
                    f"{other.strategy.value}; every consumer of a group must use the same "
                    "allocate_strategy, or use another group name",
                    group=req.group,
                )
        specs[req.client_id] = req
        if req.strategy is not AllocateStrategy.CONFIG:
            return STRATEGIES[req.strategy](queues, members)[req.client_id]
        known = set(queues)
        config = {m: [q for q in specs[m].allocation if q in known] for m in members}
        try:
            return allocate_by_config(queues, members, config)[req.client_id]
        except ConfigError:
            specs.pop(req.client_id, None)
            self.seen[key].pop(req.client_id, None)
            raise

    def leave(self, client_id: str) -> None:
        for members in self.seen.values():
            members.pop(client_id, None)
        for specs in self.specs.values():
            specs.pop(client_id, None)
