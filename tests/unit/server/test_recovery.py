"""Bringing a lost master back, without Ray: the coordinator service with fake peers
whose nodes come and go (a removed node returns under a new id, as Ray's do).

Reproduces what the nemesis soak (seed 27) found: the old master restarted where its
store is while a failover promoted its slave at the same moment, a start that failed
because its node had vanished and was never tried again, and a broker left with no
master and nothing that would retry. Every step is driven by hand (``settle``); the
retry interval is 0, so nothing waits on a clock."""

from __future__ import annotations

import asyncio

import pytest

from rayq.actors.protocol import BrokerInfo
from rayq.actors.protocol.server_key import ServerKey
from rayq.actors.server import coordinator_service
from rayq.actors.server.coordinator_peers import NoPeers
from rayq.actors.server.coordinator_service import CoordinatorService
from rayq.store.clock import FakeClock

ROOT = "/stores"


def replica(store: str, node: str, broker_id: int, *, epoch: int = 0) -> BrokerInfo:
    """A replica of broker-a over ``ROOT/store`` on ``node`` (id 0: the master)."""
    return BrokerInfo(
        broker_name="broker-a",
        node_id=node,
        store_dir=f"{ROOT}/{store}",
        topics={},
        broker_id=broker_id,
        role="SYNC_MASTER" if broker_id == 0 else "SLAVE",
        epoch=epoch,
        written_offset=1000,
        acked_offset=-1,
    )


class Nodes(NoPeers):
    """Peers over a fake cluster: ``nodes`` maps a node's ``rayq_broker:`` label to its
    current id. ``promote`` and ``restart_master`` may be held at a gate, and record
    whether they ever ran at the same time for one broker."""

    def __init__(self, nodes: dict[str, str]) -> None:
        super().__init__("test")
        self.nodes = dict(nodes)
        self.svc: CoordinatorService | None = None
        self.promotions: list[BrokerInfo | Exception | None] = []  # what each call does
        self.promoted = 0
        self.restarted = 0
        self.in_flight = 0
        self.overlapped = False
        self.gate: asyncio.Event | None = None  # restart_master waits for it if set
        self.vanish_on_restart = 0  # restarts whose node vanishes as they start
        self.unreachable = 0  # store_node calls that fail

    # --- the cluster
    async def node_alive(self, node_id: str) -> bool:
        return node_id in self.nodes.values()

    async def store_node(self, store_dir: str) -> str | None:
        if self.unreachable:
            self.unreachable -= 1
            raise ConnectionError("the node table did not answer")
        return self.nodes.get(store_dir.rpartition("/")[2])

    async def _enter(self) -> None:
        self.in_flight += 1
        self.overlapped |= self.in_flight > 1
        await asyncio.sleep(0)

    # --- what failover.py does
    async def promote(
        self, name: str, lost: BrokerInfo, slaves: dict[int, BrokerInfo]
    ) -> tuple[int, BrokerInfo] | None:
        await self._enter()
        try:
            self.promoted += 1
            outcome = self.promotions.pop(0) if self.promotions else None
            if isinstance(outcome, Exception):
                raise outcome
            if outcome is None:
                return None
            chosen = next(i for i, s in slaves.items() if s.store_dir == outcome.store_dir)
            return chosen, outcome
        finally:
            self.in_flight -= 1

    async def restart_master(
        self, name: str, lost: BrokerInfo, slaves: dict[int, BrokerInfo]
    ) -> BrokerInfo | None:
        await self._enter()
        try:
            if self.gate is not None:
                await self.gate.wait()
            node = await self.store_node(lost.store_dir)  # looked up now, by resource
            if node is None:
                return None
            self.restarted += 1
            if self.vanish_on_restart:  # removed as the master's actors start there
                self.vanish_on_restart -= 1
                self.nodes = {k: v for k, v in self.nodes.items() if v != node}
                raise RuntimeError(f"node {node} does not exist any more (unschedulable)")
            store = lost.store_dir.rpartition("/")[2]
            return replica(store, node, 0, epoch=lost.epoch)
        finally:
            self.in_flight -= 1

    async def place_replicas(
        self,
        masters: dict[str, BrokerInfo],
        slaves: dict[str, dict[int, BrokerInfo]],
        suspects: set[str],
        restartable: dict[str, BrokerInfo] | None = None,
    ) -> None:
        # Slaves rejoin by hand in these tests. (Before the fix the placement pass also
        # restarted the lost masters it was given, as failover.place_replicas did.)
        for name, lost in (restartable or {}).items():
            if name not in masters and await self.store_node(lost.store_dir):
                info = await self.restart_master(name, lost, slaves.get(name, {}))
                if info is not None and self.svc is not None:
                    await self.svc.registered(info)


