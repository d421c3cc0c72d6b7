"""Failover: promoting a slave when its master is lost, and bringing lost replicas back.

The coordinator runs this (RocketMQ 5's controller role). Clients never learn about
it: a broker's master always runs under the broker's own actor name
(``rayq-broker-<name>``, its flusher and hold service likewise), so a client whose
call to the old master failed looks the name up again and finds the new one.

**Promotion** (``promote``), when a master's actor is dead and its node is dead too
(at once), or its node is alive but Ray has not brought the actor back within
``RESTART_GRACE_S``, and ``auto_failover`` is on:

1. every live slave is asked how far it has the log and how far it was told the
   master's sends are acknowledged; among those whose log reaches the highest such
   offset (with the lost master's last heartbeat's), the one furthest ahead wins
   (actors/server/election.py). If none reaches it, nobody is promoted: the broker
   stays read-only rather than lose acknowledged messages, and the coordinator tries
   again when a slave that reaches it registers, or brings the old master back;
2. the old master's actors are killed for good (on a dead node they could only
   linger), the chosen slave closes its store cleanly and its actors end;
3. a new master (broker id 0, the old master's role) is started on the slave's node
   (the node that carries the slave's resource now, looked up again: a node that was
   removed and added back has a new id) over the slave's store, under the broker's
   name, in epoch = the highest epoch seen + 1, beginning at the slave's end of log
   (store/epochs.py);
4. other slaves fetch from the new master by name; their epoch is older, so the new
   master fences them (actors/server/replication.py).

**Restart** (``restart_master``): a lost master that is not replaced (no slave, none
eligible, failover off, or its node came back under a new id) is started again as
master over its store, on the node that carries its resource now.

The coordinator calls these for one broker name at a time (its lock): a failover, a
restart and a rejoin of the same broker never run at once, and a lost master is tried
again until one runs (actors/server/coordinator_service.py, ``_recover``).

**Rejoin** (``place_replicas``, on the coordinator's scan): a node whose resource
``rayq_broker:<name>`` or ``rayq_broker:<name>#<id>`` names a replica whose store is
not being served (the old master's node came back, or any lost replica's) gets that
replica back as a slave of the current master. Its store is where it was
(``<root>/<replica>``); its broker id is its own (``#<id>``), or for the original
master (no ``#``) the id that the promoted slave left free. The new master fences
it: a tail written after the last byte the new master had is cut (and kept).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from pathlib import Path
from typing import Any

import msgspec
import ray
from ray.actor import ActorHandle

from rayq.actors.broker_spawn import spawn_broker
from rayq.actors.flusher import spawn_flusher
from rayq.actors.handles import BrokerHandle, as_broker, within
from rayq.actors.protocol import BrokerInfo, broker_actor_name, replica_actor_names
from rayq.actors.protocol.config import REPLICA_SEPARATOR, BrokerConfig, BrokerRole, replica_name
from rayq.actors.pull_hold import spawn_hold
from rayq.actors.server.coordinator_service import RESTART_GRACE_S as RESTART_GRACE_S
from rayq.actors.server.election import elect
from rayq.store.errors import ConfigError

logger = logging.getLogger(__name__)

ASK_TIMEOUT_S = 3.0
NAME_FREE_TIMEOUT_S = 20.0
START_TIMEOUT_S = 120.0  # a replica's actors answer within this once started
BROKER_RESOURCE_PREFIX = "rayq_broker:"


class NodeGoneError(RuntimeError):
    """The node that carries a replica's resource is not up (any more)."""


async def node_alive(node_id: str) -> bool:
    nodes = await asyncio.to_thread(ray.nodes)
    return any(n.get("NodeID") == node_id and n.get("Alive") for n in nodes)


def current_node(nodes: list[dict[str, Any]], store_dir: str, fallback: str) -> str | None:
    """The node to start the replica over ``store_dir`` on, from ``ray.nodes()`` now:
    the live node carrying its resource (``rayq_broker:<store folder's name>``); None
    if only dead nodes carry it (removed, maybe to come back under another id);
    ``fallback`` if no node carries it (not placed by resource)."""
    replica = Path(store_dir).name
    live = replica_nodes(nodes).get(replica)
    if live is not None:
        return live
    resource = BROKER_RESOURCE_PREFIX + replica
    if any(resource in (n.get("Resources") or {}) for n in nodes):
        return None
    return fallback


async def store_node(store_dir: str) -> str | None:
    """The live node that carries the resource of the replica over ``store_dir``."""
    nodes = await asyncio.to_thread(ray.nodes)
    return replica_nodes(nodes).get(Path(store_dir).name)


async def _node_now(store_dir: str, fallback: str) -> str:
    node = current_node(await asyncio.to_thread(ray.nodes), store_dir, fallback)
    if node is None:
        raise NodeGoneError(f"no node carrying the resource of {store_dir!r} is up")
    return node


