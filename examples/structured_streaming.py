"""Structured Streaming with rayq: clicks per page per 5-second window of event time.

Click events (JSON bodies: page, user, ts) arrive in the topic ``clicks``. A Structured
Streaming query reads them with ``spark.readStream.format("rayq")``, parses the bodies
with ``from_json``, counts clicks per page per 5-second window of their event time (a
10-second watermark: later clicks are dropped and older windows' state is let go) and
writes each updated count as a JSON body, keyed by the page, to the topic
``page_counts`` with ``writeStream.format("rayq")`` (update mode, with a checkpoint). A
PullConsumer prints the updates as they arrive.

Run: ``make demo-streaming`` or ``.venv/bin/python examples/structured_streaming.py``
(``--seconds``, ``--rate``). ``--sink foreach-batch`` writes each micro-batch with
``rqspark.write`` from ``foreachBatch`` instead of rayq's streaming sink. Starts a local
Ray instance with the embedded broker and a RayDP Spark session, and stops everything
at the end (the store and the checkpoint live in a throwaway directory).
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import rayq
from rayq import spark as rqspark

PAGES = ["/", "/cart", "/checkout", "/product/1", "/product/2", "/search"]
CLICK = "page STRING, user STRING, ts TIMESTAMP"  # the JSON of a click, for from_json


def produce_clicks(stop: threading.Event, rate: int) -> int:
    """Send about ``rate`` click events per second, stamped now, until ``stop`` is set."""
    sent = 0
    with rayq.Producer(group="clickstream") as producer:
        while not stop.is_set():
            started = time.monotonic()
            batch = [
                rayq.Message(
                    "clicks",
                    json.dumps(
                        {
                            "page": random.choice(PAGES),
                            "user": f"u{random.randrange(50)}",
                            "ts": datetime.now(UTC).isoformat(timespec="milliseconds"),
                        }
                    ).encode(),
                )
                for _ in range(max(1, rate // 10))
            ]
            producer.send_batch(batch)
            sent += len(batch)
            stop.wait(max(0.0, 0.1 - (time.monotonic() - started)))
    return sent


def page_counts(spark: Any) -> Any:
    """The query: clicks from rayq, counted per page per window, as sink rows
    (``body``: the count as JSON, ``keys``: the page)."""
    from pyspark.sql import functions as F

    clicks = (
        spark.readStream.format("rayq")
        .option("topic", "clicks")
        .option("startingOffsets", "earliest")
        .option("maxMessagesPerTrigger", 20_000)
        .load()
        .select(F.from_json(F.col("body").cast("string"), CLICK).alias("click"))
        .select("click.*")
    )
    counts = (
        clicks.withWatermark("ts", "10 seconds")
        .groupBy(F.window("ts", "5 seconds"), "page")
        .count()
    )
    return counts.select(
        F.to_json(F.struct(F.col("window.start").alias("window"), "page", "count")).alias("body"),
        F.col("page").alias("keys"),
    )


def start_query(rows: Any, sink: str, checkpoint: Path) -> Any:
    """Write ``rows`` to ``page_counts`` after every micro-batch (update mode: the
    counts that changed), with rayq's streaming sink or from ``foreachBatch``."""
    writer = (
        rows.writeStream.outputMode("update")
        .trigger(processingTime="2 seconds")
        .option("checkpointLocation", str(checkpoint))
    )
    if sink == "rayq":
        writer = writer.format("rayq").option("topic", "page_counts").option("keys", "keys")
        return writer.start()

    def write_batch(df: Any, batch_id: int) -> None:  # at least once: a re-run writes again
        rqspark.write(df, "page_counts", body_col="body", keys_col="keys")

    return writer.foreachBatch(write_batch).start()


def show(msgs: list[rayq.MessageExt], latest: dict[tuple[str, str], int]) -> int:
    """Print the count updates ``msgs`` carry and keep the latest per window and page."""
    for msg in msgs:
        row = json.loads(msg.body)
        latest[(row["window"], row["page"])] = row["count"]
        print(f"  page_counts: {row['window'][11:19]} {row['page']:<12} {row['count']}")
    return len(msgs)


def show_batches(query: Any, seen: set[int]) -> None:
    """Print each micro-batch that read clicks, once (from Spark's progress reports)."""
    for progress in query.recentProgress:
        if progress["batchId"] not in seen and progress["numInputRows"]:
            seen.add(progress["batchId"])
            print(f"batch {progress['batchId']}: {progress['numInputRows']} clicks read")


def run(seconds: float, rate: int, sink: str, checkpoint: Path) -> None:
    admin = rayq.Admin()
    admin.create_topic("clicks", queues=4)
    admin.create_topic("page_counts", queues=2)
    t0 = time.monotonic()
    spark = rqspark.session(
        "rayq-structured-streaming",
        num_executors=1,
        executor_cores=2,
        executor_memory="1g",
        configs={
            "spark.sql.shuffle.partitions": "2",  # the aggregation's tasks and state stores
            "spark.sql.adaptive.enabled": "false",  # streaming turns it off (with a warning)
        },
    )
    print(f"Spark session up in {time.monotonic() - t0:.1f} s; sink: {sink}")

    reader = rayq.PullConsumer(
        "page-count-readers", consume_from=rayq.ConsumeFromWhere.FIRST_OFFSET
    )
    reader.subscribe("page_counts")
    reader.start()
    latest: dict[tuple[str, str], int] = {}
    stop = threading.Event()
    sent: list[int] = []
    producer = threading.Thread(target=lambda: sent.append(produce_clicks(stop, rate)))
    producer.start()
    query = None
    batches: set[int] = set()
    try:
        query = start_query(page_counts(spark), sink, checkpoint)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and query.isActive:
            show(reader.poll(timeout=1.0), latest)
            show_batches(query, batches)
        stop.set()
        producer.join()
        query.processAllAvailable()  # every click sent is counted and written
        show_batches(query, batches)
        while show(reader.poll(timeout=2.0), latest):  # the rest, until 2 s bring nothing
            pass
    finally:
        stop.set()
        producer.join()
        if query is not None:
            query.stop()
        reader.shutdown()
    print(
        f"sent {sent[0]} clicks; the sink's final counts add up to {sum(latest.values())} "
        f"over {len({w for w, _ in latest})} windows"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="how long clicks arrive")
    parser.add_argument("--rate", type=int, default=200, help="clicks per second")
    parser.add_argument(
        "--sink",
        choices=["rayq", "foreach-batch"],
        default="rayq",
        help='writeStream.format("rayq"), or rqspark.write from foreachBatch',
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rayq-streaming-demo-") as scratch:
        cluster = rayq.start(Path(scratch) / "store")
        try:
            run(args.seconds, args.rate, args.sink, Path(scratch) / "checkpoint")
        finally:
            rqspark.stop_session()
            cluster.shutdown()


if __name__ == "__main__":
    main()
