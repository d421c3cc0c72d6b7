"""Reads from a slave. With slave_read_enable, a consumer far behind is pointed at the
slave by the master (suggestWhichBrokerId) and reads there. Failover off (RocketMQ 4):
while the master's node is lost its slave serves reads.
Consumers go on from the slave (their commits kept there), producers get
BrokerUnavailableError, and when the master's node is back the master is started
again, the offsets committed on the slave reach it, and reads go back to it."""

from __future__ import annotations

import time

import pytest
import ray

import rayq
from rayq.actors.protocol import QueryOffsetsRequest
from rayq.transport.ray_actors import RayTransport

pytestmark = [
    pytest.mark.slow,
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]
NAMESPACE = "rayq-test-replication-reads"
ROLE = rayq.BrokerRole.ASYNC_MASTER
AUTO_FAILOVER = False
SLAVE_READ = True
GROUP = "slave-readers"


def consume(count: int, timeout_s: float = 60) -> list[bytes]:
    consumer = rayq.PullConsumer(
        GROUP,
        namespace=NAMESPACE,
        auto_commit=False,
        consume_from=rayq.ConsumeFromWhere.FIRST_OFFSET,
        config=rayq.ClientConfig(poll_max_messages=100),
    )
    consumer.subscribe("Reads")
    consumer.start()
    got: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(got) < count and time.monotonic() < deadline:
            try:
                batch = consumer.poll(timeout=1.0)
            except rayq.BrokerUnavailableError:
                time.sleep(0.2)
                continue
            got += [m.body for m in batch]
            if batch:
                consumer.commit()
    finally:
        consumer.shutdown()
    return got


def test_a_consumer_far_behind_reads_from_the_slave_the_master_suggests(dep) -> None:
    rayq.Admin(namespace=NAMESPACE).create_topic("Slow", queues=1)
    bodies = [f"s{i}".encode() * 100 for i in range(400)]  # ~80 KB: far behind at first
    with rayq.Producer(group="pg", namespace=NAMESPACE) as producer:
        producer.send_batch([rayq.Message("Slow", b) for b in bodies])
    dep.caught_up()
    consumer = rayq.PullConsumer(
        "slow-group", namespace=NAMESPACE, consume_from=rayq.ConsumeFromWhere.FIRST_OFFSET
    )
    consumer.subscribe("Slow")
    consumer.start()
    got: list[bytes] = []
    sources: set[str] = set()
    deadline = time.monotonic() + 60
    try:
        while len(got) < len(bodies) and time.monotonic() < deadline:
            got += [m.body for m in consumer.poll(timeout=1.0)]
            sources |= {s.read_from for s in consumer._queues.values()}  # internal state
    finally:
        consumer.shutdown()
    assert got == bodies
    assert "broker-a#1" in sources  # while far behind
    assert "" in sources  # and back to the master near the end


def test_slave_serves_reads_and_keeps_commits_while_the_master_is_lost(dep) -> None:
    rayq.Admin(namespace=NAMESPACE).create_topic("Reads", queues=1)
    with rayq.Producer(group="pg", namespace=NAMESPACE) as producer:
        for i in range(10):
            producer.send_batch([rayq.Message("Reads", f"{i}:{j}".encode()) for j in range(50)])
    first = consume(200)
    assert 200 <= len(first) < 500
    dep.caught_up()
    slave = dep.actor("broker-a#1")
    req = QueryOffsetsRequest(group=GROUP, topic="Reads")
    deadline = time.monotonic() + 30  # the slave copies offsets every second
    while ray.get(slave.query_offsets.remote(req)).offsets != {0: len(first)}:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    dep.cluster.remove_node(dep.master_node)

    rest = consume(500 - len(first))  # from the slave: the master's node is gone, no failover
    assert sorted(first + rest) == sorted(f"{i}:{j}".encode() for i in range(10) for j in range(50))
    # what Spark's JVM reads are planned with (they reach the actor by name)
    assert RayTransport(NAMESPACE).serving_replica("broker-a") == "broker-a#1"
    assert ray.get(slave.query_offsets.remote(req)).offsets == {0: 500}  # committed on the slave
    with (
        rayq.Producer(group="pg", namespace=NAMESPACE) as producer,
        pytest.raises(rayq.BrokerUnavailableError),
    ):
        producer.send(rayq.Message("Reads", b"nowhere to write"))
    assert dep.info("broker-a#1").role == "SLAVE"  # not promoted


def test_master_back_gets_the_slave_commits_and_serves_again(dep) -> None:
    dep.master_node = dep.add_node("broker-a")
    deadline = time.monotonic() + 90
    offsets = None
    while time.monotonic() < deadline:
        try:
            master = dep.actor("broker-a")
            if ray.get(master.broker_info.remote(), timeout=5).node_id == dep.master_node.node_id:
                req = QueryOffsetsRequest(group=GROUP, topic="Reads")
                offsets = ray.get(master.query_offsets.remote(req), timeout=5).offsets
                if offsets == {0: 500}:
                    break
        except (ValueError, ray.exceptions.RayError):
            pass
        time.sleep(0.3)
    assert offsets == {0: 500}  # the commits made on the slave reached the master
    deadline = time.monotonic() + 30  # until the coordinator has the master live again
    while RayTransport(NAMESPACE).serving_replica("broker-a") != "broker-a":
        assert time.monotonic() < deadline
        time.sleep(0.3)
    with rayq.Producer(group="pg", namespace=NAMESPACE) as producer:
        deadline = time.monotonic() + 30
        while True:
            try:
                producer.send(rayq.Message("Reads", b"after the master is back"))
                break
            except rayq.BrokerUnavailableError:
                assert time.monotonic() < deadline
                time.sleep(0.5)
    assert consume(1) == [b"after the master is back"]
