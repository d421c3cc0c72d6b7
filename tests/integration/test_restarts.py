"""Each server actor kind killed (and restarted by Ray) while messages flow.

A producer sends from a thread, a PushConsumer and a PullConsumer consume; then the
flusher, the hold service, the coordinator or the broker is killed with
``ray.kill(no_restart=False)``. Each test shows that the restarted actor serves
again without anyone re-wiring it, and that nothing acknowledged is lost (every
acknowledged message id is received at least once). Deadlines are generous (the
machine is shared): they separate "recovers by itself" from "waits for a
heartbeat", not fast from slow.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import ray

import rayq
from rayq import ConsumeFromWhere, ConsumeStatus
from rayq.actors.coordinator_ray import RayPeers
from rayq.actors.protocol import (
    COORDINATOR_NAME,
    BrokerInfo,
    ClientRequest,
    MemberRequest,
    broker_actor_name,
    flusher_actor_name,
    hold_actor_name,
)
from rayq.bootstrap import KEY_FILE, parse_url, read_key
from rayq.cluster import server_actor
from rayq.transport.remote import RemoteTransport

pytestmark = pytest.mark.integration

NAMESPACE = "test-restarts"
BROKER = "broker-a"
# Broker and consumer-member heartbeats slower than every deadline below: after a
# coordinator restart, only the coordinator's own rebuild can bring back routes and
# groups in time.
BROKER_OVERRIDES = {"heartbeat_interval_ms": 60_000}
CLIENT_CONFIG = rayq.ClientConfig(member_heartbeat_interval_ms=60_000)
RECOVER_S = 15.0  # generous: the targets are ~2 s
DRAIN_S = 60.0
_N = itertools.count()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def wait_for(check: Callable[[], bool], timeout: float, what: str) -> float:
    """Poll ``check`` until true; the seconds it took."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if check():
            return time.monotonic() - start
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def actor(name: str) -> object:
    return ray.get_actor(name, namespace=NAMESPACE)


def durable(flusher: object) -> int:
    """The flusher's durable offset; -1 while it is restarting."""
    try:
        return ray.get(flusher.durable.remote(), timeout=30)  # type: ignore[attr-defined]
    except ray.exceptions.RayActorError:
        return -1


@ray.remote(num_cpus=0)
class Recorder:
    """Message ids a push consumer's listener received."""

    def __init__(self) -> None:
        self.ids: set[str] = set()

    def add(self, ids: list[str]) -> None:
        self.ids.update(ids)

    def get(self) -> set[str]:
        return set(self.ids)


class Listener:
    def __init__(self, recorder: object) -> None:
        self.recorder = recorder

    def __call__(self, msgs: list[rayq.MessageExt]) -> ConsumeStatus:
        self.recorder.add.remote([m.msg_id for m in msgs])  # type: ignore[attr-defined]
        return ConsumeStatus.CONSUME_SUCCESS


class Traffic:
    """A producer sending batches from a thread; the ids the broker acknowledged."""

    def __init__(self, topic: str, batch: int = 10, body: int = 1024) -> None:
        self.topic = topic
        self.batch = batch
        self.body = b"x" * body
        self.producer = rayq.Producer(group=unique("pg"))
        self.acked: set[str] = set()
        self.failed = 0
        self.lock = threading.Lock()
        self.paused = threading.Event()
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stopped.is_set():
            if self.paused.is_set():
                time.sleep(0.05)
                continue
            msgs = [
                rayq.Message(self.topic, self.body, keys=[f"k{next(_N)}"])
                for _ in range(self.batch)
            ]
            try:
                results = self.producer.send_batch(msgs)
            except rayq.RayqError:  # not acknowledged: may or may not be stored
                self.failed += 1
                time.sleep(0.1)
                continue
            with self.lock:
                self.acked.update(r.msg_id for r in results if r.status is rayq.SendStatus.SEND_OK)
            time.sleep(0.05)

    def snapshot(self) -> set[str]:
        with self.lock:
            return set(self.acked)

    def stop(self) -> set[str]:
        self.stopped.set()
        self.thread.join(30)
        self.producer.shutdown()
        return self.snapshot()


