"""Spark on Ray figures: write and read 1 M messages of 1 KiB, streaming end-to-end latency.

Run: ``make bench-spark`` or ``.venv/bin/python benchmarks/spark_bench.py [--messages N]``.
Starts a local Ray with one embedded broker (store in a throwaway directory) and a
RayDP session (its start-up time is printed on its own), then prints:

* session start, step by step: RayDP's app master (a Ray actor that starts a JVM),
  the driver's JVM and SparkContext, the driver joining Ray, and the first job
  (which waits for the executor, a Ray Java actor, to start and register);
* write: ``rayq.spark.write`` of N rows with 1 KiB bodies (idempotent puts); the same
  rows are also written to Parquet in a temp dir by the same session;
* read: ``rayq.spark.read(...).count()`` and a full scan (``sum(length(body))``) of
  those N messages, each against the same over the Parquet copy, and the ratios;
* stream: a producer sends 1,000 msgs/s (``--rate``) for 30 s, each body stamped with
  its send time; a 1-second-trigger query writes each batch to a sink topic; per
  message, send -> stored in the sink (the sink's store timestamp): p50, p90, p99,
  the Spark jobs per batch and the backlog (sent - committed) over the run.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

import rayq
from rayq import spark as rqspark
from rayq.store import StoreConfig

try:
    from results import record, record_latency
    from spark_write_bench import _body
except ImportError:  # run as a module
    from benchmarks.results import record, record_latency
    from benchmarks.spark_write_bench import _body

BENCH = "spark_bench"

BODY_BYTES = 1024
WARMUP_RUNS = 2  # untimed reads before the timed ones (as JMH's warm-up iterations)
SENT_DIGITS = 20  # a streamed body starts with its send time, ns since the epoch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000, help="0: stream only")
    parser.add_argument("--stream-seconds", type=float, default=30.0, help="0: no stream")
    parser.add_argument("--rate", type=int, default=1_000, help="streamed msgs/s")
    parser.add_argument(
        "--bodies",
        choices=["padded", "random"],
        default="padded",
        help="padded: the id padded with x, which Parquet shrinks to almost "
        "nothing; random: SHA-512 hex digests it cannot (spark_write_bench)",
    )
    args = parser.parse_args()
    config = rayq.BrokerConfig(store=StoreConfig(commitlog_segment_size_bytes=256 << 20))
    with tempfile.TemporaryDirectory(prefix="rayq-spark-bench-") as store_dir:
        cluster = rayq.start(store_dir, config=config)
        try:
            run(args.messages, args.stream_seconds, args.rate, args.bodies)
        finally:
            rqspark.stop_session()
            cluster.shutdown()


# RayDP's steps inside ``raydp.init_spark`` (module, class, method, label), timed by
# wrapping them for the duration of ``rqspark.session``.
RAYDP_STEPS = (
    ("raydp.spark.ray_cluster", "SparkCluster", "_set_up_master", "app master (Ray actor + JVM)"),
    ("raydp.spark.ray_cluster", "SparkCluster", "get_spark_session", "driver JVM + SparkContext"),
    (
        "raydp.spark.ray_cluster",
        "SparkCluster",
        "connect_spark_driver_to_ray",
        "driver JVM joins Ray",
    ),
)


def timed_session(**kwargs: Any) -> tuple[Any, dict[str, float]]:
    """``rqspark.session(**kwargs)``, timing each RayDP step, then the first job (which
    waits for the executor to start and register)."""
    import importlib

    phases: dict[str, float] = {}
    undo = []
    for module, cls_name, method, label in RAYDP_STEPS:
        cls = getattr(importlib.import_module(module), cls_name)
        original = getattr(cls, method)

        def step(self: Any, *a: Any, _f: Any = original, _label: str = label, **kw: Any) -> Any:
            t = time.perf_counter()
            try:
                return _f(self, *a, **kw)
            finally:
                phases[_label] = time.perf_counter() - t

        setattr(cls, method, step)
        undo.append((cls, method, original))
    t0 = time.perf_counter()
    try:
        spark = rqspark.session(**kwargs)
    finally:
        for cls, method, original in undo:
            setattr(cls, method, original)
    phases["session() total"] = time.perf_counter() - t0
    _, phases["first job (executor start + registration)"] = timed(spark.range(1).count)
    return spark, phases


def run(n: int, stream_seconds: float, rate: int, bodies: str = "padded") -> None:
    admin = rayq.Admin()
    for topic in ("bench", "latency", "sink", "warmup"):
        admin.create_topic(topic, queues=4)
    spark, phases = timed_session(
        app_name="rayq-bench", num_executors=1, executor_cores=2, executor_memory="2g"
    )
    print("session start: " + ", ".join(f"{k} {v:.1f} s" for k, v in phases.items()))
    record(BENCH, "session_start", phases["session() total"], "s", **phases)
    if n:
        with tempfile.TemporaryDirectory(prefix="rayq-spark-bench-parquet-") as parquet_dir:
            read_vs_parquet(spark, n, parquet_dir, bodies)
    if stream_seconds > 0:
        stream_latency(spark, stream_seconds, rate)


def timed(action: Callable[[], Any], runs: int = 1) -> tuple[Any, float]:
    """What ``action`` returns and its best time of ``runs``."""
    best = float("inf")
    for _ in range(runs):
        t0 = time.perf_counter()
        out = action()
        best = min(best, time.perf_counter() - t0)
    return out, best


def read_vs_parquet(spark: Any, n: int, parquet_dir: str, bodies: str = "padded") -> None:
    """Write N 1 KiB bodies to the topic and to Parquet; count and scan both."""
    from pyspark.sql import functions as F

    rows = spark.range(0, n, 1, 8).select(_body(BODY_BYTES, bodies).alias("body"))
    written, dt = timed(lambda: rqspark.write(rows, "bench", body_col="body"))
    print(f"write: {written:,} msgs of {BODY_BYTES} B in {dt:.1f} s = {written / dt:,.0f} msgs/s")
    record(BENCH, "write", written / dt, "msgs/s", size=BODY_BYTES)
    rows.write.mode("overwrite").parquet(parquet_dir)

    df = rqspark.read(spark, "bench")
    pq = spark.read.parquet(parquet_dir)
    scan = F.sum(F.length("body")).alias("bytes")
    for what, rayq_action, parquet_action in (
        ("count", df.count, pq.count),
        ("scan", lambda: df.select(scan).first()[0], lambda: pq.select(scan).first()[0]),
    ):
        # Two untimed runs each, then the best of three: the first runs JIT-compile the
        # readers' Java code (and start the executor's Python workers without a JDK).
        for action in (rayq_action, parquet_action) * WARMUP_RUNS:
            action()
        got, dt = timed(rayq_action, runs=3)
        want, dt_pq = timed(parquet_action, runs=3)
        assert got == want == (n if what == "count" else n * BODY_BYTES), (what, got, want)
        print(
            f"read + {what} ({bodies} bodies): rayq {n / dt:,.0f} msgs/s ({dt:.2f} s), "
            f"Parquet {n / dt_pq:,.0f} msgs/s ({dt_pq:.2f} s): ratio {dt_pq / dt:.2f}x "
            "(target >= 0.5x)"
        )
        record(BENCH, f"read_{what}", n / dt, "msgs/s", size=BODY_BYTES, bodies=bodies)
        record(BENCH, f"parquet_read_{what}", n / dt_pq, "msgs/s", size=BODY_BYTES, bodies=bodies)
        record(
            BENCH, f"read_{what}_vs_parquet", dt_pq / dt, "ratio", size=BODY_BYTES, bodies=bodies
        )


def sent_ns(body: bytes) -> int:
    return int(body[:SENT_DIGITS])


def stream_latency(spark: Any, seconds: float, rate: int) -> None:
    """``rate`` msgs/s for ``seconds``, each stamped with its send time; a 1 s trigger
    query copies each batch to ``sink`` (one Spark job: the write); per message, send ->
    stored in the sink, from the sink's store timestamps."""
    # The executor's Python workers start (and connect to Ray) in the first job that
    # reads or writes a topic: a few seconds, once. Start them before the clock runs.
    rqspark.write(spark.createDataFrame([(b"w",)], "body binary"), "warmup")
    rqspark.read(spark, "warmup").count()
    jobs = spark.sparkContext.statusTracker()

    def process(df: Any, batch_id: int) -> None:
        rqspark.write(df.select("body"), "sink", body_col="body")

    query = rqspark.stream(spark, "latency", "bench-stream", process, trigger_interval=1.0)
    time.sleep(3)  # the query's first (empty) triggers
    jobs_before = len(jobs.getJobIdsForGroup(None))
    stop = threading.Event()
    sent = [0]
    thread = threading.Thread(target=produce, args=(rate, stop, sent))
    thread.start()
    backlog: list[tuple[float, int]] = []  # (seconds since start, sent - committed)
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        time.sleep(1.0)
        done = sum(p["numInputRows"] for p in query.recent_progress)  # the last 100 batches
        backlog.append((time.monotonic() - t0, sent[0] - done))
    stop.set()
    thread.join()
    total = sent[0]
    deadline = time.monotonic() + 60
    while (
        time.monotonic() < deadline
        and sum(p["numInputRows"] for p in query.recent_progress) < total
    ):
        time.sleep(0.2)
    query.stop(60)
    if query.exception() is not None:
        raise query.exception()  # type: ignore[misc]
    n_batches = sum(1 for p in query.recent_progress if p["numInputRows"])
    n_jobs = len(jobs.getJobIdsForGroup(None)) - jobs_before
    report_stream(spark, total, rate, backlog, query.recent_progress, n_jobs / max(1, n_batches))


