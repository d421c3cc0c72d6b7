"""The messages a push consumer holds for one queue (RocketMQ ``ProcessQueue``).

Pulled messages wait here until the listener is done with them. What a consumer
commits (``commit_state``) is the smallest offset still held (every message below it
is done), or, with nothing held, the next offset to pull; and past it, the ranges
``[start, end)`` that are done too: the gaps between the held messages below the next
pull, and the ranges a previous owner committed as done (``skip``: their messages are
neither pulled again nor handed to the listener). So one slow message holds back the
offset but not the commit of what came after it, and after a crash or a rebalance
only the messages still held come again. Concurrent consumption removes messages in
any order; orderly consumption ``take``s the lowest ones, then ``commit_taken``
(done) or ``rollback_taken`` (consume them again).

Flow control reads ``room``: how many more messages the queue may hold under the
consumer's thresholds (count, bytes and, for concurrent listeners, span), counting
the records of an answer that arrived but is not decoded yet (``incoming``).

Dict insertion order is queue order (pulls append increasing offsets and removals
never reorder), so the smallest held offset is the first key: O(1).
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import time
from collections.abc import Iterable

from rayq.actors.protocol.records import ACKED_RANGES_MAX
from rayq.store.message import MessageExt

Ranges = list[tuple[int, int]]


class ProcessQueue:
    def __init__(self, freed: asyncio.Event | None = None) -> None:
        self.msgs: dict[int, MessageExt] = {}
        self.taken: dict[int, MessageExt] = {}  # orderly: being consumed now
        self.bytes = 0
        self.next_pull = -1  # next queue offset to pull
        self.epoch = -1  # the broker epoch next_pull was read in (PullRequest.epoch)
        self.dropped = False
        self.pulling = True  # cleared first when the queue is revoked
        self.backlog = False  # the last pull left messages behind on the broker
        self.found = False  # the last pull brought messages (more may be on their way)
        self.incoming = 0  # records of an answer not put here yet (decoded after the next pull)
        self.incoming_bytes = 0
        self.incoming_from: int | None = None  # where the answer not put yet began
        self.record_bytes = 0  # body bytes per message of the last pull (0: none yet)
        self.retry_at = 0.0  # monotonic time before which the queue is not pulled (errors)
        self.inflight = 0  # concurrent consume batches running
        self.locked_at = 0.0  # orderly: monotonic time of the last successful lock
        self.running: dict[int, tuple[float, list[MessageExt]]] = {}  # batch -> (began, msgs)
        self._batches = itertools.count()
        self.changed = asyncio.Event()  # set on put, remove and drop
        self.freed = freed  # set when messages are done (shared by a broker's queues)
        self.skip: Ranges = []  # done before this consumer owned the queue (sorted)
        self._skip_starts: list[int] = []
        self._version = 0  # bumped by every change of what is held
        self._state: tuple[tuple[int, int, int | None], tuple[int, Ranges]] | None = None

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
        return self.commit_state()[0]

    def commit_state(self) -> tuple[int, Ranges]:
        """What a commit stores: ``commit_offset`` and the ranges past it that are done
        too (sorted; at most ``ACKED_RANGES_MAX``, the nearest ones: a range left out
        only comes again after a crash)."""
        key = (self._version, self.next_pull, self.incoming_from)
        if self._state is None or self._state[0] != key:
            self._state = (key, self._compute_state())
        offset, ranges = self._state[1]
        return offset, list(ranges)

    def _compute_state(self) -> tuple[int, Ranges]:
        # pulled: below it every message is held or done (an answer not put yet is neither)
        pulled = self.next_pull if self.incoming_from is None else self.incoming_from
        held = itertools.chain(self.taken, self.msgs)
        low = next(held, None)
        ranges: Ranges = []
        if low is None:
            low = pulled
        else:
            prev = low
            for off in held:
                if off > prev + 1:
                    ranges.append((prev + 1, off))
                prev = off
            if pulled > prev + 1:
                ranges.append((prev + 1, pulled))
        for start, end in self.skip:
            start = max(start, pulled)
            if end <= start:
                continue
            if ranges and ranges[-1][1] == start:
                ranges[-1] = (ranges[-1][0], end)
            else:
                ranges.append((start, end))
        while ranges and ranges[0][0] <= low:  # nothing held: done up to the range's end
            low = max(low, ranges.pop(0)[1])
        return low, ranges[:ACKED_RANGES_MAX]

    def set_skip(self, ranges: Iterable[tuple[int, int]]) -> None:
        """Ranges a previous owner committed as done: not pulled nor consumed again."""
        self.skip = sorted((int(s), int(e)) for s, e in ranges if e > s)
        self._skip_starts = [s for s, _ in self.skip]
        self._version += 1

    def pull_from(self) -> int:
        """The offset to pull next: ``next_pull``, moved past a range done already."""
        i = bisect.bisect_right(self._skip_starts, self.next_pull) - 1
        if i >= 0 and self.next_pull < self.skip[i][1]:
            self.next_pull = self.skip[i][1]
        return self.next_pull

    def _skipped(self, queue_offset: int) -> bool:
        i = bisect.bisect_right(self._skip_starts, queue_offset) - 1
        return i >= 0 and queue_offset < self.skip[i][1]

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
    def arriving(self, records: int, size_bytes: int, next_pull: int | None = None) -> None:
        """An answer with ``records`` (``size_bytes`` in all) came and is put soon; the
        pull goes on at ``next_pull`` (commits stay below the records until put)."""
        self.incoming = records
        self.incoming_bytes = size_bytes
        if next_pull is not None:
            if self.incoming_from is None:
                self.incoming_from = self.next_pull
            self.next_pull = next_pull

    def put(self, msgs: Iterable[MessageExt], next_pull: int) -> list[MessageExt]:
        """Hold ``msgs`` (but those held already or done before: ``skip``); the ones
        now held, for the listener."""
        added: list[MessageExt] = []
        added_bytes = 0
        skip = self._skipped if self.skip else None
        for m in msgs:
            if m.queue_offset not in self.msgs and not (skip and skip(m.queue_offset)):
                self.msgs[m.queue_offset] = m
                added.append(m)
                added_bytes += len(m.body)
        self.bytes += added_bytes
        if added:
            self.record_bytes = max(1, added_bytes // len(added))
        self.incoming = self.incoming_bytes = 0
        self.incoming_from = None
        self.next_pull = max(self.next_pull, next_pull) if self.skip else next_pull
        self._version += 1
        self.changed.set()
        return added

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
        return [
            m
            for began, msgs in self.running.values()
            if began < limit
            for m in msgs
            if m.queue_offset in self.msgs
        ]

    # ------------------------------------------------------------- orderly
    def take(self, n: int, more: bool = False) -> list[MessageExt]:
        """The lowest ``n`` messages, moved to ``taken`` (nothing if a batch is taken,
        unless ``more``: a listener that commits by hand takes batch after batch)."""
        if self.taken and not more:
            return []
        out = []
        for off in list(itertools.islice(self.msgs, n)):
            self.taken[off] = self.msgs.pop(off)
            out.append(self.taken[off])
        return out

    def give_back(self, msgs: Iterable[MessageExt]) -> None:
        """Put these taken messages back in front, to be consumed again (the others
        taken stay taken)."""
        back = {
            m.queue_offset: self.taken.pop(m.queue_offset)
            for m in msgs
            if m.queue_offset in self.taken
        }
        self.msgs = {**back, **self.msgs}
        self._version += 1

    def discard_taken(self, msgs: Iterable[MessageExt]) -> None:
        """These taken messages are done without being consumed (sent to the DLQ)."""
        for m in msgs:
            if self.taken.pop(m.queue_offset, None) is not None:
                self.bytes -= len(m.body)
        self._version += 1

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
        self._version += 1

    def drop(self) -> None:
        self.dropped = True
        self.changed.set()

    def _done(self) -> None:
        self._version += 1
        self.changed.set()
        if self.freed is not None:
            self.freed.set()
