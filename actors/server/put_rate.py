"""PutRate: messages stored per second over the last few seconds (``rayq cluster list``).

One counter per whole second in a small ring; a put adds its message count to the
current second's slot, and the rate is the sum of the last ``window_s`` full seconds
divided by ``window_s``. No clock of its own: callers pass the time.
"""

from __future__ import annotations

WINDOW_S = 10


class PutRate:
    """Messages per second over the last ``window_s`` full seconds."""

    def __init__(self, window_s: int = WINDOW_S) -> None:
        self.window_s = window_s
        self._counts = [0] * (window_s + 1)
        self._seconds = [-1] * (window_s + 1)  # which second each slot counts

    def add(self, count: int, now_ms: int) -> None:
        second = now_ms // 1000
        slot = second % len(self._counts)
        if self._seconds[slot] != second:
            self._seconds[slot] = second
            self._counts[slot] = 0
        self._counts[slot] += count

    def per_second(self, now_ms: int) -> float:
        """The rate over the ``window_s`` full seconds before the current one."""
        second = now_ms // 1000
        recent = range(second - self.window_s, second)
        total = sum(c for c, s in zip(self._counts, self._seconds, strict=True) if s in recent)
        return total / self.window_s
