"""Spark on Ray (RayDP): a topic as a Spark source and sink. Needs the ``spark`` extra.

    from rayq import spark as rqspark
    spark = rqspark.session("etl", num_executors=2, executor_cores=1, executor_memory="1g")
    df = rqspark.read(spark, "orders", starting="earliest", ending="latest")
    query = rqspark.stream(spark, "orders", group="etl", process=fn)  # fn(df, batch_id)
    rqspark.write(df, "results", body_col="body")

``read`` fixes offset ranges on the driver (rayq/connectors/ranges.py), deals them to as few
Spark partitions as keep the session's cores busy (``ranges.pack``, as Spark sizes
file splits), and each task reads its ranges from the broker actor as Arrow, so a
retried task re-reads exactly the same messages: through rayq's Spark source (Java,
rayq/connectors/jvm: only the columns the query uses, no Python worker) when the session has it
(rayq/connectors/spark_jar.py), else in Python tasks (``mapInArrow``; rayq/connectors/arrow_io.py).
``stream`` runs micro-batches from the driver (rayq/connectors/streaming.py): ranges recorded
with the coordinator before a batch runs, offsets committed (compare-and-set) only
after ``process(df, batch_id)`` returns. ``write`` sends
each partition to one queue with idempotent puts (producer id per write and
partition, sequence numbers per row), so re-run tasks do not duplicate messages:
through rayq's Spark sink (Arrow batches from the JVM, encoded by the broker) or
Python tasks, by the same rule as ``read``. ``write_id`` (and ``batch_id``) make those
producer ids the caller's, so a write run again, or a stream's batch re-run, adds
nothing. Spark's own ``df.writeStream.format("rayq")`` is the same sink driven by
Structured Streaming (rayq/connectors/stream_sink.py).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import sys
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import ray

from rayq.actors.protocol import broker_actor_name
from rayq.actors.protocol.auth import Credentials
from rayq.actors.protocol.config import ClientConfig
from rayq.connectors import spark_bridge, spark_jar, stream_sink
from rayq.connectors.arrow_io import (
    Columns,
    check_columns,
    ensure_ray,
    page_readers,
    read_range,
    write_batches,
)
from rayq.connectors.ranges import OffsetRange, check_max, pack, plan_ranges
from rayq.connectors.streaming import StreamingQuery
from rayq.quiet import quiet_children
from rayq.store.errors import ConfigError, InvalidMessageError, RayqError, all_error_classes
from rayq.store.names import validate_group, validate_topic
from rayq.transport.context import ClientContext
from rayq.transport.namespace import current_namespace

logger = logging.getLogger(__name__)

# Java 17 hides JDK internals Spark and Arrow use; without these, Arrow transfers
# (mapInArrow, ray.data.from_spark) fail with InaccessibleObjectException.
JAVA17_OPTIONS = " ".join(
    [
        f"--add-opens=java.base/{p}=ALL-UNNAMED"
        for p in (
            "java.lang",
            "java.lang.invoke",
            "java.lang.reflect",
            "java.io",
            "java.net",
            "java.nio",
            "java.math",
            "java.text",
            "java.util",
            "java.util.concurrent",
            "java.util.concurrent.atomic",
            "sun.nio.ch",
            "sun.nio.cs",
            "sun.security.action",
            "sun.util.calendar",
        )
    ]
    + [
        "--add-exports=java.base/sun.nio.ch=ALL-UNNAMED",
        "-Dio.netty.tryReflectionSetAccessible=true",
    ]
)
JAVA_OPTION_KEYS = (
    "spark.ray.raydp_app_master.extraJavaOptions",
    "spark.driver.extraJavaOptions",
    "spark.executor.extraJavaOptions",
)
# A Spark task reads at most this many messages (about 256 MiB of 1 KiB messages).
MAX_MESSAGES_PER_PARTITION = 262_144
# A Spark task's pages: larger than Ray Data's (arrow_io.PAGE_BYTES), near Spark's Arrow
# batches (10,000 rows); fewer calls per task (scan ~10% faster than 4 MiB pages).
PAGE_BYTES = 16 * 1024 * 1024
# Arrow bytes per put of rayq's Spark sink (the broker cuts them into batches of
# ClientConfig.batch_max_bytes of records: actors/broker.py put_arrow).
JVM_PUT_BYTES = stream_sink.JVM_PUT_BYTES
# session()'s one warning when rayq has no Spark jar and no JDK to compile one.
NO_JAR_WARNING = (
    "rayq's Spark jar is not installed and there is no JDK (javac) to compile it: Spark "
    "reads and writes use Python tasks (mapInArrow), which read every column and are "
    "slower. Install a JDK (Debian/Ubuntu: apt-get install openjdk-17-jdk-headless) or a "
    "rayq wheel that carries the jar (built with `pip wheel .` on a machine with a JDK)."
)
_session: Any = None


def session(
    app_name: str = "rayq",
    num_executors: int = 1,
    executor_cores: int = 1,
    executor_memory: str | int = "1g",
    configs: dict[str, str] | None = None,
    *,
    fault_tolerant_mode: bool = True,
) -> Any:
    """The process's RayDP SparkSession (made once; later calls return it), with the
    JDK 17 module flags set for the RayDP app master, the driver and the executors,
    and rayq's Spark jar (``spark_jar.jar()``: the wheel's, else compiled on first use)
    on the driver's class path and shipped to the executors. Without one (no jar in
    the wheel, no JDK to compile it) it logs one warning saying what to install, and
    reads and writes use Python tasks.

    ``fault_tolerant_mode`` is RayDP's: the driver's JVM joins Ray (about 1 s of the
    start), which ``ray.data.from_spark`` needs; rayq's read, stream and write do not
    (their tasks talk to the brokers themselves), so False starts faster."""
    global _session
    if _session is not None:
        return _session
    import raydp

    if not ray.is_initialized():
        raise ConfigError("Ray is not initialized: call rayq.start() or rayq.connect() first")
    for name, n in (("num_executors", num_executors), ("executor_cores", executor_cores)):
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ConfigError(f"{name} must be an int >= 1, got {n!r}")
    conf = {
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.showConsoleProgress": "false",  # no progress bars over the output
        **(configs or {}),
    }
    for key in JAVA_OPTION_KEYS:
        conf[key] = f"{conf[key]} {JAVA17_OPTIONS}" if conf.get(key) else JAVA17_OPTIONS
    source = spark_jar.jar()  # rayq's Spark source and sink (None: none packaged, no JDK)
    if source is None and spark_jar.javac() is None:  # (a failed compile has warned)
        logger.warning(NO_JAR_WARNING)
    if source is not None:  # the driver plans with it; Spark ships it to every executor
        for key, sep in (("spark.driver.extraClassPath", os.pathsep), ("spark.jars", ",")):
            conf[key] = f"{conf[key]}{sep}{source}" if conf.get(key) else str(source)
    logs = _ray_logs_dir()
    if logs:  # RayDP's driver agent logs there; its default (session_latest) may be stale
        conf["spark.driver.extraJavaOptions"] += f" -Dray.logging.dir={logs}"
    # Executors run Python tasks with PYSPARK_PYTHON as the driver sets it (default:
    # python3 on PATH, which may lack pyspark and rayq): this interpreter, unless set.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    with quiet_children():  # the Spark driver's JVM: without its start-up notices
        _session = raydp.init_spark(
            app_name,
            num_executors,
            executor_cores,
            executor_memory,
            fault_tolerant_mode=fault_tolerant_mode,
            configs=conf,
        )
    if source is not None:  # readStream / writeStream.format("rayq") plan through it
        spark_bridge.install(_session)
    return _session


def stop_session() -> None:
    """Stop the RayDP session made by :func:`session` (Ray keeps running)."""
    global _session
    if _session is not None:
        import raydp

        spark_bridge.forget(_session)
        _session = None
        raydp.stop_spark()


@functools.cache
def spark_schema() -> Any:
    """``SCHEMA`` as a Spark StructType (the columns ``read`` returns)."""
    from pyspark.sql import types as T

    s = T.StringType()
    return T.StructType(
        [
            T.StructField("topic", s),
            T.StructField("broker", s),
            T.StructField("queue_id", T.IntegerType()),
            T.StructField("queue_offset", T.LongType()),
            T.StructField("msg_id", s),
            T.StructField("tags", s),
            T.StructField("keys", T.ArrayType(s)),
            T.StructField("body", T.BinaryType(), nullable=False),  # write skips its null check
            T.StructField("properties", T.MapType(s, s)),
            T.StructField("born_timestamp", T.TimestampType()),
            T.StructField("store_timestamp", T.TimestampType()),
            T.StructField("reconsume_times", T.IntegerType()),
        ]
    )


def _ray_logs_dir() -> str | None:
    node = getattr(ray._private.worker, "_global_node", None)
    return node.get_logs_dir_path() if node is not None else None


def _ray_address() -> str:
    return ray.get_runtime_context().gcs_address


def ranges_df(
    spark: Any,
    topic: str,
    ranges: list[OffsetRange],
    namespace: str | None = None,
    page_bytes: int = PAGE_BYTES,
    *,
    credentials: Credentials | None = None,
    max_messages_per_partition: int = MAX_MESSAGES_PER_PARTITION,
) -> Any:
    """A DataFrame of the messages in ``ranges``, dealt to partitions by ``pack`` (as
    few as keep the session's cores busy, at most ``max_messages_per_partition``
    messages each), each read by its Spark task with requests signed with
    ``credentials`` (if given). The partitions come from ``spark.range`` (made in the
    JVM): task i reads the ranges of partition i, which travel in the task's closure."""
    ns = namespace or current_namespace()
    tasks = pack(ranges, max_messages_per_partition, spark.sparkContext.defaultParallelism)
    if not tasks:
        return spark.createDataFrame([], spark_schema())
    if _through_jvm(spark, credentials):
        return _source_df(spark, topic, tasks, ns, page_bytes)
    address = _ray_address()
    kwargs: dict[str, Any] = {"credentials": credentials, "page_bytes": page_bytes}

    def read_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        ensure_ray(address, ns)
        for batch in batches:
            for task in batch.column(0).to_pylist():
                for r in tasks[task]:
                    yield from read_range(topic, r, ns, **kwargs)

    plan = spark.range(0, len(tasks), 1, len(tasks))
    return plan.mapInArrow(read_partition, spark_schema())


