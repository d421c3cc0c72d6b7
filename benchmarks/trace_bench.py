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
import contextlib
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable

import psutil
import ray

import rayq
from rayq.trace import dispatcher as trace_dispatcher

TOPIC = "trace-bench"


def cpu_s() -> tuple[float, float]:
    """CPU seconds used so far by this process (the producers and the trace
    dispatcher) and by its child processes (Ray's: the broker and its helpers)."""
    me = psutil.Process()
    own = sum(me.cpu_times()[:2])
    children = 0.0
    for child in me.children(recursive=True):
        with contextlib.suppress(psutil.Error):
            children += sum(child.cpu_times()[:2])
    return own, children


class Run:
    """Rates and CPU per message of one side (trace on or off) over the rounds."""

    def __init__(self) -> None:
        self.rates: list[float] = []
        self.client_s = self.server_s = 0.0
        self.messages = 0

    def time(self, fn: Callable[[], int]) -> None:
        own, children = cpu_s()
        started = time.perf_counter()
        n = fn()
        self.rates.append(n / (time.perf_counter() - started))
        own2, children2 = cpu_s()
        self.client_s += own2 - own
        self.server_s += children2 - children
        self.messages += n

    def cpu_us(self) -> str:
        per = 1e6 / self.messages
        return f"client {self.client_s * per:5.1f} us, Ray processes {self.server_s * per:5.1f} us"


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
    off, on = Run(), Run()
    for r in range(rounds):
        if r % 2:
            on.time(traced)
            off.time(plain)
        else:
            off.time(plain)
            on.time(traced)
    off_m, on_m = statistics.median(off.rates), statistics.median(on.rates)
    print(
        f"{name:<28} trace off {off_m:>9,.0f} msgs/s   trace on {on_m:>9,.0f} msgs/s   "
        f"ratio {on_m / off_m:.3f}"
    )
    print(f"{'':<28} CPU per message: off {off.cpu_us()}; on {on.cpu_us()}")
    return off_m, on_m


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer sends per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--part", choices=["all", "single", "batch"], default="all")
    parser.add_argument(
        "--linger-ms", type=int, default=None, help="the trace dispatcher's (default: its own)"
    )
    args = parser.parse_args()
    if args.linger_ms is not None:
        trace_dispatcher.LINGER_MS = args.linger_ms  # type: ignore[misc]
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
        print(
            f"{args.rounds} alternating rounds, {args.size} B bodies, one broker, trace "
            f"dispatcher lingering {trace_dispatcher.LINGER_MS} ms"
        )
        if args.part in ("all", "single"):
            compare(
                f"sync send x {n_single}",
                singles(plain, body, n_single),
                singles(traced, body, n_single),
                args.rounds,
            )
        if args.part in ("all", "batch"):
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
