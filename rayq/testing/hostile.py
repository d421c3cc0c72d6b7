"""A hostile driver's attacks on a live rayq deployment (issue 27), for tests and soaks.

Each attack is what a driver in the same Ray cluster, without the deployment's server
key and without ACL credentials, can try through the actors' methods; each must be
refused and change nothing. A nemesis soak's "hostile client" calls them at random
against a running deployment; a checker compares ``snapshot`` before and after::

    import random
    from rayq.testing import hostile

    before = hostile.snapshot(namespace, topics=["orders"], groups=["billing"])
    for _ in range(10):
        seen = hostile.random_attack(namespace, random.Random(), topic="orders", group="billing")
        assert seen.refused, seen          # an Observation: attack, refused, error
    assert hostile.changed(before, hostile.snapshot(namespace, ["orders"], ["billing"])) == []

Interface: ``ATTACKS`` (name -> function), each ``attack(namespace, topic, group)`` ->
``Observation`` (those in ``ACL_ONLY`` are refused only by a deployment with ACL on,
the others whether ACL is on or off); ``random_attack``; ``snapshot(namespace, topics,
groups, config=None)`` -> ``Snapshot`` (routes, brokers, queue ends, committed
offsets, every actor alive; ``config``: a ClientConfig with admin credentials when ACL
is on); ``changed(before, after)`` -> what differs (the queue ends may only grow
where the soak itself sends: pass ``grown_ok=True``). Needs Ray initialized in the
namespace's cluster. Not part of the public API.
"""

from __future__ import annotations

import dataclasses
import random
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from rayq.actors.protocol import (
    COORDINATOR_NAME,
    BrokerInfo,
    ClientRequest,
    HaFetch,
    MemberRequest,
    MetadataRequest,
    QueryOffsetsRequest,
    QueueData,
    RouteRequest,
    TopicRequest,
    broker_actor_name,
    flusher_actor_name,
)
from rayq.actors.protocol.config import REPLICA_SEPARATOR, ClientConfig
from rayq.store import InnerMessage, UniqIdGenerator
from rayq.store import properties as P
from rayq.store.batch import RequestAuth, encode_batch
from rayq.store.errors import BrokerUnavailableError, PermissionDeniedError, RayqError

CALL_TIMEOUT_S = 30.0


@dataclasses.dataclass(frozen=True)
class Observation:
    """What one attack saw: ``refused`` with a rayq error (as it must be), else what
    the call answered (``error`` is then "")."""

    attack: str
    refused: bool
    error: str = ""
    answer: str = ""


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """What the attacks must not change, as a client and Ray see it."""

    brokers: tuple[str, ...]
    routes: dict[str, str]  # topic -> repr of its route
    queue_ends: dict[tuple[str, str, int], int]  # (broker, topic, queue) -> max offset
    offsets: dict[tuple[str, str, str], dict[int, int]]  # (broker, group, topic) -> offsets
    actors: tuple[str, ...]  # the rayq server actors running


def _call(name: str, ref: Any) -> Observation:
    import ray

    try:
        answer = ray.get(ref, timeout=CALL_TIMEOUT_S)
    except ray.exceptions.RayTaskError as exc:
        cause = exc.cause if isinstance(exc.cause, BaseException) else exc
        if isinstance(cause, ray.exceptions.RayError) and not isinstance(
            cause, ray.exceptions.RayTaskError
        ):
            raise cause from None  # the target was not reached (its node is gone, ...)
        if isinstance(cause, RayqError):
            return Observation(name, True, f"{type(cause).__name__}: {cause}")
        where = re.findall(r'File "([^"]+)", line (\d+)', str(exc))
        at = f" at {Path(where[-1][0]).name}:{where[-1][1]}" if where else ""
        return Observation(name, False, f"{type(cause).__name__}{at}: {cause}")
    except RayqError as exc:
        return Observation(name, True, f"{type(exc).__name__}: {exc}")
    return Observation(name, False, answer=repr(answer)[:200])


def _actor(namespace: str, name: str) -> Any:
    import ray

    return ray.get_actor(name, namespace=namespace)


