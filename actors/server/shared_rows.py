"""Rows a Spark executor on the broker's node hands over in shared memory.

Spark's rayq sink (rayq/connectors/jvm RayqWriter) sends each put's rows as an Arrow IPC stream.
Through Ray, a stream of 8 MiB is copied into the object store (whose pages are faulted
in and zeroed anew for every object), out of it into a Python ``bytes``, and encoded
from there. An executor on the broker's node instead writes the stream into a slot: a
file of its own in ``SHARED_DIR`` (tmpfs), mapped and reused put after put, and names
it in the request (``ArrowPutRequest.rows_file``, ``rows_length``). The broker maps the
file read-only, encodes the rows straight from the mapping and answers; only then does
the executor write the slot again.

Files::

    /dev/shm/rayq-put-<32 hex digits>   one slot: an Arrow IPC stream at offset 0

The executor unlinks a slot's file once a put through it was answered: from then on
the file lives only in the two mappings (the broker keeps each file it mapped, by
path, until it is idle for ``IDLE_S``; the executor drops its idle slots too), so
nothing is left behind when either process dies. For a path the broker does not hold
and cannot open, ``view`` answers None and the put answers ``{"rows": 0, "resend":
true}``; the executor then sends those rows inline (through Ray), and its later puts
too.

Only such names in ``SHARED_DIR``, regular files of this process's user, are opened:
a request cannot make the broker read anything else.
"""

from __future__ import annotations

import logging
import mmap
import os
import re
import stat
import time
from typing import Final

from rayq.actors.protocol.rows import PATH_PATTERN as PATH_PATTERN
from rayq.actors.protocol.rows import SHARED_DIR as SHARED_DIR
from rayq.store.errors import InvalidRequestError

logger = logging.getLogger(__name__)

NAME: Final = re.compile(r"rayq-put-[0-9a-f]{32}")
IDLE_S: Final[float] = 60.0  # a mapping not used for this long is dropped
MAX_FILES: Final[int] = 256  # mappings kept at most (the least recently used go first)


class SharedRows:
    """The slot files this broker has mapped, by path (see the module docstring)."""

    def __init__(self, directory: str = SHARED_DIR) -> None:
        self.directory = directory
        self._files: dict[str, tuple[mmap.mmap, float]] = {}
        self.puts = {"shared": 0, "inline": 0}  # puts served, by how their rows came

    def rows_of(self, rows_file: str, rows_length: int, inline: bytes) -> bytes | memoryview | None:
        """A put's rows: ``inline`` (the call's argument), or a view of the slot
        ``rows_file`` names (``view``); None when that slot cannot be read here."""
        if not rows_file:
            self.puts["inline"] += 1
            return inline
        if inline:
            raise InvalidRequestError(
                "put_arrow: rows in a file and in the call", request="ArrowPutRequest"
            )
        return self.view(rows_file, rows_length)

    def view(self, path: str, length: int) -> memoryview | None:
        """The first ``length`` bytes of the slot file ``path`` (no copy: valid until the
        caller answers the put; the sender writes the slot again after that), or None
        when this process cannot read it (not on this node, or no longer held)."""
        now = time.monotonic()
        self._evict(now)
        held = self._files.get(path)
        mm = held[0] if held is not None else self._map(path)
        if mm is None:
            return None
        self._files[path] = (mm, now)
        if not 0 <= length <= len(mm):
            raise InvalidRequestError(
                f"put_arrow: rows_length {length} is outside the {len(mm)} bytes of {path}",
                request="ArrowPutRequest",
            )
        self.puts["shared"] += 1
        return memoryview(mm)[:length]

    def _map(self, path: str) -> mmap.mmap | None:
        directory, name = os.path.split(path)
        if directory != self.directory or not NAME.fullmatch(name):
            raise InvalidRequestError(
                f"put_arrow: rows_file must be {self.directory}/rayq-put-<32 hex digits>, "
                f"got {path!r}",
                request="ArrowPutRequest",
            )
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError as exc:  # another node's slot, or one unlinked since (a symlink: ELOOP)
            logger.info("put_arrow: rows file %s cannot be opened here (%s)", path, exc.strerror)
            return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or not st.st_size:
                logger.warning("put_arrow: %s is not a rows file of this user", path)
                return None
            return mmap.mmap(fd, 0, prot=mmap.PROT_READ)
        finally:
            os.close(fd)

    def drop_idle(self) -> None:
        """Drop the mappings idle for ``IDLE_S`` (the broker's timer calls this)."""
        self._evict(time.monotonic())

    def _evict(self, now: float) -> None:
        """Drop mappings idle for ``IDLE_S``, and the oldest past ``MAX_FILES``."""
        idle = [p for p, (_, used) in self._files.items() if now - used > IDLE_S]
        over = len(self._files) - len(idle) - MAX_FILES + 1
        if over > 0:
            kept = sorted((used, p) for p, (_, used) in self._files.items() if p not in idle)
            idle += [p for _, p in kept[:over]]
        for path in idle:
            # dropped, not closed: an Arrow buffer of a put still being encoded may hold
            # it; it is unmapped with the last reference
            del self._files[path]

    def close(self) -> None:
        self._files.clear()
