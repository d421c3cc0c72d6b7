"""The messages a push consumer holds for one queue (RocketMQ ``ProcessQueue``).

Pulled messages wait here until the listener is done with them. The offset a
consumer may commit is the smallest offset still held (every message below it is
done), or, with nothing held, the next offset to pull. Concurrent consumption
removes messages in any order; orderly consumption ``take``s the lowest ones, then
``commit_taken`` (done) or ``rollback_taken`` (consume them again).

Flow control reads ``room``: how many more messages the queue may hold under the
consumer's thresholds (count, bytes and, for concurrent listeners, span), counting
the records of an answer that arrived but is not decoded yet (``incoming``).

Dict insertion order is queue order (pulls append increasing offsets and removals
never reorder), so the smallest held offset is the first key: O(1).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Iterable

from rayq.store.message import MessageExt


class ProcessQueue:
    def __init__(self, freed: asyncio.Event | None = None) -> None:
        self.msgs: dict[int, MessageExt] = {}
        self.taken: dict[int, MessageExt] = {}  # orderly: being consumed now
        self.bytes = 0
        self.next_pull = -1  # next queue offset to pull
        self.dropped = False
        self.pulling = True  # cleared first when the queue is revoked
        self.backlog = False  # the last pull left messages behind on the broker
        self.found = False  # the last pull brought messages (more may be on their way)
        self.incoming = 0  # records of an answer not put here yet (decoded after the next pull)
        self.incoming_bytes = 0
        self.record_bytes = 0  # body bytes per message of the last pull (0: none yet)
        self.retry_at = 0.0  # monotonic time before which the queue is not pulled (errors)
        self.inflight = 0  # concurrent consume batches running
        self.locked_at = 0.0  # orderly: monotonic time of the last successful lock
        self.running: dict[int, tuple[float, list[MessageExt]]] = {}  # batch -> (began, msgs)
        self._batches = itertools.count()
        self.changed = asyncio.Event()  # set on put, remove and drop
        self.freed = freed  # set when messages are done (shared by a broker's queues)

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

    def room(self, max_count: int, max_bytes: int, max_span: int | None = None) -> int:
        """How many more messages this queue may take in (0: pull nothing now): below
        ``max_count`` messages and ``max_bytes`` of bodies held (bytes estimated from the
        last pull's message size), and with ``max_span``, the next pull's last offset at
        most ``max_span`` past the smallest offset held."""
        room = max_count - self.count - self.incoming
        held_bytes = self.bytes + self.incoming_bytes
        if held_bytes >= max_bytes:
            return 0
        if self.record_bytes:
            room = min(room, (max_bytes - held_bytes) // self.record_bytes)
        first = self.first_offset()
        if max_span is not None and first is not None:
            room = min(room, first + max_span + 1 - self.next_pull)
        return max(room, 0)

    # ------------------------------------------------------------- changes
    def arriving(self, records: int, size_bytes: int) -> None:
        """An answer with ``records`` (``size_bytes`` in all) came and is put soon."""
        self.incoming = records
        self.incoming_bytes = size_bytes

    def put(self, msgs: Iterable[MessageExt], next_pull: int) -> None:
        added = added_bytes = 0
        for m in msgs:
            if m.queue_offset not in self.msgs:
                self.msgs[m.queue_offset] = m
                added += 1
                added_bytes += len(m.body)
        self.bytes += added_bytes
        if added:
            self.record_bytes = max(1, added_bytes // added)
        self.incoming = self.incoming_bytes = 0
        self.next_pull = next_pull
        self.changed.set()

    def remove(self, offsets: Iterable[int]) -> None:
        pop = self.msgs.pop
        for off in offsets:
            m = pop(off, None)
            if m is not None:
                self.bytes -= len(m.body)
        self._done()

    def mark_started(self, msgs: list[MessageExt]) -> int:
        """``msgs`` go to the listener now; the batch's number for ``mark_finished``."""
        batch = next(self._batches)
        self.running[batch] = (time.monotonic(), msgs)
        return batch

    def mark_finished(self, batch: int) -> None:
        self.running.pop(batch, None)

    def expired(self, timeout_s: float) -> list[MessageExt]:
        """Messages still held whose consumption began over ``timeout_s`` ago."""
        limit = time.monotonic() - timeout_s
        return [m for began, msgs in self.running.values() if began < limit
                for m in msgs if m.queue_offset in self.msgs]  # fmt: skip

    # ------------------------------------------------------------- orderly
    def take(self, n: int) -> list[MessageExt]:
        """The lowest ``n`` messages, moved to ``taken`` (nothing if a batch is taken)."""
        if self.taken:
            return []
        out = []
        for off in list(itertools.islice(self.msgs, n)):
            self.taken[off] = self.msgs.pop(off)
            out.append(self.taken[off])
        return out

    def commit_taken(self) -> int:
        """The taken batch is done; the offset to commit."""
        for m in self.taken.values():
            self.bytes -= len(m.body)
        self.taken.clear()
        self._done()
        return self.commit_offset()

    def rollback_taken(self) -> None:
        """Put the taken batch back in front, to be consumed again."""
        self.msgs = {**self.taken, **self.msgs}
        self.taken.clear()

    def drop(self) -> None:
        self.dropped = True
        self.changed.set()

    def _done(self) -> None:
        self.changed.set()
        if self.freed is not None:
            self.freed.set()