def _master(namespace: str, topic: str) -> str:
    """The replica serving the first broker routed for ``topic`` (else the first
    broker): its master, or the slave serving it while the master is lost."""
    from rayq.transport.ray_actors import RayTransport

    transport = RayTransport(namespace)
    coordinator = transport.coordinator()
    try:
        route = coordinator.route(RouteRequest(topic=topic)).result(CALL_TIMEOUT_S).route
        if route is not None and route.queues:
            first = sorted(q.broker_name for q in route.queues)[0]
            return transport.serving_replica(first)
        names = coordinator.brokers(ClientRequest()).result(CALL_TIMEOUT_S).names
    except PermissionDeniedError:  # ACL on: no routes without credentials; Ray lists actors
        from rayq.cluster import running_actors

        prefix = broker_actor_name("")
        masters = [
            a[len(prefix) :]
            for a in running_actors(namespace)
            if a.startswith(prefix) and REPLICA_SEPARATOR not in a
        ]
        names = sorted(masters)
    if not names:  # nothing to attack: the attack is not made (a fault took every broker)
        raise BrokerUnavailableError("no broker is running: the attack was not made")
    return names[0]


# ------------------------------------------------------------------ the attacks
def ha_metadata_offsets(namespace: str, topic: str, group: str) -> Observation:
    """A slave's metadata sync that moves ``group``'s offsets far ahead."""
    broker = _actor(namespace, broker_actor_name(_master(namespace, topic)))
    req = MetadataRequest(broker_id=1, offsets={f"{topic}@{group}": {0: 10**6}})
    return _call("ha_metadata_offsets", broker.ha_metadata.remote(req))


def ha_fetch_log(namespace: str, topic: str, group: str) -> Observation:
    """A slave's fetch of the whole commit log."""
    broker = _actor(namespace, broker_actor_name(_master(namespace, topic)))
    req = HaFetch(broker_id=1, offset=0, epoch=0, max_bytes=1 << 20)
    return _call("ha_fetch_log", broker.ha_fetch.remote(req))


def shutdown_broker(namespace: str, topic: str, group: str) -> Observation:
    """The broker's ``shutdown`` (it would end for good)."""
    broker = _actor(namespace, broker_actor_name(_master(namespace, topic)))
    return _call("shutdown_broker", broker.shutdown.remote())


def flusher_sync_past_end(namespace: str, topic: str, group: str) -> Observation:
    """A SYNC_FLUSH wait for an offset past the log's end (the flusher would spin)."""
    flusher = _actor(namespace, flusher_actor_name(_master(namespace, topic)))
    return _call("flusher_sync_past_end", flusher.sync.remote(10**15))


def unregister_broker(namespace: str, topic: str, group: str) -> Observation:
    """The coordinator's ``unregister_broker`` (sends stopped until the next heartbeat)."""
    coordinator = _actor(namespace, COORDINATOR_NAME)
    return _call(
        "unregister_broker", coordinator.unregister_broker.remote(_master(namespace, topic))
    )


def register_fake_broker(namespace: str, topic: str, group: str) -> Observation:
    """A fake broker in ``topic``'s route."""
    coordinator = _actor(namespace, COORDINATOR_NAME)
    queues = QueueData(broker_name="hostile", read_queue_nums=8, write_queue_nums=8, perm=6)
    info = BrokerInfo(broker_name="hostile", node_id="", store_dir="", topics={topic: queues})
    return _call("register_fake_broker", coordinator.register_broker.remote(info))


def coordinator_route(namespace: str, topic: str, group: str) -> Observation:
    """The coordinator's ``route`` of ``topic``, unsigned (ACL on: refused)."""
    coordinator = _actor(namespace, COORDINATOR_NAME)
    return _call("coordinator_route", coordinator.route.remote(RouteRequest(topic=topic)))


def coordinator_leave_group(namespace: str, topic: str, group: str) -> Observation:
    """A push consumer's ``leave_group`` on behalf of another member, unsigned (its queues
    would move to the others)."""
    coordinator = _actor(namespace, COORDINATOR_NAME)
    req = MemberRequest(group=group, client_id="victim")
    return _call("coordinator_leave_group", coordinator.leave_group.remote(req))


def whitelisted_delete_topic(namespace: str, topic: str, group: str) -> Observation:
    """A ``delete_topic`` declaring a (maybe whitelisted) host's address, unsigned."""
    broker = _actor(namespace, broker_actor_name(_master(namespace, topic)))
    req = TopicRequest(topic=topic, auth=RequestAuth(address="127.0.0.1"))
    return _call("whitelisted_delete_topic", broker.delete_topic.remote(req))


