"""Arrow → EncodedBatch encoding without Ray: the row path (``to_pylist``, one
``InnerMessage`` per row, ``encode_batch``) against the column path
(``store/arrow_encode.py``), msgs/s at 1 KiB and 128 B bodies.

    .venv/bin/python benchmarks/arrow_encode_bench.py [--quick]

Each round encodes one Arrow batch of ``--rows`` rows (a Spark writer's batch size) with
an idempotent producer's properties, as ``rayq.arrow_io.write_batches`` does, and the
best of ``--repeat`` rounds is reported (a shared 2-core machine is noisy).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import pyarrow as pa
from results import record

from rayq.store import InnerMessage, encode_batch
from rayq.store import properties as P
from rayq.store.arrow_encode import arrow_rows, encode_rows, sequence_ids

LIMITS = {"max_body_bytes": 4 * 1024 * 1024, "max_properties_bytes": 32 * 1024}
PRODUCER = "spark-0123456789ab-0"
SHARED = {P.PRODUCER_GROUP: "rayq-spark-writer", "__PID": PRODUCER, "__PSEQ": "0-9999"}


def _batch(rows: int, size: int, tagged: bool) -> pa.RecordBatch:
    bodies = pa.array([i.to_bytes(4, "big") * (size // 4) for i in range(rows)], pa.binary())
    tags = pa.array([f"Tag{i % 8}" for i in range(rows)]) if tagged else pa.nulls(rows, pa.string())
    keys = pa.array([f"key-{i}" for i in range(rows)]) if tagged else pa.nulls(rows, pa.string())
    return pa.record_batch([bodies, tags, keys], names=["body", "tags", "keys"])


def row_path(batch: pa.RecordBatch) -> int:
    """What write_batches did before: Python rows, InnerMessages, encode_batch."""
    bodies = batch.column("body").to_pylist()
    tags = batch.column("tags").to_pylist()
    keys = batch.column("keys").to_pylist()
    msgs = [
        InnerMessage(
            topic="bench",
            queue_id=0,
            body=b,
            tags=t or None,
            keys=k or "",
            uniq_key=f"{PRODUCER}-{i}",
            properties=SHARED,
            born_timestamp=1,
        )
        for i, (b, t, k) in enumerate(zip(bodies, tags, keys, strict=True))
    ]
    return encode_batch(msgs, **LIMITS).count


def column_path(batch: pa.RecordBatch) -> int:
    rows = arrow_rows(batch.column("body"), batch.column("tags"), batch.column("keys"))
    ids = sequence_ids(f"{PRODUCER}-", 0, batch.num_rows)
    return encode_rows(
        rows,
        topic="bench",
        queue_id=0,
        uniq_keys=ids,
        properties=SHARED,
        born_timestamp=1,
        **LIMITS,
    ).count


def best_rate(fn: Callable[[pa.RecordBatch], int], batch: pa.RecordBatch, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn(batch)
        best = min(best, time.perf_counter() - t0)
    return batch.num_rows / best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    rows, repeat = (2000, 3) if args.quick else (args.rows, args.repeat)
    for size in (1024, 128):
        for tagged in (False, True):
            batch = _batch(rows, size, tagged)
            old = best_rate(row_path, batch, repeat)
            new = best_rate(column_path, batch, repeat)
            shape = "tags+keys" if tagged else "bodies"
            print(
                f"arrow→EncodedBatch {size:>5} B {shape:<9} rows path {old:>12,.0f} msgs/s   "
                f"column path {new:>12,.0f} msgs/s   ×{new / old:.1f}"
            )
            for path, value in (("rows", old), ("columns", new)):
                record(
                    "arrow_encode_bench",
                    "encode",
                    value,
                    "msgs/s",
                    size=size,
                    path=path,
                    shape=shape,
                    rows=rows,
                )


if __name__ == "__main__":
    main()
