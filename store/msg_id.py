"""Unique message ids (RocketMQ's UNIQ_KEY), generated where a message is born.

32 hex digits: IPv4 (4 bytes) + pid (2) + a random per-generator prefix (4) +
milliseconds since the generator started, modulo 2^32 (4) + a counter (2).
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
    """Thread-safe generator of unique message ids."""

    def __init__(self) -> None:
        self._prefix = (
            (_local_ipv4() + struct.pack(">H", os.getpid() & 0xFFFF) + os.urandom(4)).hex().upper()
        )
        self._start = time.monotonic_ns()
        self._counter = 0
        self._lock = threading.Lock()

    def next_id(self) -> str:
        with self._lock:
            self._counter = (self._counter + 1) & 0xFFFF
            counter = self._counter
        elapsed_ms = ((time.monotonic_ns() - self._start) // 1_000_000) & 0xFFFFFFFF
        return self._prefix + _TAIL.pack(elapsed_ms, counter).hex().upper()

    def next_ids(self, count: int) -> list[str]:
        with self._lock:
            first = self._counter + 1
            self._counter = (self._counter + count) & 0xFFFF
        elapsed_ms = ((time.monotonic_ns() - self._start) // 1_000_000) & 0xFFFFFFFF
        return [
            self._prefix + _TAIL.pack(elapsed_ms, (first + i) & 0xFFFF).hex().upper()
            for i in range(count)
        ]