def _raw_put(
    namespace: str, topic: str, name: str, props: dict[str, str], ids: bool
) -> Observation:
    broker = _actor(namespace, broker_actor_name(_master(namespace, topic)))
    gen = UniqIdGenerator()
    msgs = [
        InnerMessage(
            topic=topic, queue_id=0, body=b"hostile", uniq_key=gen.next_id(), properties=props
        )
        for _ in range(2)
    ]
    batch = encode_batch(msgs, max_body_bytes=1 << 20, max_properties_bytes=32767)
    if ids:
        batch = msgspec.structs.replace(batch, msg_ids=list(reversed(batch.msg_ids)))
    return _call(name, broker.put.remote(batch))


def reserved_property_put(namespace: str, topic: str, group: str) -> Observation:
    """A raw put forging a retry's origin (RETRY_TOPIC, ORIGIN_MESSAGE_ID)."""
    props = {P.RETRY_TOPIC: "forged", P.ORIGIN_MESSAGE_ID: "0" * 32}
    return _raw_put(namespace, topic, "reserved_property_put", props, ids=False)


def mismatched_msg_ids_put(namespace: str, topic: str, group: str) -> Observation:
    """A raw put whose msg_ids name other records than its own."""
    return _raw_put(namespace, topic, "mismatched_msg_ids_put", {}, ids=True)


Attack = Callable[[str, str, str], Observation]
ATTACKS: dict[str, Attack] = {
    f.__name__: f
    for f in (
        ha_metadata_offsets,
        ha_fetch_log,
        shutdown_broker,
        flusher_sync_past_end,
        unregister_broker,
        register_fake_broker,
        coordinator_route,
        coordinator_leave_group,
        whitelisted_delete_topic,
        reserved_property_put,
        mismatched_msg_ids_put,
    )
}
# Client operations any client may call with ACL off: refused only with ACL on.
ACL_ONLY: frozenset[str] = frozenset(
    {"whitelisted_delete_topic", "coordinator_route", "coordinator_leave_group"}
)


def random_attack(namespace: str, rng: random.Random, topic: str, group: str) -> Observation:
    """One of ``ATTACKS``, chosen with ``rng``."""
    return ATTACKS[rng.choice(sorted(ATTACKS))](namespace, topic, group)


# ------------------------------------------------------------------ the checker
def snapshot(
    namespace: str, topics: list[str], groups: list[str], config: ClientConfig | None = None
) -> Snapshot:
    """What a client sees of ``topics`` and ``groups`` now, and the actors running."""
    from rayq.actors.protocol import MaxOffsetRequest
    from rayq.cluster import running_actors
    from rayq.transport.context import ClientContext

    ctx = ClientContext(config, namespace=namespace)
    brokers = tuple(sorted(ctx.brokers()))
    routes, ends, offsets = {}, {}, {}
    for topic in topics:
        route = ctx.route(topic, refresh=True)
        routes[topic] = repr(route)
        for mq in route.read_queues() if route is not None else []:
            req = MaxOffsetRequest(topic=topic, queue_id=mq.queue_id)
            got = ctx.broker(mq.broker_name).max_offset(req).result(CALL_TIMEOUT_S)
            ends[(mq.broker_name, topic, mq.queue_id)] = got.offset
        for group in groups:
            for broker in brokers:
                q = QueryOffsetsRequest(group=group, topic=topic)
                found = ctx.broker(broker).query_offsets(q).result(CALL_TIMEOUT_S)
                offsets[(broker, group, topic)] = dict(found.offsets)
    return Snapshot(brokers, routes, ends, offsets, tuple(running_actors(namespace)))


def changed(before: Snapshot, after: Snapshot, *, grown_ok: bool = False) -> list[str]:
    """What differs between two snapshots (empty: nothing changed). ``grown_ok``: queue
    ends may have grown (the soak's own sends), never shrunk."""
    out = []
    for field in ("brokers", "routes", "offsets", "actors"):
        if getattr(before, field) != getattr(after, field):
            out.append(f"{field}: {getattr(before, field)!r} -> {getattr(after, field)!r}")
    for key, end in before.queue_ends.items():
        now = after.queue_ends.get(key)
        if now is None or now < end or (now != end and not grown_ok):
            out.append(f"queue end {key}: {end} -> {now}")
    return out


__all__ = ["ACL_ONLY", "ATTACKS", "Observation", "Snapshot", "changed", "random_attack", "snapshot"]
