"""Quorum replication without Ray: a SYNC_MASTER with ``min_in_sync_replicas`` = 2 of two
in-process slave BrokerServers waits for both, answers SLAVE_NOT_AVAILABLE with one,
tells its slaves how far its sends are acknowledged; the failover decision (election.py)
promotes only a slave that holds every acknowledged message; the coordinator keeps a
broker read-only when there is none and tries again when one registers."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import msgspec
import pytest

from rayq.actors.protocol import (
    BrokerInfo,
    CreateTopicRequest,
    ReplicationRequest,
    SendStatus,
)
from rayq.actors.protocol.config import BrokerConfig, BrokerRole
from rayq.actors.protocol.server_key import ServerKey
from rayq.actors.server.broker_server import BrokerServer
from rayq.actors.server.coordinator_peers import NoPeers
from rayq.actors.server.coordinator_service import CoordinatorService
from rayq.actors.server.election import elect
from rayq.actors.server.replication_wait import sync_slave
from rayq.store import SYSTEM_CLOCK, InnerMessage, StoreConfig
from rayq.store.batch import encode_batch
from rayq.store.clock import FakeClock

STORE = StoreConfig.for_tests(sync_flush_timeout_ms=200)
MASTER = BrokerConfig(store=STORE, broker_role=BrokerRole.SYNC_MASTER, min_in_sync_replicas=2)


def slave_config(broker_id: int) -> BrokerConfig:
    return msgspec.structs.replace(MASTER, broker_id=broker_id, broker_role=BrokerRole.SLAVE)


def send(server: BrokerServer, rng: random.Random, n: int = 3) -> int:
    msgs = [InnerMessage(topic="Rep", queue_id=0, body=rng.randbytes(500)) for _ in range(n)]
    server.put(encode_batch(msgs, max_body_bytes=1 << 14, max_properties_bytes=4096))
    return server.store.written_offset


def fetch(master: BrokerServer, slave: BrokerServer, now_ms: int) -> None:
    """One fetch (acknowledging what the slave has) and applying its answer."""
    assert master.master is not None and slave.slave is not None
    chunk = master.master.fetch(slave.slave.request(), now_ms)
    if chunk is not None:
        slave.slave.apply(chunk)


def make_master(config: BrokerConfig, root: Path) -> BrokerServer:
    master = BrokerServer(config, str(root))
    master.create_topic(
        CreateTopicRequest(topic="Rep", read_queue_nums=1, write_queue_nums=1, perm=6)
    )
    return master


@pytest.fixture
def trio(tmp_path: Path):
    master = make_master(MASTER, tmp_path / "m")
    slaves = [BrokerServer(slave_config(i), str(tmp_path / f"s{i}")) for i in (1, 2)]
    yield master, *slaves
    for s in (master, *slaves):
        s.close()


def test_a_send_is_acknowledged_only_once_both_slaves_have_it(trio) -> None:
    master, one, two = trio
    rng = random.Random(1)
    written = send(master, rng)
    waiting = master.master.wait(written)
    now = SYSTEM_CLOCK.now_ms()
    for _ in range(2):  # slave 1 fetches the bytes, then acknowledges them
        fetch(master, one, now)
    assert one.store.written_offset == written
    assert not waiting.done()  # one of two is not enough
    assert master.master.acked() == -1 and master.acked_offset == -1
    for _ in range(2):
        fetch(master, two, now)
    assert waiting.done()
    assert master.master.acked() == written == master.info().acked_offset
    assert master.replication(ReplicationRequest()).acked_offset == written


def test_with_one_of_two_slaves_in_sync_sends_are_slave_not_available(trio) -> None:
    master, one, two = trio
    rng = random.Random(2)
    now = SYSTEM_CLOCK.now_ms()
    fetch(master, one, now)
    fetch(master, two, now - 10 * MASTER.ha_housekeeping_ms)  # silent since: not connected
    written = send(master, rng)
    assert master.master.in_sync(written, now) == 1
    status = asyncio.run(sync_slave(master, written))
    assert status is SendStatus.SLAVE_NOT_AVAILABLE
    fetch(master, two, SYSTEM_CLOCK.now_ms())  # back and in sync (0 < fallbehind max)
    written = send(master, rng)
    status = asyncio.run(sync_slave(master, written))  # connected, nobody fetches: timeout
    assert status is SendStatus.FLUSH_SLAVE_TIMEOUT


def test_slaves_learn_how_far_sends_are_acknowledged_and_report_it(trio) -> None:
    master, one, two = trio
    rng = random.Random(3)
    now = SYSTEM_CLOCK.now_ms()
    first = send(master, rng)
    for _ in range(2):
        fetch(master, one, now)
        fetch(master, two, now)
    assert two.info().acked_offset == 0  # it had everything: no chunk, not told yet
    send(master, rng)
    fetch(master, one, now)  # each chunk carries the acknowledged offset so far
    fetch(master, two, now)
    assert one.info().acked_offset == two.info().acked_offset == first
    assert one.slave.master_acked == first


def test_an_async_master_acknowledges_nothing_for_failover(tmp_path: Path) -> None:
    config = msgspec.structs.replace(MASTER, broker_role=BrokerRole.ASYNC_MASTER)
    master = make_master(config, tmp_path / "m")
    slave = BrokerServer(slave_config(1), str(tmp_path / "s"))
    try:
        send(master, random.Random(4))
        for _ in range(2):
            fetch(master, slave, 0)
        assert master.info().acked_offset == slave.info().acked_offset == -1
    finally:
        master.close()
        slave.close()


# ------------------------------------------------------------------ elect
def broker(broker_id: int, written: int, acked: int = -1, role: str = "SLAVE") -> BrokerInfo:
    return BrokerInfo(
        broker_name="broker-a",
        node_id="n",
        store_dir="",
        topics={},
        broker_id=broker_id,
        role=role,
        written_offset=written,
        acked_offset=acked,
    )


LOST = broker(0, 5000, acked=4000, role="SYNC_MASTER")


def test_two_of_two_master_and_one_slave_lost_the_other_slave_is_promoted() -> None:
    """k=2 of 2: every acknowledged send is on both slaves, so the survivor has them."""
    choice = elect(LOST, {2: broker(2, 4000, acked=3000)}, known_slaves=2, min_in_sync_replicas=2)
    assert choice.chosen == 2
    assert choice.proven  # 1 answer >= 2 - 2 + 1
    assert choice.acked_offset == 4000


def test_a_slave_below_the_acknowledged_offset_is_not_promoted() -> None:
    answers = {1: broker(1, 3000, acked=2500), 2: broker(2, 4500, acked=4200)}
    choice = elect(broker(0, 5000, role="SYNC_MASTER"), answers, 2, 1)
    assert choice.chosen == 2 and choice.eligible == [2] and choice.acked_offset == 4200
    # the slave ahead is lost too: the one left is behind what was acknowledged
    choice = elect(LOST, {1: broker(1, 3000, acked=2500)}, 2, 1)
    assert choice.chosen is None and choice.eligible == []
    assert "no live slave holds every acknowledged message" in choice.reason
    assert "4000" in choice.reason and "slave 1 ends at 3000" in choice.reason


def test_furthest_ahead_of_the_eligible_wins_and_too_few_answers_are_not_proven() -> None:
    answers = {1: broker(1, 4100, acked=3900), 2: broker(2, 4300), 3: broker(3, 4300)}
    choice = elect(LOST, answers, known_slaves=3, min_in_sync_replicas=1)
    assert (choice.chosen, choice.proven) == (3, True)  # ties: the higher id, as before
    choice = elect(LOST, {1: broker(1, 4100)}, known_slaves=3, min_in_sync_replicas=2)
    assert (choice.chosen, choice.proven) == (1, False)  # 1 < 3 - 2 + 1
    assert "may be lost" in choice.reason


def test_no_live_slave_promotes_nobody_and_async_promotes_the_furthest() -> None:
    assert elect(LOST, {}, 2, 1).chosen is None
    lost = broker(0, 5000, role="ASYNC_MASTER")
    answers = {1: broker(1, 100), 2: broker(2, 200)}
    assert elect(lost, answers, 2, 1).chosen == 2


# -------------------------------------------------------- the coordinator
class Promotions(NoPeers):
    """Peers whose failover refuses until ``allow`` is set."""

    def __init__(self) -> None:
        super().__init__("test")
        self.asked = 0
        self.allow: tuple[int, BrokerInfo] | None = None

    async def promote(
        self, name: str, lost: BrokerInfo, slaves: dict[int, BrokerInfo]
    ) -> tuple[int, BrokerInfo] | None:
        self.asked += 1
        return self.allow


def test_a_refused_failover_keeps_the_broker_read_only_and_is_tried_again() -> None:
    async def run() -> None:
        peers = Promotions()
        svc = CoordinatorService(peers, FakeClock(), server_key=ServerKey.new())
        svc.skip_rebuild()
        await svc.registered(LOST)
        await svc.registered(broker(1, 3000, acked=2500))
        await svc.registered(broker(2, 4500, acked=4200))
        svc.broker_died("broker-a", False)
        for _ in range(50):
            await asyncio.sleep(0)
        assert peers.asked == 1
        assert svc.refused == {"broker-a": 4200}  # the heartbeat's 4000, slave 2's 4200
        assert "broker-a" not in svc.table.brokers  # no master: no sends
        assert svc.table.read_only["broker-a"].broker_id == 2  # reads from the slave ahead
        await svc.registered(broker(1, 3000, acked=2500))  # still behind: not again
        for _ in range(50):
            await asyncio.sleep(0)
        assert peers.asked == 1
        peers.allow = (2, broker(0, 4500, role="SYNC_MASTER"))
        await svc.registered(broker(2, 4500, acked=4200))  # reaches it: try again
        for _ in range(50):
            await asyncio.sleep(0)
        assert peers.asked == 2
        assert svc.refused == {} and "broker-a" in svc.table.brokers
        svc.close()

    asyncio.run(run())
