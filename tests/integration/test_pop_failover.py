"""POP leases across a failover: a SYNC_MASTER with one slave answers a receive and an
ack once their POP log records are on the slave. The master dies for good with
messages in flight, some acknowledged; the coordinator promotes the slave, which
replays the log. Nothing acknowledged comes again, every message in flight and not
acknowledged comes again once (after its lease), and the new master serves POP."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray

import rayq
from rayq.actors.protocol import COORDINATOR_NAME, ReadReplicaRequest
from rayq.cluster import server_actor
from rayq.store import StoreConfig

pytestmark = [
    pytest.mark.slow,
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]
NAMESPACE = "rayq-test-pop-failover"
TOPIC = "PopJobs"
LEASE_S = 6.0


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    if ray.is_initialized():
        pytest.skip("Ray is already initialized in this process; this module starts its own")
    root = tmp_path_factory.mktemp("stores")
    ray.init(address="local", num_cpus=2, namespace=NAMESPACE, log_to_driver=False)
    try:
        config = rayq.BrokerConfig(
            store=StoreConfig.for_tests(sync_flush_timeout_ms=5000),
            broker_role=rayq.BrokerRole.SYNC_MASTER,
        )
        started = rayq.start(root, namespace=NAMESPACE, config=config, slaves=1)
        try:
            yield root
        finally:
            started.shutdown()
    finally:
        ray.shutdown()


def promoted(store_dir: Path, timeout_s: float = 90) -> Any:
    """broker-a's info once it runs over the slave's store and serves reads."""
    coordinator = ray.get_actor(COORDINATOR_NAME, namespace=NAMESPACE)
    ask = ReadReplicaRequest(broker_name="broker-a")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            info = ray.get(
                server_actor("rayq-broker-broker-a", NAMESPACE).broker_info.remote(), timeout=10
            )
            reads = ray.get(coordinator.read_replica.remote(ask), timeout=10).replica
            if info.store_dir == str(store_dir) and reads == "broker-a":
                return info
        except (ValueError, ray.exceptions.RayError):
            pass
        time.sleep(0.2)
    raise AssertionError(f"no master over {store_dir} after {timeout_s} s")


def receive_for(c: rayq.SimpleConsumer, seconds: float) -> list[rayq.ReceivedMessage]:
    got: list[rayq.ReceivedMessage] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            got += c.receive(max_messages=16, invisible_duration=60.0)
        except rayq.BrokerUnavailableError:
            time.sleep(0.5)
    return got


def test_leases_and_acks_survive_a_failover_to_the_slave(deployment: Path) -> None:
    rayq.Admin(namespace=NAMESPACE).create_topic(TOPIC, queues=2)
    bodies = [f"job-{i}".encode() for i in range(10)]
    with rayq.Producer("pop-fo-pg", namespace=NAMESPACE) as producer:
        producer.send_batch([rayq.Message(TOPIC, b) for b in bodies])
    c = rayq.SimpleConsumer("pop-fo", await_duration=1.0, namespace=NAMESPACE)
    c.subscribe(TOPIC)
    c.start()
    held: list[rayq.ReceivedMessage] = []
    deadline = time.monotonic() + 30
    while len(held) < len(bodies) and time.monotonic() < deadline:
        held += c.receive(max_messages=16, invisible_duration=LEASE_S)
    assert sorted(m.body for m in held) == sorted(bodies)
    acked = held[:5]
    c.ack_many(acked)
    leased_until = time.monotonic() + LEASE_S

    ray.kill(ray.get_actor("rayq-broker-broker-a", namespace=NAMESPACE), no_restart=True)
    promoted(deployment / "broker-a#1")
    again = receive_for(c, max(leased_until - time.monotonic(), 0) + 8.0)
    assert sorted(m.body for m in again) == sorted(m.body for m in held[5:])  # each once
    assert {m.delivery_count for m in again} == {2}
    for m in again:
        c.ack(m)

    with rayq.Producer("pop-fo-pg", namespace=NAMESPACE) as producer:
        producer.send(rayq.Message(TOPIC, b"after"))
    (after,) = receive_for(c, 3.0)
    assert after.body == b"after"
    c.ack(after)
    c.shutdown()
