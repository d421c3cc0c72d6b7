"""The fault schedule: derived from the seed alone, before the run starts.

``make_schedule(seed, duration_s, mean_gap_s)`` draws, with ``random.Random(seed)``,
gaps (exponential, mean ``mean_gap_s``, at least 2 s), a fault kind and its target
(the replica role, not a node or a PID: those are resolved when the fault is applied,
since failover moves the master) and how long it lasts. The same seed gives the same
list; timing under Ray is not deterministic, the schedule is.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

# Fault kinds.
RAY_KILL = "ray_kill"  # ray.kill(actor, no_restart=False): Ray restarts it
SIGKILL = "sigkill"  # kill -9 of the actor's process
PAUSE = "pause"  # SIGSTOP, then SIGCONT after duration_s
NODE = "node"  # remove the node of a replica, add it back after duration_s
DISK_FULL = "disk_full"  # the broker's disk reads as full for duration_s
TORN_TAIL = "torn_tail"  # stop the broker, garble the bytes past its log's end, kill it

# Targets: actors by role; "master"/"slave" are broker-a's replicas at the time.
BROKER_ROLES = ("master", "slave")
PARTS = ("broker", "flusher", "hold")
CONSUMERS = ("consumer:push", "consumer:orderly")
COORDINATOR = "coordinator"

# (kind, weight): what the nemesis picks from.
KIND_WEIGHTS = (
    (RAY_KILL, 3),
    (SIGKILL, 3),
    (PAUSE, 3),
    (NODE, 2),
    (DISK_FULL, 1),
    (TORN_TAIL, 1),
)


@dataclass(frozen=True)
class Planned:
    """One fault of the schedule: at ``at_s`` seconds into the run (or when the fault
    before it is over, if that is later)."""

    index: int
    at_s: float
    kind: str
    target: str
    duration_s: float = 0.0

    def __str__(self) -> str:
        lasting = f" for {self.duration_s:.1f}s" if self.duration_s else ""
        return f"#{self.index} t+{self.at_s:6.1f}s {self.kind:<9} {self.target}{lasting}"


def _target(rng: random.Random, kind: str) -> str:
    role = rng.choice(BROKER_ROLES)
    if kind == NODE:
        return f"node:{role}"
    if kind in (DISK_FULL, TORN_TAIL):
        return f"broker:{role}"
    choices = [f"{part}:{r}" for part in PARTS for r in BROKER_ROLES]
    choices += [*CONSUMERS, COORDINATOR]
    return rng.choice(choices)


def _duration(rng: random.Random, kind: str) -> float:
    if kind == PAUSE:
        return round(rng.uniform(1.0, 4.0), 1)
    if kind == NODE:
        return round(rng.uniform(6.0, 12.0), 1)
    if kind == DISK_FULL:
        return round(rng.uniform(2.0, 5.0), 1)
    return 0.0


def make_schedule(
    seed: int, duration_s: float, mean_gap_s: float = 10.0, first_at_s: float = 3.0
) -> list[Planned]:
    """The faults of a run of ``duration_s`` seconds, a fault every ``mean_gap_s`` on
    average; the first at ``first_at_s`` or later."""
    rng = random.Random(seed)
    kinds = [k for k, _ in KIND_WEIGHTS]
    weights = [w for _, w in KIND_WEIGHTS]
    planned: list[Planned] = []
    at = first_at_s
    while at < duration_s:
        kind = rng.choices(kinds, weights)[0]
        planned.append(
            Planned(len(planned), round(at, 1), kind, _target(rng, kind), _duration(rng, kind))
        )
        at += max(2.0, rng.expovariate(1.0 / mean_gap_s))
    return planned


def format_schedule(seed: int, planned: list[Planned]) -> str:
    lines = [f"seed {seed}: {len(planned)} faults"]
    lines += [f"  {p}" for p in planned]
    return "\n".join(lines)
