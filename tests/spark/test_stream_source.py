"""Spark Structured Streaming from rayq (``spark.readStream.format("rayq")``) on one RayDP
session: offsets in the checkpoint per broker and queue, a restarted query resumes
exactly there, admission control, topic lists and patterns, data loss, ACL, bad input."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import ray

import rayq
from rayq.connectors import spark as rqspark

pytestmark = [
    pytest.mark.slow,
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
    pytest.mark.filterwarnings("ignore:distutils Version classes:DeprecationWarning"),
]
NAMESPACE = "rayq-test-stream-source"
ROWS = "b string, topic string, broker string, queue_id int, queue_offset long"


@pytest.fixture(scope="module")
def spark(
    tmp_path_factory: pytest.TempPathFactory, need_jar: Callable[[Any], None]
) -> Iterator[Any]:
    if ray.is_initialized():
        pytest.skip("Ray is already initialized in this process; this module starts its own")
    ray.init(address="local", num_cpus=2, namespace=NAMESPACE, log_to_driver=False)
    cluster = rayq.start(tmp_path_factory.mktemp("store"), namespace=NAMESPACE)
    try:
        session = rqspark.session("rayq-stream-tests", num_executors=1, executor_cores=2)
        need_jar(session)  # Structured Streaming is rayq's JVM source (tests/spark/conftest.py)
        yield session
    finally:
        rqspark.stop_session()
        cluster.shutdown()
        ray.shutdown()


def send(topic: str, bodies: list[str]) -> dict[str, tuple[int, int]]:
    """One message per body (spread over the topic's queues); where each went."""
    with rayq.Producer(group="pg") as producer:
        sent = {b: producer.send(rayq.Message(topic, b.encode())) for b in bodies}
    return {b: (r.queue.queue_id, r.queue_offset) for b, r in sent.items()}


def start(spark: Any, out: Path, ckpt: Path, **options: str) -> Any:
    """A query copying the stream's rows into Parquet files under ``out``."""
    df = spark.readStream.format("rayq").options(**options).load()
    rows = df.selectExpr("CAST(body AS STRING) AS b", "topic", "broker", "queue_id", "queue_offset")
    return (
        rows.writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(ckpt))
        .trigger(processingTime="300 milliseconds")
        .start()
    )


def written(spark: Any, out: Path) -> list[Any]:
    if not out.exists():
        return []
    return spark.read.schema(ROWS).parquet(str(out)).collect()  # type: ignore[no-any-return]


def wait_for(what: Callable[[], bool], query: Any, timeout: float = 90) -> None:
    end = time.monotonic() + timeout
    while not what():
        assert query.isActive, query.exception()
        assert time.monotonic() < end, f"timed out; last progress: {query.lastProgress}"
        time.sleep(0.3)


def failure_of(query: Any) -> Any:
    """What stopped ``query`` (it must stop by itself within a minute)."""
    try:
        query.awaitTermination(60)
    except Exception as exc:  # pyspark raises the query's error here
        return exc
    assert not query.isActive, "the query did not stop"
    return query.exception()


def test_restarted_query_resumes_at_its_checkpoint_with_capped_batches(
    spark: Any, tmp_path: Path
) -> None:
    """Given 90 messages over 3 queues and maxMessagesPerTrigger 40, when a query reads from
    the earliest offsets, then its batches hold at most 40 rows and its checkpoint keeps
    per-broker, per-queue offsets; a query restarted from the checkpoint reads only what
    was sent after, each message once; the option group gets the offsets for lag."""
    rayq.Admin().create_topic("orders", queues=3)
    send("orders", [f"a{i}" for i in range(90)])
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    opts = {
        "topic": "orders",
        "startingOffsets": "earliest",
        "maxMessagesPerTrigger": "40",
        "group": "orders-etl",
    }
    query = start(spark, out, ckpt, **opts)
    try:
        wait_for(lambda: len(written(spark, out)) >= 90, query)
        sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
        end = query.lastProgress["sources"][0]["endOffset"]
    finally:
        query.stop()
    assert max(sizes) <= 40 and sum(sizes) == 90
    assert end == {"orders": {"broker-a": {"0": 30, "1": 30, "2": 30}}}  # pyspark parses it
    logs = [p for p in (ckpt / "offsets").iterdir() if p.name.isdigit()]
    logged = max(logs, key=lambda p: int(p.name)).read_text().splitlines()[-1]
    assert json.loads(logged) == end
    lag = {(p.queue.queue_id, p.lag) for p in rayq.Admin().consumer_progress("orders-etl")}
    assert lag == {(0, 0), (1, 0), (2, 0)}

    send("orders", [f"b{i}" for i in range(30)])
    query = start(spark, out, ckpt, **opts)
    try:
        wait_for(lambda: len(written(spark, out)) >= 120, query)
        time.sleep(1)  # a batch more would show here
    finally:
        query.stop()
    rows = written(spark, out)
    batch = spark.read.format("rayq").option("topic", "orders").load()  # a batch read
    assert sorted(bytes(r.body).decode() for r in batch.collect()) == sorted(r.b for r in rows)
    assert sorted(r.b for r in rows) == sorted(
        [f"a{i}" for i in range(90)] + [f"b{i}" for i in range(30)]
    )
    assert {(r.topic, r.broker) for r in rows} == {("orders", "broker-a")}