def _actor(name: str, namespace: str) -> ActorHandle | None:
    """The named actor's handle, if it is running (only killed or looked for)."""
    try:
        return ray.get_actor(name, namespace=namespace)
    except ValueError:
        return None


def _handle(name: str, namespace: str) -> BrokerHandle | None:
    """The named broker replica actor, typed for the calls made to it, if running."""
    found = _actor(name, namespace)
    return None if found is None else as_broker(found, name)


async def kill_replica(replica: str, namespace: str) -> None:
    """End a replica's broker, flusher and hold actors for good, and wait until their
    names are free (a new replica may take them)."""
    names = replica_actor_names(replica)
    for actor in names:
        handle = _actor(actor, namespace)
        if handle is not None:
            with contextlib.suppress(Exception):
                ray.kill(handle, no_restart=True)
    deadline = time.monotonic() + NAME_FREE_TIMEOUT_S
    while names and time.monotonic() < deadline:  # GCS frees a killed actor's name soon
        names = [n for n in names if _actor(n, namespace) is not None]
        await asyncio.sleep(0.05 if names else 0)


async def start_replica(
    config: BrokerConfig, store_dir: str, namespace: str, node_id: str, epoch: int = 0
) -> BrokerHandle:
    """A replica's three actors on ``node_id`` (flusher and hold first), registered.
    Raises if they do not start (Ray: unschedulable if that node is gone); the caller
    tries again, killing what was started."""
    replica = config.replica_name
    flusher = spawn_flusher(store_dir, config.store_config, replica, namespace, node_id)
    hold = spawn_hold(config, namespace, node_id)
    await within(asyncio.gather(flusher.ready.remote(), hold.ready.remote()), START_TIMEOUT_S)
    broker = as_broker(
        spawn_broker(config, store_dir, namespace, node_id, epoch),
        broker_actor_name(config.replica_name),
    )
    await within(broker.start_services.remote(), START_TIMEOUT_S)
    return broker


def _with(config: BrokerConfig, **changes: Any) -> BrokerConfig:
    values = msgspec.to_builtins(config)
    values.update({k: (v.value if isinstance(v, BrokerRole) else v) for k, v in changes.items()})
    return BrokerConfig.from_dict(values)


async def promote(
    name: str, lost: BrokerInfo, slaves: dict[int, BrokerInfo], namespace: str
) -> tuple[int, BrokerInfo] | None:
    """Make the live slave furthest ahead among those that hold every acknowledged
    message (actors/server/election.py) the master of ``name``: its former broker id and
    new info, or None if there is no such slave (logged; the broker stays read-only)."""
    answers: dict[int, BrokerInfo] = {}
    handles: dict[int, BrokerHandle] = {}
    epochs = [lost.epoch]
    for broker_id in sorted(slaves):
        handle = _handle(broker_actor_name(replica_name(name, broker_id)), namespace)
        if handle is None:
            continue
        try:
            info = await within(handle.broker_info.remote(), ASK_TIMEOUT_S)
        except Exception:  # lost too
            continue
        answers[broker_id], handles[broker_id] = info, handle
        epochs.append(info.epoch)
    k = 1
    for handle in handles.values():
        with contextlib.suppress(Exception):
            k = (await within(handle.broker_config.remote(), ASK_TIMEOUT_S)).min_in_sync_replicas
            break
    choice = elect(lost, answers, len(slaves), k)
    if choice.chosen is None:
        logger.error(
            "failover of %s: %s; not promoting: it stays read-only (no sends) until its "
            "master or a slave with the log up to %d is back",
            name,
            choice.reason,
            choice.acked_offset,
        )
        return None
    broker_id = choice.chosen
    handle, info = handles[broker_id], answers[broker_id]
    written = info.written_offset
    if lost.role == BrokerRole.SYNC_MASTER.value and not choice.proven:
        logger.warning("failover of %s: %s", name, choice.reason)
    config = await within(handle.broker_config.remote(), ASK_TIMEOUT_S)
    store_dir = info.store_dir
    node_id = await _node_now(store_dir, info.node_id)  # before anything is killed
    epoch = max(epochs) + 1
    logger.warning(
        "failover of %s: promoting slave %d (log up to %d, sends acknowledged up to %d) "
        "to master in epoch %d",
        name,
        broker_id,
        written,
        choice.acked_offset,
        epoch,
    )
    await kill_replica(name, namespace)
    with contextlib.suppress(Exception):  # closes its store cleanly, then ends
        await asyncio.wait_for(handle.shutdown.remote(), 30)
    await kill_replica(replica_name(name, broker_id), namespace)
    role = (
        BrokerRole(lost.role) if lost.role != BrokerRole.SLAVE.value else (BrokerRole.ASYNC_MASTER)
    )
    master_config = _with(config, broker_id=0, broker_role=role)
    broker = await start_replica(master_config, store_dir, namespace, node_id, epoch)
    return broker_id, await within(broker.broker_info.remote(), 30.0)


