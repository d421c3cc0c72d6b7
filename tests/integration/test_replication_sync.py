"""SYNC_MASTER replication on three Ray nodes (ray.cluster_utils.Cluster): a master and
its slave pinned by resource to two nodes. In order: byte-identical logs after 10,000
messages; metadata on the slave within one sync interval; a paused slave makes sends
FLUSH_SLAVE_TIMEOUT; the master's node removed while a producer sends: the slave is
promoted, every acknowledged message is readable, sends go on (SLAVE_NOT_AVAILABLE
while no slave is left); the old master's node returns: it rejoins as a slave, its
divergent tail is cut (and kept) and its log equals the new master's."""

from __future__ import annotations

import time

import pytest
import ray

import rayq
from rayq.actors.protocol import QueryOffsetsRequest, SendStatus, TopicRequest
from rayq.store import InnerMessage, MessageStore

pytestmark = [
    pytest.mark.slow,
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]
NAMESPACE = "rayq-test-replication-sync"
ROLE = rayq.BrokerRole.SYNC_MASTER


def test_slave_on_another_node_has_the_same_log_byte_for_byte(dep, replication_kit) -> None:
    assert dep.info("broker-a").node_id == dep.master_node.node_id
    assert dep.info("broker-a#1").node_id == dep.slave_node.node_id
    rayq.Admin(namespace=NAMESPACE).create_topic("Rep", queues=4)
    with rayq.Producer(group="pg", namespace=NAMESPACE) as producer:
        statuses = set()
        for i in range(100):
            batch = [rayq.Message("Rep", f"{i}:{j}".encode() * 20) for j in range(100)]
            statuses |= {r.status for r in producer.send_batch(batch)}
    assert statuses == {SendStatus.SEND_OK}  # each acknowledged once the slave had it
    master, slave = dep.caught_up()
    assert slave.written_offset == master.written_offset > 10_000 * 100
    upto = master.written_offset
    log_bytes = replication_kit.log_bytes
    assert log_bytes(dep.root / "broker-a#1", upto) == log_bytes(dep.root / "broker-a", upto)
    stats = [
        ray.get(dep.actor(r).topic_stats.remote(TopicRequest(topic="Rep")))
        for r in ("broker-a", "broker-a#1")
    ]
    assert [(q.queue, q.max_offset) for q in stats[0].queues] == [
        (q.queue, q.max_offset) for q in stats[1].queues
    ]
    assert sum(q.max_offset for q in stats[1].queues) == 10_000
    [status] = master.replicas
    assert (status.broker_id, status.connected, status.lag_bytes) == (1, True, 0)


def test_metadata_reaches_the_slave_within_one_sync_interval(dep) -> None:
    admin = rayq.Admin(namespace=NAMESPACE)
    admin.create_topic("Meta", queues=3)
    master = dep.actor("broker-a")
    ray.get(
        master.commit_offsets.remote(
            rayq.actors.protocol.CommitOffsetsRequest(group="mg", topic="Rep", offsets={0: 7})
        )
    )
    deadline = time.monotonic() + 1.0 + 5.0  # the interval (1 s) and slack for a busy machine
    slave = dep.actor("broker-a#1")
    while time.monotonic() < deadline:
        offsets = ray.get(slave.query_offsets.remote(QueryOffsetsRequest(group="mg", topic="Rep")))
        if "Meta" in dep.info("broker-a#1").topics and offsets.offsets == {0: 7}:
            break
        time.sleep(0.1)
    assert "Meta" in dep.info("broker-a#1").topics
    assert offsets.offsets == {0: 7}


def test_a_paused_slave_makes_sends_time_out_then_they_are_ok_again(dep) -> None:
    with rayq.Producer(group="pg", namespace=NAMESPACE) as producer:
        with dep.paused("broker-a#1"):
            late = producer.send(rayq.Message("Rep", b"while the slave is paused"))
        assert late.status is SendStatus.FLUSH_SLAVE_TIMEOUT  # stored, not yet on a slave
        deadline = time.monotonic() + 30
        while producer.send(rayq.Message("Rep", b"after")).status is not SendStatus.SEND_OK:
            assert time.monotonic() < deadline


def test_master_node_lost_slave_promoted_no_acknowledged_message_lost(dep, replication_kit) -> None:
    kit = replication_kit
    rayq.Admin(namespace=NAMESPACE).create_topic("Fail", queues=2)
    sender = kit.Sender(NAMESPACE, "Fail")
    sender.wait_for(300)
    lost_at = time.monotonic()
    dep.cluster.remove_node(dep.master_node)
    deadline = time.monotonic() + 60
    while not any(t > lost_at for t, _, _ in sender.results) and time.monotonic() < deadline:
        time.sleep(0.1)
    sender.wait_for(len(sender.results) + 50)
    sender.stop()
    after = [r for t, _, r in sender.results if t > lost_at]
    assert after, "no send was answered after the master's node was lost"
    new = dep.info("broker-a")
    assert (new.node_id, new.broker_id, new.role, new.epoch) == (
        dep.slave_node.node_id,
        0,
        "SYNC_MASTER",
        1,
    )
    assert after[-1].status is SendStatus.SLAVE_NOT_AVAILABLE  # stored; no slave is left
    acked = {b for _, b, r in sender.results if r.status is SendStatus.SEND_OK}
    stored = {b for _, b, r in sender.results}
    got = kit.read_all(NAMESPACE, "Fail", len(stored))
    assert acked <= got  # not one acknowledged message lost
    assert len(acked) >= 300


def test_old_master_returns_as_slave_its_divergent_tail_cut(dep, replication_kit) -> None:
    old_dir = dep.root / "broker-a"
    with MessageStore(old_dir, replication_kit.STORE) as store:  # its node is down
        diverged = store.written_offset
        assert store.put_messages(
            [InnerMessage(topic="Fail", queue_id=0, body=b"written by the old master alone")]
        ).ok
    dep.master_node = dep.add_node("broker-a")  # the old master's node comes back
    deadline = time.monotonic() + 60
    slave = None
    while time.monotonic() < deadline:
        try:
            slave = dep.info("broker-a#1")
            if (
                slave.store_dir == str(old_dir)
                and slave.written_offset == dep.info("broker-a").written_offset
            ):
                break
        except (ValueError, ray.exceptions.RayError):
            pass
        time.sleep(0.2)
    assert slave is not None and slave.store_dir == str(old_dir)
    master = dep.info("broker-a")
    assert slave.written_offset == master.written_offset
    assert slave.epoch == master.epoch == 1
    kept = list((old_dir / "quarantine").iterdir())
    assert kept and sum(p.stat().st_size for p in kept) >= len(b"written by the old master alone")
    cut = min(int(p.name) for p in kept)
    assert cut <= diverged  # the tail from the end of epoch 0 on the new master was cut
    upto = master.written_offset
    kit = replication_kit
    assert kit.log_bytes(old_dir, upto) == kit.log_bytes(dep.root / "broker-a#1", upto)
    with rayq.Producer(group="pg", namespace=NAMESPACE) as producer:
        deadline = time.monotonic() + 30
        while producer.send(rayq.Message("Fail", b"x")).status is not SendStatus.SEND_OK:
            assert time.monotonic() < deadline
