"""How many workers a ``ConsumerPool`` wants: a pure function of what it observed.

Each round (``ScalePolicy.interval_s``) the pool looks at its group's backlog on the
topic (messages not settled: not received yet, or in flight), at each worker's
messages in flight and the age of its oldest one, and at when each worker last had
work. ``decide`` turns that into workers to add and workers to stop:

- **Up** while the backlog is more than the live workers can hold in flight
  (``workers * concurrency * backlog_per_slot``), and growing or not shrinking since
  the last round; or while some message has been in flight longer than
  ``max_in_flight_age_s`` (the handlers are slow: more workers drain the rest). Up to
  the workers the backlog asks for, at most ``max_step`` a round, at most
  ``max_workers``.
- **Down** by one worker a round while the backlog is empty and a worker has been idle
  (nothing in flight, nothing received) for ``idle_s``: the one idle longest. Never
  below ``min_workers``.
- A dead worker is replaced at once (its leases end and its messages come again);
  there are never fewer than ``min_workers``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import msgspec

from rayq.store.errors import ConfigError


class ScalePolicy(msgspec.Struct, frozen=True, kw_only=True):
    min_workers: int = 1
    max_workers: int = 8
    concurrency: int = 1  # handlers running at once in a worker
    interval_s: float = 2.0  # how often the pool looks and decides
    backlog_per_slot: int = 8  # backlog one handler slot is expected to keep up with
    max_in_flight_age_s: float = 30.0  # a message this long in a handler asks for more
    idle_s: float = 30.0  # a worker idle this long (backlog empty) is stopped
    max_step: int = 4  # workers added in one round at most

    def __post_init__(self) -> None:
        ints = ("min_workers", "max_workers", "concurrency", "backlog_per_slot", "max_step")
        for name in ints:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"{name} must be an int, got {value!r}")
        if self.min_workers < 0 or self.max_workers < max(self.min_workers, 1):
            raise ConfigError(
                f"need 0 <= min_workers <= max_workers and max_workers >= 1, got "
                f"min_workers={self.min_workers}, max_workers={self.max_workers}"
            )
        if self.concurrency < 1 or self.backlog_per_slot < 1 or self.max_step < 1:
            raise ConfigError("concurrency, backlog_per_slot and max_step must be >= 1")
        for name in ("interval_s", "max_in_flight_age_s", "idle_s"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or not value > 0 or math.isinf(value):
                raise ConfigError(f"{name} must be a number of seconds > 0, got {value!r}")


class WorkerView(msgspec.Struct, frozen=True):
    """One worker as the pool saw it this round."""

    name: str
    alive: bool
    in_flight: int = 0
    oldest_in_flight_s: float = 0.0
    idle_s: float = 0.0  # since it last had a message in flight or received one


class Decision(msgspec.Struct, frozen=True):
    add: int
    stop: list[str]
    why: str


def decide(
    policy: ScalePolicy,
    workers: Sequence[WorkerView],
    backlog: int,
    last_backlog: int | None,
) -> Decision:
    """Workers to add and to stop this round (see the module doc)."""
    live = [w for w in workers if w.alive]
    n, dead = len(live), len(workers) - len(live)
    # the dead are replaced, and there are always min_workers
    target = max(min(n + dead, policy.max_workers), policy.min_workers)
    why = f"{dead} dead worker(s) replaced" if dead else f"{n} live, below min_workers"
    per_worker = policy.concurrency * policy.backlog_per_slot
    slow = any(w.oldest_in_flight_s > policy.max_in_flight_age_s for w in live)
    growing = last_backlog is None or backlog >= last_backlog
    if n < policy.max_workers and (
        (backlog > n * per_worker and growing) or (slow and backlog > 0)
    ):
        wanted = max(math.ceil(backlog / per_worker), n + 1)
        grown = min(wanted, n + policy.max_step, policy.max_workers)
        if grown > target:
            target = grown
            why = f"{'backlog' if backlog > n * per_worker else 'in-flight age'}: " + (
                f"backlog {backlog}, {n} workers"
            )
    if target > n:
        return Decision(target - n, [], why)
    if backlog == 0 and n > policy.min_workers:
        idle = [w for w in live if w.in_flight == 0 and w.idle_s >= policy.idle_s]
        if idle:
            longest = max(idle, key=lambda w: w.idle_s)
            return Decision(0, [longest.name], f"{longest.name} idle {longest.idle_s:.0f} s")
    return Decision(0, [], "steady")


__all__ = ["Decision", "ScalePolicy", "WorkerView", "decide"]
