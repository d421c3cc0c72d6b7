"""Spark Structured Streaming through rayq on one RayDP session.

The source, ``spark.readStream.format("rayq")``: offsets in the checkpoint per broker and
queue, a restarted query resumes exactly there, admission control, topic lists and
patterns, data loss, ACL read grants, bad input at ``load()``.

The sink, ``df.writeStream.format("rayq")``: a round trip through rayq's source and sink;
exactly once when a query is restarted from its checkpoint mid-batch and when a task is
retried mid-batch; ``rqspark.write(..., write_id=...)`` and ``stream``'s batches written
once; bad input and ACL refused at ``start()`` with nothing written.

And the Spark examples, structured_streaming.py (``make demo-streaming``) and
spark_pipeline.py (``make demo-spark``), run in this session.
"""

from __future__ import annotations

import importlib.util
import json
import re
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import ray

import rayq
from rayq.connectors import spark as rqspark
from rayq.store import StoreConfig

pytestmark = [
    pytest.mark.slow,
    pytest.mark.integration,
    # py4j (PySpark's JVM bridge) leaves sockets for the garbage collector to close.
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
    # PySpark 3.5 checks pandas/pyarrow versions with distutils' LooseVersion.
    pytest.mark.filterwarnings("ignore:distutils Version classes:DeprecationWarning"),
]
NAMESPACE = "rayq-test-structured-streaming"
ACL_NAMESPACE = "rayq-test-structured-streaming-acl"
STORE = StoreConfig.for_tests(
    commitlog_segment_size_bytes=4 << 20,
    cq_entries_per_file=4096,
    index_hash_slots=1024,
    index_entries_max=16384,
    disk_max_used_space_ratio=1.0,
    disk_clean_forcibly_ratio=1.0,
    disk_warning_ratio=1.0,
)
ROWS_PER_FILE = 400
PAD = "x" * 600  # a row is ~620 bytes: a file is ~250 KB, three splits of 96 KB


@pytest.fixture(scope="module")
def spark(
    tmp_path_factory: pytest.TempPathFactory, need_jar: Callable[[Any], None]
) -> Iterator[Any]:
    if ray.is_initialized():
        pytest.skip("Ray is already initialized in this process; this module starts its own")
    ray.init(address="local", num_cpus=2, namespace=NAMESPACE, log_to_driver=False)
    cluster = rayq.start(
        tmp_path_factory.mktemp("store"), namespace=NAMESPACE, config=rayq.BrokerConfig(store=STORE)
    )
    try:
        session = rqspark.session(
            "rayq-structured-streaming",
            num_executors=1,
            executor_cores=2,
            executor_memory="1g",
            # a failing task is tried twice (not 4 times): failing batches end sooner
            configs={"spark.task.maxFailures": "2"},
            fault_tolerant_mode=False,  # the source's and sink's tasks call the brokers
        )
        need_jar(session)  # Structured Streaming is rayq's JVM source and sink
        # each file of a sink test's stream is three partitions of one micro-batch
        session.conf.set("spark.sql.files.maxPartitionBytes", str(96 * 1024))
        session.conf.set("spark.sql.files.openCostInBytes", "0")
        yield session
    finally:
        rqspark.stop_session()
        cluster.shutdown()
        ray.shutdown()


ROWS = "b string, topic string, broker string, queue_id int, queue_offset long"


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


