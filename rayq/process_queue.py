"""The messages a push consumer holds for one queue (RocketMQ ``ProcessQueue``).

Pulled messages wait here until the listener is done with them. The offset a
consumer may commit is the smallest offset still held (every message below it is
done), or, with nothing held, the next offset to pull. Concurrent consumption
removes messages in any order; orderly consumption ``take``s the lowest ones, then
``commit_taken`` (done) or ``rollback_taken`` (consume them again).

Dict insertion order is queue order (pulls append increasing offsets and removals
never reorder), so the smallest held offset is the first key: O(1).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable

from rayq.store.message import MessageExt


class ProcessQueue:
    def __init__(self) -> None:
        self.msgs: dict[int, MessageExt] = {}
        self.taken: dict[int, MessageExt] = {}  # orderly: being consumed now
        self.bytes = 0
        self.next_pull = -1  # next queue offset to pull
        self.dropped = False
        self.pulling = True  # cleared first when the queue is revoked
        self.backlog = False  # the last pull left messages behind on the broker
        self.retry_at = 0.0  # monotonic time before which the queue is not pulled (errors)
        self.inflight = 0  # concurrent consume batches running
        self.locked_at = 0.0  # orderly: monotonic time of the last successful lock
        self.started_at: dict[int, float] = {}  # offset -> monotonic time consumption began
        self.changed = asyncio.Event()  # set on put, remove and drop

    # --------------------------------------------------------------- state
    @property
    def count(self) -> int:
        return len(self.msgs) + len(self.taken)

    @property
    def span(self) -> int:
        """Distance between the smallest and largest offset held."""
        first = self.first_offset()
        if first is None:
            return 0
        last = next(reversed(self.msgs)) if self.msgs else next(reversed(self.taken))
        return last - first

    def first_offset(self) -> int | None:
        if self.taken:
            return next(iter(self.taken))
        return next(iter(self.msgs)) if self.msgs else None

    def commit_offset(self) -> int:
        """The offset a commit may store: every message below it is done."""
        first = self.first_offset()
        return first if first is not None else self.next_pull

    # ------------------------------------------------------------- changes
    def put(self, msgs: Iterable[MessageExt], next_pull: int) -> None:
        for m in msgs:
            if m.queue_offset not in self.msgs:
                self.msgs[m.queue_offset] = m
                self.bytes += len(m.body)
        self.next_pull = next_pull
        self.changed.set()

    def remove(self, offsets: Iterable[int]) -> None:
        for off in offsets:
            m = self.msgs.pop(off, None)
            if m is not None:
                self.bytes -= len(m.body)
            self.started_at.pop(off, None)
        self.changed.set()

    def mark_started(self, msgs: Iterable[MessageExt]) -> None:
        now = time.monotonic()
        for m in msgs:
            self.started_at[m.queue_offset] = now

    def expired(self, timeout_s: float) -> list[MessageExt]:
        """Messages whose consumption began over ``timeout_s`` ago (oldest first)."""
        limit = time.monotonic() - timeout_s
        return [self.msgs[o] for o, t in self.started_at.items() if t < limit and o in self.msgs]

    # ------------------------------------------------------------- orderly
    def take(self, n: int) -> list[MessageExt]:
        """The lowest ``n`` messages, moved to ``taken`` (nothing if a batch is taken)."""
        if self.taken:
            return []
        out = []
        for off in list(self.msgs)[:n]:
            self.taken[off] = self.msgs.pop(off)
            out.append(self.taken[off])
        return out

    def commit_taken(self) -> int:
        """The taken batch is done; the offset to commit."""
        for m in self.taken.values():
            self.bytes -= len(m.body)
        self.taken.clear()
        self.changed.set()
        return self.commit_offset()

    def rollback_taken(self) -> None:
        """Put the taken batch back in front, to be consumed again."""
        self.msgs = {**self.taken, **self.msgs}
        self.taken.clear()

    def drop(self) -> None:
        self.dropped = True
        self.changed.set()
