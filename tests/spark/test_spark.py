"""rayq.connectors.spark on one RayDP session: read (planned ranges), write (idempotent, also when
Spark retries a task), stream (crash mid-batch re-runs identical ranges), bad input."""

from __future__ import annotations

import json
import operator
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import ray

import rayq
from rayq.actors.protocol import PAGE_READERS, broker_actor_name, page_reader_actor_name
from rayq.cluster import server_actor
from rayq.connectors import spark as rqspark
from rayq.store import StoreConfig, codec
from rayq.store.hosts import decode_offset_msg_id

pytestmark = [
    pytest.mark.slow,
    pytest.mark.integration,
    # py4j (PySpark's JVM bridge) leaves sockets for the garbage collector to close.
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
    # PySpark 3.5 checks pandas/pyarrow versions with distutils' LooseVersion.
    pytest.mark.filterwarnings("ignore:distutils Version classes:DeprecationWarning"),
]
NAMESPACE = "rayq-test-spark"
SMALL_STORE = StoreConfig.for_tests(
    commitlog_segment_size_bytes=1 << 20,
    cq_entries_per_file=4096,
    index_hash_slots=1024,
    index_entries_max=16384,
    disk_max_used_space_ratio=1.0,
    disk_clean_forcibly_ratio=1.0,
    disk_warning_ratio=1.0,
    max_message_size_bytes=64 * 1024,  # the 20 KB rows of a test
)
COLUMNS = [
    "topic",
    "broker",
    "queue_id",
    "queue_offset",
    "msg_id",
    "tags",
    "keys",
    "body",
    "properties",
    "born_timestamp",
    "store_timestamp",
    "reconsume_times",
]


class Crash(BaseException):
    """Stands for the driver dying mid-batch."""


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    if ray.is_initialized():
        pytest.skip("Ray is already initialized in this process; this module starts its own")
    ray.init(address="local", num_cpus=2, namespace=NAMESPACE, log_to_driver=False)
    cluster = rayq.start(
        tmp_path_factory.mktemp("store"),
        namespace=NAMESPACE,
        config=rayq.BrokerConfig(store=SMALL_STORE),
    )
    try:
        session = rqspark.session(
            "rayq-tests", num_executors=1, executor_cores=2, executor_memory="1g"
        )
        assert rqspark.session("again") is session  # one session per process
        admin = rayq.Admin()
        for topic in ("orders", "copy", "clicks"):
            admin.create_topic(topic, queues=3)
        yield session
    finally:
        rqspark.stop_session()
        cluster.shutdown()
        ray.shutdown()


def send(topic: str, n: int, start: int = 0) -> list[rayq.SendResult]:
    with rayq.Producer(group="pg") as producer:
        out = []
        for i in range(start, start + n, 50):
            msgs = [
                rayq.Message(
                    topic,
                    json.dumps({"i": j}).encode(),
                    tags=f"t{j % 3}",
                    keys=[f"k{j}"],
                    properties={"src": "test"},
                )
                for j in range(i, min(i + 50, start + n))
            ]
            out += producer.send_batch(msgs)
        return out


def test_read_covers_every_queue_with_the_design_columns(spark: object) -> None:
    sent = send("orders", 300)
    df = rqspark.read(spark, "orders", max_messages_per_partition=40)
    assert df.columns == COLUMNS
    assert df.rdd.getNumPartitions() >= 300 // 40
    rows = df.collect()
    assert sorted(json.loads(bytes(r.body))["i"] for r in rows) == list(range(300))
    by_id = {r.msg_id: r for r in rows}
    for s in sent[:20]:
        row = by_id[s.msg_id]
        assert (row.queue_id, row.queue_offset) == (s.queue.queue_id, s.queue_offset)
        i = json.loads(bytes(row.body))["i"]
        assert row.tags == f"t{i % 3}" and row.keys == [f"k{i}"]
        assert row.properties["src"] == "test" and row.topic == "orders"
    first = {q: min(r.queue_offset for r in rows if r.queue_id == q) for q in range(3)}
    part = rqspark.read(spark, "orders", starting={q: o + 10 for q, o in first.items()})
    assert part.count() == 270
    assert rqspark.read(spark, "orders", starting="latest").count() == 0
    counts = {r.tags: r["count"] for r in df.groupBy("tags").count().collect()}
    assert counts == {"t0": 100, "t1": 100, "t2": 100}