def has_source(spark: Any) -> bool:
    """Whether ``spark``'s driver can load rayq's Spark source and sink (connectors/spark_jar.py;
    sessions made by :func:`session` have them when a JDK was there to build them)."""
    try:
        spark._jvm.org.apache.spark.util.Utils.classForName(spark_jar.SOURCE_CLASS, True, False)
        return True
    except Exception:  # py4j's error for ClassNotFoundException (or no JVM at all)
        return False


def _through_jvm(spark: Any, credentials: Credentials | None) -> bool:
    """Whether reads and writes go through rayq's Spark source and sink: the session has
    them, and no ACL credentials are to sign requests (the JVM does not sign)."""
    return credentials is None and has_source(spark)


def _source_df(
    spark: Any, topic: str, tasks: list[list[OffsetRange]], namespace: str, page_bytes: int
) -> Any:
    """The tasks' messages through rayq's Spark source (connectors/jvm): Spark prunes the columns
    a query does not use, and the executors' JVMs call the brokers (no Python tasks)."""
    # by actor name: the page readers of the replica serving each broker's reads now (a
    # slave while its master is lost, as the Python tasks' reads do), task i reading
    # from reader i of each (actors/page_reader.py)
    readers = {b: page_readers(namespace, b) for b in {r.broker for task in tasks for r in task}}
    plan = [
        [[readers[r.broker][i % len(readers[r.broker])], r.queue_id, r.start, r.end] for r in task]
        for i, task in enumerate(tasks)
    ]
    options = {
        "namespace": namespace,
        "topic": topic,
        "page_bytes": str(page_bytes),
        "tasks": json.dumps(plan),
    }
    return (
        spark.read.format(spark_jar.SOURCE_CLASS).schema(spark_schema()).options(**options).load()
    )


