"""One durable JSON file holding one msgspec Struct: ``.tmp``, ``.bak``, rename.

Used by the store (``config/dispatch.json``, manifest.py) and by the broker's config
tables (``rayq.actors.server.tables``).

Write protocol (``JsonFile.save``)::

    1. serialize the value (a msgspec Struct) to bytes
    2. write <name>.tmp, fsync it
    3. if <name> exists: os.replace(<name>, <name>.bak)
    4. os.replace(<name>.tmp, <name>)
    5. fsync the directory

A crash before step 4 leaves ``<name>`` (or, between steps 3 and 4, only ``<name>.bak``)
holding the previous version, which load finds. An ``OSError`` on any step raises ``StoreError``;
the table stays dirty so the next ``persist()`` tries again.

Load protocol (``JsonFile.load``): read ``<name>``; if it is missing, empty, not valid JSON or
fails schema validation (wrong shape, negative offsets, a key that disagrees with its record),
log a warning and read ``<name>.bak`` instead; if that fails too, log a warning and start empty
(``None``). When neither file exists (a fresh store) nothing is logged. Loading never raises for
a damaged file.

The tables are plain in-memory objects, not thread-safe: their owner serialises calls. Each has a
``dirty`` flag, set by every real change, and ``persist()`` writes only when it is set.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Final, Generic, TypeVar

import msgspec

from .errors import StoreError

logger = logging.getLogger(__name__)

TMP_SUFFIX: Final[str] = ".tmp"
BAK_SUFFIX: Final[str] = ".bak"
JSON_INDENT: Final[int] = 2

T = TypeVar("T", bound=msgspec.Struct)


def encode_json(value: msgspec.Struct) -> bytes:
    """Pretty-printed JSON with a trailing newline (pure: no I/O)."""
    return msgspec.json.format(msgspec.json.encode(value), indent=JSON_INDENT) + b"\n"


def _write_synced(path: Path, data: bytes) -> None:
    with open(path, "wb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class JsonFile(Generic[T]):
    """A JSON file holding one msgspec Struct of type ``schema``, with .tmp and .bak siblings."""

    def __init__(self, path: str | os.PathLike[str], schema: type[T]) -> None:
        self.path = Path(path)
        self.tmp_path = self.path.with_name(self.path.name + TMP_SUFFIX)
        self.bak_path = self.path.with_name(self.path.name + BAK_SUFFIX)
        self._decoder: msgspec.json.Decoder[T] = msgspec.json.Decoder(schema)

    def load(self) -> T | None:
        """The main file's value, else the backup's, else None (see the module docstring)."""
        value = self._read(self.path)
        if value is not None:
            return value
        value = self._read(self.bak_path)
        if value is not None:
            logger.warning("config file %s unusable; loaded backup %s", self.path, self.bak_path)
            return value
        if self.path.exists() or self.bak_path.exists():
            logger.warning("config file %s and its backup are unusable; starting empty", self.path)
        return None

    def save(self, value: T) -> None:
        """Write durably (tmp, fsync, rotate to .bak, rename, fsync dir); StoreError on OSError."""
        data = encode_json(value)
        try:
            _write_synced(self.tmp_path, data)
            if self.path.exists():
                os.replace(self.path, self.bak_path)
            os.replace(self.tmp_path, self.path)
            _fsync_dir(self.path.parent)
        except OSError as exc:
            raise StoreError(f"cannot write {self.path}: {exc}", path=str(self.path)) from exc

    def _read(self, path: Path) -> T | None:
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            logger.warning("config file %s cannot be read: %s", path, exc)
            return None
        if not data.strip():
            logger.warning("config file %s is empty", path)
            return None
        try:
            return self._decoder.decode(data)
        except msgspec.DecodeError as exc:  # ValidationError included
            logger.warning("config file %s is damaged: %s", path, exc)
            return None