def test_rayq_source_reads_only_the_used_columns_and_matches_python_tasks(
    spark: object, monkeypatch: pytest.MonkeyPatch, need_jar: Callable[[object], None]
) -> None:
    """Given rayq's Spark jar (packaged, or compiled with a JDK), when a topic is read,
    then Spark scans it with rayq's DataSource V2 reader asking for the columns the query
    uses (none for a count), and the rows are those that Python tasks (mapInArrow) read."""
    from pyspark.sql import functions as F

    need_jar(spark)
    assert rqspark.has_source(spark)
    rayq.Admin().create_topic("pruned", queues=2)
    send("pruned", 120)

    def plan(df: Any) -> str:
        return str(df._jdf.queryExecution().executedPlan().toString())

    df = rqspark.read(spark, "pruned")
    assert "rayq topic=pruned columns=[body]" in plan(df.select(F.sum(F.length("body"))))
    assert "rayq topic=pruned columns=[]" in plan(df.groupBy().count())
    assert df.count() == 120 and df.select(F.sum(F.length("body"))).first()[0] > 0
    jvm = sorted(df.collect(), key=lambda r: (r.queue_id, r.queue_offset))
    monkeypatch.setattr(rqspark, "has_source", lambda _spark: False)
    python = rqspark.read(spark, "pruned")
    assert "MapInArrow" in plan(python) and "rayq topic=" not in plan(python)
    assert sorted(python.collect(), key=lambda r: (r.queue_id, r.queue_offset)) == jvm


def test_executors_read_bodies_from_the_commit_log_and_check_them(
    spark: object, monkeypatch: pytest.MonkeyPatch, need_jar: Callable[[object], None]
) -> None:
    """Given rayq's Spark source, when the executor runs on the page readers' node, then
    the readers leave the records in the commit log and the tasks read them from its
    files. A record damaged there fails the task's CRC check: the task asks for that page
    whole, and the read leaves the record out as the Python tasks do (a count, which the
    readers answer whole, too)."""
    need_jar(spark)
    rayq.Admin().create_topic("local", queues=2)
    sent = send("local", 200)
    df = rqspark.read(spark, "local").select("queue_id", "queue_offset", "body")

    def pages() -> dict[str, int]:
        readers = [
            ray.get_actor(page_reader_actor_name("broker-a", i), namespace=NAMESPACE)
            for i in range(PAGE_READERS)
        ]
        stats = ray.get([r.stats.remote() for r in readers])
        return {kind: sum(s[kind] for s in stats) for kind in ("refs", "whole")}

    def ids(rows: list[Any]) -> list[int]:
        return sorted(json.loads(bytes(r.body))["i"] for r in rows)

    def python_rows() -> list[Any]:
        with monkeypatch.context() as m:
            m.setattr(rqspark, "has_source", lambda _spark: False)
            return rqspark.read(spark, "local").select("queue_id", "queue_offset", "body").collect()

    key = operator.attrgetter("queue_id", "queue_offset")
    df.count()  # the readers start on the first read
    before = pages()
    jvm = df.collect()
    after = pages()
    assert after["refs"] > before["refs"] and after["whole"] == before["whole"]
    assert ids(jvm) == list(range(200))
    assert sorted(jvm, key=key) == sorted(python_rows(), key=key)
    assert rqspark.read(spark, "local").count() == 200

    broker = server_actor(broker_actor_name("broker-a"), NAMESPACE)
    commitlog = Path(ray.get(broker.broker_info.remote()).store_dir) / "commitlog"
    _host, offset = decode_offset_msg_id(sent[77].offset_msg_id)
    flip_body_byte(commitlog, offset, SMALL_STORE.commitlog_segment_size_bytes)
    try:
        before = pages()
        jvm = df.collect()
        assert pages()["whole"] > before["whole"]  # the damaged page, asked for again
        assert ids(jvm) == [i for i in range(200) if i != 77]
        assert sorted(jvm, key=key) == sorted(python_rows(), key=key)
        assert rqspark.read(spark, "local").count() == 199  # counted whole, by the readers
    finally:
        flip_body_byte(commitlog, offset, SMALL_STORE.commitlog_segment_size_bytes)


