"""Ray Data figures: ``rayq.data.read_topic`` against ``ray.data.read_parquet`` of the
same rows, in the same run.

Run: ``.venv/bin/python benchmarks/data_bench.py [--messages N] [--queues Q] [--rounds R]``.

Starts a local Ray (2 CPUs) with one embedded broker (store in a throwaway
directory), sends N messages of 1 KiB (a tag, one key) to a topic of Q queues, reads
them once with ``read_topic`` and writes those rows to Parquet in a temp dir (files of
25,000 rows or more). Then,
``--rounds`` times each, alternating, a full scan of every column of the topic and of
the Parquet files: ``iter_batches`` over the blocks, summing the body lengths (every
row is read; nothing is answered from metadata). Prints msgs/s of both (median of the
rounds) and the ratio. Target (issue 16): read_topic >= 0.5 x read_parquet.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import ray

import rayq
import rayq.data
from rayq.store import StoreConfig

try:
    from results import record
except ImportError:  # run as a module
    from benchmarks.results import record

BENCH = "data_bench"
BODY_BYTES = 1024
SEND_BATCH = 500
NAMESPACE = "rayq-data-bench"
TARGET_RATIO = 0.5
PARQUET_ROWS_PER_FILE = 25_000


def send(topic: str, n: int) -> None:
    body = bytes(range(256)) * (BODY_BYTES // 256)
    with rayq.Producer(group="bench-pg", namespace=NAMESPACE) as producer:
        for first in range(0, n, SEND_BATCH):
            count = min(SEND_BATCH, n - first)
            batch = [
                rayq.Message(topic, body, tags="TagA", keys=[f"k{first + i}"]) for i in range(count)
            ]
            producer.send_batch(batch)


def scan(ds: ray.data.Dataset) -> tuple[int, int]:
    """Rows and body bytes of every block."""
    rows = body_bytes = 0
    for batch in ds.iter_batches(batch_size=None, batch_format="pyarrow"):
        assert isinstance(batch, pa.Table)
        rows += batch.num_rows
        body_bytes += pc.sum(pc.binary_length(batch["body"])).as_py() or 0
    return rows, body_bytes


def timed(fn: Callable[[], tuple[int, int]], n: int) -> float:
    started = time.perf_counter()
    rows, _ = fn()
    elapsed = time.perf_counter() - started
    assert rows == n, (rows, n)
    return n / elapsed


def run(n: int, queues: int, rounds: int, parquet_dir: Path) -> None:
    rayq.Admin(namespace=NAMESPACE).create_topic("bench", queues=queues)
    started = time.perf_counter()
    send("bench", n)
    print(
        f"sent {n} messages of {BODY_BYTES} B to {queues} queues in "
        f"{time.perf_counter() - started:.1f} s"
    )
    # Parquet in files of about 25,000 rows (25 MB), what a writer would choose; not one
    # file per 4 MiB page, which would slow read_parquet down with tiny files.
    rows_per_file = max(PARQUET_ROWS_PER_FILE, n // 64)
    written = rayq.data.read_topic("bench", namespace=NAMESPACE)
    written.write_parquet(str(parquet_dir), min_rows_per_file=rows_per_file)
    files = len(list(parquet_dir.glob("*.parquet")))
    print(f"wrote the same rows to {files} Parquet files (snappy)")
    parts = {
        "read_topic": lambda: scan(rayq.data.read_topic("bench", namespace=NAMESPACE)),
        "read_parquet": lambda: scan(ray.data.read_parquet(str(parquet_dir))),
    }
    rates: dict[str, list[float]] = {name: [] for name in parts}
    for fn in parts.values():  # warm-up: workers started, files in the page cache
        timed(fn, n)
    for _ in range(rounds):
        for name, fn in parts.items():
            rates[name].append(timed(fn, n))
    medians = {name: statistics.median(r) for name, r in rates.items()}
    for name, median in medians.items():
        print(
            f"{name:>12}: {median:>10,.0f} msgs/s  {median * BODY_BYTES / 1e6:>6,.0f} MB/s "
            f"(rounds: {', '.join(f'{r:,.0f}' for r in rates[name])})"
        )
        record(
            BENCH,
            name,
            median,
            "msgs/s",
            size=BODY_BYTES,
            messages=n,
            queues=queues,
            rounds=rates[name],
        )
    ratio = medians["read_topic"] / medians["read_parquet"]
    print(f"read_topic / read_parquet: {ratio:.2f} (target >= {TARGET_RATIO})")
    record(BENCH, "ratio", ratio, "x", size=BODY_BYTES, messages=n, queues=queues)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--queues", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    store = StoreConfig(commitlog_segment_size_bytes=256 << 20)
    ray.init(address="local", num_cpus=2, namespace=NAMESPACE, log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    try:
        with tempfile.TemporaryDirectory(prefix="rayq-data-bench-") as tmp:
            cluster = rayq.start(
                Path(tmp) / "store", namespace=NAMESPACE, config=rayq.BrokerConfig(store=store)
            )
            try:
                run(args.messages, args.queues, args.rounds, Path(tmp) / "parquet")
            finally:
                cluster.shutdown()
    finally:
        ray.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