def read(
    spark: Any,
    topic: str,
    starting: object = "earliest",
    ending: object = "latest",
    *,
    max_messages_per_partition: int = MAX_MESSAGES_PER_PARTITION,
    skip_unavailable: bool = False,
    namespace: str | None = None,
    config: ClientConfig | None = None,
) -> Any:
    """The messages of ``topic`` between ``starting`` and ``ending`` as a DataFrame
    (columns: topic, broker, queue_id, queue_offset, msg_id, tags, keys, body,
    properties, born_timestamp, store_timestamp, reconsume_times). Offset specs are
    described in rayq/connectors/ranges.py; the ranges are fixed now, the data is read when the
    DataFrame is evaluated. A broker holding the topic that is down raises
    BrokerUnavailableError, unless ``skip_unavailable`` (then its queues are left out).
    With ACL on, ``config=ClientConfig(credentials=...)`` signs the planning calls and
    every task's reads."""
    validate_topic(topic)
    ctx = ClientContext(config, namespace)
    ranges = plan_ranges(ctx, topic, starting, ending, max_messages_per_partition, skip_unavailable)
    return ranges_df(
        spark,
        topic,
        ranges,
        ctx.namespace,
        credentials=ctx.config.credentials,
        max_messages_per_partition=max_messages_per_partition,
    )


