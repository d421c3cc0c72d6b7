"""The coordinator's tables, without Ray: brokers and their topics (routing), and the
pull-consumer members of each group per topic (group shares)."""

from __future__ import annotations

from rayq.actors.config import replica_name
from rayq.actors.protocol import BrokerInfo, QueueData, TopicRoute

from .table_files import PERM_WRITE


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
                queues.append(QueueData(broker_name=name, read_queue_nums=q.read_queue_nums,
                                        write_queue_nums=0, perm=q.perm & ~PERM_WRITE,
                                        read_from=replica_name(name, slave.broker_id)))  # fmt: skip
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
        return sorted({t for info in [*self.brokers.values(), *self.read_only.values()]
                       for t in info.topics})  # fmt: skip


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