def test_starting_offsets_per_queue_topic_lists_and_patterns(spark: Any, tmp_path: Path) -> None:
    """startingOffsets JSON picks a start per queue (-2 earliest, a number, the rest at
    their latest); a topic list reads each topic; a pattern also picks up a topic made
    while the query runs, from its earliest offset."""
    admin = rayq.Admin()
    for topic in ("ev-1", "ev-2"):
        admin.create_topic(topic, queues=2)
    where = send("ev-1", [f"x{i}" for i in range(20)])
    send("ev-2", [f"z{i}" for i in range(4)])
    starting = {"ev-1": {"broker-a": {"0": -2, "1": 3}}}  # ev-2: at its latest
    out = tmp_path / "out"
    query = start(
        spark, out, tmp_path / "c1", topic="ev-1,ev-2", startingOffsets=json.dumps(starting)
    )
    expected = [b for b, (q, offset) in where.items() if q == 0 or offset >= 3]
    try:
        wait_for(lambda: len(written(spark, out)) >= len(expected), query)
        send("ev-2", ["late"])
        wait_for(lambda: len(written(spark, out)) >= len(expected) + 1, query)
    finally:
        query.stop()
    assert sorted(r.b for r in written(spark, out)) == sorted([*expected, "late"])

    out = tmp_path / "pattern"
    query = start(spark, out, tmp_path / "c2", topicPattern="ev-.*", startingOffsets="earliest")
    try:
        wait_for(lambda: len(written(spark, out)) >= 25, query)  # ev-1 20, ev-2 5
        admin.create_topic("ev-3", queues=1)
        send("ev-3", ["new"])
        wait_for(lambda: len(written(spark, out)) >= 26, query)
    finally:
        query.stop()
    assert {r.topic for r in written(spark, out)} == {"ev-1", "ev-2", "ev-3"}


def test_data_loss_fails_or_is_skipped_with_fail_on_data_loss_false(
    spark: Any, tmp_path: Path
) -> None:
    """Given a query that read 20 messages of a topic that is then made anew (its queues
    start over, shorter than the checkpoint's offsets), when it restarts, then it fails
    with DataLossError; with failOnDataLoss=false it reads the new messages instead."""
    admin = rayq.Admin()
    admin.create_topic("lossy", queues=1)
    send("lossy", [f"old{i}" for i in range(20)])
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    query = start(spark, out, ckpt, topic="lossy", startingOffsets="earliest")
    try:
        wait_for(lambda: len(written(spark, out)) >= 20, query)
    finally:
        query.stop()
    admin.delete_topic("lossy")
    admin.create_topic("lossy", queues=1)
    send("lossy", [f"new{i}" for i in range(5)])

    query = start(spark, out, ckpt, topic="lossy")
    error = failure_of(query)
    assert error is not None and "DataLossError" in str(error) and "failOnDataLoss" in str(error)

    query = start(spark, out, ckpt, topic="lossy", failOnDataLoss="false")
    try:
        wait_for(lambda: len(written(spark, out)) >= 25, query)
    finally:
        query.stop()
    assert sorted(r.b for r in written(spark, out) if r.b.startswith("new")) == [
        f"new{i}" for i in range(5)
    ]