def stream(
    spark: Any,
    topic: str,
    group: str,
    process: Callable[[Any, int], Any],
    trigger_interval: float = 1.0,
    max_messages_per_trigger: int = 100_000,
    *,
    starting: object = "latest",
    max_messages_per_partition: int = MAX_MESSAGES_PER_PARTITION,
    namespace: str | None = None,
    config: ClientConfig | None = None,
) -> StreamingQuery:
    """Start a micro-batch query, foreachBatch style: every ``trigger_interval`` seconds,
    up to ``max_messages_per_trigger`` new messages as one DataFrame to
    ``process(df, batch_id)`` (read when ``process`` runs an action on it, in partitions as
    ``read`` makes them: one for a small batch; the engine itself runs no Spark job);
    the group's offsets are committed after it returns (see rayq/connectors/streaming.py).
    A batch re-run after a crash has its batch id and ranges, so ``process`` writing with
    ``write(df, topic, write_id=<a name for this query>, batch_id=batch_id)`` stores each
    message once. With ACL on, ``config=ClientConfig(credentials=...)`` signs the offset
    queries and commits and every task's reads."""
    if not callable(process):
        raise ConfigError(f"process must be callable as process(df, batch_id), got {process!r}")
    check_max("max_messages_per_partition", max_messages_per_partition)
    ns = namespace or current_namespace()
    # (a config that is not a ClientConfig makes StreamingQuery raise ConfigError)
    credentials = config.credentials if isinstance(config, ClientConfig) else None

    def run_batch(ranges: list[OffsetRange], batch_id: int) -> None:
        # A small batch is one partition (a task's start costs more than its reads).
        df = ranges_df(
            spark,
            topic,
            ranges,
            ns,
            credentials=credentials,
            max_messages_per_partition=max_messages_per_partition,
        )
        process(df, batch_id)

    query = StreamingQuery(
        topic,
        group,
        run_batch,
        trigger_interval=trigger_interval,
        max_messages_per_trigger=max_messages_per_trigger,
        starting=starting,
        namespace=ns,
        config=config,
    )
    return query.start()


def write(
    df: Any,
    topic: str,
    body_col: str = "body",
    keys_col: str | None = None,
    tags_col: str | None = None,
    properties_col: str | None = None,
    *,
    write_id: str | None = None,
    batch_id: int | None = None,
    group: str = "rayq-spark-writer",
    namespace: str | None = None,
    config: ClientConfig | None = None,
) -> int:
    """Send every row of ``df`` to ``topic``; returns the number of rows of ``df`` (each
    stored once).

    ``body_col`` is binary or string; ``keys_col`` string (space-separated) or
    array<string>; ``tags_col`` string; ``properties_col`` map<string, string>. Each
    partition goes to one write queue (spread over brokers) with idempotent puts, signed
    with ``config.credentials`` when ACL is on.

    ``write_id`` (letters, digits, ``.``, ``_``, ``-``) names the write's idempotent
    producers, ``spark-<write_id>-<partition>``: written again with the same ``write_id``,
    a DataFrame whose partitions hold the same rows in the same order adds nothing
    (without one, each call is a new write). ``batch_id``: the write is batch
    ``batch_id`` of a stream of writes under ``write_id`` (``foreachBatch``, or
    :func:`stream`'s ``process``), whose batch ids only grow and each of which completes
    before the next starts: a batch re-run after a failure adds only what it had not
    written, the broker keeps one producer entry per partition for the whole stream,
    and a batch id older than one written already is refused (InvalidMessageError).
    """
    validate_topic(topic)
    validate_group(group)
    cols = Columns(body_col, keys_col, tags_col, properties_col)
    for arg, name in (
        ("body_col", body_col),
        ("keys_col", keys_col),
        ("tags_col", tags_col),
        ("properties_col", properties_col),
    ):
        if name is not None and not isinstance(name, str):
            raise InvalidMessageError(f"{arg} must be a column name, got {name!r}")
    _check_batch_id(write_id, batch_id)
    wid = stream_sink.check_write_id(write_id) if write_id is not None else uuid.uuid4().hex[:12]
    check_columns(stream_sink.arrow_schema_of(df.schema), cols)
    _check_no_null_bodies(df, body_col)
    ctx = ClientContext(config, namespace)
    credentials = ctx.config.credentials
    targets = stream_sink.write_targets(ctx.write_queues(topic, refresh=True))
    if not targets:
        raise InvalidMessageError(f"topic {topic!r} has no writeable queue")
    ns, address = ctx.namespace, _ray_address()
    needed = [c for c in (body_col, keys_col, tags_col, properties_col) if c]

    if _through_jvm(df.sparkSession, credentials):
        nodes = stream_sink.broker_nodes(ctx)
        plan = [[broker_actor_name(b), qid, nodes.get(b, ""), ""] for b, qid in targets]
        options = stream_sink.jvm_write_options(ns, topic, group, wid, plan, cols, JVM_PUT_BYTES)
        options["call_id"] = uuid.uuid4().hex  # the rows written are kept under it
        if batch_id is not None:
            options["batch_id"] = str(batch_id)
        return _raising_task_errors(lambda: _sink_write(df.select(*needed), options))

    def write_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        ensure_ray(address, ns)
        task = TaskContext.get()
        assert task is not None  # this runs in a Spark task
        part = task.partitionId()
        broker, qid = targets[part % len(targets)]
        n = write_batches(
            batches,
            topic,
            broker,
            qid,
            stream_sink.producer_id(wid, part, batch_id),
            cols,
            ns,
            group,
            credentials=credentials,
        )
        yield pa.RecordBatch.from_pydict({"rows": [n]}, schema=pa.schema([("rows", pa.int64())]))

    def run() -> int:
        out = df.select(*needed).mapInArrow(write_partition, "rows long").collect()
        return sum(r["rows"] for r in out)

    return _raising_task_errors(run)