def flip_body_byte(commitlog_dir: Path, offset: int, segment_size: int) -> None:
    """Flip the first body byte of the record at commit-log ``offset`` in its segment file
    (the broker's mapping sees it); flipping it again restores it."""
    start = offset - offset % segment_size
    position = offset - start + codec.HEADER_SIZE
    fd = os.open(commitlog_dir / f"{start:020d}", os.O_RDWR)
    try:
        os.pwrite(fd, bytes([os.pread(fd, 1, position)[0] ^ 0x01]), position)
    finally:
        os.close(fd)


def test_write_round_trip(spark: object) -> None:
    src = rqspark.read(spark, "orders").select("body", "tags", "keys", "properties")
    assert (
        rqspark.write(
            src,
            "copy",
            body_col="body",
            keys_col="keys",
            tags_col="tags",
            properties_col="properties",
        )
        == 300
    )
    back = rqspark.read(spark, "copy").collect()
    assert len(back) == 300 and {r.properties["src"] for r in back} == {"test"}
    got = {json.loads(bytes(r.body))["i"]: r for r in back}
    assert sorted(got) == list(range(300))
    assert got[7].tags == "t1" and got[7].keys == ["k7"]


def test_executors_on_the_brokers_node_hand_rows_over_in_shared_memory(
    spark: object, need_jar: Callable[[object], None]
) -> None:
    """Given rayq's Spark sink and the broker on the executor's node, when a DataFrame is
    written, then every put's rows come through a shared-memory slot (none through Ray),
    no slot file is left behind, and each row arrives once. A restarted broker no longer
    holds the executor's slots: the puts are sent again through Ray, and the next write
    still delivers each row once."""
    need_jar(spark)
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm on this machine")
    rayq.Admin().create_topic("handover", queues=2)
    broker = ray.get_actor(broker_actor_name("broker-a"), namespace=NAMESPACE)

    def rows(prefix: str) -> Any:
        return spark.range(0, 2000, 1, 2).selectExpr(  # type: ignore[attr-defined]
            f"cast(concat('{prefix}-', id) as binary) as body"
        )

    def stored() -> list[bytes]:
        return sorted(bytes(r.body) for r in rqspark.read(spark, "handover").collect())

    before = ray.get(broker.put_arrow_stats.remote())
    assert rqspark.write(rows("a"), "handover") == 2000
    after = ray.get(broker.put_arrow_stats.remote())
    assert after["shared"] >= before["shared"] + 2 and after["inline"] == before["inline"]
    assert not [f for f in os.listdir("/dev/shm") if f.startswith("rayq-put-")]
    assert stored() == sorted(f"a-{i}".encode() for i in range(2000))

    ray.kill(broker, no_restart=False)
    deadline = time.monotonic() + 60
    while True:
        try:
            ray.get(broker.ready.remote(), timeout=5)
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    assert rqspark.write(rows("b"), "handover") == 2000
    assert ray.get(broker.put_arrow_stats.remote())["inline"] >= 1  # the slots it lost
    assert stored() == sorted(
        [f"a-{i}".encode() for i in range(2000)] + [f"b-{i}".encode() for i in range(2000)]
    )


@pytest.mark.parametrize("sink", ["jvm", "python"])
def test_retried_tasks_do_not_duplicate(
    spark: object, sink: str, monkeypatch: pytest.MonkeyPatch, need_jar: Callable[[object], None]
) -> None:
    """Given a write whose first attempt of partition 0 dies after some of its puts were
    appended (20 KB rows: Python tasks put 4 MiB, the JVM here every 64 rows), when
    Spark runs the task again, then every row is stored once: through rayq's Spark sink
    (the JVM) and through Python tasks."""
    from pyspark import TaskContext
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType

    if sink == "jvm":
        need_jar(spark)
    if sink == "python":
        monkeypatch.setattr(rqspark, "has_source", lambda _spark: False)
    monkeypatch.setattr(rqspark, "JVM_PUT_BYTES", 64 * 20_000)  # the JVM: puts of 64 rows
    topic = f"retried-{sink}"
    rayq.Admin().create_topic(topic, queues=2)
    marker = Path(str(spark.conf.get("spark.local.dir", "/tmp"))) / f"rayq-retry-{topic}"

    @F.udf(StringType())
    def fail_once(i: str) -> str:  # the first attempt of partition 0 dies near its end
        ctx = TaskContext.get()
        if ctx.partitionId() == 0 and ctx.attemptNumber() == 0 and i.endswith("#900"):
            marker.touch()
            raise RuntimeError("task killed on purpose")
        return i

    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "20")
    try:
        rows = spark.range(0, 2000, 1, 2).select(F.concat(F.lit("row#"), F.col("id")).alias("s"))
        df = rows.select(F.concat(fail_once("s"), F.lit("|" + "x" * 20_000)).alias("body"))
        assert rqspark.write(df, topic) == 2000
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    assert marker.exists()  # the first attempt did fail and was retried
    marker.unlink()
    got = [bytes(r.body).decode().split("|")[0] for r in rqspark.read(spark, topic).collect()]
    assert sorted(got) == sorted(f"row#{i}" for i in range(2000))  # none twice