def produce(rate: int, stop: threading.Event, sent: list[int]) -> None:
    """``rate`` msgs/s in batches of rate/20 every 50 ms (on a fixed schedule)."""
    per = max(1, rate // 20)
    with rayq.Producer(group="bench-stream-producer") as producer:
        next_at = time.monotonic()
        while not stop.is_set():
            stamp = f"{time.time_ns():0{SENT_DIGITS}d}".encode().ljust(BODY_BYTES, b"x")
            producer.send_batch([rayq.Message("latency", stamp) for _ in range(per)])
            sent[0] += per
            next_at += per / rate
            stop.wait(max(0.0, next_at - time.monotonic()))


def report_stream(
    spark: Any,
    total: int,
    rate: int,
    backlog: list[tuple[float, int]],
    progress: list[dict[str, Any]],
    jobs_per_batch: float,
) -> None:
    """Latencies from the sink's store timestamps; the backlog over the run."""
    from pyspark.sql import functions as F

    sink = rqspark.read(spark, "sink").select(
        F.substring("body", 1, SENT_DIGITS).cast("string").cast("long").alias("sent_ns"),
        (F.col("store_timestamp").cast("double") * 1000).alias("stored_ms"),
    )
    rows = sink.collect()
    assert len(rows) == total, (len(rows), total)
    latencies_ms = [r.stored_ms - r.sent_ns / 1e6 for r in rows]
    q = statistics.quantiles(latencies_ms, n=100)
    record_latency(BENCH, "stream_latency", latencies_ms, size=BODY_BYTES, trigger_s=1.0, rate=rate)
    busy = [p for p in progress if p["numInputRows"]]
    half = len(backlog) // 2
    first, second = max(b for _, b in backlog[:half]), max(b for _, b in backlog[half:])
    print(
        f"stream end-to-end (send -> stored in the sink), 1 s trigger, {rate:,} msgs/s, "
        f"{total:,} msgs: p50 {q[49] / 1000:.2f} s, p90 {q[89] / 1000:.2f} s, "
        f"p99 {q[98] / 1000:.2f} s"
    )
    rows_each = statistics.mean(p["numInputRows"] for p in busy)
    process_ms = statistics.median(p["durationMs"]["addBatch"] for p in busy)
    trigger_ms = statistics.median(p["durationMs"]["triggerExecution"] for p in busy)
    print(
        f"  {len(busy)} batches, {rows_each:,.0f} rows each, process {process_ms:.0f} ms and "
        f"trigger {trigger_ms:.0f} ms (medians), {jobs_per_batch:.1f} Spark jobs per batch"
    )
    print(
        f"  backlog (sent - committed): max {first:,} in the first half, {second:,} in the "
        f"second; {backlog[-1][1]:,} when the producer stopped; last batch lag "
        f"{progress[-1]['lag']}"
    )
    record(BENCH, "stream_backlog_end", backlog[-1][1], "msgs", rate=rate)


if __name__ == "__main__":
    main()
