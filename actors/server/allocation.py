"""Queue allocation strategies: which consumer of a group owns which queue.

Pure functions over sorted inputs, so every party computing an allocation from the
same membership gets the same answer. All take the topic's queues and the group's
consumer ids (both sorted here) and return ``{consumer_id: [queues]}``.

``allocate_averagely`` (RocketMQ ``AllocateMessageQueueAveragely``): contiguous
blocks, the first ``len(queues) % len(consumers)`` consumers one queue more::

    queues q0..q9, consumers a b c d  ->  a: q0 q1 q2   b: q3 q4 q5   c: q6 q7   d: q8 q9

``allocate_averagely_by_circle``: dealt round robin::

    queues q0..q9, consumers a b c d  ->  a: q0 q4 q8   b: q1 q5 q9   c: q2 q6   d: q3 q7

``allocate_consistent_hash``: each consumer owns ``virtual_nodes`` points on a hash
ring; a queue goes to the first point at or after its own hash, so a membership
change moves only the queues next to the points that came or went.

``allocate_by_config``: an explicit ``{consumer_id: [queues]}``, validated.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from typing import Protocol, TypeVar

from crc32c import crc32c

from rayq.actors.protocol import AllocateStrategy as AllocateStrategy  # re-exported
from rayq.store.errors import ConfigError

Q = TypeVar("Q")


def allocate_averagely(queues: Sequence[Q], consumers: Sequence[str]) -> dict[str, list[Q]]:
    """Contiguous blocks; sizes differ by at most one, larger blocks first."""
    qs, cs = sorted(queues), sorted(consumers)  # type: ignore[type-var]
    out: dict[str, list[Q]] = {c: [] for c in cs}
    if not cs:
        return out
    base, extra = divmod(len(qs), len(cs))
    start = 0
    for i, c in enumerate(cs):
        size = base + (1 if i < extra else 0)
        out[c] = qs[start : start + size]
        start += size
    return out


def allocate_averagely_by_circle(
    queues: Sequence[Q], consumers: Sequence[str]
) -> dict[str, list[Q]]:
    """Queues dealt to consumers in turn."""
    qs, cs = sorted(queues), sorted(consumers)  # type: ignore[type-var]
    out: dict[str, list[Q]] = {c: [] for c in cs}
    for i, q in enumerate(qs):
        if cs:
            out[cs[i % len(cs)]].append(q)
    return out


def allocate_consistent_hash(
    queues: Sequence[Q], consumers: Sequence[str], virtual_nodes: int = 10
) -> dict[str, list[Q]]:
    """Each queue to the consumer owning the next point on a hash ring."""
    cs = sorted(consumers)
    out: dict[str, list[Q]] = {c: [] for c in cs}
    if not cs:
        return out
    ring = sorted((crc32c(f"{c}-{v}".encode()), c) for c in cs for v in range(virtual_nodes))
    points = [p for p, _ in ring]
    for q in sorted(queues):  # type: ignore[type-var]
        i = bisect.bisect_left(points, crc32c(repr(q).encode())) % len(ring)
        out[ring[i][1]].append(q)
    return out


def allocate_by_config(
    queues: Sequence[Q], consumers: Sequence[str], config: Mapping[str, Sequence[Q]]
) -> dict[str, list[Q]]:
    """An explicit allocation; every queue named must exist and have one owner."""
    known = set(queues)
    out: dict[str, list[Q]] = {c: [] for c in sorted(consumers)}
    owner: dict[Q, str] = {}
    for c, qs in config.items():
        for q in qs:
            if q not in known:
                raise ConfigError(f"allocation config names queue {q!r}, which does not exist")
            if q in owner:
                raise ConfigError(f"allocation config gives queue {q!r} to {owner[q]} and {c}")
            owner[q] = c
        if c in out:
            out[c] = sorted(qs)  # type: ignore[type-var]
    return out


class Strategy(Protocol):
    """An allocation: each consumer's queues."""

    def __call__(self, queues: Sequence[Q], consumers: Sequence[str], /) -> dict[str, list[Q]]: ...


STRATEGIES: dict[AllocateStrategy, Strategy] = {
    AllocateStrategy.AVERAGELY: allocate_averagely,
    AllocateStrategy.AVERAGELY_BY_CIRCLE: allocate_averagely_by_circle,
    AllocateStrategy.CONSISTENT_HASH: allocate_consistent_hash,
}
