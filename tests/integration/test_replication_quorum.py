"""Quorum replication on one Ray node: a SYNC_MASTER with min_in_sync_replicas=2 and two
slaves. While slave 2 is stopped (SIGSTOP), slave 1 alone does not make a send
acknowledged (FLUSH_SLAVE_TIMEOUT, then SLAVE_NOT_AVAILABLE once slave 2 is too far
behind); then the master dies together with slave 1, the slave ahead: slave 2 is
promoted and every acknowledged message is read from it. With one slave per message
(min_in_sync_replicas=1) the sends while slave 2 was stopped were acknowledged and
would be lost here."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray

import rayq
from rayq.actors.protocol import COORDINATOR_NAME, ReadReplicaRequest, SendStatus
from rayq.cluster import server_actor
from rayq.store import StoreConfig

pytestmark = [
    pytest.mark.slow,
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]
NAMESPACE = "rayq-test-replication-quorum"
TOPIC = "Quorum"
BEHIND_MAX = 32 * 1024  # ha_slave_fallbehind_max: two batches of 20 KB past it
BODY = 1000
STORE = StoreConfig.for_tests(
    commitlog_segment_size_bytes=256 * 1024,
    cq_entries_per_file=1024,
    index_hash_slots=1024,
    index_entries_max=8192,
    disk_max_used_space_ratio=1.0,
    disk_clean_forcibly_ratio=1.0,
    disk_warning_ratio=1.0,
    sync_flush_timeout_ms=1000,
)


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    if ray.is_initialized():
        pytest.skip("Ray is already initialized in this process; this module starts its own")
    root = tmp_path_factory.mktemp("stores")
    ray.init(address="local", num_cpus=2, namespace=NAMESPACE, log_to_driver=False)
    try:
        config = rayq.BrokerConfig(
            store=STORE,
            broker_role=rayq.BrokerRole.SYNC_MASTER,
            min_in_sync_replicas=2,
            ha_slave_fallbehind_max=BEHIND_MAX,
        )
        started = rayq.start(root, namespace=NAMESPACE, config=config, slaves=2)
        try:
            yield root
        finally:
            started.shutdown()
    finally:
        ray.shutdown()


def actor(replica: str) -> Any:
    return server_actor(f"rayq-broker-{replica}", NAMESPACE)


def send_batches(producer: rayq.Producer, tag: str, count: int) -> list[tuple[bytes, Any]]:
    sent = []
    for i in range(count):
        bodies = [f"{tag}-{i}-{j}-".encode().ljust(BODY, b".") for j in range(20)]
        results = producer.send_batch([rayq.Message(TOPIC, b) for b in bodies])
        sent += list(zip(bodies, results, strict=True))
    return sent


def promoted(store_dir: Path, timeout_s: float = 90) -> Any:
    """broker-a's info once it runs over ``store_dir`` (the promoted slave's store) and
    the coordinator sends reads to it (before, they went to the slave it knew furthest
    ahead: the dead slave 1)."""
    coordinator = ray.get_actor(COORDINATOR_NAME, namespace=NAMESPACE)
    ask = ReadReplicaRequest(broker_name="broker-a")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            info = ray.get(actor("broker-a").broker_info.remote(), timeout=10)
            reads = ray.get(coordinator.read_replica.remote(ask), timeout=10).replica
            if info.store_dir == str(store_dir) and reads == "broker-a":
                return info
        except (ValueError, ray.exceptions.RayError):
            pass
        time.sleep(0.2)
    raise AssertionError(f"no master over {store_dir} after {timeout_s} s")


def read_all(expect: int, timeout_s: float = 60) -> set[bytes]:
    consumer = rayq.PullConsumer(
        "quorum-reader", namespace=NAMESPACE, consume_from=rayq.ConsumeFromWhere.FIRST_OFFSET
    )
    consumer.subscribe(TOPIC)
    consumer.start()
    got: set[bytes] = set()
    deadline = time.monotonic() + timeout_s
    try:
        while len(got) < expect and time.monotonic() < deadline:
            try:
                got |= {m.body for m in consumer.poll(timeout=1.0)}
            except rayq.BrokerUnavailableError:
                time.sleep(0.2)
    finally:
        consumer.shutdown()
    return got


def test_master_lost_with_the_slave_ahead_nothing_acknowledged_is_lost(deployment) -> None:
    rayq.Admin(namespace=NAMESPACE).create_topic(TOPIC, queues=2)
    with rayq.Producer(group="quorum-pg", namespace=NAMESPACE) as producer:
        both = send_batches(producer, "both", 5)
        pid = ray.get(actor("broker-a#2").__ray_call__.remote(lambda _self: os.getpid()))
        os.kill(pid, signal.SIGSTOP)  # slave 2 stops fetching; slave 1 goes on
        try:
            one = send_batches(producer, "one", 3)
            ray.kill(
                ray.get_actor("rayq-broker-broker-a#1", namespace=NAMESPACE), no_restart=True
            )  # the slave ahead dies
            ray.kill(
                ray.get_actor("rayq-broker-broker-a", namespace=NAMESPACE), no_restart=True
            )  # and so does the master
        finally:
            os.kill(pid, signal.SIGCONT)
    info = promoted(deployment / "broker-a#2")
    assert (info.broker_id, info.role, info.epoch) == (0, "SYNC_MASTER", 1)
    acked = {b for b, r in both + one if r.status is SendStatus.SEND_OK}
    got = read_all(len(acked))
    assert acked <= got  # not one acknowledged message lost
    assert {r.status for _, r in both} == {SendStatus.SEND_OK}
    # with slave 2 stopped, one slave of the two was not enough to acknowledge a send
    statuses = [r.status for _, r in one]
    assert SendStatus.SEND_OK not in statuses
    assert statuses[0] is SendStatus.FLUSH_SLAVE_TIMEOUT  # in sync, but did not fetch
    assert statuses[-1] is SendStatus.SLAVE_NOT_AVAILABLE  # too far behind: one in sync
