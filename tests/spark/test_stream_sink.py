"""rayq as a Structured Streaming sink, ``df.writeStream.format("rayq")``, on one RayDP
session: a round trip through rayq's source and sink; exactly once when a query is
restarted from its checkpoint mid-batch and when a task is retried mid-batch;
``rqspark.write(..., write_id=...)`` and ``stream``'s batches written once; bad input and
ACL refused at ``start()`` with nothing written."""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from collections.abc import Iterator
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
NAMESPACE = "rayq-test-stream-sink"
ACL_NAMESPACE = "rayq-test-stream-sink-acl"
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
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    if ray.is_initialized():
        pytest.skip("Ray is already initialized in this process; this module starts its own")
    ray.init(address="local", num_cpus=2, namespace=NAMESPACE, log_to_driver=False)
    cluster = rayq.start(
        tmp_path_factory.mktemp("store"), namespace=NAMESPACE, config=rayq.BrokerConfig(store=STORE)
    )
    try:
        session = rqspark.session(
            "rayq-stream-sink",
            num_executors=1,
            executor_cores=2,
            executor_memory="1g",
            # a failing task is tried twice (not 4 times): failing batches end sooner
            configs={"spark.task.maxFailures": "2"},
            fault_tolerant_mode=False,  # the sink's tasks call the brokers themselves
        )
        if not rqspark.has_source(session):
            pytest.skip("no JDK on this machine to build rayq's Spark source and sink")
        # each file of a test's stream is three partitions of one micro-batch
        session.conf.set("spark.sql.files.maxPartitionBytes", str(96 * 1024))
        session.conf.set("spark.sql.files.openCostInBytes", "0")
        yield session
    finally:
        rqspark.stop_session()
        cluster.shutdown()
        ray.shutdown()


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
