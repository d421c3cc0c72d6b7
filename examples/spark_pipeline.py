"""Spark on Ray with rayq: clicks in, page counts per 10-second window out.

A clickstream producer writes JSON events to ``clicks``; a streaming Spark job
(``rayq.spark.stream``) counts events per page per 10-second window and writes the
updated counts to ``page_counts`` after every micro-batch (update mode: the job
keeps the running totals of open windows); a PullConsumer prints them.

Run: ``make demo-spark`` or ``.venv/bin/python examples/spark_pipeline.py``. Starts a
local Ray instance with the embedded broker and a RayDP Spark session, and stops
everything at the end (the store lives in a throwaway directory).
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import threading
import time

import rayq
from rayq import spark as rqspark

PAGES = ["/", "/cart", "/checkout", "/product/1", "/product/2", "/search"]


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
                    tags="click",
                )
                for _ in range(max(1, rate // 10))
            ]
            producer.send_batch(batch)
            sent += len(batch)
            stop.wait(max(0.0, 0.1 - (time.monotonic() - started)))
    return sent


def count_pages(spark: object, totals: dict[tuple[str, str], int]):
    """The streaming job's ``process(df, batch_id)``: 10-second windows per page."""
    from pyspark.sql import functions as F

    schema = "page string, user string, ts long"

    def process(df, batch_id: int) -> None:
        events = df.select(F.from_json(F.col("body").cast("string"), schema).alias("e")).select(
            "e.page", (F.col("e.ts") / 1000).cast("timestamp").alias("at")
        )
        counts = events.groupBy(F.window("at", "10 seconds"), "page").count().collect()
        updated = []
        for row in counts:
            key = (row.window.start.isoformat(), row.page)
            totals[key] = totals.get(key, 0) + row["count"]
            updated.append(
                (json.dumps({"window": key[0], "page": key[1], "count": totals[key]}), key[1])
            )
        if updated:
            out = spark.createDataFrame(updated, "body string, page string")  # type: ignore[attr-defined]
            rqspark.write(out, "page_counts", body_col="body", keys_col="page")
        print(f"batch {batch_id}: {df.count()} clicks, {len(updated)} window counts updated")

    return process


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="how long clicks arrive")
    parser.add_argument("--rate", type=int, default=200, help="clicks per second")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rayq-spark-demo-") as store_dir:
        cluster = rayq.start(store_dir)
        try:
            run(args.seconds, args.rate)
        finally:
            rqspark.stop_session()
            cluster.shutdown()


def show(msgs: list[rayq.MessageExt], latest: dict[tuple[str, str], int]) -> int:
    """Print the count updates ``msgs`` carry and keep the latest per window and page."""
    for msg in msgs:
        row = json.loads(msg.body)
        latest[(row["window"], row["page"])] = row["count"]
        print(f"  page_counts: {row['window'][11:19]} {row['page']:<12} {row['count']}")
    return len(msgs)


def run(seconds: float, rate: int) -> None:
    admin = rayq.Admin()
    admin.create_topic("clicks", queues=4)
    admin.create_topic("page_counts", queues=2)
    t0 = time.monotonic()
    spark = rqspark.session(
        "rayq-spark-demo", num_executors=1, executor_cores=2, executor_memory="1g"
    )
    print(f"Spark session up in {time.monotonic() - t0:.1f} s")

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
    totals: dict[tuple[str, str], int] = {}
    query = rqspark.stream(
        spark,
        "clicks",
        "page-counter",
        count_pages(spark, totals),
        trigger_interval=1.0,
        starting="earliest",
    )
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline or producer.is_alive():
            if time.monotonic() >= deadline:
                stop.set()
                producer.join()
            show(reader.poll(timeout=1.0), latest)
        lag_deadline = time.monotonic() + 120
        while query.exception() is None and time.monotonic() < lag_deadline:
            progress = admin.consumer_progress("page-counter")  # committed after each batch
            if progress and sum(p.lag for p in progress) == 0:
                break
            show(reader.poll(timeout=0.5), latest)
    finally:
        query.stop(60)
    while show(reader.poll(timeout=2.0), latest):  # what is left, until 2 s bring nothing
        pass
    reader.shutdown()
    if query.exception() is not None:
        raise query.exception()  # type: ignore[misc]
    counted = sum(latest.values())
    print(
        f"sent {sent[0]} clicks; the sink's final counts add up to {counted} "
        f"over {len({w for w, _ in latest})} windows"
    )


if __name__ == "__main__":
    main()
