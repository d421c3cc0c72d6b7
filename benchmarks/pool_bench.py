"""``rayq.ConsumerPool`` under a load step: workers and backlog over time.

Run: ``.venv/bin/python benchmarks/pool_bench.py [--quick] [--out docs/bench]``
(starts and stops its own local Ray and one broker).

A producer sends at 100 msgs/s, then steps to 1,000 msgs/s, then stops; each message
is 20 ms of work (an async handler awaiting ``asyncio.sleep``: I/O-bound work such as a
model or web call). The pool has 1 to 8 workers of 8 handler slots each and checks
every second; a worker idle for 10 s is stopped. Every 0.5 s the benchmark samples
the pool's status. It prints the backlog's peak and where it ended, the workers at
each phase, and draws ``pool_autoscale.png`` (workers and backlog over time).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import threading
import time
import uuid
from pathlib import Path

import ray

import rayq

try:
    from results import record
except ImportError:  # run as a module
    from benchmarks.results import record

BENCH = "pool_bench"
WORK_S = 0.020


async def work(msg: rayq.ReceivedMessage) -> None:
    await asyncio.sleep(WORK_S)


def produce(topic: str, phases: list[tuple[float, float]], stop: threading.Event) -> None:
    """Send at each phase's rate (msgs/s) for its seconds, in batches of up to 10."""
    with rayq.Producer("pool-bench") as producer:
        for rate, seconds in phases:
            if not rate:
                stop.wait(seconds)
                continue
            batch = max(1, int(rate // 100))
            t0 = time.perf_counter()
            n = 0
            while (now := time.perf_counter()) - t0 < seconds and not stop.is_set():
                due = int((now - t0) * rate)
                while n < due:
                    k = min(batch, due - n)
                    producer.send_batch([rayq.Message(topic, b"x" * 256)] * k)
                    n += k
                time.sleep(0.005)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default="docs/bench")
    args = parser.parse_args()
    scale = 0.5 if args.quick else 1.0
    phases = [(100.0, 15 * scale), (1000.0, 30 * scale), (0.0, 40 * scale)]
    with tempfile.TemporaryDirectory(prefix="rayq-bench-") as tmp:
        cluster = rayq.start(tmp, namespace="rayq-pool-bench")
        try:
            topic = f"pool-{uuid.uuid4().hex[:6]}"
            rayq.Admin().create_topic(topic, queues=4)
            pool = rayq.ConsumerPool(
                group=f"pool-{uuid.uuid4().hex[:6]}",
                topic=topic,
                handler=work,
                min_workers=1,
                max_workers=8,
                concurrency=8,
                num_cpus=0.1,
                interval_s=1.0,
                idle_s=10.0,
                backlog_per_slot=4,
            )
            pool.start()
            stop = threading.Event()
            sender = threading.Thread(target=produce, args=(topic, phases, stop), daemon=True)
            t0 = time.perf_counter()
            sender.start()
            samples: list[tuple[float, int, int, float]] = []
            total = sum(s for _, s in phases)
            while (elapsed := time.perf_counter() - t0) < total + 5:
                st = pool.status()
                running = sum(1 for w in st.workers if w.state == "running")
                samples.append((elapsed, running, st.backlog, st.rate))
                time.sleep(0.5)
            stop.set()
            sender.join()
            pool.shutdown(grace_s=5)
        finally:
            cluster.shutdown()
            ray.shutdown()
    ends = [phases[0][1], phases[0][1] + phases[1][1], total]
    for name, (lo, hi) in zip(
        ["100 msgs/s", "1,000 msgs/s", "stopped"],
        [(0, ends[0]), (ends[0], ends[1]), (ends[1], total + 5)],
        strict=True,
    ):
        part = [s for s in samples if lo <= s[0] < hi]
        if not part:
            continue
        print(
            f"{name:>12}: workers {min(s[1] for s in part)}-{max(s[1] for s in part)}, "
            f"backlog peak {max(s[2] for s in part):,}, at the end {part[-1][2]:,}, "
            f"settled up to {max(s[3] for s in part):,.0f} msgs/s"
        )
    peak = max(s[2] for s in samples)
    record(BENCH, "backlog_peak", peak, "messages")
    record(BENCH, "workers_peak", max(s[1] for s in samples), "workers")
    record(BENCH, "workers_end", samples[-1][1], "workers")
    draw(samples, ends, Path(args.out) / "pool_autoscale.png")


def draw(samples: list[tuple[float, int, int, float]], ends: list[float], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [s[0] for s in samples]
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.step(t, [s[1] for s in samples], where="post", color="tab:blue", label="workers running")
    ax.set_xlabel("seconds")
    ax.set_ylabel("workers", color="tab:blue")
    ax.set_ylim(0, 9)
    other = ax.twinx()
    other.plot(t, [s[2] for s in samples], color="tab:red", label="backlog")
    other.set_ylabel("backlog (messages)", color="tab:red")
    for x, label in zip(ends[:2], ["100 -> 1,000 msgs/s", "sends stop"], strict=True):
        ax.axvline(x, color="grey", linestyle=":")
        ax.text(x, 8.5, " " + label, fontsize=8, color="grey")
    ax.set_title("rayq.ConsumerPool: a load step of 20 ms messages (1-8 workers x 8 slots)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    print(f"drew {path}")


if __name__ == "__main__":
    main()
