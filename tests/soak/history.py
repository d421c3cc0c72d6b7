"""The history of a soak: every send, delivery, observed commit, fault and bad request.

Events are plain dataclasses with a wall-clock time ``t`` (``time.time()``; the clients,
the Consumer actors and the nemesis all run on one machine, so their clocks agree).
A :class:`History` is appended to from many threads and written as JSON lines, so a
failing run's history can be checked again (``python -m soak --check FILE``).
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Contracts of the producers (Send.contract) and the consumers (Delivery.contract).
SYNC, ASYNC, IDEMPOTENT, TRANSACTIONAL, ORDERED = "sync", "async", "idempotent", "tx", "ordered"
PUSH, ORDERLY, PULL = "push", "orderly", "pull"


@dataclass(frozen=True)
class Send:
    """One send and its answer. ``ok``: acknowledged with SEND_OK (stored as safely as
    the deployment promises); ``status`` is the SendStatus name or the error's class."""

    client: str
    contract: str
    key: str  # unique: "<client>-<seq>"
    topic: str
    t_start: float
    t: float  # when the answer came
    ok: bool
    status: str
    broker: str = ""
    queue: int = -1
    offset: int = -1
    msg_id: str = ""
    error: str = ""
    sharding_key: str = ""
    seq: int = -1
    tx_state: str = ""  # transactional: the listener's decision (COMMIT/ROLLBACK/UNKNOWN)
    tx_final: str = ""  # transactional: what the transaction ends as (COMMIT/ROLLBACK)


@dataclass(frozen=True)
class Subscribed:
    """A consumer group of the soak, its contract and the topics it must receive."""

    group: str
    contract: str
    topics: tuple[str, ...]
    t: float = 0.0


@dataclass(frozen=True)
class Delivery:
    """One message handed to a consumer's listener (or returned by a poll)."""

    group: str
    contract: str
    instance: str  # the consumer instance (a new one after a restart)
    key: str
    topic: str
    broker: str
    queue: int
    offset: int
    msg_id: str
    t: float
    n: int = 0  # per-instance counter: orders deliveries with equal times
    reconsume_times: int = 0


@dataclass(frozen=True)
class Commit:
    """A committed offset of (group, topic, broker, queue), as observed on the brokers
    (``source="broker"``) or as committed by a pull consumer (``source="client"``)."""

    group: str
    topic: str
    broker: str
    queue: int
    offset: int
    t: float
    source: str = "broker"


@dataclass(frozen=True)
class Fault:
    """One injected fault: from ``t_start`` (injection) to ``t_end`` (repaired: resumed,
    node back, disk freed; for kills, when the kill returned)."""

    index: int
    kind: str
    target: str
    t_start: float
    t_end: float
    broker: str = ""  # the broker name it hit, if any
    detail: str = ""
    error: str = ""  # the nemesis could not apply it (the fault is then still listed)


@dataclass(frozen=True)
class BadRequest:
    """One bad request a client sent; ``refused``: it raised a RayqError (or was answered
    with one). ``actor_died``: the request's target stopped answering."""

    action: str
    t: float
    refused: bool
    error: str = ""
    actor_died: bool = False


@dataclass(frozen=True)
class Invariant:
    """A check made at the end of the run (the canary topic unchanged, actors alive)."""

    name: str
    ok: bool
    detail: str = ""
    t: float = 0.0


Event = Send | Subscribed | Delivery | Commit | Fault | BadRequest | Invariant
KINDS: dict[str, type] = {
    cls.__name__: cls for cls in (Send, Subscribed, Delivery, Commit, Fault, BadRequest, Invariant)
}


@dataclass
class History:
    """Thread-safe, append-only list of events."""

    events: list[Any] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, event: Event) -> None:
        with self._lock:
            self.events.append(event)

    def extend(self, events: Iterable[Event]) -> None:
        with self._lock:
            self.events.extend(events)

    def of(self, kind: type) -> list[Any]:
        with self._lock:
            return [e for e in self.events if isinstance(e, kind)]

    def dump(self, path: Path) -> None:
        with self._lock, path.open("w") as out:
            for e in self.events:
                out.write(json.dumps({"event": type(e).__name__, **dataclasses.asdict(e)}) + "\n")

    @classmethod
    def load(cls, path: Path) -> History:
        history = cls()
        for line in path.read_text().splitlines():
            row = json.loads(line)
            kind = KINDS[row.pop("event")]
            if kind is Subscribed:
                row["topics"] = tuple(row["topics"])
            history.add(kind(**row))
        return history
