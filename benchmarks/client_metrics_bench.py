"""What client-side metrics (rayq/metrics.py) cost a producer: sends with the recorder
on against off, in one run, rounds alternating.

Run: ``.venv/bin/python benchmarks/client_metrics_bench.py [--part fake|ray|both]
[--rounds R] [--sends N]``

- ``fake``: one process, no Ray: a Producer over rayq.testing's fake cluster (the real
  broker objects and store in a temp dir), so the client's own work dominates. The
  recorder keeps samples for Ray as it does in a Ray process (``_exporting`` forced on),
  the worst case.
- ``ray``: a local deployment (``rayq.start``); the producer in this driver exports to
  Ray every 2 s.

Each round sends ``--sends`` messages of 100 B one by one with ``send`` (one sample per
message: the most the recorder is asked to do), then as many with ``send_async``
(a sample per batch). "off" replaces the recorder's hot-path methods with no-ops. The
median of the rounds is printed for each, with this process's CPU time per message
(all its threads, the exporter's included: less sensitive to a busy machine than the
rate), and the ratios on/off (1.00 = no cost).
Also printed: the cost of one ``RECORDER.sent`` call in ns.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import rayq
from rayq.metrics import RECORDER, Recorder

BODY = b"x" * 100
TOPIC = "metered"


@contextmanager
def recorder(on: bool) -> Iterator[None]:
    """The process's recorder as is (on), or with its hot-path methods doing nothing."""
    if on:
        yield
        return
    noop: Callable[..., None] = lambda *args: None  # noqa: E731
    for name in ("sent", "send_failed", "lag", "listened"):
        setattr(RECORDER, name, noop)
    try:
        yield
    finally:
        for name in ("sent", "send_failed", "lag", "listened"):
            delattr(RECORDER, name)


def one_round(producer: rayq.Producer, sends: int) -> tuple[float, float, float, float]:
    """(sync msgs/s, its CPU us/msg, async msgs/s, its CPU us/msg) of one round. CPU:
    this process's, all its threads (the exporter's included)."""
    started, cpu = time.perf_counter(), time.process_time()
    for _ in range(sends):
        producer.send(rayq.Message(TOPIC, BODY))
    sync_rate = sends / (time.perf_counter() - started)
    sync_cpu = (time.process_time() - cpu) / sends * 1e6
    started, cpu = time.perf_counter(), time.process_time()
    futures = [producer.send_async(rayq.Message(TOPIC, BODY)) for _ in range(sends)]
    for f in futures:
        f.result()
    async_rate = sends / (time.perf_counter() - started)
    return sync_rate, sync_cpu, async_rate, (time.process_time() - cpu) / sends * 1e6


def compare(producer: rayq.Producer, rounds: int, sends: int, label: str) -> None:
    one_round(producer, sends // 4)  # warm up: routes, connections
    rates: dict[bool, list[tuple[float, ...]]] = {True: [], False: []}
    for i in range(rounds * 2):
        on = i % 4 in (0, 3)  # on, off, off, on, ...: neither goes first every time
        with recorder(on):
            rates[on].append(one_round(producer, sends))
    for kind, idx in (("send", 0), ("send_async", 2)):
        on, off = (statistics.median(r[idx] for r in rates[k]) for k in (True, False))
        cpu_on, cpu_off = (statistics.median(r[idx + 1] for r in rates[k]) for k in (True, False))
        print(
            f"{label:5} {kind:10} metrics on {on:>9,.0f} msgs/s {cpu_on:7.1f} CPU us/msg   "
            f"off {off:>9,.0f} msgs/s {cpu_off:7.1f} CPU us/msg   on/off {on / off:.3f} "
            f"(CPU {cpu_on / cpu_off:.3f})"
        )


def per_call_ns() -> float:
    r = Recorder()
    r._exporting = lambda: True  # type: ignore[method-assign]  # keep samples, as with Ray
    n = 200_000
    started = time.perf_counter()
    for _ in range(n):
        r.sent("t", 0.001)
    return (time.perf_counter() - started) / n * 1e9


def part_fake(rounds: int, sends: int) -> None:
    from rayq.testing import FakeCluster, FakeTransport

    RECORDER._exporting = lambda: True  # type: ignore[method-assign]
    with tempfile.TemporaryDirectory(prefix="rayq-metrics-bench-") as tmp:
        cluster = FakeCluster(Path(tmp))
        try:
            transport = FakeTransport(cluster)
            rayq.Admin(transport=transport).create_topic(TOPIC, queues=4)
            with rayq.Producer("bench-pg", transport=transport) as producer:
                compare(producer, rounds, sends, "fake")
        finally:
            cluster.close()
    del RECORDER._exporting


def part_ray(rounds: int, sends: int) -> None:
    with tempfile.TemporaryDirectory(prefix="rayq-metrics-bench-") as tmp:
        cluster = rayq.start(tmp, namespace="rayq-metrics-bench")
        try:
            rayq.Admin().create_topic(TOPIC, queues=4)
            with rayq.Producer("bench-pg") as producer:
                compare(producer, rounds, sends, "ray")
        finally:
            cluster.shutdown()


def main(argv: Any = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=("fake", "ray", "both"), default="both")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sends", type=int, default=2000)
    args = parser.parse_args(argv)
    print(f"RECORDER.sent: {per_call_ns():.0f} ns per call (keeping the sample for Ray)")
    if args.part in ("fake", "both"):
        part_fake(args.rounds, args.sends)
    if args.part in ("ray", "both"):
        part_ray(args.rounds, args.sends)


if __name__ == "__main__":
    main()
