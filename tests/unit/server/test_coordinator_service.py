"""The coordinator's request handling without Ray: broker expiry on a fake clock, and
the in-process fake answering exactly as the real service does (it is the service)."""

from __future__ import annotations

import ast
import asyncio
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest

from rayq.actors.protocol import (
    BrokerInfo,
    ClientRequest,
    GroupShareRequest,
    JoinGroupRequest,
    LostBrokersRequest,
    MemberRequest,
    MemberSpec,
    MessageQueue,
    QueueData,
    ReadReplicaRequest,
    RouteRequest,
)
from rayq.actors.protocol.server_key import ServerKey
from rayq.actors.server import coordinator_service
from rayq.actors.server.coordinator_peers import MemberGone, NoPeers
from rayq.actors.server.coordinator_service import BROKER_EXPIRY_MS, CoordinatorService
from rayq.admin.admin import Admin
from rayq.store.clock import FakeClock
from rayq.store.errors import InvalidRequestError, RayqError
from rayq.testing import FakeCluster, FakeTransport

TOPIC = "orders"


def info(name: str) -> BrokerInfo:
    queues = QueueData(broker_name=name, read_queue_nums=4, write_queue_nums=4, perm=6)
    return BrokerInfo(broker_name=name, node_id="n1", store_dir="", topics={TOPIC: queues})


def service(clock: FakeClock) -> CoordinatorService:
    found = CoordinatorService(NoPeers("test"), clock, server_key=ServerKey.new())
    found.skip_rebuild()
    return found


def test_no_server_module_imports_ray() -> None:
    """actors/server holds the Ray-free services (the coordinator's included)."""
    folder = Path(coordinator_service.__file__).parent
    for module in folder.glob("*.py"):
        imported = set()
        for node in ast.walk(ast.parse(module.read_text())):
            if isinstance(node, ast.Import):
                imported |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module)
        assert not {m for m in imported if m == "ray" or m.startswith("ray.")}, module.name


