"""DiskGauge: how full the store's disk is, measured only when that can have changed.

Past ``disk_warning_ratio`` the store refuses writes (``PutStatus.DISK_FULL``). Asking
the file system on every put would cost a system call per put, so the gauge keeps the
last measured ratio and when it was measured, and the put path (which reads the clock
anyway) asks it with that time. It measures again only when a measurement is due:

* the store allocated a file since the last measurement (``stale``): commit-log and
  consume-queue segments and index files are preallocated when they are created
  (segment.py), so the store's own writes use up disk then and only then;
* before a put that needs a new commit-log segment (``check(..., allocating=True)``),
  so that a full disk refuses that put instead of allocating past the limit;
* ``disk_check_interval_ms`` after the last measurement, for space that others use
  or free (and at once if the clock went back);
* ``retention_tick`` measures too and hands its ratio over (``update``).

A measurement below the ratio again lifts the refusal. The gauge has no file.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

logger = logging.getLogger(__name__)


class DiskGauge:
    """The last measured disk usage ratio of ``root``'s file system, and whether it is
    past ``warning_ratio``."""

    def __init__(
        self, root: Path, usage: Callable[[Path], float], warning_ratio: float, interval_ms: int
    ) -> None:
        self.root = root
        self.usage = usage
        self.warning_ratio = warning_ratio
        self.interval_ms = interval_ms
        self.ratio = 0.0
        self.full = False
        self.measured_at_ms: int | None = None  # None: never measured, or stale

    def stale(self) -> None:
        """The store allocated a file: the next check measures."""
        self.measured_at_ms = None

    def due(self, now_ms: int) -> bool:
        at = self.measured_at_ms
        return at is None or not 0 <= now_ms - at < self.interval_ms

    def check(self, now_ms: int, *, allocating: bool = False) -> bool:
        """Whether writes are refused at ``now_ms``; measures first if that is due or the
        write will allocate a commit-log segment."""
        if allocating or self.due(now_ms):
            self.measure(now_ms)
        return self.full

    def measure(self, now_ms: int) -> float:
        """Ask the file system now. A failed measurement keeps the last state (logged) and
        is tried again after the interval."""
        try:
            ratio = float(self.usage(self.root))
        except OSError as exc:
            logger.warning(
                "cannot measure disk usage of %s (%s); keeping %.1f%%",
                self.root,
                exc,
                self.ratio * 100,
            )
            self.measured_at_ms = now_ms
            return self.ratio
        self.update(ratio, now_ms)
        return ratio

    def update(self, ratio: float, now_ms: int) -> None:
        """A measurement of ``ratio`` at ``now_ms`` (the gauge's own or retention's)."""
        full = ratio > self.warning_ratio
        args = (ratio * 100, self.root, self.warning_ratio * 100)
        if full and not self.full:
            logger.error(
                "disk usage %.1f%% of %s is past disk_warning_ratio %.0f%%: writes are refused",
                *args,
            )
        elif self.full and not full:
            logger.warning(
                "disk usage %.1f%% of %s is below disk_warning_ratio %.0f%% again: "
                "writes are accepted",
                *args,
            )
        self.ratio, self.full, self.measured_at_ms = ratio, full, now_ms
