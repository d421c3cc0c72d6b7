"""Both replicas' nodes lost at once (ray.cluster_utils.Cluster, placement by resource):
a SYNC_MASTER and its slave on two nodes, both nodes removed together, then added back
(Ray gives them new node ids). Nobody could be promoted; the coordinator must start the
master again where its store is, on the node that carries it now, and the slave must
rejoin: sends are acknowledged again and no acknowledged message is lost."""

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
NAMESPACE = "rayq-test-replication-nodes-back"
ROLE = rayq.BrokerRole.SYNC_MASTER
TOPIC = "Back"


def test_both_nodes_lost_and_back_the_broker_serves_sends_again(dep, replication_kit) -> None:
    kit = replication_kit
    rayq.Admin(namespace=NAMESPACE).create_topic(TOPIC, queues=2)
    with rayq.Producer(group="pg", namespace=NAMESPACE) as producer:
        before = [producer.send(rayq.Message(TOPIC, f"before {i}".encode())) for i in range(50)]
    assert {r.status for r in before} == {SendStatus.SEND_OK}
    old = (dep.master_node.node_id, dep.slave_node.node_id)
    dep.cluster.remove_node(dep.master_node)
    dep.cluster.remove_node(dep.slave_node)
    dep.master_node = dep.add_node("broker-a")
    dep.slave_node = dep.add_node("broker-a#1")
    assert dep.master_node.node_id not in old and dep.slave_node.node_id not in old

    after = None
    with rayq.Producer(group="pg", namespace=NAMESPACE) as producer:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                after = producer.send(rayq.Message(TOPIC, b"after"))
                if after.status is SendStatus.SEND_OK:  # the master and its slave are back
                    break
            except rayq.RayqError:
                time.sleep(0.5)
    assert after is not None and after.status is SendStatus.SEND_OK
    master = dep.info("broker-a")
    assert (master.node_id, master.store_dir) == (
        dep.master_node.node_id,
        str(dep.root / "broker-a"),
    )
    assert dep.info("broker-a#1").node_id == dep.slave_node.node_id
    got = kit.read_all(NAMESPACE, TOPIC, 51)
    assert {f"before {i}".encode() for i in range(50)} | {b"after"} <= got
    assert ray.is_initialized()