def _check_batch_id(write_id: object, batch_id: object) -> None:
    if batch_id is None:
        return
    if write_id is None:
        raise ConfigError("batch_id needs a write_id (the stream of writes it belongs to)")
    if not isinstance(batch_id, int) or isinstance(batch_id, bool) or not 0 <= batch_id < 10**18:
        raise ConfigError(f"batch_id must be an int in 0..10^18, got {batch_id!r}")


def _sink_write(df: Any, options: dict[str, str]) -> int:
    """``df`` appended through rayq's Spark sink (rayq/connectors/jvm RayqWrite): the executors'
    JVMs send Arrow batches to the brokers (no Python tasks); the rows it wrote."""
    df.write.format(spark_jar.SOURCE_CLASS).options(**options).mode("append").save()
    written = df.sparkSession._jvm.io.rayq.spark.RayqWrite.written(options["call_id"])
    return int(written)


def _raising_task_errors(run: Callable[[], int]) -> int:
    """``run()``, a rayq error raised in one of its Spark tasks raised again as itself."""
    try:
        return run()
    except Exception as exc:
        raised = raised_in_task(exc)
        if raised is None:
            raise
        raise raised from exc


def _check_no_null_bodies(df: Any, body_col: str) -> None:
    """InvalidMessageError, before any task writes, if ``body_col`` has a null. Costs one
    Spark job over the column unless the schema says it cannot be null (as after
    ``df.where(col(body_col).isNotNull())``)."""
    if not df.schema[body_col].nullable:
        return
    if _has_null(df, body_col):
        raise InvalidMessageError(
            f"column {body_col!r} has null bodies; a message needs one: fill them or filter "
            f"them out (df.where(col({body_col!r}).isNotNull())); nothing was written",
            column=body_col,
        )


def _has_null(df: Any, column: str) -> bool:
    """Whether ``column`` of ``df`` has a null: with rayq's jar one Spark job of one stage
    (rayq/connectors/jvm NullCheck), else one aggregating pass (two stages; a limit(1) count also
    runs two and scales its first one up)."""
    if has_source(df.sparkSession):
        return bool(df.sparkSession._jvm.io.rayq.spark.NullCheck.hasNull(df._jdf, column))
    from pyspark.sql import functions as F

    return bool(df.select(F.max(F.col(column).isNull())).first()[0])


# The last line of a Python worker's traceback, as Spark's job error quotes it.
_TASK_ERROR = re.compile(r"^rayq(?:\.store)?\.errors\.(\w+): (.*)$", re.MULTILINE)


def raised_in_task(exc: BaseException) -> RayqError | None:
    """The rayq error a Spark task raised, rebuilt from the job's error (Spark carries
    only its text), e.g. PermissionDeniedError for a write refused by ACL; None if the
    task raised something else."""
    found = _TASK_ERROR.findall(str(exc))
    if not found:
        return None
    name, message = found[-1]
    classes = {cls.__name__: cls for cls in all_error_classes()}
    cls = classes.get(name)
    return cls(f"{message} (raised in a Spark task)") if cls is not None else None


__all__ = ["JAVA17_OPTIONS", "read", "session", "spark_schema", "stop_session", "stream", "write"]
