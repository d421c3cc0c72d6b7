"""Delay levels: RocketMQ's ``messageDelayLevel`` string, parsed once at config time.

``"1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"`` (the default) names
level 1 (1 s) to level 18 (2 h). Each entry is a positive integer and a unit: ``s``,
``m``, ``h`` or ``d``; entries are separated by blanks. A message asking for a level
above the table's size waits as long as the last level (RocketMQ clamps the same
way). Level ``L`` waits in queue ``L - 1`` of ``SCHEDULE_TOPIC_XXXX``; queue
``DELIVER_AT_QUEUE_ID`` holds messages with an exact delivery time (schedule.py).
"""

from __future__ import annotations

import re
from typing import Final

from rayq.store.errors import ConfigError

DEFAULT_MESSAGE_DELAY_LEVEL: Final[str] = (
    "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
)
DELIVER_AT_QUEUE_ID: Final[int] = 1023  # SCHEDULE_TOPIC_XXXX queue of deliver_at_ms messages
MAX_DELAY_LEVELS: Final[int] = DELIVER_AT_QUEUE_ID  # levels use queues 0..1022
_UNIT_MS: Final[dict[str, int]] = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_ENTRY: Final[re.Pattern[str]] = re.compile(r"^([0-9]{1,9})([smhd])$")


class DelayLevels:
    """The delay of each level, in ms: ``DelayLevels.parse("1s 2s 1m").delay_ms(3) == 60000``."""

    __slots__ = ("delays_ms", "spec")

    def __init__(self, spec: str, delays_ms: tuple[int, ...]) -> None:
        self.spec = spec
        self.delays_ms = delays_ms

    @classmethod
    def parse(cls, spec: object) -> DelayLevels:
        """Parse a ``message_delay_level`` string; ConfigError says what is wrong."""
        if not isinstance(spec, str):
            raise ConfigError(
                f"message_delay_level must be a str such as '1s 5s 1m', got {type(spec).__name__}",
                value=repr(spec),
            )
        entries = spec.split()
        if not entries:
            raise ConfigError("message_delay_level is empty; give at least one level, e.g. '1s'")
        if len(entries) > MAX_DELAY_LEVELS:
            raise ConfigError(
                f"message_delay_level has {len(entries)} levels; at most {MAX_DELAY_LEVELS}",
                value=len(entries),
                limit=MAX_DELAY_LEVELS,
            )
        delays = []
        for i, entry in enumerate(entries, 1):
            match = _ENTRY.match(entry)
            if match is None or int(match.group(1)) == 0:
                raise ConfigError(
                    f"message_delay_level entry {i} ({entry!r}) must be a positive integer "
                    "followed by s, m, h or d, e.g. '10s' or '2h'",
                    value=entry,
                )
            delays.append(int(match.group(1)) * _UNIT_MS[match.group(2)])
        return cls(spec, tuple(delays))

    @property
    def count(self) -> int:
        return len(self.delays_ms)

    def clamp(self, level: int) -> int:
        """``level`` limited to 1..count (levels above the table wait as long as the last)."""
        return min(max(level, 1), len(self.delays_ms))

    def delay_ms(self, level: int) -> int:
        return self.delays_ms[self.clamp(level) - 1]

    def __repr__(self) -> str:
        return f"DelayLevels({self.spec!r})"


DEFAULT_DELAY_LEVELS: Final[DelayLevels] = DelayLevels.parse(DEFAULT_MESSAGE_DELAY_LEVEL)