SOURCE_ACL_NAMESPACE = "rayq-test-structured-streaming-source-acl"
SOURCE_ACL_RULES = """
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
        tmp_path / "store",
        namespace=SOURCE_ACL_NAMESPACE,
        config=rayq.BrokerConfig(acl_enable=True),
    )
    try:
        admin_keys = rayq.Credentials(access_key="root", secret_key="root-secret-123")
        rules = (
            SOURCE_ACL_RULES
            + '\n[[accounts]]\naccess_key = "root"\nsecret_key = "root-secret-123"\nadmin = true\n'
        )
        for name in cluster.broker_names:
            (cluster.store_dir / name / "config" / "plain_acl.toml").write_text(rules)
        (tmp_path / "store" / "config").mkdir(exist_ok=True)
        (tmp_path / "store" / "config" / "plain_acl.toml").write_text(rules)
        config = rayq.ClientConfig(credentials=admin_keys)
        admin = rayq.Admin(namespace=SOURCE_ACL_NAMESPACE, config=config)
        deadline = time.monotonic() + 60
        while True:  # until the brokers and the coordinator have loaded the file (1/s)
            try:
                admin.create_topic("acl-in", queues=2)
                break
            except rayq.PermissionDeniedError:
                assert time.monotonic() < deadline
                time.sleep(0.2)
        with rayq.Producer("acl-pg", namespace=SOURCE_ACL_NAMESPACE, config=config) as producer:
            producer.send_batch([rayq.Message("acl-in", f"s{i}".encode()) for i in range(12)])

        base = {"topic": "acl-in", "namespace": SOURCE_ACL_NAMESPACE, "startingOffsets": "earliest"}
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
        rayq.connect(namespace=NAMESPACE)  # the module's deployment again


def files(directory: Path, count: int) -> Path:
    """``count`` JSON-lines files of ROWS_PER_FILE rows ``{"v": i, "pad": ...}``, i from 0."""
    directory.mkdir()
    for k in range(count):
        rows = range(k * ROWS_PER_FILE, (k + 1) * ROWS_PER_FILE)
        text = "".join(json.dumps({"v": v, "pad": PAD}) + "\n" for v in rows)
        (directory / f"part-{k:03d}.json").write_text(text)
    return directory


def file_stream(spark: Any, directory: Path) -> Any:
    """A stream of the files, one file per micro-batch, as ``body`` ("row#<v>|x..")."""
    from pyspark.sql import functions as F

    df = spark.readStream.schema("v long, pad string").option("maxFilesPerTrigger", 1)
    rows = df.json(str(directory))
    return rows.select(
        "v", F.concat(F.lit("row#"), F.col("v"), F.lit("|"), F.col("pad")).alias("s")
    )


def sink(df: Any, topic: str, checkpoint: Path, **options: str) -> Any:
    """``df`` (a column ``body``) as a rayq sink query of ``topic``: one micro-batch per
    file, every file there is (Trigger.AvailableNow), puts of 16 KiB (many per task)."""
    writer = df.writeStream.format("rayq").option("topic", topic)
    writer = writer.option("namespace", options.pop("namespace", NAMESPACE))
    writer = writer.option("checkpointLocation", str(checkpoint)).option("putBytes", "16384")
    return writer.options(**options).trigger(availableNow=True).start()


def stored(spark: Any, topic: str, namespace: str = NAMESPACE, **kw: Any) -> list[Any]:
    return rqspark.read(spark, topic, namespace=namespace, **kw).collect()


def row_ids(rows: list[Any]) -> Counter[int]:
    """How often each ``row#<v>`` is stored."""
    return Counter(int(bytes(r.body).split(b"|")[0][4:]) for r in rows)


def messages(topic: str, namespace: str = NAMESPACE, config: Any = None) -> int:
    admin = rayq.Admin(namespace=namespace, config=config)
    return sum(q.max_offset for q in admin.topic_stats(topic))


def test_round_trip_through_rayq_source_and_sink(spark: Any, tmp_path: Path) -> None:
    """Given messages with tags, keys and properties in a topic, when a query reads them
    with readStream.format("rayq") and writes them with writeStream.format("rayq") (the
    options keys, tags and properties naming its columns), then the other topic holds
    each once, with them; each was put by producer ``spark-<query id>-<partition>`` at
    epoch ``<batch id>``."""
    admin = rayq.Admin()
    admin.create_topic("trip-in", queues=3)
    admin.create_topic("trip-out", queues=2)
    with rayq.Producer(group="pg") as producer:
        producer.send_batch(
            [
                rayq.Message(
                    "trip-in",
                    f"m{i}".encode(),
                    tags=f"t{i % 3}",
                    keys=[f"k{i}"],
                    properties={"src": f"s{i}"},
                )
                for i in range(300)
            ]
        )
    source = spark.readStream.format("rayq").option("topic", "trip-in")
    source = source.option("namespace", NAMESPACE).option("startingOffsets", "earliest")
    columns = ["queue_offset", "body", "tags as t", "keys as k", "properties as p", "msg_id"]
    df = source.load().selectExpr(*columns)  # the sink sends only the columns it names
    query = sink(df, "trip-out", tmp_path / "ck", tags="t", keys="k", properties="p")
    query.awaitTermination(120)
    assert query.exception() is None
    back = stored(spark, "trip-out")
    got = {bytes(r.body): r for r in back}
    assert len(back) == len(got) == 300
    for i in (0, 7, 299):
        row = got[f"m{i}".encode()]
        assert (row.tags, row.keys, row.properties["src"]) == (f"t{i % 3}", [f"k{i}"], f"s{i}")
    pids = {r.properties["__PID"] for r in back}
    assert all(re.fullmatch(rf"spark-{query.id}-\d+~\d+", p) for p in pids), pids


