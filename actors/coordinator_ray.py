"""``CoordinatorPeers`` over Ray: what the coordinator service asks of other actors.

The coordinator keeps a never-returning call (``park``) open on each broker and each
group member's Consumer actor, so Ray tells it of a death at once; a broker restarted
by Ray (max_restarts) is wired up again (``start_services``). Members are called with
``assign``/``revoke``; failover and replica placement are actors/failover.py's.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
from typing import Any

import msgspec
import ray
from ray.experimental import internal_kv

from rayq.actors import failover
from rayq.actors.handles import BrokerHandle, ConsumerHandle, as_broker, as_consumer, within
from rayq.actors.metrics import metric
from rayq.actors.protocol import (
    BROKER_ACTOR_PREFIX,
    CONSUMER_ACTOR_PREFIX,
    BrokerInfo,
    MessageQueue,
    broker_actor_name,
    consumer_actor_name,
    hold_actor_name,
)
from rayq.actors.protocol.config import BrokerConfig
from rayq.actors.protocol.frames import DataEndpoint, DataEndpointRequest
from rayq.actors.server.coordinator_peers import BrokerDied, MemberGone
from rayq.actors.server.coordinator_service import CoordinatorService
from rayq.actors.server.gateway import Gateway
from rayq.store.errors import BrokerUnavailableError, ClosedError, InvalidRequestError

logger = logging.getLogger(__name__)

RESTART_WAIT_S = 60.0
CONFIG_ASK_S = 10.0  # a watched master asked for its settings
KV_NAMESPACE = "rayq"  # the namespace of rayq's keys in Ray's GCS key-value store
_ENCODER = msgspec.msgpack.Encoder()
ENDPOINT_ASK_S = 10.0  # a replica asked where it listens (the bootstrap endpoint)
REBUILD_CALL_TIMEOUT_S = 5.0  # a broker or consumer asked after a restart; slower: heartbeats


class RayPeers:
    """The named actors of one namespace, found, watched and called through Ray."""

    def __init__(self, namespace: str, deployment: str = "") -> None:
        self.namespace = namespace
        # Ray's GCS key-value store outlives the coordinator's restarts: each master's
        # last info and settings there, under this deployment's name (its server key's
        # fingerprint), so a later ``rayq.start`` in the namespace finds none of them
        self.kv_root = f"{namespace}/{deployment}/"
        self.kv_prefix = f"{self.kv_root}master/"
        self.members: dict[tuple[str, str], ConsumerHandle] = {}
        self.member_watches: dict[tuple[str, str], asyncio.Task[None]] = {}
        self.broker_watches: dict[str, asyncio.Task[None]] = {}
        # each master's settings, asked when its watch begins: a master restarted with no
        # slave to ask gets its own settings back, not the defaults (another segment size
        # than its files have would keep it from opening its store)
        self.configs: dict[str, BrokerConfig] = {}

    # ------------------------------------------------------------ members
    async def attach_member(self, group: str, client_id: str, gone: MemberGone) -> None:
        name = consumer_actor_name(client_id)
        try:
            found = await asyncio.to_thread(ray.get_actor, name, namespace=self.namespace)
        except ValueError:
            raise InvalidRequestError(
                f"no Consumer actor {name!r} in namespace {self.namespace!r}: "
                "only a running push consumer can join a group"
            ) from None
        key = (group, client_id)
        self.members[key] = as_consumer(found)
        watch = self.member_watches.get(key)
        if watch is None or watch.done():
            self.member_watches[key] = asyncio.create_task(self._watch_member(key, gone))

    async def _watch_member(self, key: tuple[str, str], gone: MemberGone) -> None:
        """Ray reports a Consumer actor's death here; ``gone`` moves its queues."""
        handle = self.members.get(key)
        if handle is None:
            return
        with contextlib.suppress(Exception):  # died (a cancel passes: it left)
            await handle.park.remote()
        self.member_watches.pop(key, None)
        await gone()

    def detach_member(self, group: str, client_id: str) -> None:
        key = (group, client_id)
        self.members.pop(key, None)
        watch = self.member_watches.pop(key, None)
        if watch is not None and watch is not asyncio.current_task():
            watch.cancel()

    async def assign(
        self, group: str, client_id: str, generation: int, queues: list[MessageQueue]
    ) -> None:
        await self._member(group, client_id).assign.remote(generation, queues)

    async def revoke(
        self, group: str, client_id: str, generation: int, queues: list[MessageQueue]
    ) -> None:
        await self._member(group, client_id).revoke.remote(generation, queues)

    def _member(self, group: str, client_id: str) -> ConsumerHandle:
        handle = self.members.get((group, client_id))
        if handle is None:
            raise KeyError(client_id)
        return handle

    def rebalanced(self, group: str) -> None:
        metric("rayq_rebalances").inc(1, {"group": group})

    # ------------------------------------------------------------ brokers
    def watch_broker(self, broker_name: str, died: BrokerDied) -> None:
        watch = self.broker_watches.get(broker_name)
        if watch is None or watch.done():
            self.broker_watches[broker_name] = asyncio.create_task(
                self._watch_broker(broker_name, died)
            )

    def unwatch_broker(self, broker_name: str) -> None:
        watch = self.broker_watches.pop(broker_name, None)
        if watch is not None:
            watch.cancel()

    async def _watch_broker(self, broker_name: str, died: BrokerDied) -> None:
        """Report a broker's death at once; re-wire it when Ray restarts it."""
        name = broker_actor_name(broker_name)
        try:
            handle = as_broker(ray.get_actor(name, self.namespace), name)
        except ValueError:
            return
        with contextlib.suppress(Exception):  # asked again at its next watch
            config = await within(handle.broker_config.remote(), CONFIG_ASK_S)
            self.configs[broker_name] = config
            await asyncio.to_thread(self._put, broker_name, "config", _ENCODER.encode(config))
        while True:
            try:
                await handle.park.remote()
            except Exception as exc:
                logger.warning(
                    "broker %s died (%s); dropping it until it is back",
                    broker_name,
                    type(exc).__name__,
                )
                died(broker_name, isinstance(getattr(exc, "cause", None), ClosedError))
            try:  # restarted by Ray (max_restarts): wire it up again
                await asyncio.wait_for(handle.start_services.remote(), RESTART_WAIT_S)
            except Exception:
                return  # killed for good: a later registration starts a new watch

    # ------------------------------------------------------------ replicas
    async def node_alive(self, node_id: str) -> bool:
        return await failover.node_alive(node_id)

    async def store_node(self, store_dir: str) -> str | None:
        return await failover.store_node(store_dir)

    async def promote(
        self, name: str, lost: BrokerInfo, slaves: dict[int, BrokerInfo]
    ) -> tuple[int, BrokerInfo] | None:
        return await failover.promote(name, lost, slaves, self.namespace)

    async def restart_master(
        self, name: str, lost: BrokerInfo, slaves: dict[int, BrokerInfo]
    ) -> BrokerInfo | None:
        known = self.configs.get(name)
        if known is None:  # this coordinator restarted since it watched the master
            raw = await asyncio.to_thread(self._get, name, "config")
            with contextlib.suppress(Exception):
                known = msgspec.msgpack.decode(raw, type=BrokerConfig) if raw else None
        return await failover.restart_master(name, lost, slaves, self.namespace, known)

    # ------------------------------------------------------------ memory
    def remember(self, info: BrokerInfo) -> None:
        self._put(info.broker_name, "info", _ENCODER.encode(info))

    def forget(self, broker_name: str) -> None:
        with contextlib.suppress(Exception):
            internal_kv._internal_kv_del(
                self.kv_prefix + broker_name + "/", del_by_prefix=True, namespace=KV_NAMESPACE
            )

    async def remembered(self) -> dict[str, BrokerInfo]:
        def read() -> dict[str, BrokerInfo]:
            found = {}
            keys = internal_kv._internal_kv_list(self.kv_prefix, namespace=KV_NAMESPACE)
            for key in keys:
                name, _, part = key.decode()[len(self.kv_prefix) :].partition("/")
                raw = self._get(name, "info") if part == "info" else None
                with contextlib.suppress(Exception):
                    if raw:
                        found[name] = msgspec.msgpack.decode(raw, type=BrokerInfo)
            return found

        try:
            return await asyncio.to_thread(read)
        except Exception:
            logger.exception("coordinator: the remembered masters could not be read")
            return {}

    def _put(self, broker_name: str, part: str, value: bytes) -> None:
        try:
            key = f"{self.kv_prefix}{broker_name}/{part}"
            internal_kv._internal_kv_put(key, value, namespace=KV_NAMESPACE)
        except Exception:  # remembered at its next change
            logger.warning("coordinator: could not remember broker %s", broker_name)

    def _get(self, broker_name: str, part: str) -> bytes | None:
        try:
            key = f"{self.kv_prefix}{broker_name}/{part}"
            value: bytes | None = internal_kv._internal_kv_get(key, namespace=KV_NAMESPACE)
            return value
        except Exception:
            return None

    async def place_replicas(
        self,
        masters: dict[str, BrokerInfo],
        slaves: dict[str, dict[int, BrokerInfo]],
        suspects: set[str],
    ) -> None:
        await failover.place_replicas(masters, slaves, self.namespace, suspects)

    # ------------------------------------------------------------ bootstrap
    async def data_endpoint(self, replica: str, service: str) -> DataEndpoint:
        """Where ``replica``'s ``service`` (broker or hold) listens, asked of its actor:
        for the bootstrap endpoint's clients (actors/server/gateway.py)."""
        name = broker_actor_name(replica) if service == "broker" else hold_actor_name(replica)
        try:
            handle = await asyncio.to_thread(ray.get_actor, name, namespace=self.namespace)
            ref: Any = handle.data_endpoint.remote(DataEndpointRequest())
            endpoint: DataEndpoint = await asyncio.wait_for(ref, ENDPOINT_ASK_S)
            return endpoint
        except ValueError:
            raise BrokerUnavailableError(
                f"no {service} {replica!r} runs in this deployment", broker=replica
            ) from None
        except (TimeoutError, ray.exceptions.RayError) as exc:
            raise BrokerUnavailableError(
                f"the {service} {replica!r} did not say where it listens: {type(exc).__name__}",
                broker=replica,
            ) from None

    def bootstrap_port(self, configured: int) -> int:
        """The port the bootstrap endpoint listened on before a restart, else
        ``configured``."""
        with contextlib.suppress(Exception):
            raw = internal_kv._internal_kv_get(self.kv_root + "bootstrap", namespace=KV_NAMESPACE)
            if raw:
                return int(raw)
        return configured

    def remember_bootstrap_port(self, port: int) -> None:
        with contextlib.suppress(Exception):
            internal_kv._internal_kv_put(
                self.kv_root + "bootstrap", str(port).encode(), namespace=KV_NAMESPACE
            )

    # ------------------------------------------------------------ discovery
    async def broker_infos(self) -> dict[str, BrokerInfo | BaseException]:
        brokers, _ = await asyncio.to_thread(named_actors, self.namespace)
        infos = await asyncio.gather(
            *(within(h.broker_info.remote(), REBUILD_CALL_TIMEOUT_S) for h in brokers.values()),
            return_exceptions=True,
        )
        return dict(zip(brokers, infos, strict=True))

    async def rejoin_consumers(self) -> dict[str, BaseException | None]:
        _, consumers = await asyncio.to_thread(named_actors, self.namespace)
        answers = await asyncio.gather(
            *(within(h.rejoin.remote(), REBUILD_CALL_TIMEOUT_S) for h in consumers.values()),
            return_exceptions=True,
        )
        return {
            name: a if isinstance(a, BaseException) else None
            for name, a in zip(consumers, answers, strict=True)
        }


