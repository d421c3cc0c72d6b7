"""Broker-side queue locks for orderly consumption (RocketMQ ``RebalanceLockManager``).

In memory only: a lock is a lease of ``lease_ms`` held by one client of a group on
one queue, renewed by locking again. A lease that ran out may be taken by another
client; a broker restart forgets every lease, and consumers lock again within their
renew interval (they stop consuming a queue whose lock they could not renew).
"""

from __future__ import annotations

from collections.abc import Iterable

QueueKey = tuple[str, int]  # (topic, queue id)


class QueueLocks:
    """``{(group, topic, queue): (client id, lease end ms)}``."""

    def __init__(self, lease_ms: int) -> None:
        self.lease_ms = lease_ms
        self._locks: dict[tuple[str, str, int], tuple[str, int]] = {}

    def lock(
        self, group: str, client_id: str, queues: Iterable[QueueKey], now_ms: int
    ) -> list[QueueKey]:
        """Lock (or renew) what is free, expired or already ``client_id``'s; the ones got."""
        got = []
        for topic, qid in queues:
            key = (group, topic, qid)
            held = self._locks.get(key)
            if held is None or held[0] == client_id or held[1] <= now_ms:
                self._locks[key] = (client_id, now_ms + self.lease_ms)
                got.append((topic, qid))
        return got

    def unlock(self, group: str, client_id: str, queues: Iterable[QueueKey]) -> int:
        """Release the queues ``client_id`` holds; how many were released."""
        released = 0
        for topic, qid in queues:
            key = (group, topic, qid)
            held = self._locks.get(key)
            if held is not None and held[0] == client_id:
                del self._locks[key]
                released += 1
        return released

    def holder(self, group: str, topic: str, queue_id: int, now_ms: int) -> str | None:
        held = self._locks.get((group, topic, queue_id))
        return held[0] if held is not None and held[1] > now_ms else None