def test_a_query_restarted_from_its_checkpoint_mid_batch_writes_each_row_once(
    spark: Any, tmp_path: Path
) -> None:
    """Given a query whose second micro-batch fails near the end of one partition, on
    every attempt, after some of that batch's rows were stored, when the query is
    started again from its checkpoint (without the failure), then it re-runs that batch
    as the same query id and batch id and every row is stored exactly once."""
    from pyspark.sql import functions as F

    rayq.Admin().create_topic("restart", queues=2)
    data = files(tmp_path / "in", 3)
    checkpoint = tmp_path / "ck"
    poison = ROWS_PER_FILE + ROWS_PER_FILE // 3 - 5  # the end of batch 1's first partition
    rows = file_stream(spark, data)
    failing = rows.select(
        F.when(F.col("v") == poison, F.raise_error(F.lit("dies mid-batch on purpose")))
        .otherwise(F.col("s"))
        .alias("body")
    )
    first = sink(failing, "restart", checkpoint)
    with pytest.raises(Exception, match="dies mid-batch on purpose"):
        first.awaitTermination(180)
    partial = row_ids(stored(spark, "restart"))
    assert set(range(ROWS_PER_FILE)) <= set(partial)  # batch 0 was written
    assert ROWS_PER_FILE in partial and poison not in partial  # batch 1 in part
    assert max(partial.values()) == 1  # and its task's attempts wrote their rows once

    again = sink(rows.select(F.col("s").alias("body")), "restart", checkpoint)
    again.awaitTermination(180)
    assert again.exception() is None and again.id == first.id  # the checkpoint's query id
    assert row_ids(stored(spark, "restart")) == Counter(range(3 * ROWS_PER_FILE))


def test_a_task_retried_mid_batch_writes_its_rows_once(spark: Any, tmp_path: Path) -> None:
    """Given a micro-batch whose task dies on its first attempt after some of its puts were
    stored, when Spark runs the task again, then each row is stored once."""
    from pyspark import TaskContext
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType

    rayq.Admin().create_topic("retried", queues=2)
    marker = tmp_path / "failed"
    poison = ROWS_PER_FILE // 3 - 5

    @F.udf(StringType())
    def fail_once(v: int, s: str) -> str:  # the first attempt dies near its partition's end
        if v == poison and TaskContext.get().attemptNumber() == 0:
            marker.touch()
            raise RuntimeError("task killed on purpose")
        return s

    rows = file_stream(spark, files(tmp_path / "in", 1))
    query = sink(rows.select(fail_once("v", "s").alias("body")), "retried", tmp_path / "ck")
    query.awaitTermination(180)
    assert query.exception() is None and marker.exists()  # it failed, and was retried
    assert row_ids(stored(spark, "retried")) == Counter(range(ROWS_PER_FILE))