class GatewayRunner:
    """The bootstrap endpoint as the coordinator actor runs it: it starts listening in
    the background of the actor's event loop; ``url`` waits for that."""

    def __init__(self, gateway: Gateway, started: concurrent.futures.Future[None]) -> None:
        self.gateway = gateway
        self.started = started

    async def url(self) -> str:
        await asyncio.wrap_future(self.started)  # thread-safe: any of Ray's event loops
        return self.gateway.url


def serve_gateway(
    service: CoordinatorService, peers: RayPeers, access_key: bytes, config: BrokerConfig
) -> GatewayRunner | None:
    """Start the bootstrap endpoint (None without a key): on ``bootstrap_host`` (this
    node's address when empty) and the port it had before a restart of the
    coordinator, else ``bootstrap_port``."""
    if not access_key:
        return None
    gateway = Gateway(service, peers.data_endpoint, access_key)
    host = config.bootstrap_host or ray.util.get_node_ip_address()

    async def listen() -> None:
        await gateway.start(host, peers.bootstrap_port(config.bootstrap_port))
        peers.remember_bootstrap_port(gateway.server.port)

    started: concurrent.futures.Future[None] = concurrent.futures.Future()

    def settle(task: asyncio.Task[None]) -> None:
        if task.cancelled():
            started.cancel()
        elif (exc := task.exception()) is not None:
            logger.error("coordinator: the bootstrap endpoint could not listen: %s", exc)
            started.set_exception(exc)
        else:
            started.set_result(None)

    asyncio.get_running_loop().create_task(listen()).add_done_callback(settle)
    return GatewayRunner(gateway, started)


def named_actors(namespace: str) -> tuple[dict[str, BrokerHandle], dict[str, ConsumerHandle]]:
    """Handles of the broker and push-consumer actors of ``namespace``, by name."""
    brokers: dict[str, BrokerHandle] = {}
    consumers: dict[str, ConsumerHandle] = {}
    for entry in ray.util.list_named_actors(all_namespaces=True):
        name = entry["name"]
        if entry["namespace"] != namespace:
            continue
        with contextlib.suppress(ValueError):  # gone since it was listed
            if name.startswith(BROKER_ACTOR_PREFIX):
                brokers[name] = as_broker(ray.get_actor(name, namespace=namespace), name)
            elif name.startswith(CONSUMER_ACTOR_PREFIX):
                consumers[name] = as_consumer(ray.get_actor(name, namespace=namespace))
    return brokers, consumers
