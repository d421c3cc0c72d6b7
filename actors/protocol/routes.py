"""Topic routes: which brokers hold a topic's queues, with what permission."""

from __future__ import annotations

import msgspec

from rayq.actors.protocol.enums import MessageQueue
from rayq.actors.protocol.records import (
    is_readable,
    is_writeable,
)


class QueueData(msgspec.Struct, frozen=True, kw_only=True):
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    # While the broker's master is lost and a slave serves its reads: that slave's
    # replica name (``<name>#<id>``); the queues are then read-only.
    read_from: str = ""
    property_filter: bool = False  # the broker evaluates SQL92 subscriptions


class TopicRoute(msgspec.Struct, frozen=True, kw_only=True):
    topic: str
    queues: list[QueueData]

    def read_queues(self) -> list[MessageQueue]:
        """Every queue consumers may read, on the brokers whose permission allows it."""
        return [
            MessageQueue(self.topic, d.broker_name, q)
            for d in self.queues
            if is_readable(d.perm)
            for q in range(d.read_queue_nums)
        ]

    def write_queues(self) -> list[MessageQueue]:
        """Every queue producers may send to, on the brokers whose permission allows it."""
        return [
            MessageQueue(self.topic, d.broker_name, q)
            for d in self.queues
            if is_writeable(d.perm)
            for q in range(d.write_queue_nums)
        ]