def test_sink_errors_raised_in_tasks_are_rayq_errors(
    spark: object, need_jar: Callable[[object], None]
) -> None:
    """A row the broker refuses (a reserved property) fails the write with the broker's
    InvalidMessageError, raised again on the driver."""
    need_jar(spark)
    rows = spark.createDataFrame(  # type: ignore[attr-defined]
        [(b"x", {"DELAY": "3"})], "body binary, props map<string, string>"
    )
    with pytest.raises(rayq.InvalidMessageError, match="DELAY") as refused:
        rqspark.write(rows, "copy", properties_col="props")
    assert "raised in a Spark task" in str(refused.value)


def test_bad_input_raises_rayq_errors(spark: object) -> None:
    with pytest.raises(rayq.TopicNotFoundError):
        rqspark.read(spark, "no-such-topic")
    with pytest.raises(rayq.InvalidOffsetError):
        rqspark.read(spark, "orders", starting="beginning")
    with pytest.raises(rayq.InvalidOffsetError):
        rqspark.read(spark, "orders", ending={99: 1})
    df = spark.createDataFrame([(1, "a")], "n int, s string")
    with pytest.raises(rayq.InvalidMessageError, match="no such column"):
        rqspark.write(df, "copy", body_col="missing")
    with pytest.raises(rayq.InvalidMessageError, match="must be binary or string"):
        rqspark.write(df, "copy", body_col="n")
    with pytest.raises(rayq.InvalidMessageError, match="tags_col"):
        rqspark.write(df, "copy", body_col="s", tags_col="n")
    with pytest.raises(rayq.ConfigError):
        rqspark.stream(spark, "orders", "g", process="not callable")  # type: ignore[arg-type]
    assert rqspark.read(spark, "orders").count() == 300  # nothing was harmed


