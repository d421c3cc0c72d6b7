"""Offset ranges of a topic, fixed on the driver before a Spark or Ray Data job runs.

``plan_ranges`` turns ``starting``/``ending`` into one ``[start, end)`` range per
queue and splits each into pieces of at most ``max_messages_per_partition``. A
retried task re-reads exactly its range, so a job reads the same messages however
often its tasks run. Offset specs (``starting`` and ``ending``):

* ``"earliest"`` / ``"latest"``: the queue's min / max offset now;
* ``"committed:<group>"``: the group's committed offset (earliest where none);
* an int: a timestamp in epoch ms (first message stored at or after it);
* a dict ``{queue: offset}``, a queue being a ``MessageQueue``, ``(broker, queue_id)``
  or, when one broker holds the topic, a queue id; unnamed queues get
  ``"earliest"`` (starting) or ``"latest"`` (ending).

Offsets outside what a queue holds are clamped to it; a bad spec raises
``InvalidOffsetError``, an unknown topic ``TopicNotFoundError``, a broker that does
not answer ``BrokerUnavailableError`` naming it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import msgspec

from rayq.actors.protocol import (
    LostBrokersRequest,
    MessageQueue,
    OffsetByTimeRequest,
    QueryOffsetsRequest,
    TopicRequest,
)
from rayq.store.errors import BrokerUnavailableError, InvalidOffsetError
from rayq.store.names import validate_group
from rayq.transport.context import ClientContext, bind

logger = logging.getLogger(__name__)

DEFAULT_MAX_MESSAGES_PER_PARTITION = 50_000
# A task reads at least this many messages unless there are fewer (Spark's file sources
# pack small files into a task the same way, by spark.sql.files.openCostInBytes, 4 MiB).
MIN_MESSAGES_PER_TASK = 4096
CALL_TIMEOUT_S = 30.0

QueueKey = tuple[str, int]  # (broker, queue id)


class OffsetRange(msgspec.Struct, frozen=True, order=True):
    """Messages ``[start, end)`` of one queue; ``committed`` is the group's offset when
    a streaming batch planned it (-1: none), the value its commit compares against."""

    broker: str
    queue_id: int
    start: int
    end: int
    committed: int = -1

    @property
    def count(self) -> int:
        return self.end - self.start


def queue_bounds(
    ctx: ClientContext, topic: str, skip_unavailable: bool = False
) -> dict[QueueKey, tuple[int, int]]:
    """(min, max) offset of every readable queue of ``topic``, from its broker.

    Raises BrokerUnavailableError when a broker holding ``topic`` died or went silent
    (its queues are unavailable, not gone), unless ``skip_unavailable``."""
    req = LostBrokersRequest(topic=topic, client_id=ctx.client_id)
    lost = ctx.coordinator.lost_brokers(req).result(CALL_TIMEOUT_S).names
    if lost and not skip_unavailable:
        raise BrokerUnavailableError(
            f"topic {topic!r}: the queues on broker(s) {lost} are unavailable (the broker died "
            "or its node is gone) until it is back; skip_unavailable=True reads the others",
            broker=lost[0],
            topic=topic,
        )
    if lost:
        logger.warning("topic %r: skipping the queues of unavailable broker(s) %s", topic, lost)
    brokers = sorted({q.broker_name for q in ctx.read_queues(topic, refresh=True)})
    bounds_req = TopicRequest(topic=topic, client_id=ctx.client_id)
    found = ctx.broker_calls(
        {b: lambda c: c.queue_bounds(bounds_req) for b in brokers}, CALL_TIMEOUT_S
    )
    return {(b, q): (lo, hi) for b, qs in found.items() for q, (lo, hi) in qs.bounds.items()}


def committed_offsets(
    ctx: ClientContext, topic: str, group: str, brokers: set[str]
) -> dict[QueueKey, int]:
    req = QueryOffsetsRequest(group=group, topic=topic, client_id=ctx.client_id)
    found = ctx.broker_calls(
        {b: lambda c: c.query_offsets(req) for b in sorted(brokers)}, CALL_TIMEOUT_S
    )
    return {(b, q): o for b, qs in found.items() for q, o in qs.offsets.items()}


def resolve(
    ctx: ClientContext,
    topic: str,
    spec: object,
    bounds: dict[QueueKey, tuple[int, int]],
    *,
    default: str,
    what: str,
) -> dict[QueueKey, int]:
    """The offset ``spec`` names for every queue in ``bounds`` (clamped to the queue)."""
    lo = {k: v[0] for k, v in bounds.items()}
    hi = {k: v[1] for k, v in bounds.items()}
    if spec == "earliest":
        return lo
    if spec == "latest":
        return hi
    if isinstance(spec, str) and spec.startswith("committed:"):
        group = validate_group(spec.split(":", 1)[1])
        got = committed_offsets(ctx, topic, group, {b for b, _ in bounds})
        return {
            k: _clamp(got.get(k, -1), lo[k], hi[k]) if got.get(k, -1) >= 0 else lo[k]
            for k in bounds
        }
    if isinstance(spec, int) and not isinstance(spec, bool):
        if spec < 0:
            raise InvalidOffsetError(f"{what}: a timestamp must be epoch ms >= 0, got {spec}")
        by_time = ctx.broker_calls(
            {
                k: bind(
                    lambda c, q: c.offset_by_time(
                        OffsetByTimeRequest(topic=topic, queue_id=q, timestamp_ms=spec)
                    ),
                    k[1],
                )
                for k in bounds
            },
            CALL_TIMEOUT_S,
        )
        return {k: _clamp(by_time[k].offset, lo[k], hi[k]) for k in bounds}
    if isinstance(spec, Mapping):
        base = resolve(ctx, topic, default, bounds, default=default, what=what)
        for queue, offset in spec.items():
            key = _queue_key(queue, bounds, topic, what)
            if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
                raise InvalidOffsetError(
                    f"{what}: offset of {queue!r} must be an int >= 0, got {offset!r}"
                )
            base[key] = _clamp(offset, lo[key], hi[key])
        return base
    raise InvalidOffsetError(
        f"{what} must be 'earliest', 'latest', 'committed:<group>', a timestamp in epoch ms "
        f"or a dict {{queue: offset}}, got {spec!r}"
    )


def _clamp(value: int, lo: int, hi: int) -> int:
    return min(max(value, lo), hi)


def _queue_key(queue: object, bounds: dict[QueueKey, Any], topic: str, what: str) -> QueueKey:
    if isinstance(queue, MessageQueue):
        if queue.topic != topic:
            raise InvalidOffsetError(f"{what}: {queue} is not a queue of topic {topic!r}")
        key = (queue.broker_name, queue.queue_id)
    elif isinstance(queue, tuple) and len(queue) == 2:
        key = (queue[0], queue[1])
    elif isinstance(queue, int) and not isinstance(queue, bool):
        brokers = sorted({b for b, _ in bounds})
        if len(brokers) != 1:
            raise InvalidOffsetError(
                f"{what}: queue id {queue} is ambiguous: topic {topic!r} is on brokers "
                f"{brokers}; name queues as (broker, queue_id) or MessageQueue"
            )
        key = (brokers[0], queue)
    else:
        raise InvalidOffsetError(f"{what}: {queue!r} does not name a queue")
    if key not in bounds:
        raise InvalidOffsetError(f"{what}: topic {topic!r} has no readable queue {key}")
    return key


def split(ranges: list[OffsetRange], max_per_partition: int) -> list[OffsetRange]:
    """Ranges cut into pieces of at most ``max_per_partition`` messages (empty ones dropped)."""
    out = []
    for r in ranges:
        for s in range(r.start, r.end, max_per_partition):
            out.append(msgspec.structs.replace(r, start=s, end=min(s + max_per_partition, r.end)))
    return out


def pack(ranges: list[OffsetRange], max_per_task: int, slots: int) -> list[list[OffsetRange]]:
    """The ranges dealt to as few tasks as fill ``slots`` (the cores that run them) with
    at most ``max_per_task`` messages each: ceil(total / per) tasks of about equal
    size, per = min(max_per_task, max(MIN_MESSAGES_PER_TASK, ceil(total / slots))), as
    Spark sizes file splits. A task's ranges are consecutive pieces of ``ranges`` (a
    range may be cut between two tasks); empty ranges are dropped."""
    total = sum(r.count for r in ranges)
    if total <= 0:
        return []
    per = min(max_per_task, max(MIN_MESSAGES_PER_TASK, -(-total // max(1, slots))))
    n = -(-total // per)
    bounds = [total * (i + 1) // n for i in range(n)]  # cumulative message counts
    tasks: list[list[OffsetRange]] = [[]]
    done = 0  # messages dealt so far
    for r in ranges:
        start = r.start
        while start < r.end:
            room = bounds[len(tasks) - 1] - done
            if room == 0:
                tasks.append([])
                continue
            end = min(r.end, start + room)
            tasks[-1].append(msgspec.structs.replace(r, start=start, end=end))
            done += end - start
            start = end
    return tasks


def check_max(name: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InvalidOffsetError(f"{name} must be an int >= 1, got {value!r}")
    return value


def plan_ranges(
    ctx: ClientContext,
    topic: str,
    starting: object = "earliest",
    ending: object = "latest",
    max_messages_per_partition: int = DEFAULT_MAX_MESSAGES_PER_PARTITION,
    skip_unavailable: bool = False,
) -> list[OffsetRange]:
    """The pieces a batch read of ``topic`` covers (see the module docstring)."""
    check_max("max_messages_per_partition", max_messages_per_partition)
    bounds = queue_bounds(ctx, topic, skip_unavailable)
    starts = resolve(ctx, topic, starting, bounds, default="earliest", what="starting")
    ends = resolve(ctx, topic, ending, bounds, default="latest", what="ending")
    ranges = [
        OffsetRange(b, q, starts[(b, q)], max(starts[(b, q)], ends[(b, q)]))
        for b, q in sorted(bounds)
    ]
    return split(ranges, max_messages_per_partition)
