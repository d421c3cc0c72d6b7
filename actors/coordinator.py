"""The Coordinator actor (RocketMQ's NameServer role): brokers, routes and groups.

Soft state only: brokers register on start and re-register (heartbeat) every
``heartbeat_interval_ms``; a broker silent for ``BROKER_EXPIRY_MS`` is dropped by a
scan every ``SCAN_INTERVAL_MS``, and one whose actor Ray reports dead is dropped at
once (the coordinator keeps a never-returning call open on each broker).

(Re)started, the coordinator does not wait for heartbeats: its constructor starts
``_rebuild``, which lists the named actors of its namespace, asks every broker for
its info and every push consumer to join its group again. Queries for routes and
groups wait for that (at most ``REBUILD_WAIT_S``), so a client never sees the empty
tables of a coordinator that has just come back. Pull consumers' shares come back
with their next ``group_share`` call.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import ray

from rayq.actors.failover import RESTART_GRACE_S, node_alive, place_replicas, promote
from rayq.actors.metrics import metric
from rayq.actors.protocol import (
    BROKER_ACTOR_PREFIX,
    CONSUMER_ACTOR_PREFIX,
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
    broker_actor_name,
    check,
    consumer_actor_name,
)
from rayq.actors.server.rebalance import Plan, Rebalancer
from rayq.actors.server.routes import GroupTable, RouteTable
from rayq.actors.server.stream_plans import StreamPlans
from rayq.store.clock import SYSTEM_CLOCK
from rayq.store.errors import ClosedError, InvalidRequestError

logger = logging.getLogger(__name__)

BROKER_EXPIRY_MS = 120_000
SCAN_INTERVAL_MS = 10_000
RESTART_WAIT_S = 60.0
SAFETY_REBALANCE_MS = 20_000  # every push-consumer group, in case an event was missed
MEMBER_CALL_TIMEOUT_S = 30.0  # a revoke waits for in-flight work; a member slower is dropped
REBUILD_CALL_TIMEOUT_S = 5.0  # a broker or consumer asked after a restart; slower: heartbeats
REBUILD_WAIT_S = 10.0  # how long a query waits for the rebuild before answering anyway
_FREE = asyncio.Lock()
PLACEMENT_INTERVAL_S = 2.0  # how often lost replicas are looked for (with slaves only)


class CoordinatorActor:
    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self.table = RouteTable()
        self.groups = GroupTable()
        self._watches: dict[str, asyncio.Task] = {}
        self._scan: asyncio.Task | None = None
        self.rebalancer = Rebalancer()
        self._members: dict[tuple[str, str], Any] = {}  # (group, member id) -> actor handle
        self._member_watches: dict[tuple[str, str], asyncio.Task] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._dirty: set[str] = set()
        self._safety: asyncio.Task | None = None
        self._pending: set[asyncio.Task] = set()
        self.stream_plans = StreamPlans()
        self.lost: dict[str, BrokerInfo] = {}  # died or went silent, not back yet
        self.slaves: dict[str, dict[int, BrokerInfo]] = {}  # broker name -> id -> last info
        self._failover_locks: dict[str, asyncio.Lock] = {}
        self._placement: asyncio.Task | None = None
        self._suspects: set[str] = set()
        self.seen_ms: dict[tuple[str, int], int] = {}  # replica -> last registration
        # Set once the soft state is rebuilt by asking (see _rebuild): routes once the
        # brokers answered, groups once the push consumers re-joined.
        self._routes_ready = asyncio.Event()
        self._groups_ready = asyncio.Event()
        # An async actor's __init__ runs on its event loop: rebuild in the background.
        self._rebuild_task = asyncio.get_running_loop().create_task(self._rebuild())

    # ------------------------------------------------------------ restart
    async def _rebuild(self) -> None:
        """Rebuild the soft state at once after a (re)start, by asking rather than
        waiting for heartbeats: every broker actor of the namespace for its info, then
        every push-consumer actor to join its group again; then rebalance each group
        once (rebalances are held back meanwhile, so no member loses its queues to
        routes not known yet)."""
        try:
            brokers, consumers = await asyncio.to_thread(self._named_actors)
            infos = await asyncio.gather(
                *(_ask(h, "broker_info") for h in brokers.values()), return_exceptions=True
            )
            for name, info in zip(brokers, infos, strict=True):
                if isinstance(info, BrokerInfo):
                    await self.register_broker(info)
                else:  # it registers itself when it is up
                    logger.warning("rebuild: broker actor %s did not answer (%s)", name, info)
            self._routes_ready.set()
            answers = await asyncio.gather(
                *(_ask(h, "rejoin") for h in consumers.values()), return_exceptions=True
            )
            for name, answer in zip(consumers, answers, strict=True):
                if isinstance(answer, BaseException):  # it re-joins on its member heartbeat
                    logger.warning("rebuild: consumer actor %s did not re-join (%s)", name, answer)
            if brokers or consumers:
                logger.warning(
                    "coordinator (re)started: %d broker(s) and %d push consumer(s) "
                    "found in namespace %s",
                    len(self.table.brokers),
                    len(consumers),
                    self.namespace,
                )
        except Exception:
            logger.exception("coordinator: rebuilding state failed; waiting for heartbeats")
        finally:
            self._routes_ready.set()
            self._groups_ready.set()
        for group in self.rebalancer.groups():
            self._spawn(self._rebalance(group))

    def _named_actors(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """Handles of the broker and push-consumer actors of this namespace, by name."""
        brokers: dict[str, Any] = {}
        consumers: dict[str, Any] = {}
        for entry in ray.util.list_named_actors(all_namespaces=True):
            name = entry["name"]
            if entry["namespace"] != self.namespace:
                continue
            found = (
                brokers
                if name.startswith(BROKER_ACTOR_PREFIX)
                else consumers
                if name.startswith(CONSUMER_ACTOR_PREFIX)
                else None
            )
            if found is None:
                continue
            with contextlib.suppress(ValueError):  # gone since it was listed
                found[name] = ray.get_actor(name, namespace=self.namespace)
        return brokers, consumers

    async def _ready(self, event: asyncio.Event) -> None:
        """Answer from rebuilt state (or from what there is after ``REBUILD_WAIT_S``)."""
        if not event.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), REBUILD_WAIT_S)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    # ------------------------------------------------------------ brokers

    async def register_broker(self, info: BrokerInfo) -> bool:
        if self._scan is None:
            self._scan = asyncio.create_task(self._scan_loop())
        self.seen_ms[info.broker_name, info.broker_id] = _now_ms()
        if info.broker_id != 0:  # a slave: known, never routed to for sends
            new = info.broker_id not in self.slaves.get(info.broker_name, {})
            self.slaves.setdefault(info.broker_name, {})[info.broker_id] = info
            if info.broker_name in self.lost:  # its master is lost: it serves the reads
                self._read_from_slave(info.broker_name)
            self._ensure_placement()
            return new
        if self.table.read_only.pop(info.broker_name, None) is not None:
            logger.warning("broker %s: its master is back; reads go to it again", info.broker_name)
        old = self.table.brokers.get(info.broker_name)
        changed = {
            t
            for t in set(info.topics) | set(old.topics if old else {})
            if (old.topics.get(t) if old else None) != info.topics.get(t)
        }
        new = self.table.register(info, _now_ms())
        self._routes_changed(changed)
        self.lost.pop(info.broker_name, None)
        watch = self._watches.get(info.broker_name)
        if watch is None or watch.done():
            self._watches[info.broker_name] = asyncio.create_task(self._watch(info.broker_name))
        return new

    async def _watch(self, broker_name: str) -> None:
        """Drop a broker as soon as Ray reports it dead; re-wire it when Ray restarts it."""
        try:
            handle = ray.get_actor(broker_actor_name(broker_name), namespace=self.namespace)
        except ValueError:
            return
        while True:
            try:
                await handle.park.remote()
            except Exception as exc:
                logger.warning(
                    "broker %s died (%s); dropping it until it is back",
                    broker_name,
                    type(exc).__name__,
                )
                self._remove_broker(broker_name)
                shut_down = isinstance(getattr(exc, "cause", None), ClosedError)  # on purpose
                if self.slaves.get(broker_name) and not shut_down:
                    self._spawn(self._failover(broker_name))
            try:  # restarted by Ray (max_restarts): wire it up again
                await asyncio.wait_for(handle.start_services.remote(), RESTART_WAIT_S)
            except Exception:
                return  # killed for good: a later registration starts a new watch

    async def _failover(self, name: str) -> None:
        """The master of ``name`` died: promote its slave furthest ahead (failover.py),
        at once if its node is dead, after RESTART_GRACE_S if Ray could restart it."""
        lost = self.lost.get(name)
        if lost is None or not lost.auto_failover:
            return
        if await node_alive(lost.node_id):
            deadline = asyncio.get_running_loop().time() + RESTART_GRACE_S
            while asyncio.get_running_loop().time() < deadline:
                if name in self.table.brokers:
                    return  # restarted by Ray where it was
                await asyncio.sleep(0.2)
        lock = self._failover_locks.setdefault(name, asyncio.Lock())
        async with lock:
            if name in self.table.brokers or name not in self.lost:
                return
            watch = self._watches.pop(name, None)
            if watch is not None:
                watch.cancel()
            try:
                promoted = await promote(name, lost, self.slaves.get(name, {}), self.namespace)
            except Exception:
                logger.exception("failover of %s failed", name)
                return
            if promoted is not None:
                self.slaves.get(name, {}).pop(promoted[0], None)
                await self.register_broker(promoted[1])
                self._ensure_placement()

    def _ensure_placement(self) -> None:
        if self._placement is None or self._placement.done():
            self._placement = asyncio.create_task(self._placement_loop())

    async def _placement_loop(self) -> None:
        """Bring lost replicas back as slaves when their node is up (failover.py)."""
        while True:
            await asyncio.sleep(PLACEMENT_INTERVAL_S)
            restartable = {
                n: info
                for n, info in self.lost.items()
                if not (info.auto_failover and self.slaves.get(n))
                and not self._failover_locks.get(n, _FREE).locked()
            }
            try:
                await place_replicas(
                    dict(self.table.brokers),
                    self.slaves,
                    self.namespace,
                    self._suspects,
                    restartable,
                )
            except Exception:
                logger.exception("placing replicas failed; trying again")

    async def _scan_loop(self) -> None:
        while True:
            await asyncio.sleep(SCAN_INTERVAL_MS / 1000)
            now = _now_ms()
            expired = [
                b for b, seen in self.table.last_seen_ms.items() if now - seen > BROKER_EXPIRY_MS
            ]
            for gone in expired:
                logger.warning("broker %s missed its heartbeats; dropping it", gone)
                self._remove_broker(gone)

    def _remove_broker(self, broker_name: str, *, lost: bool = True) -> None:
        """Drop a broker from the routes; a ``lost`` one (died or silent) is remembered,
        so reads of its topics report it unavailable rather than gone, or, if it has a
        slave, are served by the slave (read-only routes) until a master is back."""
        info = self.table.brokers.get(broker_name)
        self.table.remove(broker_name)
        if lost:
            self.lost[broker_name] = info or BrokerInfo(
                broker_name=broker_name, node_id="", store_dir="", topics={}
            )
            self._read_from_slave(broker_name)
            self._ensure_placement()  # brought back when its node is (failover.py)
        if info is not None:
            self._routes_changed(set(info.topics))

    def _read_from_slave(self, broker_name: str) -> None:
        """The master of ``broker_name`` is lost: its slave furthest ahead serves reads."""
        slaves = self.slaves.get(broker_name)
        if not slaves:
            return
        best = max(slaves.values(), key=lambda s: s.written_offset)
        old = self.table.read_only.get(broker_name)
        self.table.read_only[broker_name] = best
        if old is None or old.broker_id != best.broker_id:
            logger.warning(
                "broker %s: master lost; slave %d serves its reads", broker_name, best.broker_id
            )
            self._routes_changed(set(best.topics))

    async def read_replica(self, req: ReadReplicaRequest) -> ReadReplicaReply:
        """Which replica of a broker serves calls now (a client resolving its name)."""
        req = check(req, ReadReplicaRequest)
        await self._ready(self._routes_ready)
        return ReadReplicaReply(replica=self.table.replica(req.broker_name))

    async def unregister_broker(self, broker_name: str) -> None:
        self._remove_broker(broker_name, lost=False)

    # ------------------------------------------ the client protocol: routes
    # One typed method per operation (actors/protocol.py), each checking its request.

    async def route(self, req: RouteRequest) -> RouteReply:
        req = check(req, RouteRequest)
        await self._ready(self._routes_ready)
        return RouteReply(route=self.table.route(req.topic))

    async def routes(self, req: RoutesRequest) -> RoutesReply:
        req = check(req, RoutesRequest)
        await self._ready(self._routes_ready)
        return RoutesReply(routes={t: self.table.route(t) for t in req.topics})

    async def topics(self, req: ClientRequest) -> NamesReply:
        check(req, ClientRequest)
        await self._ready(self._routes_ready)
        return NamesReply(names=self.table.topics())

    async def brokers(self, req: ClientRequest) -> NamesReply:
        check(req, ClientRequest)
        await self._ready(self._routes_ready)
        return NamesReply(names=sorted(self.table.brokers))

    async def broker_table(self, req: ClientRequest) -> BrokerTableReply:
        """Every broker replica known: live masters, slaves and lost masters, each with
        its role, node and last heartbeat (``rayq cluster list``, ``Admin.health``)."""
        check(req, ClientRequest)
        await self._ready(self._routes_ready)
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

    # ----------------------------------------------- pull-consumer shares
    async def group_share(self, req: GroupShareRequest) -> ShareReply:
        """The caller's share of the topic's queues among the group's live members (by
        the request's strategy); members not heard from for ``expiry_ms`` no longer count."""
        req = check(req, GroupShareRequest)
        if not req.client_id:
            raise InvalidRequestError("group_share needs the caller's client_id")
        await self._ready(self._routes_ready)
        route = self.table.route(req.topic)
        if route is None:
            return ShareReply(queues=None)
        return ShareReply(queues=self.groups.share(req, route.read_queues(), _now_ms()))

    async def leave_shares(self, req: ClientRequest) -> Done:
        """A pull consumer shut down: its shares go to the other members at once."""
        req = check(req, ClientRequest)
        self.groups.leave(req.client_id)
        return Done()

    async def ready(self) -> bool:
        return True

    # ------------------------------------------------ push-consumer groups
    async def join_group(self, req: JoinGroupRequest) -> CountReply:
        """A push consumer joins (ConfigError if it subscribes unlike the group); the group
        is rebalanced before this returns. Its Consumer actor is found by name."""
        req = check(req, JoinGroupRequest)
        group, client_id = req.group, req.client_id
        try:
            handle = await asyncio.to_thread(
                ray.get_actor, consumer_actor_name(client_id), namespace=self.namespace
            )
        except ValueError:
            raise InvalidRequestError(
                f"no Consumer actor {consumer_actor_name(client_id)!r} in namespace "
                f"{self.namespace!r}: only a running push consumer can join a group"
            ) from None
        self.rebalancer.join(group, client_id, req.spec)
        key = (group, client_id)
        self._members[key] = handle
        watch = self._member_watches.get(key)
        if watch is None or watch.done():
            self._member_watches[key] = asyncio.create_task(self._watch_member(group, client_id))
        if self._safety is None:
            self._safety = asyncio.create_task(self._safety_loop())
        await self._rebalance(group)
        return CountReply(count=len(self.rebalancer.members(group)))

    async def leave_group(self, req: MemberRequest) -> Done:
        """A member leaves (shut down): its queues go to the others at once."""
        req = check(req, MemberRequest)
        group, client_id = req.group, req.client_id
        watch = self._member_watches.pop((group, client_id), None)
        if watch is not None:
            watch.cancel()
        existed = self._forget_member(group, client_id)
        if existed:
            await self._rebalance(group)
        return Done(existed=existed)

    async def member_alive(self, req: MemberRequest) -> Done:
        """``existed``: the caller is a member of the group now."""
        req = check(req, MemberRequest)
        await self._ready(self._groups_ready)
        return Done(existed=req.client_id in self.rebalancer.members(req.group))

    async def group_members(self, req: MemberRequest) -> MembersReply:
        """Each member of a push-consumer group and the queues it owns now."""
        req = check(req, MemberRequest)
        await self._ready(self._groups_ready)
        owned = self.rebalancer.owned(req.group)
        return MembersReply(
            members={
                m: sorted(owned.get(m, frozenset())) for m in self.rebalancer.members(req.group)
            }
        )

    def _forget_member(self, group: str, client_id: str) -> bool:
        self._members.pop((group, client_id), None)
        return self.rebalancer.leave(group, client_id)

    async def _watch_member(self, group: str, client_id: str) -> None:
        """Ray reports a consumer actor's death here: its queues move at once."""
        handle = self._members.get((group, client_id))
        if handle is None:
            return
        try:
            await handle.park.remote()
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.warning("consumer %s of group %s died; rebalancing", client_id, group)
        if self._forget_member(group, client_id):
            await self._rebalance(group)

    async def _safety_loop(self) -> None:
        while True:
            await asyncio.sleep(SAFETY_REBALANCE_MS / 1000)
            for group in self.rebalancer.groups():
                await self._rebalance(group)

    def _routes_changed(self, topics: set[str]) -> None:
        for group in self.rebalancer.groups_of_topics(topics) if topics else []:
            self._spawn(self._rebalance(group))

    async def _rebalance(self, group: str) -> None:
        """Rebalance ``group``; calls that arrive while one runs are folded into one rerun,
        and calls while the state is being rebuilt into one when it is."""
        self._dirty.add(group)
        if not self._groups_ready.is_set():
            return  # _rebuild rebalances every group when it is done
        lock = self._locks.setdefault(group, asyncio.Lock())
        if lock.locked():
            return
        async with lock:
            while group in self._dirty:
                self._dirty.discard(group)
                plan = self.rebalancer.plan(group, self._queues_of, _now_ms())
                if plan is not None:
                    await self._carry_out(plan)

    def _queues_of(self, topic: str) -> list[MessageQueue]:
        route = self.table.route(topic)
        return route.read_queues() if route is not None else []

    async def _carry_out(self, plan: Plan) -> None:
        """Step 1: owners release what they lose (acknowledged or dead). Step 2: assign."""
        group = plan.group
        metric("rayq_rebalances").inc(1, {"group": group})
        revokes = {m: qs for m, qs in plan.revoke.items() if qs}
        results = await self._call_members(group, "revoke", plan.generation, revokes)
        for member, qs in revokes.items():
            if isinstance(results[member], BaseException):
                logger.warning(
                    "group %s: %s did not release %d queues (%s); moving them anyway",
                    group,
                    member,
                    len(qs),
                    results[member],
                )
            self.rebalancer.released(group, member, qs)
        results = await self._call_members(group, "assign", plan.generation, plan.assign)
        for member, qs in plan.assign.items():
            if not isinstance(results[member], BaseException):
                self.rebalancer.assigned(group, member, qs)

    async def _call_members(
        self, group: str, method: str, generation: int, queues: dict[str, list[MessageQueue]]
    ) -> dict[str, Any]:
        async def one(member: str, qs: list[MessageQueue]) -> Any:
            handle = self._members.get((group, member))
            if handle is None:
                return KeyError(member)
            try:
                return await asyncio.wait_for(
                    getattr(handle, method).remote(generation, qs), MEMBER_CALL_TIMEOUT_S
                )
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                return exc

        members = list(queues)
        got = await asyncio.gather(*(one(m, queues[m]) for m in members))
        return dict(zip(members, got, strict=True))

    async def lost_brokers(self, req: LostBrokersRequest) -> NamesReply:
        """Brokers that died or went silent and are not back (holding ``topic``, if given):
        their queues are unavailable, not gone."""
        topic = check(req, LostBrokersRequest).topic
        await self._ready(self._routes_ready)
        return NamesReply(
            names=sorted(
                b
                for b, info in self.lost.items()
                if (topic is None or topic in info.topics or not info.topics)
                and b not in self.table.read_only
            )
        )

    # Streaming batches in flight (stream_plans.py), for rayq/streaming.py.
    async def stream_plan(self, req: StreamPlanRequest) -> StreamPlanReply:
        req = check(req, StreamPlanRequest)
        found = self.stream_plans.get(req.group, req.topic)
        if found is None:
            return StreamPlanReply()
        return StreamPlanReply(batch_id=found[0], ranges=list(found[1]))

    async def record_stream_plan(self, req: RecordStreamPlanRequest) -> StreamPlanReply:
        req = check(req, RecordStreamPlanRequest)
        batch_id = self.stream_plans.record(req.group, req.topic, req.ranges)
        return StreamPlanReply(batch_id=batch_id, ranges=req.ranges)

    async def finish_stream_plan(self, req: FinishStreamPlanRequest) -> Done:
        req = check(req, FinishStreamPlanRequest)
        return Done(existed=self.stream_plans.finish(req.group, req.topic, req.batch_id))


def _now_ms() -> int:
    return SYSTEM_CLOCK.now_ms()


async def _ask(handle: Any, method: str) -> Any:
    """One call to another actor while rebuilding, bounded by ``REBUILD_CALL_TIMEOUT_S``."""
    return await asyncio.wait_for(getattr(handle, method).remote(), REBUILD_CALL_TIMEOUT_S)


def spawn_coordinator(namespace: str, node_id: str | None = None) -> Any:
    """Start (or get) the coordinator; pinned to ``node_id`` (the head) when given."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from rayq.actors.protocol import COORDINATOR_NAME

    where = NodeAffinitySchedulingStrategy(node_id, soft=False) if node_id else "DEFAULT"
    return (
        ray.remote(CoordinatorActor)
        .options(
            name=COORDINATOR_NAME,
            namespace=namespace,
            get_if_exists=True,
            lifetime="detached",
            max_restarts=-1,
            num_cpus=0,
            max_concurrency=1000,
            scheduling_strategy=where,
        )
        .remote(namespace)
    )
