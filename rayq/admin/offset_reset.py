"""Where an offset reset moves a group's queues: Kafka's ``kafka-consumer-groups
--reset-offsets`` targets (``--to-earliest``, ``--to-latest``, ``--to-offset``,
``--shift-by``, ``--to-datetime``) as ``Admin.reset_offsets`` takes them.

Targets are clamped to each queue's bounds ``[min offset, max offset]``, as Kafka
clamps them; a shift starts from the committed offset, or from the queue's min
offset when the group has none committed there. Nothing here calls a broker.
"""

from __future__ import annotations

from typing import Final

import msgspec

from rayq.actors.protocol import MessageQueue
from rayq.store.errors import InvalidOffsetError

RESET_TO: Final[tuple[str, ...]] = ("earliest", "latest", "offset", "shift", "time")
_NEEDS_VALUE: Final[frozenset[str]] = frozenset({"offset", "shift", "time"})
OFFSET_MAX: Final[int] = 2**63 - 1


class OffsetChange(msgspec.Struct, frozen=True):
    """One queue of an offset reset: the group's committed offset there (-1: none yet)
    and the offset the reset moves it to."""

    queue: MessageQueue
    current: int
    target: int


def check_reset(to: object, value: object) -> None:
    """InvalidOffsetError unless ``to`` is one of ``RESET_TO`` with the value it needs."""
    if not isinstance(to, str) or to not in RESET_TO:
        raise InvalidOffsetError(
            f"to must be one of {', '.join(RESET_TO)}, got {to!r}", value=repr(to)
        )
    if to not in _NEEDS_VALUE:
        if value is not None:
            raise InvalidOffsetError(f"to={to!r} takes no value, got {value!r}", value=repr(value))
        return
    if not isinstance(value, int) or isinstance(value, bool):
        what = {"offset": "the offset", "shift": "+/- N messages", "time": "ms since the epoch"}
        raise InvalidOffsetError(
            f"to={to!r} needs an int value ({what[to]}), got {value!r}", value=repr(value)
        )
    low = -OFFSET_MAX if to == "shift" else 0
    if not low <= value <= OFFSET_MAX:
        raise InvalidOffsetError(
            f"to={to!r}: value must be in {low}..{OFFSET_MAX}, got {value}", value=str(value)
        )


def target(to: str, value: int | None, current: int, bounds: tuple[int, int], at_time: int) -> int:
    """The offset a queue with ``bounds`` (min, max) and committed offset ``current``
    (-1: none) moves to; ``at_time``: the first offset stored at or after ``value``
    (for ``to="time"``)."""
    lo, hi = bounds
    if to == "earliest":
        return lo
    if to == "latest":
        return hi
    assert value is not None
    if to == "offset":
        wanted = value
    elif to == "shift":
        wanted = (current if current >= 0 else lo) + value
    else:
        wanted = at_time
    return min(max(wanted, lo), hi)


def describe(queues: list[MessageQueue]) -> str:
    """``broker-a: 0..3, broker-b: 0..1``: the queues of a topic, for error messages."""
    per: dict[str, list[int]] = {}
    for q in queues:
        per.setdefault(q.broker_name, []).append(q.queue_id)
    return ", ".join(f"{b}: {min(ids)}..{max(ids)}" for b, ids in sorted(per.items()))


def pick(
    queues: list[MessageQueue], topic: str, broker: str | None, queue_id: int | None
) -> list[MessageQueue]:
    """The queues of ``topic`` a reset names (all, a broker's, or one); InvalidOffsetError
    when that names none."""
    if broker is not None and (not isinstance(broker, str) or not broker):
        raise InvalidOffsetError(f"broker must be a broker name, got {broker!r}")
    if queue_id is not None and (
        not isinstance(queue_id, int) or isinstance(queue_id, bool) or queue_id < 0
    ):
        raise InvalidOffsetError(f"queue_id must be an int >= 0, got {queue_id!r}")
    picked = [
        q
        for q in queues
        if (broker is None or q.broker_name == broker)
        and (queue_id is None or q.queue_id == queue_id)
    ]
    if not picked:
        named = " ".join(
            part
            for part in (
                f"queue {queue_id}" if queue_id is not None else "any queue",
                f"on broker {broker!r}" if broker is not None else "",
            )
            if part
        )
        raise InvalidOffsetError(
            f"topic {topic!r} has no {named}: its read queues are {describe(queues)}",
            topic=topic,
        )
    return picked


__all__ = ["RESET_TO", "OffsetChange", "check_reset", "describe", "pick", "target"]
