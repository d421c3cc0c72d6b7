"""Three Ray nodes on this machine (ray.cluster_utils.Cluster): two brokers pinned by
resource to two nodes, topics over both, producers, consumers and a Spark read across
them; a broker's node removed: its queues report unavailable, the other broker serves.

The Spark read runs in a child driver process: a Spark JVM binds to one Ray cluster
for its life, and the other Spark module of this directory runs in this process."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
import ray
from ray.cluster_utils import Cluster

import rayq
from rayq.actors.protocol import LostBrokersRequest
from rayq.cluster import server_actor
from rayq.connectors.arrow_io import read_range
from rayq.connectors.ranges import OffsetRange, plan_ranges
from rayq.store import StoreConfig
from rayq.transport.context import ClientContext

pytestmark = [
    pytest.mark.slow,
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
    pytest.mark.filterwarnings("ignore:distutils Version classes:DeprecationWarning"),
]
NAMESPACE = "rayq-test-multinode"
SMALL_STORE = StoreConfig.for_tests(
    commitlog_segment_size_bytes=1 << 20,
    cq_entries_per_file=4096,
    index_hash_slots=1024,
    index_entries_max=16384,
    disk_max_used_space_ratio=1.0,
    disk_clean_forcibly_ratio=1.0,
    disk_warning_ratio=1.0,
)


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    if ray.is_initialized():
        pytest.skip("Ray is already initialized in this process; this module starts its own")
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
    b1 = cluster.add_node(num_cpus=0, resources={"rayq_broker:broker-b1": 1})
    b2 = cluster.add_node(num_cpus=0, resources={"rayq_broker:broker-b2": 1})
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, namespace=NAMESPACE, log_to_driver=False)
    deployment = None
    try:
        deployment = rayq.start(
            tmp_path_factory.mktemp("stores"),
            placement="resource",
            namespace=NAMESPACE,
            config=rayq.BrokerConfig(store=SMALL_STORE),
        )
        yield {"cluster": cluster, "b1": b1, "b2": b2, "rayq": deployment}
    finally:
        if deployment is not None:
            deployment.shutdown()
        ray.shutdown()
        cluster.shutdown()


def test_brokers_are_pinned_and_serve_across_nodes(nodes: dict) -> None:
    assert nodes["rayq"].broker_names == ["broker-b1", "broker-b2"]
    for name, node in (("broker-b1", nodes["b1"]), ("broker-b2", nodes["b2"])):
        handle = server_actor(f"rayq-broker-{name}", NAMESPACE)  # a server operation
        assert ray.get(handle.broker_info.remote(), timeout=30).node_id == node.node_id
    rayq.Admin(namespace=NAMESPACE).create_topic("spread", queues=2)
    with rayq.Producer(group="pg", namespace=NAMESPACE) as producer:
        sent = [producer.send(rayq.Message("spread", f"m{i}".encode())) for i in range(60)]
    assert {r.queue.broker_name for r in sent} == {"broker-b1", "broker-b2"}
    consumer = rayq.PullConsumer(
        group="mc", namespace=NAMESPACE, consume_from=rayq.ConsumeFromWhere.FIRST_OFFSET
    )
    consumer.subscribe("spread")
    consumer.start()
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(got) < 60 and time.monotonic() < deadline:
        got += [m.body for m in consumer.poll(timeout=1.0)]
    consumer.shutdown()
    assert sorted(got) == sorted(f"m{i}".encode() for i in range(60))
    counts = spark_counts_by_broker(nodes["cluster"].address)
    assert counts == {b: sum(r.queue.broker_name == b for r in sent) for b in counts}
    assert set(counts) == {"broker-b1", "broker-b2"}


SPARK_DRIVER = """
import json, sys, ray, rayq
from rayq.connectors import spark as rqspark
ray.init(address=sys.argv[1], namespace=sys.argv[2], log_to_driver=False)
rayq.connect(sys.argv[2])
spark = rqspark.session("rayq-multinode", num_executors=1, executor_cores=1,
                        executor_memory="1g")
try:
    rows = rqspark.read(spark, "spread").groupBy("broker").count().collect()
    print("COUNTS " + json.dumps({r["broker"]: r["count"] for r in rows}))
finally:
    rqspark.stop_session()
    ray.shutdown()
"""


def spark_counts_by_broker(address: str) -> dict[str, int]:
    """``rqspark.read`` of the topic in a child driver: messages per broker."""
    argv = [sys.executable, "-c", SPARK_DRIVER, address, NAMESPACE]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=240, check=True).stdout
    line = next(ln for ln in out.splitlines() if ln.startswith("COUNTS "))
    return json.loads(line[len("COUNTS ") :])


def test_a_removed_broker_node_reports_unavailable_and_the_other_serves(nodes: dict) -> None:
    ctx = ClientContext(namespace=NAMESPACE)
    b1_before = sum(r.count for r in plan_ranges(ctx, "spread") if r.broker == "broker-b1")
    nodes["cluster"].remove_node(nodes["b2"])
    deadline = time.monotonic() + 60
    lost = LostBrokersRequest(topic="spread")
    while ctx.coordinator.lost_brokers(lost).result(10).names != ["broker-b2"]:
        assert time.monotonic() < deadline, "the coordinator never noticed the lost broker"
        time.sleep(0.5)
    with pytest.raises(rayq.BrokerUnavailableError, match="broker-b2"):
        plan_ranges(ctx, "spread")  # what rqspark.read plans with
    with pytest.raises(rayq.BrokerUnavailableError, match="broker-b2"):
        list(read_range("spread", OffsetRange("broker-b2", 0, 0, 1), NAMESPACE))
    with rayq.Producer(group="pg", namespace=NAMESPACE) as producer:
        more = [producer.send(rayq.Message("spread", f"n{i}".encode())) for i in range(10)]
    assert {r.queue.broker_name for r in more} == {"broker-b1"}
    left = plan_ranges(ctx, "spread", skip_unavailable=True)
    assert {r.broker for r in left} == {"broker-b1"}
    assert sum(r.count for r in left) == b1_before + 10
    rows = sum(b.num_rows for r in left for b in read_range("spread", r, NAMESPACE))
    assert rows == b1_before + 10
