"""The soak's Ray cluster (ray.cluster_utils.Cluster): a head node (coordinator,
clients, the Recorder) and two broker nodes, one with broker-a's master
(``rayq_broker:broker-a``) and one with its slave (``rayq_broker:broker-a#1``), in
SYNC_MASTER mode with failover, so an acknowledged message is on both."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import ray
from ray.cluster_utils import Cluster

import rayq
from rayq.store import StoreConfig
from soak import recorder
from soak.recorder import start_recorder

BROKER = "broker-a"
SLAVE = "broker-a#1"
STORE = StoreConfig.for_tests(
    commitlog_segment_size_bytes=1 << 20,  # small segments: the torn tail hits a fresh one often
    cq_entries_per_file=4096,
    index_hash_slots=1024,
    index_entries_max=16384,
    disk_max_used_space_ratio=1.0,  # the machine's own disk never refuses (see disk_full)
    disk_clean_forcibly_ratio=1.0,
    disk_warning_ratio=1.0,
    sync_flush_timeout_ms=1500,
)


class Deployment:
    """Started by ``__init__``; ``close()`` always stops rayq, Ray and the cluster."""

    def __init__(self, namespace: str, root: Path) -> None:
        self.namespace = namespace
        self.root = root
        self.cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
        self.nodes: dict[str, Any] = {}  # node id -> the Cluster's node
        self.labels: dict[str, str] = {}  # node id -> the replica resource it carries
        self.rayq: rayq.Cluster | None = None
        try:
            for replica in (BROKER, SLAVE):
                self.add_node(replica)
            ray.init(
                address=self.cluster.address,
                namespace=namespace,
                log_to_driver=False,
                logging_level=logging.WARNING,
                # the actors' warnings with their times (``*.err`` in Ray's session
                # logs), to line them up with the history
                logging_config=ray.LoggingConfig(encoding="TEXT", log_level="WARNING"),
            )
            self.head_id = ray.get_runtime_context().get_node_id()
            ray.cloudpickle.register_pickle_by_value(recorder)
            self.recorder = start_recorder(namespace, self.head_id)
            config = rayq.BrokerConfig(
                store=STORE,
                broker_role=rayq.BrokerRole.SYNC_MASTER,
                auto_failover=True,
                slave_sync_metadata_interval_ms=1000,
                transaction_timeout=2000,
                transaction_check_interval=1000,
                rebalance_lock_max_live_time_ms=8000,  # orderly locks: see clients.CLIENT
            )
            self.rayq = rayq.start(root, placement="resource", namespace=namespace, config=config)
        except BaseException:
            self.close()
            raise

    def add_node(self, replica: str) -> str:
        node = self.cluster.add_node(num_cpus=0, resources={f"rayq_broker:{replica}": 1})
        self.cluster.wait_for_nodes()
        self.nodes[node.node_id] = node
        self.labels[node.node_id] = replica
        return str(node.node_id)

    def remove_node(self, node_id: str) -> str:
        """Removes the node; returns the replica resource it carried (to add it back)."""
        self.cluster.remove_node(self.nodes.pop(node_id))
        return self.labels.pop(node_id)

    def actor(self, name: str) -> Any:
        return ray.get_actor(name, namespace=self.namespace)

    def info(self, replica: str) -> Any:
        assert self.rayq is not None  # broker_info is a server operation: signed with the key
        broker = self.rayq.server_actor(f"rayq-broker-{replica}")
        return ray.get(broker.broker_info.remote(), timeout=10)

    def close(self) -> None:
        try:
            if self.rayq is not None:
                self.rayq.shutdown()
        except Exception:
            logging.getLogger(__name__).warning("rayq did not shut down cleanly", exc_info=True)
        finally:
            ray.shutdown()
            self.cluster.shutdown()


def pid_of(actor: Any, timeout_s: float = 10.0) -> int:
    return int(ray.get(actor.__ray_call__.remote(lambda _self: os.getpid()), timeout=timeout_s))
