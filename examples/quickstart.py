"""rayq quickstart: start the embedded broker, send 1,000 messages sync and async,
read them back with a PullConsumer, print throughput and lag.

Run: ``make demo`` or ``.venv/bin/python examples/quickstart.py``. Starts a local
Ray instance (``rayq.start()``) and stops it at the end.
"""

from __future__ import annotations

import argparse
import tempfile
import time

import rayq


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1000)
    args = parser.parse_args()
    n = args.messages
    # A throwaway store: rayq.start() alone keeps its store in $RAYQ_HOME or ./rayq-data.
    with tempfile.TemporaryDirectory(prefix="rayq-quickstart-") as store_dir:
        cluster = rayq.start(store_dir)
        try:
            run(cluster, n)
        finally:
            cluster.shutdown()


def run(cluster: rayq.Cluster, n: int) -> None:
    print(f"rayq started; broker stores under {cluster.store_dir}")
    admin = rayq.Admin()
    admin.create_topic("orders", queues=4)
    print(f"topics: {admin.topics()}")

    consumer = rayq.PullConsumer(
        "quickstart-readers", consume_from=rayq.ConsumeFromWhere.FIRST_OFFSET
    )
    consumer.subscribe("orders", "paid || refund")
    consumer.start()

    with rayq.Producer("quickstart-writers") as producer:
        t0 = time.perf_counter()
        for i in range(n // 2):
            producer.send(
                rayq.Message(
                    "orders",
                    f'{{"order": {i}}}'.encode(),
                    tags="paid" if i % 4 else "refund",
                    keys=[f"order-{i}"],
                )
            )
        sync_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        futures = [
            producer.send_async(
                rayq.Message(
                    "orders", f'{{"order": {i}}}'.encode(), tags="paid", keys=[f"order-{i}"]
                )
            )
            for i in range(n // 2, n)
        ]
        results = [f.result(timeout=30) for f in futures]
        async_s = time.perf_counter() - t0
    print(
        f"sent {n // 2} sync in {sync_s:.2f} s ({n // 2 / sync_s:,.0f} msgs/s), "
        f"{len(results)} async in {async_s:.2f} s ({len(results) / async_s:,.0f} msgs/s)"
    )

    t0 = time.perf_counter()
    got = []
    while len(got) < n and time.perf_counter() - t0 < 30:
        got += consumer.poll(timeout=1.0)
    read_s = time.perf_counter() - t0
    print(
        f"read back {len(got)} messages in {read_s:.2f} s; first: "
        f"{got[0].body.decode() if got else None} (queue {got[0].queue_id if got else '-'})"
    )
    consumer.commit()
    lag = sum(p.lag for p in admin.consumer_progress("quickstart-readers"))
    print(f"consumer lag after commit: {lag}")
    found = admin.query_message("orders", "order-7")
    print(f"query by key 'order-7': {[m.body.decode() for m in found]}")
    consumer.shutdown()


if __name__ == "__main__":
    main()