class PullLoop:
    """A PullConsumer polling in a thread (it is used by that thread only)."""

    def __init__(self, topic: str) -> None:
        self.consumer = rayq.PullConsumer(unique("lg"), consume_from=ConsumeFromWhere.FIRST_OFFSET)
        self.consumer.subscribe(topic)
        self.ids: set[str] = set()
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        self.consumer.start()
        try:
            while not self.stopped.is_set():
                msgs = self.consumer.poll(timeout=0.5)
                with self.lock:
                    self.ids.update(m.msg_id for m in msgs)
        finally:
            self.consumer.shutdown()

    def received(self) -> set[str]:
        with self.lock:
            return set(self.ids)

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(30)


@dataclass
class Flow:
    traffic: Traffic
    push: rayq.PushConsumer
    recorder: object
    puller: PullLoop | None

    def pushed(self) -> set[str]:
        return ray.get(self.recorder.get.remote(), timeout=30)  # type: ignore[attr-defined]

    def pulled(self) -> set[str]:
        return self.puller.received() if self.puller is not None else set()


@contextmanager
def flowing(admin: rayq.Admin, *, pull: bool = True) -> Iterator[Flow]:
    """A new topic with traffic, a push consumer (and a pull consumer) on it, all
    consuming before the block runs; afterwards every acknowledged id must have been
    received by each consumer."""
    topic = unique("restart")
    admin.create_topic(topic, queues=2)
    recorder = Recorder.remote()
    push = rayq.PushConsumer(
        unique("cg"), consume_from=ConsumeFromWhere.FIRST_OFFSET, config=CLIENT_CONFIG
    )
    push.subscribe(topic)
    push.register_listener(Listener(recorder))
    push.start()
    flow = Flow(Traffic(topic), push, recorder, PullLoop(topic) if pull else None)
    try:
        wait_for(
            lambda: flow.pushed() and (not pull or flow.pulled()),
            RECOVER_S,
            "both consumers to receive",
        )
        yield flow
        acked = flow.traffic.stop()
        assert acked, "nothing was acknowledged"
        wait_for(lambda: acked <= flow.pushed(), DRAIN_S, "the push consumer to get every ack")
        if pull:
            wait_for(lambda: acked <= flow.pulled(), DRAIN_S, "the pull consumer to get every ack")
    finally:
        flow.traffic.stopped.set()
        if flow.puller is not None:
            flow.puller.stop()
        push.shutdown()
        ray.kill(recorder)


def acked_after(traffic: Traffic, before: set[str], n: int = 20) -> set[str]:
    """Wait until ``n`` more messages are acknowledged; those ids."""
    wait_for(lambda: len(traffic.snapshot() - before) >= n, RECOVER_S, f"{n} more acks")
    return traffic.snapshot() - before


@pytest.fixture(scope="module")
def admin(cluster: rayq.Cluster) -> rayq.Admin:
    return rayq.Admin()


def test_start_refuses_a_namespace_where_a_deployment_runs(
    cluster: rayq.Cluster, admin: rayq.Admin, tmp_path: Path
) -> None:
    coordinator_id = actor(COORDINATOR_NAME)._actor_id  # type: ignore[attr-defined]
    with pytest.raises(rayq.ConfigError, match=f"already runs in Ray namespace '{NAMESPACE}'"):
        rayq.start(tmp_path / "other", namespace=NAMESPACE)
    assert not (tmp_path / "other").exists()
    assert actor(COORDINATOR_NAME)._actor_id == coordinator_id  # type: ignore[attr-defined]
    topic = unique("still")
    admin.create_topic(topic, queues=1)
    with rayq.Producer(group="pg-still") as producer:
        assert producer.send(rayq.Message(topic, b"x")).status is rayq.SendStatus.SEND_OK
    assert topic in admin.topics()


def test_a_restarted_flusher_goes_on_flushing(admin: rayq.Admin) -> None:
    flusher = actor(flusher_actor_name(BROKER))
    with flowing(admin, pull=False) as flow:
        ray.kill(flusher, no_restart=False)
        acked_after(flow.traffic, flow.traffic.snapshot())
        signed = server_actor(broker_actor_name(BROKER), NAMESPACE)
        written = ray.get(signed.flush_targets.remote(), timeout=30).written
        wait_for(
            lambda: durable(flusher) >= written, RECOVER_S, f"the durable offset to pass {written}"
        )