@pytest.mark.parametrize("path", ["jvm", "python"])
@pytest.mark.parametrize("null_id", [0, 33])  # in the first partition, in the last
def test_null_bodies_raise_before_anything_is_written(
    spark: object, path: str, null_id: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check before a write: rayq's jar (one stage, each task stops at its first null)
    or, without it, an aggregating pass."""
    if path == "python":
        monkeypatch.setattr(rqspark, "has_source", lambda _spark: False)
    stored = sum(q.max_offset for q in rayq.Admin().topic_stats("copy"))
    nulls = spark.range(0, 40, 1, 4).selectExpr(
        f"if(id = {null_id}, null, cast(cast(id as string) as binary)) as body"
    )
    with pytest.raises(rayq.InvalidMessageError, match="null bodies"):
        rqspark.write(nulls, "copy")
    assert sum(q.max_offset for q in rayq.Admin().topic_stats("copy")) == stored  # none written
    assert rqspark.read(spark, "copy").count() == stored  # and the topic reads as before


def test_stream_crash_mid_batch_reruns_identical_ranges(spark: object) -> None:
    send("clicks", 120)
    seen: list[tuple[int, list[int]]] = []

    def crash(df: object, batch_id: int) -> None:
        seen.append((batch_id, sorted(r.queue_offset * 10 + r.queue_id for r in df.collect())))
        raise Crash

    query = rqspark.stream(
        spark,
        "clicks",
        "etl",
        crash,
        trigger_interval=0.2,
        max_messages_per_trigger=50,
        starting="earliest",
    )
    with pytest.raises(Crash):
        query.await_termination(120)
    send("clicks", 30, start=120)

    partitions: list[int] = []

    def collect(df: object, batch_id: int) -> None:
        partitions.append(df.rdd.getNumPartitions())  # type: ignore[attr-defined]
        seen.append((batch_id, sorted(r.queue_offset * 10 + r.queue_id for r in df.collect())))

    query = rqspark.stream(
        spark, "clicks", "etl", collect, trigger_interval=0.2, max_messages_per_trigger=50
    )
    try:
        end = time.monotonic() + 120
        while sum(len(s[1]) for s in seen[1:]) < 150:
            assert time.monotonic() < end and query.is_active, query.exception()
            time.sleep(0.2)
    finally:
        query.stop(60)
    assert seen[1] == seen[0]  # the re-run: same batch id, same messages
    ids = [s[0] for s in seen[1:]]
    assert ids == list(range(ids[0], ids[0] + len(ids)))
    after = [x for s in seen[1:] for x in s[1]]
    assert len(after) == len(set(after)) == 150  # nothing lost, nothing twice after the re-run
    progress = query.last_progress
    assert progress is not None and {"num_input_rows", "lag", "durations_ms"} <= set(progress)
    assert {"batchId", "numInputRows", "durationMs"} <= set(progress)
    assert set(partitions) == {1}  # a batch of 3 queues' ranges, small: one partition


ACL_NAMESPACE = "rayq-test-spark-acl"
ACL_APP = rayq.Credentials(access_key="app", secret_key="app-secret-123456")
ACL_RULES = """
[[accounts]]
access_key = "app"
secret_key = "app-secret-123456"
admin = true
"""


def test_acl_read_stream_and_write_sign_with_credentials(spark: object, tmp_path: Path) -> None:
    """Given a deployment with ACL on (a second one, in its own namespace, on the same Ray),
    when read, stream and write carry credentials, then the driver and the executors sign
    every broker call; without credentials, read and write raise PermissionDeniedError;
    the secret shows in no plan or error."""
    cluster = rayq.start(
        tmp_path,
        namespace=ACL_NAMESPACE,
        config=rayq.BrokerConfig(store=SMALL_STORE, acl_enable=True),
    )
    try:
        for name in cluster.broker_names:
            (cluster.store_dir / name / "config" / "plain_acl.toml").write_text(ACL_RULES)
        (tmp_path / "config").mkdir(exist_ok=True)  # the coordinator's, under the store dir
        (tmp_path / "config" / "plain_acl.toml").write_text(ACL_RULES)
        config = rayq.ClientConfig(credentials=ACL_APP)
        admin = rayq.Admin(namespace=ACL_NAMESPACE, config=config)
        deadline = time.monotonic() + 60
        while True:  # until the brokers and the coordinator have loaded the file (1/s)
            try:
                admin.create_topic("acl-in", queues=2)
                break
            except rayq.PermissionDeniedError:
                assert time.monotonic() < deadline
                time.sleep(0.2)
        admin.create_topic("acl-out", queues=2)
        with rayq.Producer("acl-pg", namespace=ACL_NAMESPACE, config=config) as producer:
            producer.send_batch([rayq.Message("acl-in", f"m{i}".encode()) for i in range(30)])

        df = rqspark.read(spark, "acl-in", namespace=ACL_NAMESPACE, config=config)
        plan = df._jdf.queryExecution().toString()  # type: ignore[attr-defined]
        assert ACL_APP.secret_key not in plan
        written = rqspark.write(
            df.select("body"), "acl-out", namespace=ACL_NAMESPACE, config=config
        )
        assert written == 30
        seen: list[int] = []
        query = rqspark.stream(
            spark,
            "acl-out",
            "acl-etl",
            lambda d, _: seen.append(d.count()),
            trigger_interval=0.2,
            starting="earliest",
            namespace=ACL_NAMESPACE,
            config=config,
        )
        try:
            end = time.monotonic() + 120
            while sum(seen) < 30:
                assert time.monotonic() < end and query.is_active, query.exception()
                time.sleep(0.2)
        finally:
            query.stop(60)
        assert sum(seen) == 30 and query.exception() is None

        with pytest.raises(rayq.PermissionDeniedError, match="no credentials"):
            rqspark.read(spark, "acl-in", namespace=ACL_NAMESPACE)
        rows = spark.createDataFrame([(b"x",)], "body binary")  # type: ignore[attr-defined]
        with pytest.raises(rayq.PermissionDeniedError, match="no credentials") as refused:
            rqspark.write(rows, "acl-out", namespace=ACL_NAMESPACE)
        assert ACL_APP.secret_key not in str(refused.value)
    finally:
        cluster.shutdown()
