"""Arrow → EncodedBatch encoding without Ray: the row path (``to_pylist``, one
``InnerMessage`` per row, ``encode_batch``) against the column path
(``store/arrow_encode.py``), msgs/s at 1 KiB and 128 B bodies.

    .venv/bin/python benchmarks/arrow_encode_bench.py [--quick]

Each round encodes one Arrow batch of ``--rows`` rows (a Spark writer's batch size) with
an idempotent producer's properties, as ``rayq.connectors.arrow_io.write_batches`` does, and the
best of ``--repeat`` rounds is reported (a shared 2-core machine is noisy).

``--part send-batch``: would the column path pay for ``Producer.send_batch``? Its input is
Python lists, so the column path must first build Arrow arrays from them
(``pa.array``); against that, the row path's ``InnerMessage`` per message +
``encode_batch``, µs per message at 10 .. 10,000 messages.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import pyarrow as pa

try:
    from results import record
except ImportError:  # run as a module
    from benchmarks.results import record

from rayq.store import InnerMessage, UniqIdGenerator, encode_batch
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


def send_batch_sizes(quick: bool) -> None:
    """µs per message from Python lists: InnerMessages + encode_batch vs pa.array + encode_rows."""
    ids = UniqIdGenerator()
    shared = {P.PRODUCER_GROUP: "pg"}
    for n in (10, 100, 1000) if quick else (10, 100, 1000, 10_000):
        for size in (128, 1024):
            bodies = [bytes([i % 251]) * size for i in range(n)]
            uniq = ids.next_ids(n)

            def rows_path(bodies: list[bytes] = bodies, uniq: list[str] = uniq) -> int:
                msgs = [
                    InnerMessage(
                        topic="bench",
                        queue_id=0,
                        body=b,
                        uniq_key=u,
                        properties=shared,
                        born_timestamp=1,
                    )
                    for b, u in zip(bodies, uniq, strict=True)
                ]
                return encode_batch(msgs, **LIMITS).count

            def columns_path(bodies: list[bytes] = bodies, uniq: list[str] = uniq) -> int:
                rows = arrow_rows(pa.array(bodies, pa.binary()))
                return encode_rows(
                    rows,
                    topic="bench",
                    queue_id=0,
                    properties=shared,
                    uniq_keys=pa.array(uniq, pa.string()),
                    born_timestamp=1,
                    **LIMITS,
                ).count

            us = {}
            for name, fn in (("rows", rows_path), ("columns", columns_path)):
                reps = max(3, 20_000 // n)
                best = min(_timed(fn, reps) for _ in range(3 if quick else 5))
                us[name] = best / n * 1e6
                record(
                    "arrow_encode_bench",
                    "send_batch_encode",
                    us[name],
                    "us/msg",
                    size=size,
                    batch=n,
                    path=name,
                )
            print(
                f"send_batch {n:>6} × {size:>4} B: InnerMessage + encode_batch "
                f"{us['rows']:5.2f} µs/msg, pa.array + encode_rows {us['columns']:5.2f} µs/msg"
            )


def _timed(fn: Callable[[], int], reps: int) -> float:
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) / reps


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--part", choices=["arrow", "send-batch", "all"], default="all")
    args = ap.parse_args()
    if args.part in ("send-batch", "all"):
        send_batch_sizes(args.quick)
    if args.part == "send-batch":
        return
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