def test_a_restarted_hold_service_answers_held_pulls(admin: rayq.Admin) -> None:
    with flowing(admin) as flow:
        ray.kill(actor(hold_actor_name(BROKER)), no_restart=False)
        after = acked_after(flow.traffic, flow.traffic.snapshot())
        wait_for(
            lambda: after <= flow.pulled() and after <= flow.pushed(),
            RECOVER_S,
            "both consumers to receive what was sent after the kill",
        )
        # Quiet: both consumers' pulls are parked in the restarted hold service; one
        # message must wake them (long before the 15 s suspend time runs out).
        flow.traffic.paused.set()
        time.sleep(1.5)
        with rayq.Producer(group="pg-wake") as producer:
            one = producer.send(rayq.Message(flow.traffic.topic, b"wake")).msg_id
        wait_for(
            lambda: one in flow.pulled() and one in flow.pushed(),
            10.0,
            "the held pulls to be answered",
        )
        flow.traffic.paused.clear()


def test_a_restarted_coordinator_serves_routes_and_groups_at_once(
    cluster: rayq.Cluster, admin: rayq.Admin
) -> None:
    assert cluster.store_dir is not None
    host, port = parse_url(cluster.url)
    outside = RemoteTransport(cluster.url, host, port, read_key(cluster.store_dir / KEY_FILE))
    with flowing(admin) as flow:
        topic, group = flow.traffic.topic, flow.push.group
        coordinator = actor(COORDINATOR_NAME)
        members_of = MemberRequest(group=group)
        owned = ray.get(coordinator.group_members.remote(members_of), timeout=30).members
        assert list(owned) == [flow.push.client_id] and owned[flow.push.client_id]
        ray.kill(coordinator, no_restart=False)
        killed = time.monotonic()

        def routes_served() -> bool:
            try:
                with rayq.Producer(group=unique("pg-new")) as producer:
                    producer.send(rayq.Message(topic, b"new"))
                return topic in rayq.Admin().topics()
            except rayq.RayqError:
                return False

        wait_for(routes_served, RECOVER_S, "a new producer to send and a new Admin to see topics")

        def served_outside_ray() -> bool:  # the bootstrap endpoint, on the same port again
            try:
                return topic in outside.coordinator().topics(ClientRequest()).result(5).names
            except rayq.RayqError:
                return False

        wait_for(served_outside_ray, RECOVER_S, "a client outside Ray to reconnect")
        assert ray.get(coordinator.bootstrap.remote(), timeout=30) == cluster.url
        outside.close()

        def group_served() -> bool:
            members = ray.get(coordinator.group_members.remote(members_of), timeout=30).members
            return members == owned

        wait_for(
            group_served,
            max(1.0, RECOVER_S - (time.monotonic() - killed)),
            "the push consumer to own its queues again",
        )
        after = acked_after(flow.traffic, flow.traffic.snapshot())
        wait_for(lambda: after <= flow.pushed(), RECOVER_S, "push consumption to go on")


def test_a_restarted_broker_recovers_and_serves(admin: rayq.Admin) -> None:
    flusher = actor(flusher_actor_name(BROKER))
    with flowing(admin) as flow:
        ray.kill(actor(broker_actor_name(BROKER)), no_restart=False)
        after = acked_after(flow.traffic, flow.traffic.snapshot())
        wait_for(
            lambda: after <= flow.pulled() and after <= flow.pushed(),
            RECOVER_S,
            "both consumers to receive what was sent after the restart",
        )
        signed = server_actor(broker_actor_name(BROKER), NAMESPACE)
        written = ray.get(signed.flush_targets.remote(), timeout=30).written
        wait_for(
            lambda: durable(flusher) >= written,
            RECOVER_S,
            "the flusher to flush the restarted broker",
        )
        assert flow.traffic.topic in rayq.Admin().topics()


def test_the_coordinator_remembers_its_masters_in_rays_key_value_store(
    cluster: rayq.Cluster,
) -> None:
    """What a restarted coordinator reads to bring back a master that is not running:
    the deployment's masters, under its server key's fingerprint (another deployment
    in the namespace sees none of them), forgotten when shut down on purpose."""
    peers = RayPeers(NAMESPACE, cluster._server_key.fingerprint())  # type: ignore[union-attr]
    remembered = asyncio.run(peers.remembered())
    assert remembered[BROKER].store_dir and remembered[BROKER].broker_id == 0
    other = RayPeers(NAMESPACE, "another-deployment")
    info = BrokerInfo(broker_name="broker-x", node_id="n", store_dir="/s", topics={})
    other.remember(info)
    assert asyncio.run(other.remembered()) == {"broker-x": info}
    assert "broker-x" not in asyncio.run(peers.remembered())
    other.forget("broker-x")
    assert asyncio.run(other.remembered()) == {}
