"""One durable JSON file holding one msgspec Struct: ``.tmp``, ``.bak``, rename.

Used by the store (``config/dispatch.json``, manifest.py) and by the broker's config
tables (``rayq.actors.server.tables``).

Write protocol (``JsonFile.save``)::

    1. serialize the value (a msgspec Struct) to bytes
    2. write <name>.tmp, fsync it
    3. if <name> exists (and load did not find it damaged): os.replace(<name>, <name>.bak)
    4. os.replace(<name>.tmp, <name>)
    5. fsync the directory

A crash before step 4 leaves ``<name>`` (or, between steps 3 and 4, only ``<name>.bak``)
holding the previous version, which load finds. An ``OSError`` on any step raises ``StoreError``;
the table stays dirty so the next ``persist()`` tries again.

Load protocol (``JsonFile.load``): read ``<name>``; if it is missing, empty, not valid JSON or
fails schema validation (wrong shape, negative offsets, a key that disagrees with its record),
log a warning, copy the damaged ``<name>`` aside (see below) and read ``<name>.bak`` instead.
The next ``save`` then overwrites the damaged ``<name>`` in place instead of rotating it onto the
good ``.bak``. When neither file exists (a fresh store) nothing is logged and ``load`` is None.

When ``<name>`` AND ``<name>.bak`` both fail, a file never silently becomes empty. Policy:

1. Keep the damaged files aside: each existing one is **copied** to
   ``<name>.damaged-<ms since epoch>`` (``<name>.bak.damaged-<ms>``); the originals stay in place,
   so a crash now cannot turn them into "no file" (= a fresh, empty start) on the next load.
2. Salvage, if the ``JsonFile`` was given a ``salvage`` function (the broker's config tables):
   decode the JSON leniently (a document truncated or broken at some byte is cut back to its
   last complete entry before the damage and its brackets closed; entries after the damage
   are lost, the kept copy still has them), then let ``salvage`` keep every valid entry and
   drop only the bad ones. Each dropped entry is logged at ERROR with the file name.
   ``<name>`` is tried before ``.bak``; the first one that yields at least one entry wins, and
   ``needs_rewrite`` is set so the owner writes the salvaged value back soon.
3. Refuse: if no entry could be salvaged from a file that exists, raise ``StoreError``
   naming both files and the kept copies, and saying how to fix it: restore a good copy as
   ``<name>``, or delete ``<name>`` and ``<name>.bak`` to start empty on purpose.

A ``JsonFile`` without ``salvage`` (a derived cache such as the store's
``dispatch.json``, or a broadcasting consumer's local offsets) keeps the copies, logs an ERROR and
loads None, as before.

The tables are plain in-memory objects, not thread-safe: their owner serialises calls. Each has a
``dirty`` flag, set by every real change, and ``persist()`` writes only when it is set.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Callable, Iterator
from itertools import islice
from pathlib import Path
from typing import Any, Final, Generic, TypeVar

import msgspec

from .clock import SYSTEM_CLOCK, Clock
from .errors import StoreError

logger = logging.getLogger(__name__)

TMP_SUFFIX: Final[str] = ".tmp"
BAK_SUFFIX: Final[str] = ".bak"
DAMAGED_SUFFIX: Final[str] = ".damaged-"
JSON_INDENT: Final[int] = 2
# A truncated document is cut back at most this many times while looking for a parseable prefix.
REPAIR_ATTEMPTS_MAX: Final[int] = 256

T = TypeVar("T", bound=msgspec.Struct)


class Salvaged(msgspec.Struct, Generic[T]):
    """What a salvage function kept from a damaged file: the value, its entry count, and a
    one-line reason per dropped entry."""

    value: T
    kept: int
    dropped: list[str]


# Given the leniently decoded JSON (plain dicts, lists, str, int...), keep what is valid.
# None when the document's top level is unusable.
SalvageFn = Callable[[Any], "Salvaged[T] | None"]


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

    def __init__(
        self,
        path: str | os.PathLike[str],
        schema: type[T],
        *,
        salvage: SalvageFn[T] | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.path = Path(path)
        self.tmp_path = self.path.with_name(self.path.name + TMP_SUFFIX)
        self.bak_path = self.path.with_name(self.path.name + BAK_SUFFIX)
        self._decoder: msgspec.json.Decoder[T] = msgspec.json.Decoder(schema)
        self._salvage = salvage
        self._clock = clock
        self._main_damaged = False  # save overwrites <name> instead of rotating it to .bak
        self.needs_rewrite = False  # load salvaged or fell back: the owner should save soon

    def load(self) -> T | None:
        """The main file's value, else the backup's, else a salvaged one (module docstring)."""
        self._main_damaged = self.needs_rewrite = False
        value = self._read(self.path)
        if value is not None:
            return value
        damaged: list[Path] = []
        kept: list[Path] = []
        if self.path.exists():
            self._main_damaged = True
            damaged.append(self.path)
            kept.append(self._keep_aside(self.path))
        value = self._read(self.bak_path)
        if value is not None:
            logger.warning("config file %s unusable; loaded backup %s", self.path, self.bak_path)
            self.needs_rewrite = self._main_damaged
            return value
        if self.bak_path.exists():
            damaged.append(self.bak_path)
            kept.append(self._keep_aside(self.bak_path))
        if not damaged:
            return None
        return self._salvage_or_refuse(damaged, kept)

    def _salvage_or_refuse(self, damaged: list[Path], kept: list[Path]) -> T | None:
        if self._salvage is not None:
            for path in damaged:
                salvaged = self._salvage_file(path)
                if salvaged is not None:
                    self._main_damaged = self.needs_rewrite = True
                    return salvaged
        names = " and ".join(str(p) for p in damaged)
        copies = ", ".join(str(p) for p in kept)
        if self._salvage is None:
            logger.error(
                "config file %s and its backup are unusable; starting empty "
                "(damaged copies kept as %s)",
                self.path,
                copies,
            )
            return None
        raise StoreError(
            f"{names} cannot be loaded and nothing in them could be salvaged; refusing to start "
            f"with an empty {self.path.name}. Copies are kept as {copies}. To fix: restore a good "
            f"copy as {self.path} (and remove {self.bak_path}), or delete {self.path} and "
            f"{self.bak_path} to start with an empty table on purpose.",
            path=str(self.path),
            kept=copies,
        )

    def _salvage_file(self, path: Path) -> T | None:
        assert self._salvage is not None
        try:
            document = lenient_json(path.read_bytes())
        except OSError as exc:
            logger.error("config file %s cannot be read: %s", path, exc)
            return None
        salvaged = self._salvage(document) if document is not None else None
        if salvaged is None or salvaged.kept == 0:
            logger.error("config file %s: nothing could be salvaged", path)
            return None
        for reason in salvaged.dropped:
            logger.error("config file %s: dropped damaged entry %s", path, reason)
        logger.error(
            "config file %s and its backup were damaged; salvaged %d entries from %s "
            "and dropped %d",
            self.path,
            salvaged.kept,
            path,
            len(salvaged.dropped),
        )
        return salvaged.value

    def _keep_aside(self, path: Path) -> Path:
        """Copy ``path`` to ``<path>.damaged-<ms>`` (never overwriting an earlier copy)."""
        stem = f"{path.name}{DAMAGED_SUFFIX}{self._clock.now_ms()}"
        target = path.with_name(stem)
        n = 0
        while target.exists():
            n += 1
            target = path.with_name(f"{stem}-{n}")
        try:
            shutil.copy2(path, target)
        except OSError as exc:
            raise StoreError(
                f"cannot keep a copy of the damaged {path} as {target}: {exc}", path=str(path)
            ) from exc
        logger.error("config file %s is damaged; kept a copy as %s", path, target)
        return target

    def save(self, value: T) -> None:
        """Write durably (tmp, fsync, rotate to .bak, rename, fsync dir); StoreError on OSError."""
        data = encode_json(value)
        try:
            _write_synced(self.tmp_path, data)
            if self.path.exists() and not self._main_damaged:
                os.replace(self.path, self.bak_path)
            os.replace(self.tmp_path, self.path)
            _fsync_dir(self.path.parent)
            self._main_damaged = self.needs_rewrite = False
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
        except (msgspec.DecodeError, UnicodeDecodeError) as exc:  # ValidationError included
            logger.warning("config file %s is damaged: %s", path, exc)
            return None


def lenient_json(data: bytes) -> Any:
    """Decode ``data`` as plain JSON. A damaged document (truncated, or broken at some byte)
    is cut back to the last complete value before the damage and its open brackets closed;
    what followed the damage is lost (the caller keeps a copy). None when nothing decodes.
    Pure: no I/O."""
    try:
        return msgspec.json.decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError):
        pass
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        text = data[: exc.start].decode("utf-8")
    try:
        return json.loads(text)
    except ValueError as exc:
        damaged_at = getattr(exc, "pos", len(text))
    for prefix in islice(_repair_candidates(text[:damaged_at]), REPAIR_ATTEMPTS_MAX):
        try:
            return json.loads(prefix)
        except ValueError:
            continue
    return None


def _repair_candidates(text: str) -> Iterator[str]:
    """Prefixes of ``text`` that end after a complete value, brackets closed; longest first."""
    cuts: list[tuple[int, str]] = []
    stack: list[str] = []
    in_string = escaped = False
    for i, char in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
            continue
        if char == '"':
            in_string = True
        elif char in "{[":
            stack.append("}" if char == "{" else "]")
        elif char in "}]":
            if not stack:
                break
            stack.pop()
            cuts.append((i + 1, "".join(reversed(stack))))
        elif char == "," and stack:
            cuts.append((i, "".join(reversed(stack))))
    return (text[:end] + closing for end, closing in reversed(cuts))
