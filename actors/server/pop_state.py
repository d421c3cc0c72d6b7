"""POP consumption's in-flight state: leases per message, cursors per queue, and its log.

For each (group, topic, queue) a POP group reads, the broker keeps:

- the **cursor**: the next queue offset no receiver was given yet;
- the **leases**: messages given out and not settled, each with a random lease id, the
  time its lease ends and its commit-log offset (to copy it to the retry topic);
- the group's committed offset, set to the lowest offset not settled (the smallest
  lease, else the cursor): what ``Admin.consumer_progress`` shows as the group's
  position, and where a cursor starts again if the log below is gone.

On disk: the pop log
--------------------
Every change is an entry appended to the broker's own topic ``rmq_sys_POP_LOG`` (one
queue) in the commit log, so it is flushed and replicated with the messages it is about
(RocketMQ 5 writes its pop check points and acks into the commit log for the same
reason). A record's body is a msgpack array of the ``PopLogEntry`` of one request
(a receive, an ack, a lease change) or one revive; each entry a msgpack array:

    kind        "take" (messages leased; ``cursor`` is the queue's cursor after it),
                "ack" (settled), "lease" (leases moved: new ids and end),
                "revive" (leases ended: copied to the retry or dead-letter topic),
                "drop" (a deleted topic's or group's leases and cursors forgotten:
                every queue of ``topic``, or of ``group``, when the other is "")
    group, topic, queue_id
    offsets     the queue offsets it is about
    leases      take, lease: each message's lease id
    commitlog   take: each message's commit-log offset
    deadline_ms take, lease: when the leases end (ms since the epoch)
    cursor      take: the queue's cursor after it (-1: unchanged)

A broker that starts as a master (after a restart, or a slave promoted by failover)
replays the whole log (``replay``): the leases held before come back with the times they
end, so a message is never lost and comes again once per lease that ended. Entries for
offsets below the group's committed offset are settled already and ignored. Retention
deletes old log segments with the others; a lease lives at most 12 hours.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Final, Literal

import msgspec

POP_LOG_TOPIC: Final[str] = "rmq_sys_POP_LOG"

QueueKey = tuple[str, str, int]  # (group, topic, queue_id)
Kind = Literal["take", "ack", "lease", "revive", "drop"]


class PopLogEntry(msgspec.Struct, frozen=True, array_like=True):
    """One change of the in-flight state (see the module doc)."""

    kind: Kind
    group: str
    topic: str
    queue_id: int
    offsets: list[int]
    leases: list[int] = []
    commitlog: list[int] = []
    deadline_ms: int = 0
    cursor: int = -1

    @property
    def key(self) -> QueueKey:
        return (self.group, self.topic, self.queue_id)


encode_entries = msgspec.msgpack.Encoder().encode
decode_entries = msgspec.msgpack.Decoder(list[PopLogEntry]).decode


@dataclass(slots=True)
class Lease:
    """One message in flight: its lease id, when the lease ends, where it is stored."""

    lease: int
    deadline_ms: int
    commitlog_offset: int


class PopState:
    """Leases and cursors of every POP group of one broker. ``lock`` is held by the
    processor around a read and the entry it logs, so entries apply in log order."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.cursors: dict[QueueKey, int] = {}
        self.leases: dict[QueueKey, dict[int, Lease]] = {}

    def apply(self, entry: PopLogEntry) -> None:
        """Apply one logged change (live, or when the log is replayed)."""
        key = entry.key
        if entry.kind == "take":
            queue = self.leases.setdefault(key, {})
            for offset, lease, at in zip(entry.offsets, entry.leases, entry.commitlog, strict=True):
                queue[offset] = Lease(lease, entry.deadline_ms, at)
            if entry.cursor > self.cursors.get(key, -1):
                self.cursors[key] = entry.cursor
            return
        if entry.kind == "drop":
            self.drop(entry.group, entry.topic)
            return
        queue = self.leases.get(key, {})
        if entry.kind == "lease":
            for offset, lease in zip(entry.offsets, entry.leases, strict=True):
                held = queue.get(offset)
                if held is not None:
                    held.lease, held.deadline_ms = lease, entry.deadline_ms
            return
        for offset in entry.offsets:  # ack, revive
            queue.pop(offset, None)
        if not queue:
            self.leases.pop(key, None)

    def holds(self, group: str, topic: str) -> bool:
        """Whether any lease or cursor is of ``group`` ("": any) and ``topic`` ("": any)."""
        return any(_matches(k, group, topic) for k in (*self.leases, *self.cursors))

    def drop(self, group: str, topic: str) -> None:
        """Forget the leases and cursors of ``group`` ("": every group) on ``topic`` ("":
        every topic)."""
        for table in (self.leases, self.cursors):
            for key in [k for k in table if _matches(k, group, topic)]:
                del table[key]

    def lease_of(self, key: QueueKey, offset: int) -> Lease | None:
        return self.leases.get(key, {}).get(offset)

    def floor(self, key: QueueKey) -> int:
        """The lowest offset not settled: the smallest lease, else the cursor (-1: none)."""
        queue = self.leases.get(key)
        if queue:
            return min(queue)
        return self.cursors.get(key, -1)

    def due(self, now_ms: int, limit: int) -> list[tuple[QueueKey, int, Lease]]:
        """Up to ``limit`` leases that ended by ``now_ms`` (oldest first per queue)."""
        out: list[tuple[QueueKey, int, Lease]] = []
        for key, queue in self.leases.items():
            for offset in sorted(queue):
                lease = queue[offset]
                if lease.deadline_ms <= now_ms:
                    out.append((key, offset, lease))
                    if len(out) >= limit:
                        return out
        return out

    def in_flight(self, group: str | None = None) -> int:
        """How many messages are leased (of ``group``, or of all groups)."""
        return sum(len(q) for k, q in self.leases.items() if group is None or k[0] == group)


def _matches(key: QueueKey, group: str, topic: str) -> bool:
    return (not group or key[0] == group) and (not topic or key[1] == topic)


def group_by_queue(
    items: Iterable[tuple[QueueKey, int, Lease]],
) -> Iterator[tuple[QueueKey, list[tuple[int, Lease]]]]:
    """``items`` grouped by queue, in order of first appearance."""
    out: dict[QueueKey, list[tuple[int, Lease]]] = {}
    for key, offset, lease in items:
        out.setdefault(key, []).append((offset, lease))
    yield from out.items()


__all__ = [
    "POP_LOG_TOPIC",
    "Lease",
    "PopLogEntry",
    "PopState",
    "QueueKey",
    "decode_entries",
    "encode_entries",
    "group_by_queue",
]
