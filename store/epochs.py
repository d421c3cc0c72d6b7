"""The epoch history of a replicated commit log (RocketMQ 5 ``EpochFile``, Kafka's
leader-epoch checkpoint).

File: ``config/epochs.json``, written like every JSON file here (json_file.py)::

    {"entries": [[0, 0], [1, 73400320], ...]}    # [epoch, start offset], ascending

Epoch ``e`` covers commit-log offsets from its start to the next entry's start (the
last one: to the end of the log). A master that takes over appends a new epoch
starting at its written offset. A slave whose history says it wrote past the point
where its epoch ended on the current master holds a divergent tail (bytes the old
master wrote that nobody else has): it is cut there before it replicates on
(``fence``). A store that was never replicated has the single epoch ``[0, 0]``.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from .errors import StoreError
from .json_file import JsonFile


class EpochEntries(msgspec.Struct, kw_only=True):
    entries: list[tuple[int, int]] = []


class EpochHistory:
    """The epochs of one store, persisted on every change."""

    def __init__(self, config_dir: Path) -> None:
        config_dir.mkdir(parents=True, exist_ok=True)
        self._file = JsonFile(config_dir / "epochs.json", EpochEntries)
        loaded = self._file.load()
        self.entries: list[tuple[int, int]] = list(loaded.entries) if loaded else [(0, 0)]

    @property
    def current(self) -> int:
        return self.entries[-1][0]

    def start_of(self, epoch: int) -> int | None:
        for e, start in self.entries:
            if e == epoch:
                return start
        return None

    def end_of(self, epoch: int) -> int | None:
        """Where ``epoch`` ended in this history: the next epoch's start; None if
        ``epoch`` is the current one (it has not ended) or older than every entry."""
        for i, (e, _start) in enumerate(self.entries):
            if e > epoch:
                return self.entries[i][1] if i else None
            if e == epoch and i + 1 < len(self.entries):
                return self.entries[i + 1][1]
        return None

    def begin(self, epoch: int, start: int) -> None:
        """A new epoch from ``start`` (a master taking over)."""
        if epoch <= self.current:
            raise StoreError(f"epoch {epoch} is not newer than the current epoch {self.current}")
        self.entries.append((epoch, start))
        self._save()

    def adopt(self, entries: list[tuple[int, int]]) -> None:
        """Take the master's history (a slave whose log is a prefix of the master's)."""
        if [tuple(e) for e in entries] != self.entries:
            self.entries = [(int(e), int(s)) for e, s in entries]
            self._save()

    def _save(self) -> None:
        self._file.save(EpochEntries(entries=self.entries))
