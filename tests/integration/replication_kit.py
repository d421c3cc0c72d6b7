"""Helpers shared by the multi-node replication tests (loaded by their conftest
fixture ``kit``, as test modules cannot import each other with importlib mode)."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import ray
from ray.cluster_utils import Cluster

import rayq
from rayq.cluster import server_actor
from rayq.store import StoreConfig, codec
from rayq.store.reader import MEMORY_BYTES

STORE = StoreConfig.for_tests(
    commitlog_segment_size_bytes=1 << 20,
    cq_entries_per_file=4096,
    index_hash_slots=1024,
    index_entries_max=16384,
    disk_max_used_space_ratio=1.0,
    disk_clean_forcibly_ratio=1.0,
    disk_warning_ratio=1.0,
    sync_flush_timeout_ms=1500,
)


class Deployment:
    """A Ray cluster of a head and two broker nodes (the master's and its slave's)."""

    def __init__(
        self,
        namespace: str,
        root: Path,
        role: rayq.BrokerRole,
        auto_failover: bool = True,
        slave_read: bool = False,
    ) -> None:
        self.namespace = namespace
        self.root = root
        self.cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
        self.master_node = self.add_node("broker-a")
        self.slave_node = self.add_node("broker-a#1")
        ray.init(address=self.cluster.address, namespace=namespace, log_to_driver=False)
        store = STORE
        if slave_read:  # "far behind" from ~50 KB before the end of the log on
            store = STORE.replace(access_message_in_memory_max_ratio=50_000 / MEMORY_BYTES)
        config = rayq.BrokerConfig(
            store=store,
            broker_role=role,
            auto_failover=auto_failover,
            slave_sync_metadata_interval_ms=1000,
            slave_read_enable=slave_read,
        )
        self.rayq = rayq.start(root, placement="resource", namespace=namespace, config=config)
        self.rayq_store = store

    def add_node(self, replica: str) -> Any:
        node = self.cluster.add_node(num_cpus=0, resources={f"rayq_broker:{replica}": 1})
        self.cluster.wait_for_nodes()
        return node

    def close(self) -> None:
        try:
            self.rayq.shutdown()
        finally:
            ray.shutdown()
            self.cluster.shutdown()

    # ------------------------------------------------------------- reading
    def actor(self, replica: str) -> Any:
        """The replica's broker, its server operations signed with the deployment's key."""
        return server_actor(f"rayq-broker-{replica}", self.namespace)

    def handle(self, replica: str) -> Any:
        """The replica's broker as Ray's own actor handle (for ``ray.kill``)."""
        return ray.get_actor(f"rayq-broker-{replica}", namespace=self.namespace)

    def info(self, replica: str) -> Any:
        return ray.get(self.actor(replica).broker_info.remote(), timeout=30)

    def caught_up(self, timeout_s: float = 60) -> tuple[Any, Any]:
        """The master's and the slave's info once the slave has the whole log."""
        deadline = time.monotonic() + timeout_s
        while True:
            master, slave = self.info("broker-a"), self.info("broker-a#1")
            if slave.written_offset == master.written_offset or time.monotonic() > deadline:
                return master, slave
            time.sleep(0.1)

    def pid(self, replica: str) -> int:
        return ray.get(self.actor(replica).__ray_call__.remote(lambda _self: os.getpid()))

    @contextmanager
    def paused(self, replica: str) -> Iterator[None]:
        """The replica's broker process stopped (SIGSTOP) for the block."""
        pid = self.pid(replica)
        os.kill(pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.kill(pid, signal.SIGCONT)


def log_bytes(store_dir: Path, upto: int) -> bytes:
    files = sorted(p for p in (store_dir / "commitlog").iterdir() if p.name.isdigit())
    return b"".join(p.read_bytes() for p in files)[:upto]


def commitlog_offset(result: Any) -> int:
    return codec.decode_offset_msg_id(result.offset_msg_id)[1]


class Sender:
    """A producer sending single messages in a thread, keeping every answer."""

    def __init__(self, namespace: str, topic: str) -> None:
        self.producer = rayq.Producer(group="replication-pg", namespace=namespace)
        self.producer.start()
        self.topic = topic
        self.results: list[tuple[float, bytes, Any]] = []  # (time, body, SendResult)
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            body = f"m{i}".encode()
            try:
                result = self.producer.send(rayq.Message(self.topic, body))
                self.results.append((time.monotonic(), body, result))
            except rayq.RayqError:
                self.errors += 1
                time.sleep(0.05)
            i += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)
        self.producer.shutdown()

    def wait_for(self, count: int, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while len(self.results) < count and time.monotonic() < deadline:
            time.sleep(0.05)


def read_all(namespace: str, topic: str, expect: int, timeout_s: float = 60) -> set[bytes]:
    consumer = rayq.PullConsumer(
        f"reader-{time.monotonic_ns()}",
        namespace=namespace,
        consume_from=rayq.ConsumeFromWhere.FIRST_OFFSET,
    )
    consumer.subscribe(topic)
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
