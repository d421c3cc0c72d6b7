"""``rqspark.write`` against ``df.write.parquet`` of the same rows, in one Spark session.

Run: ``.venv/bin/python benchmarks/spark_write_bench.py [--messages N] [--rounds R]``.
Starts a local Ray with one embedded broker (store in a throwaway directory) and a
RayDP session, makes N rows of 1 KiB and of 128 B bodies (cached and counted first, so
neither writer pays for making them; ``--bodies random``, the default, makes them of
hex digests Parquet cannot compress, ``padded`` of the id padded with x), then writes
them alternately to a topic (``rayq.spark.write``, idempotent puts) and to Parquet in a
temp dir, ``--rounds`` times each (each after a pause of ``SETTLE_S``), and prints the
best rate of each and their ratio (target: rayq ≥ 0.5×), beside the floor of handing the
rows to Python at all.

``--profile S``: then writes rows of the first size once more while py-spy samples the broker,
its flusher and the Spark Python workers for S seconds (profile_parts.py's summary:
busy share and top functions per process), to show what bounds ``rqspark.write``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable, Iterator

import pyarrow as pa

import rayq
from rayq import spark as rqspark
from rayq.store import StoreConfig

try:
    from results import record
except ImportError:  # run as a module
    from benchmarks.results import record

BENCH = "spark_write_bench"
PARTITIONS = 4
# A pause before each timed write, so the background work the previous one left (the
# broker's flush and commit-log read-ahead, the kernel's writeback of Parquet's files)
# is not billed to the next writer.
SETTLE_S = 1.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1024, 128])
    parser.add_argument("--profile", type=float, default=0.0, metavar="SECONDS")
    parser.add_argument("--bodies", choices=["random", "padded"], default="random")
    args = parser.parse_args()
    config = rayq.BrokerConfig(store=StoreConfig(commitlog_segment_size_bytes=512 << 20))
    with tempfile.TemporaryDirectory(prefix="rayq-spark-write-bench-") as tmp:
        cluster = rayq.start(f"{tmp}/store", config=config)
        try:
            spark = rqspark.session(
                "rayq-write-bench", num_executors=1, executor_cores=2, executor_memory="2g"
            )
            for size in args.sizes:
                run(spark, args.messages, size, args.rounds, f"{tmp}/parquet-{size}", args.bodies)
            if args.profile:
                profile(spark, args.messages, args.sizes[0], args.bodies, args.profile, tmp)
        finally:
            rqspark.stop_session()
            cluster.shutdown()


def _body(size: int, bodies: str) -> object:
    """A ``size``-byte binary column: the id padded with x (``padded``: Parquet's
    dictionary and snappy shrink it to almost nothing) or SHA-512 hex digests of the id
    (``random``: distinct, and snappy, which has no entropy coder, cannot shrink them)."""
    from pyspark.sql import functions as F

    if bodies == "padded":
        return F.lpad(F.col("id").cast("string"), size, "x").cast("binary")
    digests = [
        F.sha2(F.concat(F.col("id").cast("string"), F.lit(f"#{i}")), 512)
        for i in range(-(-size // 128))
    ]
    return F.substring(F.concat(*digests), 1, size).cast("binary")


def run(spark: object, n: int, size: int, rounds: int, parquet_dir: str, bodies: str) -> None:
    topic = f"write-{size}-{bodies}"
    rayq.Admin().create_topic(topic, queues=PARTITIONS)
    ids = spark.range(0, n, 1, PARTITIONS)  # type: ignore[attr-defined]
    rows = ids.select(_body(size, bodies).alias("body"))
    rows = rows.cache()
    rows.count()

    def to_rayq() -> int:
        return rqspark.write(rows, topic, body_col="body")

    def to_parquet() -> int:
        rows.write.mode("overwrite").parquet(parquet_dir)
        return n

    def to_python() -> int:  # the floor: the rows handed to Python workers as Arrow, dropped
        out = rows.mapInArrow(_count_rows, "rows long").collect()
        return sum(r["rows"] for r in out)

    best: dict[str, float] = {}
    writers = (
        ("rqspark.write", to_rayq),
        ("df.write.parquet", to_parquet),
        ("mapInArrow floor", to_python),
    )
    for _ in range(rounds):
        for name, write in writers:
            best[name] = max(best.get(name, 0.0), _rate(write))
    ratio = best["rqspark.write"] / best["df.write.parquet"]
    print(
        f"{n:,} rows of {size} B ({bodies}): rqspark.write {best['rqspark.write']:,.0f} msgs/s, "
        f"df.write.parquet {best['df.write.parquet']:,.0f} msgs/s, ratio {ratio:.2f} "
        f"(target >= 0.5); Arrow to Python and dropped (mapInArrow floor) "
        f"{best['mapInArrow floor']:,.0f} msgs/s"
    )
    record(BENCH, "write", best["rqspark.write"], "msgs/s", size=size, rows=n, bodies=bodies)
    record(
        BENCH, "write_parquet", best["df.write.parquet"], "msgs/s", size=size, rows=n, bodies=bodies
    )
    record(
        BENCH,
        "map_in_arrow_floor",
        best["mapInArrow floor"],
        "msgs/s",
        size=size,
        rows=n,
        bodies=bodies,
    )
    record(BENCH, "write_ratio", ratio, "x", size=size, rows=n, target=0.5, bodies=bodies)
    rows.unpersist()


def profile(spark: object, n: int, size: int, bodies: str, seconds: float, tmp: str) -> None:
    """py-spy samples of the broker, flusher and Spark Python workers during a write."""
    import threading
    from pathlib import Path

    import psutil

    try:
        import profile_parts as parts
    except ImportError:  # run as a module
        from benchmarks import profile_parts as parts

    rayq.Admin().create_topic("write-profile", queues=PARTITIONS)
    rows = spark.range(0, 4 * n, 1, PARTITIONS).select(  # type: ignore[attr-defined]
        _body(size, bodies).alias("body")
    )
    writer = threading.Thread(target=rqspark.write, args=(rows, "write-profile"))
    writer.start()
    time.sleep(3)  # the workers start
    workers = {  # this run's only: Ray's local cluster and its executors descend from us
        f"spark python worker {p.pid}": p.pid
        for p in psutil.Process().children(recursive=True)
        if "pyspark.daemon" in " ".join(p.cmdline())
    }
    pids = {k: v for k, v in parts.processes(workers).items() if not k.startswith("driver")}
    out = Path(tmp) / "profile"
    out.mkdir()
    for role, path in parts.record(pids, seconds, out).items():
        parts.summarize(role, path, seconds, 10)
    writer.join()


def _count_rows(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    n = sum(b.num_rows for b in batches)
    yield pa.RecordBatch.from_pydict({"rows": [n]}, schema=pa.schema([("rows", pa.int64())]))


def _rate(write: Callable[[], int]) -> float:
    time.sleep(SETTLE_S)
    t0 = time.perf_counter()
    written = write()
    return written / (time.perf_counter() - t0)


if __name__ == "__main__":
    main()