def test_bad_input_fails_at_load_and_a_checkpoint_of_gone_queues_fails_the_query(
    spark: Any, tmp_path: Path
) -> None:
    """An unknown topic, bad startingOffsets JSON, offsets of queues the topic lacks, of
    another topic, or both topic and topicPattern fail ``load()`` with rayq's message; a
    checkpoint naming queues the topic no longer has stops the query before a batch."""
    rayq.Admin().create_topic("small", queues=2)
    bad = [
        ({"topic": "no-such-topic"}, "TopicNotFoundError"),
        ({"topic": "small", "startingOffsets": "{oops"}, "is not"),
        ({"topic": "small", "startingOffsets": '{"small": {"broker-a": {"7": 1}}}'}, "broker-a/7"),
        ({"topic": "small", "startingOffsets": '{"orders": {"broker-a": {"0": 1}}}'}, "orders"),
        ({"topic": "small", "topicPattern": "s.*"}, "exactly one"),
        ({"topic": "small", "maxMessagesPerTrigger": "0"}, "maxMessagesPerTrigger"),
        ({"topic": "small", "failOnDataLoss": "maybe"}, "failOnDataLoss"),
    ]
    for options, message in bad:
        with pytest.raises(Exception, match=r"rayq\.errors") as raised:
            spark.readStream.format("rayq").options(**options).load()
        assert message in str(raised.value), options

    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    send("small", ["m0", "m1"])
    query = start(spark, out, ckpt, topic="small", startingOffsets="earliest")
    try:
        wait_for(lambda: len(written(spark, out)) >= 2, query)
    finally:
        query.stop()
    rayq.Admin().delete_topic("small")
    rayq.Admin().create_topic("small", queues=1)
    query = start(spark, out, ckpt, topic="small")
    error = failure_of(query)
    assert error is not None and "broker-a/1" in str(error)
    assert "new checkpointLocation" in str(error)


ACL_NAMESPACE = "rayq-test-stream-acl"
ACL_RULES = """
[[accounts]]
access_key = "reader"
secret_key = "reader-secret-123"
default_topic_perm = "DENY"
topic_perms = ["acl-in=SUB"]
"""


def test_acl_reads_with_grants_and_refuses_bad_credentials_at_load(
    spark: Any, tmp_path: Path
) -> None:
    """Given ACL on, when a query gives an account's keys, then its tasks read with the
    grants the driver signed; no keys or a wrong secret fail ``load()``."""
    cluster = rayq.start(
        tmp_path / "store", namespace=ACL_NAMESPACE, config=rayq.BrokerConfig(acl_enable=True)
    )
    try:
        admin_keys = rayq.Credentials(access_key="root", secret_key="root-secret-123")
        rules = (
            ACL_RULES
            + '\n[[accounts]]\naccess_key = "root"\nsecret_key = "root-secret-123"\nadmin = true\n'
        )
        for name in cluster.broker_names:
            (cluster.store_dir / name / "config" / "plain_acl.toml").write_text(rules)
        (tmp_path / "store" / "config").mkdir(exist_ok=True)
        (tmp_path / "store" / "config" / "plain_acl.toml").write_text(rules)
        config = rayq.ClientConfig(credentials=admin_keys)
        admin = rayq.Admin(namespace=ACL_NAMESPACE, config=config)
        deadline = time.monotonic() + 60
        while True:  # until the brokers and the coordinator have loaded the file (1/s)
            try:
                admin.create_topic("acl-in", queues=2)
                break
            except rayq.PermissionDeniedError:
                assert time.monotonic() < deadline
                time.sleep(0.2)
        with rayq.Producer("acl-pg", namespace=ACL_NAMESPACE, config=config) as producer:
            producer.send_batch([rayq.Message("acl-in", f"s{i}".encode()) for i in range(12)])

        base = {"topic": "acl-in", "namespace": ACL_NAMESPACE, "startingOffsets": "earliest"}
        for keys, message in (
            ({}, "no credentials"),
            ({"accessKey": "reader", "secretKey": "wrong"}, "bad signature"),
        ):
            with pytest.raises(Exception, match="PermissionDeniedError") as refused:
                spark.readStream.format("rayq").options(**base, **keys).load()
            assert message in str(refused.value)

        out = tmp_path / "out"
        keys = {"accessKey": "reader", "secretKey": "reader-secret-123"}
        query = start(spark, out, tmp_path / "ckpt", **base, **keys)
        try:
            wait_for(lambda: len(written(spark, out)) >= 12, query)
        finally:
            query.stop()
        assert sorted(r.b for r in written(spark, out)) == sorted(f"s{i}" for i in range(12))
        plan = query.lastProgress["sources"][0]["description"]
        assert "reader-secret-123" not in plan
    finally:
        cluster.shutdown()