def test_a_broker_silent_past_the_expiry_is_dropped_and_reported_lost() -> None:
    """Given brokers a and b registered, when only b heartbeats for longer than the
    expiry, expect a dropped from the routes and listed as lost; b kept."""

    async def run() -> None:
        clock = FakeClock()
        svc = service(clock)
        await svc.registered(info("broker-a"))
        await svc.registered(info("broker-b"))
        clock.advance(BROKER_EXPIRY_MS // 2)
        assert svc.tick(clock.now_ms()) == []
        await svc.registered(info("broker-b"))  # b's heartbeat
        clock.advance(BROKER_EXPIRY_MS // 2 + 1)
        assert svc.tick(clock.now_ms()) == ["broker-a"]
        route = (await svc.route(RouteRequest(topic=TOPIC))).route
        assert route is not None
        assert [q.broker_name for q in route.queues] == ["broker-b"]
        lost = await svc.lost_brokers(LostBrokersRequest(topic=TOPIC))
        assert lost.names == ["broker-a"]
        assert (await svc.brokers(ClientRequest())).names == ["broker-b"]
        svc.close()

    asyncio.run(run())


def test_the_scan_loop_drops_a_broker_silent_for_120_s_on_the_services_clock() -> None:
    """The coordinator's own scan loop (started by the first registration), not a
    hand-called tick: on a fake clock, a broker silent for 120 s stays routed while
    the loop scans many times, and is dropped by the loop just past the expiry."""

    async def scan_rounds(rounds: int, until: Callable[[], object] = lambda: False) -> None:
        for _ in range(rounds):  # the loop scans every ~1 ms of real time here
            await asyncio.sleep(0.005)
            if until():
                return

    async def run() -> None:
        clock = FakeClock()
        svc = service(clock)
        svc.scan_interval_s = 0.001
        await svc.registered(info("broker-a"))
        await svc.registered(info("broker-b"))
        assert BROKER_EXPIRY_MS == 120_000
        clock.advance(BROKER_EXPIRY_MS)  # silent exactly 120 s: not yet past it
        await svc.registered(info("broker-b"))
        await scan_rounds(20)
        assert (await svc.brokers(ClientRequest())).names == ["broker-a", "broker-b"]
        clock.advance(1)
        await scan_rounds(2000, until=lambda: svc.lost)
        assert (await svc.lost_brokers(LostBrokersRequest())).names == ["broker-a"]
        assert (await svc.brokers(ClientRequest())).names == ["broker-b"]
        svc.close()

    asyncio.run(run())


def test_a_heartbeat_after_expiry_brings_the_broker_back() -> None:
    async def run() -> None:
        clock = FakeClock()
        svc = service(clock)
        await svc.registered(info("broker-a"))
        clock.advance(BROKER_EXPIRY_MS + 1)
        assert svc.tick(clock.now_ms()) == ["broker-a"]
        await svc.registered(info("broker-a"))
        assert (await svc.lost_brokers(LostBrokersRequest())).names == []
        assert (await svc.brokers(ClientRequest())).names == ["broker-a"]
        svc.close()

    asyncio.run(run())


def test_a_heartbeat_older_than_a_topic_change_does_not_undo_it() -> None:
    """A broker's heartbeat (its topics before a create) processed after the
    registration the create sent: the route stays. A new life of the broker (another
    ``instance``) is taken as it comes, whatever its data_version."""

    async def run() -> None:
        svc = service(FakeClock())
        before = msgspec.structs.replace(info("broker-a"), data_version=3, instance="life-1")
        created = msgspec.structs.replace(
            before,
            data_version=4,
            topics={**before.topics, "fresh": before.topics[TOPIC]},
        )
        await svc.registered(created)
        await svc.registered(before)  # the heartbeat sent before the create, late
        assert (await svc.route(RouteRequest(topic="fresh"))).route is not None
        restarted = msgspec.structs.replace(before, data_version=1, instance="life-2")
        await svc.registered(restarted)
        assert (await svc.route(RouteRequest(topic="fresh"))).route is None
        svc.close()

    asyncio.run(run())


BAD_SHARES = {
    "no client_id": GroupShareRequest(group="lg", topic=TOPIC, expiry_ms=30_000),
    "client_id too long": GroupShareRequest(
        group="lg", topic=TOPIC, expiry_ms=30_000, client_id="c" * 5000
    ),
}


def _real_error(req: GroupShareRequest) -> RayqError:
    async def run() -> RayqError:
        svc = service(FakeClock())
        await svc.registered(info("broker-a"))
        try:
            await svc.group_share(req)
        except RayqError as exc:
            return exc
        finally:
            svc.close()
        raise AssertionError("the real coordinator accepted it")

    return asyncio.run(run())


@pytest.mark.parametrize("case", sorted(BAD_SHARES))
def test_the_fake_refuses_a_bad_group_share_as_the_real_coordinator_does(
    case: str, tmp_path: Path
) -> None:
    """The fake once had its own group_share without the client_id check; now it runs
    the real service, so a request without (or with a bad) client_id fails alike."""
    req = BAD_SHARES[case]
    expected = _real_error(req)
    assert isinstance(expected, InvalidRequestError)
    with FakeCluster(tmp_path) as cluster:
        Admin(transport=FakeTransport(cluster)).create_topic(TOPIC, queues=4)
        reply = FakeTransport(cluster).coordinator().group_share(req)
        with pytest.raises(RayqError) as got:
            reply.result(5)
    assert type(got.value) is type(expected)
    assert str(got.value) == str(expected)


def test_the_fake_answers_a_good_group_share(tmp_path: Path) -> None:
    with FakeCluster(tmp_path) as cluster:
        Admin(transport=FakeTransport(cluster)).create_topic(TOPIC, queues=4)
        req = GroupShareRequest(group="lg", topic=TOPIC, expiry_ms=30_000, client_id="c1")
        share = FakeTransport(cluster).coordinator().group_share(req).result(5)
    assert share.queues is not None and len(share.queues) == 4


class RecordingMembers(NoPeers):
    """Consumer actors that are there and acknowledge every call, recorded; ``die``
    reports one dead as Ray would."""

    def __init__(self) -> None:
        super().__init__("test")
        self.owned: dict[str, list[MessageQueue]] = {}
        self.gone: dict[str, MemberGone] = {}

    async def attach_member(self, group: str, client_id: str, gone: MemberGone) -> None:
        self.gone[client_id] = gone

    async def assign(
        self, group: str, client_id: str, generation: int, queues: list[MessageQueue]
    ) -> None:
        self.owned[client_id] = list(queues)

    async def revoke(
        self, group: str, client_id: str, generation: int, queues: list[MessageQueue]
    ) -> None:
        self.owned[client_id] = [q for q in self.owned[client_id] if q not in queues]


def test_push_members_share_the_queues_and_a_dead_members_queues_move() -> None:
    """Given two members of a group on a 4-queue topic, expect two queues each; when
    one dies, expect the other to own all four."""

    async def run() -> None:
        peers = RecordingMembers()
        svc = CoordinatorService(peers, FakeClock(), server_key=ServerKey.new())
        svc.skip_rebuild()
        await svc.registered(info("broker-a"))
        spec = MemberSpec(subscriptions=((TOPIC, "*"),))
        for cid in ("c1", "c2"):
            await svc.join_group(JoinGroupRequest(group="pg", spec=spec, client_id=cid))
        assert sorted(len(qs) for qs in peers.owned.values()) == [2, 2]
        await peers.gone["c1"]()
        assert len(peers.owned["c2"]) == 4
        members = await svc.group_members(MemberRequest(group="pg"))
        assert list(members.members) == ["c2"]
        svc.close()

    asyncio.run(run())


def test_join_group_without_a_consumer_actor_is_refused() -> None:
    async def run() -> None:
        svc = service(FakeClock())
        spec = MemberSpec(subscriptions=((TOPIC, "*"),))
        with pytest.raises(InvalidRequestError, match="only a running push consumer"):
            await svc.join_group(JoinGroupRequest(group="pg", spec=spec, client_id="c1"))
        svc.close()

    asyncio.run(run())


def test_a_lost_masters_reads_go_only_to_a_slave_in_its_epoch() -> None:
    """The soak (seed 27): the old master came back as a slave in epoch 2 while the
    master of epoch 3 restarted; it was not fenced yet, so its log still held the
    unacknowledged tail the promoted slave never had, and it looked furthest ahead. Reads
    went to it, the pull consumer read past the master's end, and the master moved it
    back to offset 0 when it answered again. A slave in an older epoch serves no reads;
    once it has fetched from the master (and adopted its epochs) it may."""

    async def run() -> None:
        svc = service(FakeClock())
        master = msgspec.structs.replace(info("broker-a"), epoch=3, written_offset=1_517_140)
        await svc.registered(master)
        stale = msgspec.structs.replace(
            info("broker-a"), broker_id=1, role="SLAVE", epoch=2, written_offset=1_775_755
        )
        await svc.registered(stale)
        svc.broker_died("broker-a", shut_down=True)  # Ray restarts it: no failover
        ask = ReadReplicaRequest(broker_name="broker-a")
        assert (await svc.read_replica(ask)).replica == "broker-a"
        fenced = msgspec.structs.replace(stale, epoch=3, written_offset=1_517_140)
        await svc.registered(fenced)
        assert (await svc.read_replica(ask)).replica == "broker-a#1"
        svc.close()

    asyncio.run(run())
