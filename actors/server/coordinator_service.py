"""The coordinator's request handling, without Ray (RocketMQ's NameServer role plus
the client rebalance): brokers, routes, groups, stream plans and failover decisions.

Soft state only: brokers register on start and re-register (heartbeat) every
``heartbeat_interval_ms``; a broker silent for ``BROKER_EXPIRY_MS`` is dropped by
``tick`` (run every ``SCAN_INTERVAL_MS``), and one whose actor dies is dropped at once
(``CoordinatorPeers.watch_broker`` reports it).

(Re)started, the coordinator does not wait for heartbeats: ``rebuild`` asks every
broker for its info and every push consumer to join its group again. Queries for
routes and groups wait for that (at most ``REBUILD_WAIT_S``), so a client never sees
the empty tables of a coordinator that has just come back. Pull consumers' shares
come back with their next ``group_share`` call.

Every request is checked here (``protocol.check``) and, with ACL on, authorized
(``acl``: actors/server/acl.py, the registry's Access of each operation), so the actor
shell and the in-process fake (rayq/testing/fake.py) answer alike. Time comes from the injected
clock; everything that needs Ray goes through ``CoordinatorPeers``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import msgspec

from rayq.actors.protocol import (
    BrokerEntry,
    BrokerInfo,
    BrokerTableReply,
    ClientRequest,
    CountReply,
    Done,
    FinishStreamPlanRequest,
    GroupShareRequest,
    JoinGroupRequest,
    LostBrokersRequest,
    MemberRequest,
    MembersReply,
    MessageQueue,
    NamesReply,
    ReadReplicaReply,
    ReadReplicaRequest,
    RecordStreamPlanRequest,
    RouteReply,
    RouteRequest,
    RoutesReply,
    RoutesRequest,
    ShareReply,
    StreamPlanReply,
    StreamPlanRequest,
    check,
)
from rayq.actors.protocol.names import COORDINATOR_NAME
from rayq.actors.protocol.server_key import Guard, ServerKey, ServerProof
from rayq.actors.server.acl import AclService
from rayq.actors.server.coordinator_groups import GroupCoordinator, wait_ready
from rayq.actors.server.coordinator_peers import CoordinatorPeers
from rayq.actors.server.routes import GroupTable, RouteTable
from rayq.actors.server.stream_plans import StreamPlans
from rayq.store.clock import SYSTEM_CLOCK, Clock
from rayq.store.errors import InvalidRequestError

logger = logging.getLogger(__name__)

BROKER_EXPIRY_MS = 120_000
SCAN_INTERVAL_MS = 10_000
PLACEMENT_INTERVAL_S = 2.0  # how often lost replicas are looked for (with slaves only)
RECOVERY_INTERVAL_S = 2.0  # a lost master not brought back is tried again this often
RESTART_GRACE_S = 5.0  # a master whose node lives gets this long to be restarted by Ray
R = TypeVar("R")


class Loops:
    """Background tasks of one event loop: named loops started once, and one-off tasks
    kept referenced until they end."""

    def __init__(self) -> None:
        self.named: dict[str, asyncio.Task[None]] = {}
        self.pending: set[asyncio.Task[None]] = set()

    def ensure(self, name: str, make: Callable[[], Coroutine[Any, Any, None]]) -> None:
        task = self.named.get(name)
        if task is None or task.done():
            self.named[name] = asyncio.create_task(make())

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)
        self.pending.add(task)
        task.add_done_callback(self.pending.discard)

    def cancel(self) -> None:
        for task in [*self.named.values(), *self.pending]:
            task.cancel()


class CoordinatorService:
    """Every coordinator operation (actors/protocol/registry.py, service "coordinator")."""

    def __init__(
        self,
        peers: CoordinatorPeers,
        clock: Clock = SYSTEM_CLOCK,
        *,
        server_key: ServerKey,
        acl: AclService | None = None,
    ) -> None:
        self.peers = peers
        # the client operations' ACL (None: off, nothing is checked); its rules are the
        # brokers' (acl.coordinator_acl)
        self.acl = acl
        # register_broker and unregister_broker: a broker's, with its server proof
        self.guard = Guard(server_key, "coordinator", COORDINATOR_NAME)
        self.clock = clock
        self.table = RouteTable()
        self.groups = GroupTable()
        self.stream_plans = StreamPlans()
        self.loops = Loops()
        self.lost: dict[str, BrokerInfo] = {}  # died or went silent, not back yet
        self.slaves: dict[str, dict[int, BrokerInfo]] = {}  # broker name -> id -> last info
        self.seen_ms: dict[tuple[str, int], int] = {}  # replica -> last registration
        self.suspects: set[str] = set()
        self.scan_interval_s = SCAN_INTERVAL_MS / 1000  # how often _scan_loop ticks
        # lost masters whose failover found no slave holding every acknowledged message:
        # name -> the acknowledged offset known then (tried again when a slave that
        # reaches it registers; the old master may be restarted where its store is)
        self.refused: dict[str, int] = {}
        # masters shut down on purpose (rayq's shutdown): lost, but not brought back
        self.stopped: set[str] = set()
        # One lock per broker name, held by whatever starts or kills its replicas (a
        # failover, a restart of its master, a slave rejoining): one decision at a time.
        self._locks: dict[str, asyncio.Lock] = {}
        self._wakes: dict[str, asyncio.Event] = {}  # a lost master's recovery, woken early
        # Set once the soft state is rebuilt by asking (see rebuild): routes once the
        # brokers answered, groups once the push consumers re-joined.
        self.routes_ready = asyncio.Event()
        self.groups_ready = asyncio.Event()
        self.members = GroupCoordinator(peers, clock, self.loops, self.groups_ready)
        self.members.queues_of = self._queues_of
        self.rebalancer = self.members.rebalancer

    # ------------------------------------------------------------ restart
    def start_rebuild(self) -> None:
        """Rebuild in the background (an async actor's ``__init__`` runs on its loop)."""
        self.loops.ensure("rebuild", self.rebuild)

    def skip_rebuild(self) -> None:
        """Nothing to rebuild (a fresh in-process coordinator): answer at once."""
        self.routes_ready.set()
        self.groups_ready.set()

    async def rebuild(self) -> None:
        """Rebuild the soft state by asking rather than waiting for heartbeats: every
        broker for its info, then every push consumer to join its group again; then
        rebalance each group once (held back meanwhile, so no member loses its queues
        to routes not known yet)."""
        try:
            infos = await self.peers.broker_infos()
            for name, info in infos.items():
                if isinstance(info, BrokerInfo):
                    await self.registered(info)
                else:  # it registers itself when it is up
                    logger.warning("rebuild: broker actor %s did not answer (%s)", name, info)
            await self._recover_remembered()
            if self.table.brokers or self.lost:
                # slaves that died while no coordinator ran are known to nobody: the
                # placement scan finds their nodes and starts them again
                self._ensure_placement()
            self.routes_ready.set()
            answers = await self.peers.rejoin_consumers()
            for name, error in answers.items():
                if error is not None:  # it re-joins on its member heartbeat
                    logger.warning("rebuild: consumer actor %s did not re-join (%s)", name, error)
            if infos or answers:
                logger.warning(
                    "coordinator (re)started: %d broker(s) and %d push consumer(s) found",
                    len(self.table.brokers),
                    len(answers),
                )
        except Exception:
            logger.exception("coordinator: rebuilding state failed; waiting for heartbeats")
        finally:
            self.skip_rebuild()
        self.members.rebalance_all()

    async def _recover_remembered(self) -> None:
        """Masters this deployment remembers (``CoordinatorPeers.remember``) that are not
        running: lost while no coordinator ran, or lost before this one restarted. Each
        is recovered as if Ray had just reported its death; without this, a master dead
        when the coordinator restarts is known to nobody and never comes back."""
        for name, info in sorted((await self.peers.remembered()).items()):
            if name in self.table.brokers or name in self.lost or name in self.stopped:
                continue
            logger.warning("rebuild: master %s is not running; bringing it back", name)
            self.lost[name] = info
            self._read_from_slave(name)
            self._ensure_recovery(name)

    def close(self) -> None:
        """Stop every background task (the in-process fake's end)."""
        self.loops.cancel()

    # ------------------------------------------------------------ brokers
    async def register_broker(self, info: BrokerInfo, proof: ServerProof | None = None) -> bool:
        """A broker (re-)registers (with its proof of the server key): True if it is new."""
        self.guard.check("register_broker", proof, info)
        return await self.registered(info)

    async def registered(self, info: BrokerInfo) -> bool:
        """``register_broker`` from within (a rebuild, a failover): True if it is new."""
        info = check(info, BrokerInfo)
        self.loops.ensure("scan", self._scan_loop)
        self.seen_ms[info.broker_name, info.broker_id] = self.clock.now_ms()
        if info.broker_id != 0:  # a slave: known, never routed to for sends
            new = info.broker_id not in self.slaves.get(info.broker_name, {})
            self.slaves.setdefault(info.broker_name, {})[info.broker_id] = info
            if info.broker_name in self.lost:  # its master is lost: it serves the reads
                self._read_from_slave(info.broker_name)
                needed = self.refused.get(info.broker_name)
                if needed is None or info.written_offset >= needed:  # may be promoted
                    self.refused.pop(info.broker_name, None)
                    self._wake(info.broker_name)
            self._ensure_placement()
            return new
        if self.table.read_only.pop(info.broker_name, None) is not None:
            logger.warning("broker %s: its master is back; reads go to it again", info.broker_name)
        old = self.table.brokers.get(info.broker_name)
        if (
            old is not None
            and info.instance
            and old.instance == info.instance
            and info.data_version < old.data_version
        ):  # its topics are older than those registered: keep those
            info = msgspec.structs.replace(info, topics=old.topics, data_version=old.data_version)
        changed = {
            t
            for t in set(info.topics) | set(old.topics if old else {})
            if (old.topics.get(t) if old else None) != info.topics.get(t)
        }
        new = self.table.register(info, self.clock.now_ms())
        self.members.routes_changed(changed)
        if (old is None or (old.store_dir, old.epoch, old.role, old.node_id)
                != (info.store_dir, info.epoch, info.role, info.node_id)):  # fmt: skip
            self.peers.remember(info)  # found again by a restarted coordinator
        self.lost.pop(info.broker_name, None)
        self.refused.pop(info.broker_name, None)
        self.stopped.discard(info.broker_name)
        self._wake(info.broker_name)  # its recovery, if one runs, ends
        self.peers.watch_broker(info.broker_name, self.broker_died)
        return new

    async def unregister_broker(self, broker_name: str, proof: ServerProof | None = None) -> None:
        """A broker leaves the routes (with its proof of the server key)."""
        self.guard.check("unregister_broker", proof, broker_name)
        self.peers.forget(broker_name)
        self.remove_broker(broker_name, lost=False)

    def tick(self, now_ms: int) -> list[str]:
        """Drop the brokers silent for more than ``BROKER_EXPIRY_MS``: their names."""
        expired = [
            b for b, seen in self.table.last_seen_ms.items() if now_ms - seen > BROKER_EXPIRY_MS
        ]
        for gone in expired:
            logger.warning("broker %s missed its heartbeats; dropping it", gone)
            self.remove_broker(gone)
        return expired

    async def _scan_loop(self) -> None:
        while True:
            await asyncio.sleep(self.scan_interval_s)
            self.tick(self.clock.now_ms())

    def broker_died(self, broker_name: str, shut_down: bool) -> None:
        """Ray reports the broker's actor dead: drop it until it is back, and bring a
        master back (``_recover``) unless it was shut down on purpose."""
        if shut_down:
            self.stopped.add(broker_name)
            self.peers.forget(broker_name)
        self.remove_broker(broker_name)
        if not shut_down:
            self._ensure_recovery(broker_name)

    def remove_broker(self, broker_name: str, *, lost: bool = True) -> None:
        """Drop a broker from the routes; a ``lost`` one (died or silent) is remembered,
        so reads of its topics report it unavailable rather than gone, or, if it has a
        slave, are served by the slave (read-only routes) until a master is back."""
        info = self.table.brokers.get(broker_name)
        self.table.remove(broker_name)
        if lost:  # (lost already: its last info is kept)
            self.lost[broker_name] = (
                info
                or self.lost.get(broker_name)
                or BrokerInfo(broker_name=broker_name, node_id="", store_dir="", topics={})
            )
            self._read_from_slave(broker_name)
            self._ensure_placement()  # brought back when its node is (failover.py)
        if info is not None:
            self.members.routes_changed(set(info.topics))

    def _read_from_slave(self, broker_name: str) -> None:
        """The master of ``broker_name`` is lost: its slave furthest ahead serves reads,
        among those in the lost master's epoch or later. A slave in an older epoch has not
        fetched from this master yet, so it was not fenced: it may hold a divergent tail
        (an old master back as a slave, whose unacknowledged writes the promoted slave
        never had), and consumers reading that tail go past the master's end of the queue
        and are moved back to its start when the master answers again. Its written offset
        is no measure either: the divergent tail makes it look furthest ahead."""
        lost = self.lost.get(broker_name)
        epoch = lost.epoch if lost is not None else 0
        slaves = [s for s in self.slaves.get(broker_name, {}).values() if s.epoch >= epoch]
        if not slaves:
            return
        best = max(slaves, key=lambda s: s.written_offset)
        old = self.table.read_only.get(broker_name)
        self.table.read_only[broker_name] = best
        if old is None or old.broker_id != best.broker_id:
            logger.warning(
                "broker %s: master lost; slave %d serves its reads", broker_name, best.broker_id
            )
            self.members.routes_changed(set(best.topics))

    # ------------------------------------------------------------ failover
    def _lock(self, name: str) -> asyncio.Lock:
        return self._locks.setdefault(name, asyncio.Lock())

    def _wake(self, name: str) -> None:
        event = self._wakes.get(name)
        if event is not None:
            event.set()

    def _ensure_recovery(self, name: str) -> None:
        """Bring a master of ``name`` back (one task per broker name)."""
        if name not in self.stopped:
            self.loops.ensure(f"recover:{name}", lambda: self._recover(name))

    async def _recover(self, name: str) -> None:
        """The master of ``name`` is lost: try, under the broker's lock, until one runs
        (``_recover_once``), again every RECOVERY_INTERVAL_S or as soon as a replica of
        it registers. If its node is alive, Ray may restart it there: that is given
        RESTART_GRACE_S first."""
        grace = True
        wake = self._wakes.setdefault(name, asyncio.Event())
        while self._masterless(name):
            lost = self.lost[name]
            if grace and lost.node_id and await self._node_alive(lost.node_id):
                grace = False
                deadline = asyncio.get_running_loop().time() + RESTART_GRACE_S
                while self._masterless(name):  # woken by any registration: look again
                    left = deadline - asyncio.get_running_loop().time()
                    if left <= 0:
                        break
                    wake.clear()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(wake.wait(), left)
                continue
            grace = False
            wake.clear()
            async with self._lock(name):
                if not self._masterless(name):
                    return
                try:
                    if await self._recover_once(name, self.lost[name]):
                        return
                except Exception:  # e.g. Ray's node table unreachable: the next round
                    logger.exception("bringing a master of %s back failed; trying again", name)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), RECOVERY_INTERVAL_S)

    async def _node_alive(self, node_id: str) -> bool:
        try:
            return await self.peers.node_alive(node_id)
        except Exception:  # not known now: no grace, the attempts follow
            logger.exception("could not tell whether node %s is alive", node_id)
            return False

    def _masterless(self, name: str) -> bool:
        return name in self.lost and name not in self.table.brokers and name not in self.stopped

    async def _recover_once(self, name: str, lost: BrokerInfo) -> bool:
        """One attempt (the broker's lock held) to give ``name`` a master: True if one
        runs. If the node that carries its store (looked up now, by resource) came back
        under a new id, the master is started there again: it has every message. Else,
        with ``auto_failover`` and a slave, the slave furthest ahead among those holding
        every acknowledged send is promoted (failover.py, election.py); if there is none
        (``refused``, tried again when one registers) or the promotion failed, the old
        master is started where its store is, if that node is up."""
        home = await self.peers.store_node(lost.store_dir) if lost.store_dir else None
        slaves = self.slaves.get(name, {})
        came_back = home is not None and home != lost.node_id
        if lost.auto_failover and slaves and not came_back and name not in self.refused:
            self.peers.unwatch_broker(name)
            promoted: tuple[int, BrokerInfo] | None = None
            try:
                promoted = await self.peers.promote(name, lost, dict(slaves))
            except Exception:
                logger.exception("failover of %s failed; trying again", name)
            else:
                if promoted is None:  # nobody to promote without losing acknowledged sends
                    self.refused[name] = self.acked_offset(name)
            if promoted is not None:
                self.refused.pop(name, None)
                self.slaves.get(name, {}).pop(promoted[0], None)
                await self.registered(promoted[1])
                self._ensure_placement()
                return True
        if home is None:
            return False
        try:
            restarted = await self.peers.restart_master(name, lost, dict(slaves))
        except Exception:
            logger.exception("starting master %s again failed; trying again", name)
            return False
        if restarted is None:  # its node went away meanwhile
            return False
        await self.registered(restarted)
        self._ensure_placement()
        return True

    def acked_offset(self, name: str) -> int:
        """The highest offset ``name``'s sends are known to be acknowledged up to, from the
        lost master's last heartbeat and its slaves' registrations (-1: none)."""
        lost = self.lost.get(name)
        known = [s.acked_offset for s in self.slaves.get(name, {}).values()]
        return max([lost.acked_offset if lost else -1, *known])

    def _ensure_placement(self) -> None:
        self.loops.ensure("placement", self._placement_loop)

    async def _placement_loop(self) -> None:
        """Bring lost slaves back when their node is up (failover.py), each broker under
        its lock (skipped while a failover or restart holds it); make sure every lost
        master (not shut down on purpose) has its recovery running."""
        while True:
            await asyncio.sleep(PLACEMENT_INTERVAL_S)
            for name in list(self.lost):
                if self._masterless(name):
                    self._ensure_recovery(name)
            for name, master in sorted(self.table.brokers.items()):
                lock = self._lock(name)
                if lock.locked():
                    continue
                async with lock:
                    if self.table.brokers.get(name) is not master:
                        continue
                    try:
                        await self.peers.place_replicas(
                            {name: master}, {name: self.slaves.get(name, {})}, self.suspects
                        )
                    except Exception:
                        logger.exception("placing replicas of %s failed; trying again", name)

    # ------------------------------------------ the client protocol: routes
    def authorize(self, method: str, req: R) -> R:
        """``req`` if it may call client operation ``method``, else PermissionDeniedError
        (ACL on; with ACL off nothing is checked)."""
        if self.acl is not None:
            self.acl.check(method, req)
        return req

    async def route(self, req: RouteRequest) -> RouteReply:
        req = check(req, RouteRequest)
        self.authorize("route", req)
        await wait_ready(self.routes_ready)
        return RouteReply(route=self.table.route(req.topic))

    async def routes(self, req: RoutesRequest) -> RoutesReply:
        req = check(req, RoutesRequest)
        self.authorize("routes", req)
        await wait_ready(self.routes_ready)
        return RoutesReply(routes={t: self.table.route(t) for t in req.topics})

    async def topics(self, req: ClientRequest) -> NamesReply:
        self.authorize("topics", check(req, ClientRequest))
        await wait_ready(self.routes_ready)
        return NamesReply(names=self.table.topics())

    async def brokers(self, req: ClientRequest) -> NamesReply:
        self.authorize("brokers", check(req, ClientRequest))
        await wait_ready(self.routes_ready)
        return NamesReply(names=sorted(self.table.brokers))

    async def read_replica(self, req: ReadReplicaRequest) -> ReadReplicaReply:
        """Which replica of a broker serves calls now (a client resolving its name)."""
        req = check(req, ReadReplicaRequest)  # not checked by the ACL (registry: NONE)
        await wait_ready(self.routes_ready)
        return ReadReplicaReply(replica=self.table.replica(req.broker_name))

    async def broker_table(self, req: ClientRequest) -> BrokerTableReply:
        """Every broker replica known: live masters, slaves and lost masters, each with
        its role, node and last heartbeat (``rayq cluster list``, ``Admin.health``)."""
        self.authorize("broker_table", check(req, ClientRequest))
        await wait_ready(self.routes_ready)
        infos = [(i, False) for i in self.table.brokers.values()]
        infos += [(i, True) for n, i in self.lost.items() if n not in self.table.brokers]
        infos += [(i, False) for per in self.slaves.values() for i in per.values()]
        out = [
            BrokerEntry(
                broker_name=i.broker_name,
                broker_id=i.broker_id,
                role=i.role,
                node_id=i.node_id,
                lost=lost,
                last_heartbeat_ms=self.seen_ms.get((i.broker_name, i.broker_id), 0),
            )
            for i, lost in infos
        ]
        return BrokerTableReply(brokers=sorted(out, key=lambda e: (e.broker_name, e.broker_id)))

    async def lost_brokers(self, req: LostBrokersRequest) -> NamesReply:
        """Brokers that died or went silent and are not back (holding ``topic``, if given):
        their queues are unavailable, not gone."""
        req = check(req, LostBrokersRequest)
        self.authorize("lost_brokers", req)
        topic = req.topic
        await wait_ready(self.routes_ready)
        return NamesReply(
            names=sorted(
                b
                for b, info in self.lost.items()
                if (topic is None or topic in info.topics or not info.topics)
                and b not in self.table.read_only
            )
        )

    # ----------------------------------------------- pull-consumer shares
    async def group_share(self, req: GroupShareRequest) -> ShareReply:
        """The caller's share of the topic's queues among the group's live members (by
        the request's strategy); members not heard from for ``expiry_ms`` no longer count."""
        req = check(req, GroupShareRequest)
        self.authorize("group_share", req)
        if not req.client_id:
            raise InvalidRequestError("group_share needs the caller's client_id")
        await wait_ready(self.routes_ready)
        route = self.table.route(req.topic)
        if route is None:
            return ShareReply(queues=None)
        return ShareReply(queues=self.groups.share(req, route.read_queues(), self.clock.now_ms()))

    async def leave_shares(self, req: ClientRequest) -> Done:
        """A pull consumer shut down: its shares go to the other members at once."""
        req = check(req, ClientRequest)
        self.authorize("leave_shares", req)
        self.groups.leave(req.client_id)
        return Done()

    # ------------------------------------------------ push-consumer groups
    async def join_group(self, req: JoinGroupRequest) -> CountReply:
        return await self.members.join_group(
            self.authorize("join_group", check(req, JoinGroupRequest))
        )

    async def leave_group(self, req: MemberRequest) -> Done:
        return await self.members.leave_group(
            self.authorize("leave_group", check(req, MemberRequest))
        )

    async def member_alive(self, req: MemberRequest) -> Done:
        return await self.members.member_alive(
            self.authorize("member_alive", check(req, MemberRequest))
        )

    async def group_members(self, req: MemberRequest) -> MembersReply:
        return await self.members.group_members(
            self.authorize("group_members", check(req, MemberRequest))
        )

    def _queues_of(self, topic: str) -> list[MessageQueue]:
        route = self.table.route(topic)
        return route.read_queues() if route is not None else []

    # --------------------------------------------------- stream plans
    # Streaming batches in flight (stream_plans.py), for the streaming connector.
    async def stream_plan(self, req: StreamPlanRequest) -> StreamPlanReply:
        req = check(req, StreamPlanRequest)
        self.authorize("stream_plan", req)
        found = self.stream_plans.get(req.group, req.topic)
        if found is None:
            return StreamPlanReply()
        return StreamPlanReply(batch_id=found[0], ranges=list(found[1]))

    async def record_stream_plan(self, req: RecordStreamPlanRequest) -> StreamPlanReply:
        req = check(req, RecordStreamPlanRequest)
        self.authorize("record_stream_plan", req)
        batch_id = self.stream_plans.record(req.group, req.topic, req.ranges)
        return StreamPlanReply(batch_id=batch_id, ranges=req.ranges)

    async def finish_stream_plan(self, req: FinishStreamPlanRequest) -> Done:
        req = check(req, FinishStreamPlanRequest)
        self.authorize("finish_stream_plan", req)
        return Done(existed=self.stream_plans.finish(req.group, req.topic, req.batch_id))

    async def ready(self) -> bool:
        return True
