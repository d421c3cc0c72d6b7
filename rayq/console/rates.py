"""Message rates per queue from two readings of its max offset.

A queue's max offset counts the messages ever stored in it, so its rate is the
difference of two readings over the time between them. The console keeps the last
reading of each queue in memory (``RateMeter``, one per console process); the first
view of a topic has no rate yet (shown as "-"), each later view the rate since the
view before it (views less than a second apart show the same rate). A reading older
than ``window_s`` gives no rate, so a rate is never averaged over hours; a max offset
that went down (the topic was deleted and made again) gives none either.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Final, NamedTuple

from rayq.actors.protocol import MessageQueue, QueueStats

DEFAULT_WINDOW_S: Final[float] = 15 * 60.0
MIN_INTERVAL_S: Final[float] = 1.0


class Reading(NamedTuple):
    at_s: float
    max_offset: int


class RateMeter:
    """The last max-offset reading of each queue, and rates against it."""

    def __init__(
        self,
        window_s: float = DEFAULT_WINDOW_S,
        min_interval_s: float = MIN_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.window_s = window_s
        self.min_interval_s = min_interval_s
        self._clock = clock
        self._last: dict[MessageQueue, tuple[Reading, float | None]] = {}
        self._lock = threading.Lock()

    def observe(self, stats: list[QueueStats]) -> dict[MessageQueue, float | None]:
        """Record these readings; per queue, messages per second since its previous
        reading, or None when there is none to compare with (or it is older than
        ``window_s``). Views closer than ``min_interval_s`` to the previous reading show
        the rate shown then and keep that reading."""
        now = self._clock()
        out: dict[MessageQueue, float | None] = {}
        with self._lock:
            for s in stats:
                current = Reading(now, s.max_offset)
                before, shown = self._last.get(s.queue, (None, None))
                if before is not None and now - before.at_s < self.min_interval_s:
                    out[s.queue] = shown
                    continue
                fresh = before is not None and now - before.at_s <= self.window_s
                out[s.queue] = rate(before, current) if fresh else None
                self._last[s.queue] = (current, out[s.queue])
        return out


def rate(before: Reading | None, now: Reading) -> float | None:
    """Messages per second from ``before`` to ``now``; None without an earlier reading,
    with no time between them, or when the max offset went down."""
    if before is None or now.at_s <= before.at_s or now.max_offset < before.max_offset:
        return None
    return (now.max_offset - before.max_offset) / (now.at_s - before.at_s)


def total(rates: dict[MessageQueue, float | None]) -> float | None:
    """A topic's rate: the sum of its queues' (None if no queue has one yet)."""
    known = [r for r in rates.values() if r is not None]
    return sum(known) if known else None
