"""ASYNC_MASTER replication on three Ray nodes (ray.cluster_utils.Cluster): the log is
byte-identical after catch-up; replication lag is reported in bytes and in time; when
the master's node is lost, the acknowledged messages missing afterwards are at most the
lag the master reported just before."""

from __future__ import annotations

import time

import pytest
import ray

import rayq
from rayq.actors.protocol import SendStatus

pytestmark = [
    pytest.mark.slow,
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]
NAMESPACE = "rayq-test-replication-async"
ROLE = rayq.BrokerRole.ASYNC_MASTER


def test_async_slave_catches_up_byte_for_byte(dep, replication_kit) -> None:
    rayq.Admin(namespace=NAMESPACE).create_topic("Rep", queues=4)
    with rayq.Producer(group="pg", namespace=NAMESPACE) as producer:
        for i in range(100):
            batch = [rayq.Message("Rep", f"{i}:{j}".encode() * 20) for j in range(100)]
            assert {r.status for r in producer.send_batch(batch)} == {SendStatus.SEND_OK}
    master, slave = dep.caught_up()
    assert slave.written_offset == master.written_offset
    log_bytes = replication_kit.log_bytes
    upto = master.written_offset
    assert log_bytes(dep.root / "broker-a#1", upto) == log_bytes(dep.root / "broker-a", upto)


def test_a_slave_restarted_by_ray_resumes_from_its_own_end(dep, replication_kit, restart) -> None:
    before = dep.info("broker-a#1").written_offset
    restart(dep.handle("broker-a#1"))  # Ray restarts it on its node
    with rayq.Producer(group="pg", namespace=NAMESPACE) as producer:
        for i in range(20):
            producer.send_batch([rayq.Message("Rep", f"r{i}:{j}".encode()) for j in range(50)])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            master, slave = dep.caught_up(timeout_s=5)
            if slave.written_offset == master.written_offset:
                break
        except (ValueError, ray.exceptions.RayError):  # ValueError: its name, while Ray restarts it
            time.sleep(0.2)
    assert slave.written_offset == master.written_offset > before
    assert slave.node_id == dep.slave_node.node_id
    log_bytes = replication_kit.log_bytes
    upto = master.written_offset
    assert log_bytes(dep.root / "broker-a#1", upto) == log_bytes(dep.root / "broker-a", upto)


def test_lag_is_reported_and_bounds_what_a_lost_master_loses(dep, replication_kit) -> None:
    kit = replication_kit
    admin = rayq.Admin(namespace=NAMESPACE)
    admin.create_topic("Lag", queues=2)
    sender = kit.Sender(NAMESPACE, "Lag")
    sender.wait_for(100)
    with dep.paused("broker-a#1"):  # the slave falls behind while sends are acknowledged
        count = len(sender.results)
        sender.wait_for(count + 200)
        sender.stop()
        [status] = dep.info("broker-a").replicas
        [progress] = [p for p in admin.replication() if p.broker_name == "broker-a"]
        dep.cluster.remove_node(dep.master_node)
    assert status.lag_bytes > 0 and status.lag_ms > 0
    assert progress.replicas[0].lag_bytes >= status.lag_bytes
    acked = [(b, r) for _, b, r in sender.results if r.status is SendStatus.SEND_OK]
    lag_messages = sum(kit.commitlog_offset(r) >= status.acked_offset for _, r in acked)
    assert lag_messages >= 200
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            # promoted, and the coordinator sends reads to it again (the promoted master
            # answers before the coordinator has its registration)
            if dep.info("broker-a").node_id == dep.slave_node.node_id and _reads_go_to_master():
                break
        except (ValueError, ray.exceptions.RayError, rayq.RayqError):
            pass
        time.sleep(0.2)
    assert dep.info("broker-a").node_id == dep.slave_node.node_id  # promoted
    assert _reads_go_to_master()
    got = kit.read_all(NAMESPACE, "Lag", len(acked) - lag_messages)
    missing = [b for b, _ in acked if b not in got]
    assert len(missing) <= lag_messages


def test_a_slave_whose_master_is_missing_says_so_and_keeps_trying(dep) -> None:
    from rayq.actors.broker_spawn import spawn_broker
    from rayq.actors.protocol import ReplicationRequest

    config = rayq.BrokerConfig(
        broker_name="ghost", broker_id=1, broker_role=rayq.BrokerRole.SLAVE, store=dep.rayq_store
    )
    key = rayq.cluster._KEYS[NAMESPACE]  # the deployment's (this driver started it)
    slave = spawn_broker(
        config, str(dep.root / "ghost#1"), NAMESPACE, dep.slave_node.node_id, server_key=key
    )
    try:
        deadline = time.monotonic() + 30
        errors = []
        while time.monotonic() < deadline and len(set(errors)) < 1:
            stats = ray.get(slave.replication.remote(ReplicationRequest()), timeout=30)
            if stats.error:
                errors.append(stats.error)
            time.sleep(0.2)
        assert stats.role == "SLAVE"
        assert "master ghost is not running" in stats.error
        time.sleep(1.5)  # still alive, still trying
        again = ray.get(slave.replication.remote(ReplicationRequest()), timeout=30)
        assert again.error == stats.error
    finally:
        ray.kill(slave, no_restart=True)


def _reads_go_to_master() -> bool:
    from rayq.actors.protocol import COORDINATOR_NAME, ReadReplicaRequest

    coordinator = ray.get_actor(COORDINATOR_NAME, namespace=NAMESPACE)
    reply = ray.get(coordinator.read_replica.remote(ReadReplicaRequest(broker_name="broker-a")))
    return reply.replica == "broker-a"
