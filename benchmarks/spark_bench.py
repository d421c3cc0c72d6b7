"""Spark on Ray figures: write and read 1 M messages of 1 KiB, streaming end-to-end latency.

Run: ``make bench-spark`` or ``.venv/bin/python benchmarks/spark_bench.py [--messages N]``.
Starts a local Ray with one embedded broker (store in a throwaway directory) and a
RayDP session (its start-up time is printed on its own), then prints:

* write: ``rayq.spark.write`` of N rows with 1 KiB bodies (idempotent puts);
* read: ``rayq.spark.read(...).count()`` of those N messages;
* stream: a producer sends ~200 msgs/s for 20 s; a 1-second-trigger query writes
  each batch to a sink topic; per message, the time from send (born timestamp) to
  the sink write returning: p50, p90, p99.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time

import rayq
from rayq import spark as rqspark
from rayq.store import StoreConfig

try:
    from results import record, record_latency
except ImportError:  # run as a module
    from benchmarks.results import record, record_latency

BENCH = "spark_bench"

BODY_BYTES = 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--stream-seconds", type=float, default=20.0)
    args = parser.parse_args()
    config = rayq.BrokerConfig(store=StoreConfig(commitlog_segment_size_bytes=256 << 20))
    with tempfile.TemporaryDirectory(prefix="rayq-spark-bench-") as store_dir:
        cluster = rayq.start(store_dir, config=config)
        try:
            run(args.messages, args.stream_seconds)
        finally:
            rqspark.stop_session()
            cluster.shutdown()


def run(n: int, stream_seconds: float) -> None:
    from pyspark.sql import functions as F

    admin = rayq.Admin()
    for topic in ("bench", "latency", "sink"):
        admin.create_topic(topic, queues=4)
    t0 = time.perf_counter()
    spark = rqspark.session("rayq-bench", num_executors=1, executor_cores=2,
                            executor_memory="2g")  # fmt: skip
    started = time.perf_counter() - t0
    print(f"session start: {started:.1f} s")
    record(BENCH, "session_start", started, "s")
    spark.range(1).count()  # warm the executor's JVM

    rows = spark.range(0, n, 1, 8).select(
        F.lpad(F.col("id").cast("string"), BODY_BYTES, "x").cast("binary").alias("body")
    )
    t0 = time.perf_counter()
    written = rqspark.write(rows, "bench", body_col="body")
    dt = time.perf_counter() - t0
    print(f"write: {written:,} msgs of {BODY_BYTES} B in {dt:.1f} s = {written / dt:,.0f} msgs/s")
    record(BENCH, "write", written / dt, "msgs/s", size=BODY_BYTES)

    t0 = time.perf_counter()
    df = rqspark.read(spark, "bench", max_messages_per_partition=62_500)
    counted = df.count()
    dt = time.perf_counter() - t0
    print(f"read + count(): {counted:,} msgs in {dt:.1f} s = {counted / dt:,.0f} msgs/s "
          f"({df.rdd.getNumPartitions()} partitions)")  # fmt: skip
    assert counted == written == n, (counted, written, n)
    record(BENCH, "read_count", counted / dt, "msgs/s", size=BODY_BYTES)

    stream_latency(spark, stream_seconds)


def stream_latency(spark: object, seconds: float) -> None:
    latencies: list[float] = []

    def process(df, batch_id: int) -> None:
        born = [r.born_timestamp.timestamp() for r in df.select("born_timestamp").collect()]
        if born:
            rqspark.write(df.select("body"), "sink", body_col="body")
            now = time.time()
            latencies.extend(now - b for b in born)

    query = rqspark.stream(spark, "latency", "bench-stream", process, trigger_interval=1.0)
    time.sleep(3)  # the query's first (empty) triggers
    stop = threading.Event()

    def produce() -> None:
        with rayq.Producer(group="bench-stream-producer") as producer:
            while not stop.is_set():
                producer.send_batch([rayq.Message("latency", b"x" * BODY_BYTES)
                                     for _ in range(20)])  # fmt: skip
                stop.wait(0.1)

    thread = threading.Thread(target=produce)
    thread.start()
    time.sleep(seconds)
    stop.set()
    thread.join()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (query.last_progress or {}).get("lag", 1):
        time.sleep(0.5)
    time.sleep(2)
    query.stop(60)
    if query.exception() is not None:
        raise query.exception()  # type: ignore[misc]
    q = statistics.quantiles(latencies, n=100)
    record_latency(BENCH, "stream_latency", [x * 1000 for x in latencies], size=BODY_BYTES,
                   trigger_s=1.0)  # fmt: skip
    print(f"stream end-to-end (send -> in the sink), 1 s trigger, {len(latencies):,} msgs: "
          f"p50 {q[49]:.2f} s, p90 {q[89]:.2f} s, p99 {q[98]:.2f} s")  # fmt: skip


if __name__ == "__main__":
    main()
