"""Send throughput with message trace on against off, in one run (target: trace on
keeps at least 90% of the sends/s of trace off).

Run: ``.venv/bin/python benchmarks/trace_bench.py [--quick] [--rounds 5]`` (starts and
stops its own local Ray and one rayq deployment; nothing is left running).

Two producers of one deployment, one with ``ClientConfig(trace_enable=True)``, one
without, take turns: each round times both, in alternating order, on the same topic,
so that both see the same broker and the same store. Printed per workload (sync
single sends of 1 KiB; ``send_batch`` of 100 x 1 KiB), the median sends/s of the
rounds for each, and the ratio on/off. Then the trace dispatcher's counts (records
written, dropped, failed) and one traced message's timeline, to show the records
were written, not only buffered.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable

import ray

import rayq

TOPIC = "trace-bench"


def rate(fn: Callable[[], int]) -> float:
    started = time.perf_counter()
    n = fn()
    return n / (time.perf_counter() - started)


def singles(producer: rayq.Producer, body: bytes, n: int) -> Callable[[], int]:
    def run() -> int:
        for _ in range(n):
            producer.send(rayq.Message(TOPIC, body, tags="t", keys=["k"]))
        return n

    return run


def batches(producer: rayq.Producer, body: bytes, n: int, size: int) -> Callable[[], int]:
    msgs = [rayq.Message(TOPIC, body, tags="t", keys=["k"]) for _ in range(size)]

    def run() -> int:
        for _ in range(n):
            producer.send_batch(msgs)
        return n * size

    return run


def compare(
    name: str, plain: Callable[[], int], traced: Callable[[], int], rounds: int
) -> tuple[float, float]:
    """Median msgs/s of ``plain`` and ``traced`` over ``rounds`` alternating rounds."""
    off: list[float] = []
    on: list[float] = []
    for r in range(rounds):
        if r % 2:
            on.append(rate(traced))
            off.append(rate(plain))
        else:
            off.append(rate(plain))
            on.append(rate(traced))
    off_m, on_m = statistics.median(off), statistics.median(on)
    print(
        f"{name:<34} trace off {off_m:>9,.0f} msgs/s   trace on {on_m:>9,.0f} msgs/s   "
        f"ratio {on_m / off_m:.3f}"
    )
    return off_m, on_m


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer sends per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--size", type=int, default=1024)
    args = parser.parse_args()
    n_single, n_batch = (500, 40) if args.quick else (3000, 200)
    store = tempfile.mkdtemp(prefix="rayq-bench-trace-")
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    cluster = rayq.start(store, namespace="rayq-trace-bench")
    try:
        admin = rayq.Admin()
        admin.create_topic(TOPIC, queues=4)
        plain = rayq.Producer("bench-plain")
        traced = rayq.Producer("bench-traced", config=rayq.ClientConfig(trace_enable=True))
        body = os.urandom(args.size)
        for p in (plain, traced):  # warm: routes, connections, the trace topic
            batches(p, body, 20, 100)()
            singles(p, body, 200)()
        print(f"{args.rounds} alternating rounds, {args.size} B bodies, one broker")
        compare(
            f"sync send x {n_single}",
            singles(plain, body, n_single),
            singles(traced, body, n_single),
            args.rounds,
        )
        compare(
            f"send_batch 100 x {n_batch}",
            batches(plain, body, n_batch, 100),
            batches(traced, body, n_batch, 100),
            args.rounds,
        )
        last = traced.send(rayq.Message(TOPIC, body))
        tracer = traced._tracer
        assert tracer is not None
        tracer.dispatcher.flush()
        stats = tracer.dispatcher.stats()
        print(
            f"trace records: {stats.submitted:,} submitted, {stats.written:,} written, "
            f"{stats.dropped:,} dropped, {stats.failed:,} failed"
        )
        events = admin.trace(last.msg_id)
        print("timeline of the last traced send:", [(e.kind, e.status) for e in events])
        plain.shutdown()
        traced.shutdown()
    finally:
        cluster.shutdown()
        ray.shutdown()
        shutil.rmtree(store, ignore_errors=True)


if __name__ == "__main__":
    main()