def replica_nodes(nodes: list[dict[str, Any]], *, unique: bool = False) -> dict[str, str]:
    """Replica name -> node id for every live node with a ``rayq_broker:`` resource;
    ``unique``: ConfigError if two nodes carry the same one (refused at start)."""
    found: dict[str, str] = {}
    for node in nodes:
        if node.get("Alive"):
            for resource in node.get("Resources", {}):
                if resource.startswith(BROKER_RESOURCE_PREFIX):
                    name = resource[len(BROKER_RESOURCE_PREFIX) :]
                    if unique and name in found:
                        raise ConfigError(
                            f"two nodes carry resource {resource!r}; broker names must be unique"
                        )
                    found[name] = node["NodeID"]
    return found


async def place_replicas(
    masters: dict[str, BrokerInfo],
    slaves: dict[str, dict[int, BrokerInfo]],
    namespace: str,
    suspects: set[str],
) -> list[str]:
    """Start, as slaves of ``masters``, the replicas whose node is up but whose store
    nobody serves; the replicas started. A replica whose actor exists but does not
    answer is restarted only when it did not answer at the previous scan either
    (``suspects``): one that is still starting is left alone. (Lost masters are
    brought back by the coordinator's recovery: ``restart_master``, ``promote``.)"""
    nodes = replica_nodes(await asyncio.to_thread(ray.nodes))
    started = []
    for replica, node_id in sorted(nodes.items()):
        name, sep, raw = replica.partition(REPLICA_SEPARATOR)
        master = masters.get(name)
        if master is None or not master.store_dir:
            continue
        root = Path(master.store_dir).parent
        store_dir = str(root / replica)
        if store_dir == master.store_dir:
            continue  # it is the master
        served = [i for i, s in slaves.get(name, {}).items() if s.store_dir == store_dir]
        if served and await _answers(replica_name(name, served[0]), namespace):
            continue
        own = int(raw) if sep and raw.isdigit() else 0
        master_home = Path(master.store_dir).name.partition(REPLICA_SEPARATOR)[2]
        broker_id = own or (int(master_home) if master_home.isdigit() else 0)
        if broker_id <= 0:
            continue
        slave = replica_name(name, broker_id)
        if _actor(broker_actor_name(slave), namespace) is not None:
            if await _answers(slave, namespace):
                suspects.discard(slave)
                continue  # a live slave (still registering, or serving another store)
            if slave not in suspects:
                suspects.add(slave)
                continue  # maybe still starting: look again at the next scan
        suspects.discard(slave)
        handle = _handle(broker_actor_name(name), namespace)
        if handle is None:
            continue
        try:
            config = await within(handle.broker_config.remote(), ASK_TIMEOUT_S)
        except Exception:
            continue
        logger.warning(
            "replica %s of %s is back on node %s: rejoining as slave %d",
            replica,
            name,
            node_id,
            broker_id,
        )
        await kill_replica(replica_name(name, broker_id), namespace)
        slave_config = _with(config, broker_id=broker_id, broker_role=BrokerRole.SLAVE)
        node_id = await _node_now(store_dir, node_id)  # it may have gone meanwhile
        await start_replica(slave_config, store_dir, namespace, node_id)
        started.append(replica)
    return started


async def restart_master(
    name: str,
    lost: BrokerInfo,
    slaves: dict[int, BrokerInfo],
    namespace: str,
    known: BrokerConfig | None = None,
) -> BrokerInfo | None:
    """Nobody took the lost master's place: start it again over its store, on the node
    that carries the store's resource now, with its settings: ``known`` (the
    coordinator's copy of the master's), else a live slave's, else the defaults with its
    role (logged). Its new info; None if that node is not up."""
    node_id = await store_node(lost.store_dir)
    if node_id is None:
        return None
    found = known
    for broker_id in sorted(slaves) if found is None else []:
        handle = _handle(broker_actor_name(replica_name(name, broker_id)), namespace)
        if handle is not None:
            with contextlib.suppress(Exception):
                found = await within(handle.broker_config.remote(), ASK_TIMEOUT_S)
                break
    if found is None:
        logger.warning("master %s: its settings are not known; restarting it with defaults", name)
        found = BrokerConfig(broker_name=name)
    config = _with(found, broker_id=0, broker_role=BrokerRole(lost.role))
    logger.warning("master %s: its node is up; starting it again on node %s", name, node_id)
    await kill_replica(name, namespace)
    broker = await start_replica(config, lost.store_dir, namespace, node_id)
    return await within(broker.broker_info.remote(), 30.0)


async def _answers(replica: str, namespace: str) -> bool:
    handle = _handle(broker_actor_name(replica), namespace)
    if handle is None:
        return False
    try:
        await within(handle.ready.remote(), ASK_TIMEOUT_S)
        return True
    except Exception:
        return False
