"""Unique message ids (RocketMQ's UNIQ_KEY), generated where a message is born.

32 hex digits: IPv4 (4 bytes) + pid (2) + a random per-generator prefix (4) +
milliseconds since the generator started, modulo 2^32 (4) + a counter (2).
(On counter overflow the millisecond field runs ahead of the clock.)
Unique across processes (pid, random prefix) and in time (clock + counter).

The last six bytes are one position ``ms * 2^16 + counter`` that only ever
increases: ``next_ids(n)`` reserves n consecutive positions under the lock and
builds their ids with C-level string concatenation, 256 at a time (a position's
last byte is an index into a table of two-digit hex strings).
"""

from __future__ import annotations

import os
import socket
import struct
import threading
import time
from collections.abc import Callable
from typing import Final

_COUNTER_BITS: Final[int] = 16
_POSITION_MASK: Final[int] = (1 << 48) - 1  # milliseconds modulo 2^32, then the counter
_HEX2: Final[tuple[str, ...]] = tuple(f"{i:02X}" for i in range(256))


def _local_ipv4() -> bytes:
    try:
        return socket.inet_aton(socket.gethostbyname(socket.gethostname()))
    except OSError:
        return socket.inet_aton("127.0.0.1")


class UniqIdGenerator:
    """Thread-safe generator of unique message ids.

    (milliseconds, counter) only ever increases: when the 16-bit counter runs out
    within one millisecond, the time field moves on to the next one.
    """

    def __init__(self, monotonic_ns: Callable[[], int] = time.monotonic_ns) -> None:
        self._prefix = (
            (_local_ipv4() + struct.pack(">H", os.getpid() & 0xFFFF) + os.urandom(4)).hex().upper()
        )
        self._clock = monotonic_ns
        self._start = monotonic_ns()
        self._last = -1  # the last position handed out: ms << 16 | counter
        self._lock = threading.Lock()

    def _reserve(self, count: int) -> int:
        """The first of ``count`` consecutive unused positions (a new millisecond
        starts at counter 0)."""
        now_ms = (self._clock() - self._start) // 1_000_000
        with self._lock:
            first = max(self._last + 1, now_ms << _COUNTER_BITS)
            self._last = first + count - 1
        return first

    def next_id(self) -> str:
        position = self._reserve(1) & _POSITION_MASK
        return f"{self._prefix}{position:012X}"

    def next_ids(self, count: int) -> list[str]:
        """``count`` ids at once, equal to as many ``next_id()`` calls in a row."""
        first = self._reserve(count)
        out: list[str] = []
        position, end = first, first + count
        while position < end:  # one round per run of positions that share all but the last byte
            stop = min(end, (position | 0xFF) + 1)
            head = f"{self._prefix}{(position & _POSITION_MASK) >> 8:010X}"
            out += map(head.__add__, _HEX2[position & 0xFF : ((stop - 1) & 0xFF) + 1])
            position = stop
        return out
