"""Tally: counts and latency samples gathered on a hot path, handed to metrics by a timer.

A put or a pull adds to a plain dict (a lookup and two additions, no Ray call); the
actor's metrics timer (actors/metrics.py) takes what gathered with ``drain`` and
records it with ``ray.util.metrics``. So the hot paths pay well under a microsecond,
and the server objects stay free of Ray.

    >>> t = Tally()
    >>> t.count(("orders",), 100, 102_400)
    >>> t.count(("orders",), 1, 1024)
    >>> t.observe(("orders",), 0.0021)
    >>> counts, samples = t.drain()
    >>> counts[("orders",)], samples[("orders",)]
    ([101, 103424], [0.0021])
    >>> t.drain()
    ({}, {})

Samples wait in a list until the next drain; past ``max_samples`` per key the
newest are dropped (a timer that stops cannot grow the actor without bound). A lock
makes it safe to add from the listener's pool threads as well as the event loop.
"""

from __future__ import annotations

import threading
from typing import Final

Key = tuple[str, ...]

MAX_SAMPLES: Final[int] = 100_000  # per key between two drains


class Tally:
    """Counters (a list of totals per label key) and latency samples (seconds per key)."""

    def __init__(self, max_samples: int = MAX_SAMPLES) -> None:
        self.max_samples = max_samples
        self._counts: dict[Key, list[int]] = {}
        self._samples: dict[Key, list[float]] = {}
        self._lock = threading.Lock()

    def count(self, key: Key, *amounts: int) -> None:
        """Add ``amounts`` (e.g. messages, bytes) to the totals of ``key``."""
        with self._lock:
            totals = self._counts.get(key)
            if totals is None:
                self._counts[key] = list(amounts)
                return
            for i, amount in enumerate(amounts):
                totals[i] += amount

    def observe(self, key: Key, seconds: float) -> None:
        """One latency sample of ``key``."""
        with self._lock:
            samples = self._samples.get(key)
            if samples is None:
                self._samples[key] = [seconds]
            elif len(samples) < self.max_samples:
                samples.append(seconds)

    def drain(self) -> tuple[dict[Key, list[int]], dict[Key, list[float]]]:
        """What was added since the last drain; the tally starts empty again."""
        with self._lock:
            counts, samples = self._counts, self._samples
            self._counts, self._samples = {}, {}
        return counts, samples
