"""What the coordinator service asks of the world around it, as small typed interfaces.

``CoordinatorService`` (coordinator_service.py) holds every decision of the
coordinator but makes no Ray call: finding and watching actors, calling Consumer
actors, promoting slaves and placing replicas go through ``CoordinatorPeers``. The
coordinator actor's shell implements it over Ray (actors/coordinator_ray.py); the
in-process fake and the unit tests use ``NoPeers`` (a deployment with no other actor).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from rayq.actors.protocol import BrokerInfo, MessageQueue
from rayq.store.errors import InvalidRequestError

# Called when a watched broker's actor dies: (broker name, shut down on purpose).
BrokerDied = Callable[[str, bool], None]
# Called when a group member's Consumer actor dies.
MemberGone = Callable[[], Awaitable[None]]


class MemberCalls(Protocol):
    """The push consumers' Consumer actors, as the coordinator calls them."""

    async def attach_member(self, group: str, client_id: str, gone: MemberGone) -> None:
        """Find ``client_id``'s Consumer actor (InvalidRequestError if there is none)
        and call ``gone`` once when it dies."""

    def detach_member(self, group: str, client_id: str) -> None:
        """Stop watching a member that left (or died)."""

    async def assign(
        self, group: str, client_id: str, generation: int, queues: list[MessageQueue]
    ) -> None:
        """The member owns exactly ``queues`` from now (rebalance step 2)."""

    async def revoke(
        self, group: str, client_id: str, generation: int, queues: list[MessageQueue]
    ) -> None:
        """The member gives up ``queues``; returns once it released them (step 1)."""

    def rebalanced(self, group: str) -> None:
        """Count one rebalance of ``group`` (a metric)."""


class BrokerWatch(Protocol):
    """Liveness of broker actors, as Ray reports it."""

    def watch_broker(self, broker_name: str, died: BrokerDied) -> None:
        """Watch the broker's actor (unless watched already); ``died`` when it dies."""

    def unwatch_broker(self, broker_name: str) -> None:
        """Stop watching it (its master is being replaced)."""


class Replicas(Protocol):
    """Nodes, and starting broker replicas (actors/failover.py)."""

    async def node_alive(self, node_id: str) -> bool: ...

    async def store_node(self, store_dir: str) -> str | None:
        """The live node that carries the ``rayq_broker:`` resource of the replica whose
        store is ``store_dir``, looked up now (None: none is up, or no node carries it)."""

    async def promote(
        self, name: str, lost: BrokerInfo, slaves: dict[int, BrokerInfo]
    ) -> tuple[int, BrokerInfo] | None:
        """Make a live slave of ``name`` its master: its former id and new info (None:
        no slave may be promoted; raises if starting the new master failed)."""

    async def restart_master(
        self, name: str, lost: BrokerInfo, slaves: dict[int, BrokerInfo]
    ) -> BrokerInfo | None:
        """Start the lost master of ``name`` again over its store, on the node that
        carries it now: its new info (None: that node is not up)."""

    async def place_replicas(
        self,
        masters: dict[str, BrokerInfo],
        slaves: dict[str, dict[int, BrokerInfo]],
        suspects: set[str],
    ) -> None:
        """Start the lost slaves of ``masters`` again where their node is up."""


class Discovery(Protocol):
    """The actors already running, asked after a coordinator (re)start."""

    async def broker_infos(self) -> dict[str, BrokerInfo | BaseException]:
        """Every broker actor's info by actor name (or why it did not answer)."""

    async def rejoin_consumers(self) -> dict[str, BaseException | None]:
        """Ask every Consumer actor to join its group again: by actor name, the error
        of one that did not (None: asked)."""

    def remember(self, info: BrokerInfo) -> None:
        """Keep a master's last info where a restarted coordinator finds it."""

    def forget(self, broker_name: str) -> None:
        """A master shut down on purpose: not to be brought back."""

    async def remembered(self) -> dict[str, BrokerInfo]:
        """The masters this deployment remembers, running or not, by broker name."""


class CoordinatorPeers(MemberCalls, BrokerWatch, Replicas, Discovery, Protocol):
    """Everything the coordinator service asks of other actors and of Ray."""


class NoPeers:
    """A deployment with no other actor: nothing to watch, find, call or place."""

    def __init__(self, namespace: str = "") -> None:
        self.namespace = namespace
        self.memory: dict[str, BrokerInfo] = {}  # ``remember``: in this process only

    async def attach_member(self, group: str, client_id: str, gone: MemberGone) -> None:
        raise InvalidRequestError(
            f"no Consumer actor for {client_id!r} in namespace {self.namespace!r}: "
            "only a running push consumer can join a group"
        )

    def detach_member(self, group: str, client_id: str) -> None:
        return None

    async def assign(
        self, group: str, client_id: str, generation: int, queues: list[MessageQueue]
    ) -> None:
        raise KeyError(client_id)

    async def revoke(
        self, group: str, client_id: str, generation: int, queues: list[MessageQueue]
    ) -> None:
        raise KeyError(client_id)

    def rebalanced(self, group: str) -> None:
        return None

    def watch_broker(self, broker_name: str, died: BrokerDied) -> None:
        return None

    def unwatch_broker(self, broker_name: str) -> None:
        return None

    async def node_alive(self, node_id: str) -> bool:
        return False

    async def store_node(self, store_dir: str) -> str | None:
        return None

    async def promote(
        self, name: str, lost: BrokerInfo, slaves: dict[int, BrokerInfo]
    ) -> tuple[int, BrokerInfo] | None:
        return None

    async def restart_master(
        self, name: str, lost: BrokerInfo, slaves: dict[int, BrokerInfo]
    ) -> BrokerInfo | None:
        return None

    async def place_replicas(
        self,
        masters: dict[str, BrokerInfo],
        slaves: dict[str, dict[int, BrokerInfo]],
        suspects: set[str],
    ) -> None:
        return None

    async def broker_infos(self) -> dict[str, BrokerInfo | BaseException]:
        return {}

    async def rejoin_consumers(self) -> dict[str, BaseException | None]:
        return {}

    def remember(self, info: BrokerInfo) -> None:
        self.memory[info.broker_name] = info

    def forget(self, broker_name: str) -> None:
        self.memory.pop(broker_name, None)

    async def remembered(self) -> dict[str, BrokerInfo]:
        return dict(self.memory)
