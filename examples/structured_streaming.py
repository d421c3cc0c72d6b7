"""Spark Structured Streaming with rayq: clicks in, windowed page counts out.

A producer sends JSON click events (a page and an event time in ms) to the topic
``clicks``. A Structured Streaming query reads them with
``spark.readStream.format("rayq")``, counts clicks per page per 5-second event-time
window behind a 10-second watermark, and writes each updated count as a JSON message
(key: the page) to the topic ``page_counts`` with ``writeStream.format("rayq")``
(``outputMode("update")``, exactly once per batch). A PullConsumer prints what arrives.
The query keeps its offsets and its window state in a checkpoint directory.

Run: ``make demo-streaming`` or ``.venv/bin/python examples/structured_streaming.py``.
Starts a local Ray instance with the embedded broker and a RayDP Spark session, and
stops everything at the end (the store and the checkpoint live in a throwaway
directory).
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import rayq
from rayq import spark as rqspark

PAGES = ["/", "/cart", "/checkout", "/product/1", "/product/2", "/search"]
CLICK = "page string, user string, ts long"


def produce_clicks(stop: threading.Event, rate: int) -> int:
    """Send about ``rate`` click events per second until ``stop`` is set."""
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
                            "ts": time.time_ns() // 1_000_000,
                        }
                    ).encode(),
                )
                for _ in range(max(1, rate // 10))
            ]
            producer.send_batch(batch)
            sent += len(batch)
            stop.wait(max(0.0, 0.1 - (time.monotonic() - started)))
    return sent


def start_query(spark: Any, checkpoint: Path) -> Any:
    """clicks -> per-page counts of 5-second windows (10 s watermark) -> page_counts."""
    from pyspark.sql import functions as F

    # A stateful query's batches run this many tasks (Spark's default, 200, is for
    # clusters); the checkpoint keeps the number once the query has run.
    spark.conf.set("spark.sql.shuffle.partitions", "4")
    clicks = (
        spark.readStream.format("rayq")
        .option("topic", "clicks")
        .option("startingOffsets", "earliest")
        .load()
        .select(F.from_json(F.col("body").cast("string"), CLICK).alias("c"))
        .select("c.page", (F.col("c.ts") / 1000).cast("timestamp").alias("at"))
    )
    counts = (
        clicks.withWatermark("at", "10 seconds")
        .groupBy(F.window("at", "5 seconds"), "page")
        .count()
    )
    out = counts.select(
        F.to_json(
            F.struct(
                F.date_format("window.start", "HH:mm:ss").alias("window"),
                "page",
                "count",
            )
        ).alias("body"),
        F.col("page").alias("key"),
    )
    return (
        out.writeStream.format("rayq")
        .option("topic", "page_counts")
        .option("keys", "key")
        .outputMode("update")
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="1 second")
        .start()
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="how long clicks arrive")
    parser.add_argument("--rate", type=int, default=200, help="clicks per second")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rayq-streaming-demo-") as tmp:
        cluster = rayq.start(Path(tmp) / "store")
        try:
            run(args.seconds, args.rate, Path(tmp) / "checkpoint")
        finally:
            rqspark.stop_session()
            cluster.shutdown()


def run(seconds: float, rate: int, checkpoint: Path) -> None:
    admin = rayq.Admin()
    admin.create_topic("clicks", queues=4)
    admin.create_topic("page_counts", queues=2)
    t0 = time.monotonic()
    spark = rqspark.session(
        "rayq-streaming-demo", num_executors=1, executor_cores=2, executor_memory="1g"
    )
    print(f"Spark session up in {time.monotonic() - t0:.1f} s")
    query = start_query(spark, checkpoint)

    reader = rayq.PullConsumer(
        "page-count-readers", consume_from=rayq.ConsumeFromWhere.FIRST_OFFSET
    )
    reader.subscribe("page_counts")
    reader.start()
    latest: dict[tuple[str, str], int] = {}

    def show(timeout: float) -> int:
        got = reader.poll(timeout=timeout)
        for msg in got:
            row = json.loads(msg.body)
            latest[(row["window"], row["page"])] = row["count"]
            print(f"  page_counts: {row['window']} {row['page']:<12} {row['count']}")
        return len(got)

    stop = threading.Event()
    sent: list[int] = []
    producer = threading.Thread(target=lambda: sent.append(produce_clicks(stop, rate)))
    producer.start()
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            show(1.0)
            if not query.isActive:
                break
        stop.set()
        producer.join()
        # every click read: the query's last batch ends where the topic does
        read_all = time.monotonic() + 120
        while query.isActive and time.monotonic() < read_all:
            done = sum(p["numInputRows"] for p in query.recentProgress)
            if done >= sent[0] and query.lastProgress and not query.status["isDataAvailable"]:
                break
            show(0.5)
        while show(1.0):  # the updates of the batch that read the last clicks
            pass
    finally:
        stop.set()
        producer.join()
        error = query.exception()
        query.stop()
        reader.shutdown()
    if error is not None:
        raise SystemExit(f"the query failed: {error}")
    counted = sum(latest.values())
    print(
        f"sent {sent[0]} clicks; the last counts of {len(latest)} windows add up to {counted}"
        f" ({'all counted' if counted == sent[0] else 'some windows still open'})"
    )


if __name__ == "__main__":
    main()
