"""The broker's peers as the Ray-free services see them: small typed interfaces.

The endpoint, long polling and the broker's runtime wait on other actors (the
flusher under SYNC_FLUSH, the hold service for answers to parked pulls, the
coordinator for registration, a slave's master for replication). They reach them
only through these Protocols; the Ray shells implement them with actor handles
(actors/broker_peers.py), the fake with in-process objects. A peer that is not
running, or whose call failed because it died, raises ``PeerLostError``: the shell
looks it up again by name on the next call.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Protocol

from rayq.actors.protocol import (
    BrokerInfo,
    HaChunk,
    HaFetch,
    MetadataReply,
    MetadataRequest,
    Park,
    PullManyRequest,
    PullManyResponse,
    PullRequest,
    PullResponse,
)


class PeerLostError(Exception):
    """A peer actor is not running, or died during the call (looked up anew next time).
    Internal to the server: every service catches it, no client sees it."""


class PeerMissingError(PeerLostError):
    """No actor of the peer's name is running (yet)."""


class Flusher(Protocol):
    """The broker's flusher (actors/flusher.py)."""

    name: str  # its actor's name, for messages

    async def sync(self, offset: int) -> int:
        """Return once the commit log is durable up to ``offset``."""
        ...

    async def durable(self) -> int:
        """The commit-log offset below which everything is durable."""
        ...


class Hold(Protocol):
    """The broker's hold service (actors/pull_hold.py), as the broker calls it."""

    name: str  # its actor's name, for messages

    async def deliver(self, token: str, answer: PullResponse | PullManyResponse) -> bool:
        """Hand the answer of the parked pull ``token``; True if a caller waited for it."""
        ...

    async def ready(self) -> bool: ...


class Registrar(Protocol):
    """The coordinator, as a broker registers (and heartbeats) with it."""

    async def register_broker(self, info: BrokerInfo) -> None: ...


class Master(Protocol):
    """A slave's master: ``ha_fetch`` starts the call at once (the slave keeps one
    fetch in flight while it dispatches the last chunk) and returns its answer."""

    def ha_fetch(self, req: HaFetch) -> Awaitable[HaChunk]: ...

    async def ha_metadata(self, req: MetadataRequest) -> MetadataReply: ...


class PageReaders(Protocol):
    """The replica's page readers (actors/page_reader.py): started on demand."""

    async def start(self) -> None:
        """Start them (once) and return when they answer."""
        ...


class HoldBroker(Protocol):
    """The broker, as its hold service calls it: a pull with an optional ``Park``."""

    async def pull(self, req: PullRequest, park: Park | None = None) -> PullResponse: ...

    async def pull_many(
        self, req: PullManyRequest, park: Park | None = None
    ) -> PullManyResponse: ...
