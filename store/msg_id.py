"""Unique message ids (RocketMQ's UNIQ_KEY), generated where a message is born.

32 hex digits: IPv4 (4 bytes) + pid (2) + a random per-generator prefix (4) +
milliseconds since the generator started, modulo 2^32 (4) + a counter (2).
(On counter overflow the millisecond field runs ahead of the clock.)
Unique across processes (pid, random prefix) and in time (clock + counter).
"""

from __future__ import annotations

import os
import socket
import struct
import threading
import time

_TAIL = struct.Struct(">IH")


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

    def __init__(self) -> None:
        self._prefix = (
            (_local_ipv4() + struct.pack(">H", os.getpid() & 0xFFFF) + os.urandom(4)).hex().upper()
        )
        self._start = time.monotonic_ns()
        self._ms = -1
        self._counter = 0
        self._lock = threading.Lock()

    def _reserve(self, count: int) -> list[tuple[int, int]]:
        now_ms = (time.monotonic_ns() - self._start) // 1_000_000
        with self._lock:
            if now_ms > self._ms:
                self._ms, self._counter = now_ms, -1
            out = []
            for _ in range(count):
                self._counter += 1
                if self._counter > 0xFFFF:
                    self._ms, self._counter = self._ms + 1, 0
                out.append((self._ms & 0xFFFFFFFF, self._counter))
            return out

    def next_id(self) -> str:
        now_ms = (time.monotonic_ns() - self._start) // 1_000_000
        with self._lock:
            if now_ms > self._ms:
                self._ms, self._counter = now_ms, 0
            elif self._counter < 0xFFFF:
                self._counter += 1
            else:
                self._ms, self._counter = self._ms + 1, 0
            ms, counter = self._ms, self._counter
        return f"{self._prefix}{ms & 0xFFFFFFFF:08X}{counter:04X}"

    def next_ids(self, count: int) -> list[str]:
        prefix = self._prefix
        return [prefix + _TAIL.pack(ms, c).hex().upper() for ms, c in self._reserve(count)]
