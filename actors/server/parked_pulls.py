"""Pulls that found nothing new, kept by the broker until an append answers them (no Ray).

The hold service sends a waiting pull to the broker with a ``Park`` token. The broker
parks the token *before* it reads (``park``), and drops it again if the read found
something (``drop``). An append takes the tokens parked on the queues it touched
(``take``) and the broker answers each with a fresh read, sent straight to the hold
service: the consumer gets the records two actor hops after the put (broker -> hold,
hold -> consumer). Park-then-read and append-then-take, under one lock, mean an append
either is seen by the read or finds the token.

A token whose hold time is over is swept (``sweep``) and never answered: the hold
service has answered its caller with "nothing new" by then.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

QueueKey = tuple[str, int]

# Kept a little past the hold time, so an append just before the hold service gives
# up still finds the token (an answer that arrives too late is dropped there).
GRACE_S = 1.0


@dataclass(slots=True)
class Parked:
    """One parked pull: its request (a PullRequest or a PullManyRequest), its queues
    and when it stops mattering."""

    request: Any
    keys: tuple[QueueKey, ...]
    deadline: float = field(default=0.0)


class ParkedPulls:
    """Parked pulls by token and by queue; safe to use from several threads (the
    broker's send and pull concurrency groups run in threads of their own)."""

    def __init__(self, clock: Any = time.monotonic) -> None:
        self._lock = threading.Lock()
        self._clock = clock
        self._by_token: dict[str, Parked] = {}
        self._by_queue: dict[QueueKey, set[str]] = {}
        self._next_sweep = 0.0

    def __len__(self) -> int:
        return len(self._by_token)

    def watched(self, key: QueueKey) -> bool:
        """Whether a pull waits on ``key`` (a cheap check before ``take``)."""
        return key in self._by_queue

    def park(self, token: str, request: Any, keys: tuple[QueueKey, ...], hold_s: float) -> None:
        now = self._clock()
        with self._lock:
            self._forget(token)
            self._by_token[token] = Parked(request, keys, now + hold_s + GRACE_S)
            for key in keys:
                self._by_queue.setdefault(key, set()).add(token)
        if now >= self._next_sweep:
            self.sweep()

    def drop(self, token: str) -> bool:
        """Unpark ``token``; whether it was still parked (then the caller answers it)."""
        with self._lock:
            return self._forget(token) is not None

    def take(self, keys: list[QueueKey] | tuple[QueueKey, ...]) -> list[tuple[str, Any]]:
        """Unpark and return the live pulls waiting on any of ``keys`` (token, request)."""
        now = self._clock()
        out: list[tuple[str, Any]] = []
        with self._lock:
            tokens = {t for key in keys for t in self._by_queue.get(key, ())}
            for token in tokens:
                parked = self._forget(token)
                if parked is not None and parked.deadline > now:
                    out.append((token, parked.request))
        return out

    def sweep(self) -> int:
        """Forget every pull whose hold time is over; how many."""
        now = self._clock()
        with self._lock:
            self._next_sweep = now + GRACE_S
            stale = [t for t, p in self._by_token.items() if p.deadline <= now]
            for token in stale:
                self._forget(token)
        return len(stale)

    def _forget(self, token: str) -> Parked | None:
        parked = self._by_token.pop(token, None)
        if parked is not None:
            for key in parked.keys:
                tokens = self._by_queue.get(key)
                if tokens is not None:
                    tokens.discard(token)
                    if not tokens:
                        del self._by_queue[key]
        return parked