@pytest.mark.parametrize("path", ["jvm", "python"])
def test_write_again_with_the_same_write_id_writes_nothing_twice(
    spark: Any, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``rqspark.write(..., write_id=...)`` twice stores each row once (through rayq's
    sink and through Python tasks); batches of a write id (``batch_id``) each once, and a
    batch id older than one written is refused, adding nothing."""
    if path == "python":
        monkeypatch.setattr(rqspark, "has_source", lambda _spark: False)
    topic = f"again-{path}"
    rayq.Admin().create_topic(topic, queues=2)

    def rows(first: int) -> Any:
        return spark.range(first, first + 300, 1, 3).selectExpr(
            "cast(concat('row#', id, '|') as binary) as body"
        )

    assert rqspark.write(rows(0), topic, write_id="nightly-1") == 300
    assert rqspark.write(rows(0), topic, write_id="nightly-1") == 300  # stored once
    assert messages(topic) == 300
    for batch in (0, 0, 1):  # a batch re-run, then the next one
        rqspark.write(rows(1000 + 300 * batch), topic, write_id="feed", batch_id=batch)
    assert row_ids(stored(spark, topic)) == Counter([*range(300), *range(1000, 1600)])
    with pytest.raises(rayq.InvalidMessageError, match="fenced"):
        rqspark.write(rows(5000), topic, write_id="feed", batch_id=0)
    assert messages(topic) == 900
    with pytest.raises(rayq.ConfigError, match="write_id"):
        rqspark.write(rows(0), topic, write_id="no spaces")
    with pytest.raises(rayq.ConfigError, match="batch_id needs a write_id"):
        rqspark.write(rows(0), topic, batch_id=3)


class Crash(BaseException):
    """Stands for the driver dying after its batch's write, before the commit."""


def test_stream_batches_written_with_their_batch_id_are_stored_once(spark: Any) -> None:
    """Given ``rqspark.stream`` whose ``process`` writes each batch with
    ``write(..., write_id=..., batch_id=batch_id)``, when the driver dies after a batch's
    write and the query runs again, then the re-run batch (same batch id) adds nothing."""
    admin = rayq.Admin()
    admin.create_topic("feed-in", queues=2)
    admin.create_topic("feed-out", queues=2)
    with rayq.Producer(group="pg") as producer:
        producer.send_batch([rayq.Message("feed-in", f"row#{i}|".encode()) for i in range(200)])

    def write_then_crash(df: Any, batch_id: int) -> None:
        rqspark.write(df.select("body"), "feed-out", write_id="feed-etl", batch_id=batch_id)
        raise Crash

    def write(df: Any, batch_id: int) -> None:
        rqspark.write(df.select("body"), "feed-out", write_id="feed-etl", batch_id=batch_id)

    options = {"trigger_interval": 0.2, "max_messages_per_trigger": 120, "starting": "earliest"}
    query = rqspark.stream(spark, "feed-in", "etl", write_then_crash, **options)
    with pytest.raises(Crash):
        query.await_termination(120)
    assert messages("feed-out") == 120  # batch 0, written before the crash
    query = rqspark.stream(spark, "feed-in", "etl", write, **options)
    try:
        deadline = time.monotonic() + 120
        while messages("feed-out") < 200 or (query.last_progress or {}).get("lag", 1):
            assert time.monotonic() < deadline and query.is_active, query.exception()
            time.sleep(0.2)
    finally:
        query.stop(60)
    assert row_ids(stored(spark, "feed-out")) == Counter(range(200))


def test_bad_input_raises_at_start_and_writes_nothing(spark: Any) -> None:
    """A missing topic option, an unknown topic, a column option naming no column or one
    of the wrong type, half the ACL credentials: start() raises the rayq error (Spark's
    IllegalArgumentException carrying it); no query runs, nothing is written."""
    rayq.Admin().create_topic("bad", queues=1)
    df = spark.readStream.format("rate").load().selectExpr("cast(value as string) as body", "value")
    cases = [
        ({}, "ConfigError", "option topic"),
        ({"topic": "no-such-topic"}, "TopicNotFoundError", "does not exist"),
        ({"topic": "bad", "body": "nope"}, "InvalidMessageError", "option body='nope'"),
        ({"topic": "bad", "keys": "value"}, "InvalidMessageError", "option keys='value'"),
        ({"topic": "bad", "accessKey": "app"}, "ConfigError", "secretKey"),
    ]
    for options, error, text in cases:
        writer = df.writeStream.format("rayq").option("namespace", NAMESPACE).options(**options)
        with pytest.raises(Exception, match=f"rayq.errors.{error}: .*{re.escape(text)}") as err:
            writer.option("checkpointLocation", "unused").start()
        raised = rqspark.raised_in_task(err.value)
        assert type(raised).__name__ == error
    assert spark.streams.active == [] and messages("bad") == 0


ACL_RULES = """
[[accounts]]
access_key = "root"
secret_key = "root-secret-0000"
admin = true

[[accounts]]
access_key = "writer"
secret_key = "writer-secret-1111"
topic_perms = ["acl-out=PUB"]

[[accounts]]
access_key = "reader"
secret_key = "reader-secret-2222"
topic_perms = ["acl-out=SUB"]
"""


def test_acl_the_sink_writes_with_credentials_and_refuses_others_at_start(
    spark: Any, tmp_path: Path
) -> None:
    """Given a deployment with ACL on (a second one, in its own namespace, on the same
    Ray), when the sink's options carry the credentials of an account with PUB on the
    topic, then its tasks append with the grants the driver signed; without
    credentials, with a wrong secret or with a SUB-only account, start() raises
    PermissionDeniedError and nothing is written; the secret shows in no plan."""
    cluster = rayq.start(
        tmp_path / "store",
        namespace=ACL_NAMESPACE,
        config=rayq.BrokerConfig(store=STORE, acl_enable=True),
    )
    try:
        for name in cluster.broker_names:
            (cluster.store_dir / name / "config" / "plain_acl.toml").write_text(ACL_RULES)
        (tmp_path / "store" / "config").mkdir(exist_ok=True)  # the coordinator's
        (tmp_path / "store" / "config" / "plain_acl.toml").write_text(ACL_RULES)
        root = rayq.ClientConfig(
            credentials=rayq.Credentials(access_key="root", secret_key="root-secret-0000")
        )
        admin = rayq.Admin(namespace=ACL_NAMESPACE, config=root)
        deadline = time.monotonic() + 60
        while True:  # until the brokers and the coordinator have loaded the file (1/s)
            try:
                admin.create_topic("acl-out", queues=2)
                break
            except rayq.PermissionDeniedError:
                assert time.monotonic() < deadline
                time.sleep(0.2)
        rows = file_stream(spark, files(tmp_path / "in", 1)).selectExpr("s as body")
        for creds, text in [
            ({}, "no credentials"),
            ({"accessKey": "writer", "secretKey": "wrong-secret-9999"}, "bad signature"),
            ({"accessKey": "reader", "secretKey": "reader-secret-2222"}, "no PUB permission"),
        ]:
            with pytest.raises(Exception, match=f"PermissionDeniedError: .*{text}"):
                sink(rows, "acl-out", tmp_path / "refused", namespace=ACL_NAMESPACE, **creds)
        assert spark.streams.active == [] and messages("acl-out", ACL_NAMESPACE, root) == 0
        writer = {"accessKey": "writer", "secretKey": "writer-secret-1111"}
        query = sink(rows, "acl-out", tmp_path / "ck", namespace=ACL_NAMESPACE, **writer)
        query.awaitTermination(180)
        assert query.exception() is None
        assert "writer-secret-1111" not in json.dumps(query.lastProgress)
        back = stored(spark, "acl-out", ACL_NAMESPACE, config=root)
        assert row_ids(back) == Counter(range(ROWS_PER_FILE))
    finally:
        cluster.shutdown()
        rayq.connect(namespace=NAMESPACE)  # the module's deployment again


def test_the_structured_streaming_example_counts_every_click(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """examples/structured_streaming.py's ``run`` (all of ``make demo-streaming`` but the
    start and stop of Ray, rayq and Spark, which this module does): readStream -> a
    watermarked window count -> writeStream; the last count of each window, as the
    example's consumer reads them from page_counts, add up to the clicks it sent."""
    example = load_example("structured_streaming")
    example.run(4.0, 50, tmp_path / "checkpoint")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("Spark session up in"), lines
    assert any(line.startswith("  page_counts: ") for line in lines), lines
    found = re.fullmatch(
        r"sent (\d+) clicks; the last counts of (\d+) windows add up to (\d+) \(all counted\)",
        lines[-1],
    )
    assert found, lines
    sent, windows, counted = map(int, found.groups())
    assert sent == counted > 0 and windows >= 1


def load_example(name: str) -> Any:
    path = Path(__file__).resolve().parents[2] / "examples" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"{name}_example", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_spark_pipeline_example_counts_every_click(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """examples/spark_pipeline.py's ``run`` (``make demo-spark`` but the start and stop of
    Ray, rayq and Spark) against a deployment of its own in this session: the driver loop
    (``rqspark.stream``) counts clicks per page and window into page_counts, and the last
    counts its consumer reads add up to the clicks it sent."""
    cluster = rayq.start(tmp_path / "store", namespace=f"{NAMESPACE}-pipeline")
    try:
        load_example("spark_pipeline").run(3.0, 50)
    finally:
        cluster.shutdown()
        rayq.connect(namespace=NAMESPACE)  # the module's deployment again
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert {line.split()[0] for line in lines} <= {"Spark", "batch", "page_counts:", "sent"}, out
    assert out.startswith("Spark session up in"), out
    assert re.search(r"^batch \d+: [1-9]\d* clicks", out, re.MULTILINE), out
    assert "  page_counts: " in out
    found = re.fullmatch(
        r"sent (\d+) clicks; the sink's final counts add up to (\d+) .*", lines[-1]
    )
    assert found, out
    assert int(found[1]) == int(found[2]) > 0, out