@pytest.fixture(autouse=True)
def no_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loops retry at once (asyncio.sleep(0)): the tests step them by hand."""
    monkeypatch.setattr(coordinator_service, "PLACEMENT_INTERVAL_S", 0.0)
    monkeypatch.setattr(coordinator_service, "RECOVERY_INTERVAL_S", 0.0, raising=False)


async def settle(rounds: int = 200) -> None:
    for _ in range(rounds):
        await asyncio.sleep(0)


async def deployment(peers: Nodes, master: BrokerInfo, *slaves: BrokerInfo) -> CoordinatorService:
    svc = CoordinatorService(peers, FakeClock(), server_key=ServerKey.new())
    svc.skip_rebuild()
    peers.svc = svc
    await svc.registered(master)
    for slave in slaves:
        await svc.registered(slave)
    return svc


def test_restarting_the_old_master_and_a_failover_never_run_at_once() -> None:
    """Both replicas' nodes go; the failover finds no live slave. Both nodes come back
    under new ids: the old master is restarted where its store is, and while that runs
    its slave registers again. Expect no promotion alongside the restart, and one
    master at the end (the restarted one)."""

    async def run() -> None:
        peers = Nodes({"broker-a#1": "n1", "broker-a": "n2"})
        svc = await deployment(peers, replica("broker-a#1", "n1", 0), replica("broker-a", "n2", 1))
        peers.nodes = {}
        svc.broker_died("broker-a", False)
        await settle()
        assert peers.promoted == 1 and "broker-a" in svc.refused  # no live slave
        peers.gate = asyncio.Event()
        peers.nodes = {"broker-a#1": "n1-new", "broker-a": "n2-new"}
        await settle()
        assert peers.in_flight == 1  # the restart, held at the gate
        await svc.registered(replica("broker-a", "n2-new", 1))  # the slave is back
        await settle()
        peers.gate.set()
        await settle()
        assert not peers.overlapped
        master = svc.table.brokers["broker-a"]
        assert (master.store_dir, master.node_id) == (f"{ROOT}/broker-a#1", "n1-new")
        assert "broker-a" not in svc.lost and "broker-a" not in svc.refused
        svc.close()

    asyncio.run(run())


def test_a_master_lost_with_no_slave_known_is_recovered_once_one_registers() -> None:
    """The promoted master's node vanishes before the old master, back on its node,
    has rejoined as its slave: when it died no slave was known. Expect the slave that
    registers next to be promoted (nothing below an acknowledged offset is involved)."""

    async def run() -> None:
        peers = Nodes({"broker-a": "nA", "broker-a#1": "nB"})
        svc = await deployment(peers, replica("broker-a", "nA", 0), replica("broker-a#1", "nB", 1))
        peers.nodes = {"broker-a#1": "nB"}
        peers.promotions = [replica("broker-a#1", "nB", 0, epoch=1)]
        svc.broker_died("broker-a", False)
        await settle()
        assert svc.table.brokers["broker-a"].node_id == "nB" and svc.slaves["broker-a"] == {}
        peers.nodes = {"broker-a": "nA2"}  # nB vanishes; the old master's node is back
        svc.broker_died("broker-a", False)
        await settle()
        assert "broker-a" not in svc.table.brokers
        peers.promotions = [replica("broker-a", "nA2", 0, epoch=2)]
        await svc.registered(replica("broker-a", "nA2", 1))  # rejoined just before
        await settle()
        assert peers.promoted == 2
        master = svc.table.brokers["broker-a"]
        assert (master.node_id, master.epoch) == ("nA2", 2)
        svc.close()

    asyncio.run(run())


def test_a_promotion_whose_node_vanished_is_tried_again() -> None:
    """The slave's node vanishes while it is being promoted (the new master's actors
    are unschedulable). Expect the failover to be tried again, not dropped."""

    async def run() -> None:
        peers = Nodes({"broker-a": "nA", "broker-a#1": "nB"})
        svc = await deployment(peers, replica("broker-a", "nA", 0), replica("broker-a#1", "nB", 1))
        peers.nodes = {"broker-a#1": "nB"}
        peers.promotions = [
            RuntimeError("the node specified via NodeAffinitySchedulingStrategy doesn't exist"),
            replica("broker-a#1", "nB", 0, epoch=1),
        ]
        svc.broker_died("broker-a", False)
        await settle()
        assert peers.promoted == 2
        assert svc.table.brokers["broker-a"].epoch == 1
        svc.close()

    asyncio.run(run())


def test_a_restart_whose_node_vanished_uses_the_node_that_carries_the_store_now() -> None:
    """No slave: the master's node comes back, vanishes as the master starts there, and
    comes back again under another id. Expect the master started on that one."""

    async def run() -> None:
        peers = Nodes({"broker-a": "n1"})
        svc = await deployment(peers, replica("broker-a", "n1", 0))
        peers.nodes = {}
        svc.broker_died("broker-a", False)
        await settle()
        peers.vanish_on_restart = 1
        peers.nodes = {"broker-a": "n2"}
        await settle()
        assert peers.restarted == 1 and "broker-a" not in svc.table.brokers
        peers.nodes = {"broker-a": "n3"}
        await settle()
        assert svc.table.brokers["broker-a"].node_id == "n3"
        assert peers.promoted == 0  # no slave: nobody to promote
        svc.close()

    asyncio.run(run())


def test_an_attempt_that_raises_is_followed_by_another() -> None:
    async def run() -> None:
        peers = Nodes({"broker-a": "n1"})
        svc = await deployment(peers, replica("broker-a", "n1", 0))
        peers.nodes = {"broker-a": "n2"}
        peers.unreachable = 3
        svc.broker_died("broker-a", False)
        await settle()
        assert peers.unreachable == 0
        assert svc.table.brokers["broker-a"].node_id == "n2"
        svc.close()

    asyncio.run(run())


def test_a_broker_shut_down_on_purpose_is_not_brought_back() -> None:
    async def run() -> None:
        peers = Nodes({"broker-a": "n1"})
        svc = await deployment(peers, replica("broker-a", "n1", 0))
        svc.broker_died("broker-a", True)
        await settle()
        assert peers.restarted == peers.promoted == 0
        assert "broker-a" not in svc.table.brokers
        svc.close()

    asyncio.run(run())


def test_a_master_lost_before_the_coordinator_restarted_is_brought_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The master dies, then the coordinator restarts before it is back: no actor of it
    runs, so only what the deployment remembers (Ray's key-value store; here the peers'
    memory) names it. The new coordinator recovers it; one shut down on purpose it
    leaves alone."""
    monkeypatch.setattr(coordinator_service, "RESTART_GRACE_S", 0.0)  # Ray restarted nothing

    async def run() -> None:
        peers = Nodes({"broker-a": "n1"})
        old = await deployment(peers, replica("broker-a", "n1", 0))
        old.close()  # the coordinator is killed; the master dies meanwhile
        assert set(await peers.remembered()) == {"broker-a"}
        new = CoordinatorService(peers, FakeClock(), server_key=ServerKey.new())
        peers.svc = new
        await new.rebuild()  # no broker actor answers
        await settle()
        assert peers.restarted == 1
        assert new.table.brokers["broker-a"].node_id == "n1"
        new.broker_died("broker-a", True)  # shut down on purpose: forgotten
        assert await peers.remembered() == {}
        new.close()

    asyncio.run(run())


def test_a_slave_lost_while_the_coordinator_was_down_is_placed_again() -> None:
    """The coordinator restarts after the slave's node went: only the master answers
    its rebuild, and no slave registers. The placement scan runs all the same, so the
    slave is started again when its node is back."""

    class Counting(Nodes):
        placed = 0

        async def broker_infos(self) -> dict[str, BrokerInfo | BaseException]:
            return {"rayq-broker-broker-a": replica("broker-a", "n1", 0)}

        async def place_replicas(self, masters, slaves, suspects, restartable=None) -> None:  # type: ignore[no-untyped-def]
            self.placed += 1

    async def run() -> None:
        peers = Counting({"broker-a": "n1"})
        svc = CoordinatorService(peers, FakeClock(), server_key=ServerKey.new())
        await svc.rebuild()
        await settle()
        assert peers.placed > 0
        svc.close()

    asyncio.run(run())
