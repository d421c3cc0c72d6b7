"""Quorum replication: SYNC_MASTER sends/s with min_in_sync_replicas 2 of 2 against 1 of 2.

Run: ``.venv/bin/python benchmarks/quorum_bench.py [--quick]``

One Ray session on this machine, two deployments side by side (each a SYNC_MASTER with
two slaves; one acknowledges a send once 1 slave has it, the other once both have it).
One producer per deployment sends 1 KiB messages, batched (100 per call) and single,
each call waiting for its acknowledgement; the rounds alternate between the two
settings so that the machine's load falls on both alike. Printed: the median msgs/s
over the rounds for each setting and each kind of send, and the ratio 2-of-2 / 1-of-2.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import ray

import rayq
from rayq.actors.protocol import SendStatus
from rayq.store import StoreConfig

try:
    from results import record
except ImportError:  # run as a module from the repository root
    from benchmarks.results import record

STORE = StoreConfig(
    commitlog_segment_size_bytes=256 << 20,
    disk_warning_ratio=1.0,
    disk_max_used_space_ratio=1.0,
    disk_clean_forcibly_ratio=1.0,
)
BODY = b"x" * 1024
BATCH = 100
SETTINGS = (1, 2)  # min_in_sync_replicas, of 2 slaves


def measure(producer: rayq.Producer, batched: bool, calls: int) -> float:
    """msgs/s over ``calls`` acknowledged calls (a batch of BATCH, or one message)."""
    msgs = [rayq.Message("Bench", BODY) for _ in range(BATCH)]
    start = time.perf_counter()
    for _ in range(calls):
        results = producer.send_batch(msgs) if batched else [producer.send(msgs[0])]
        bad = {r.status for r in results} - {SendStatus.SEND_OK}
        if bad:
            raise RuntimeError(f"a send was not acknowledged: {bad}")
    return calls * (BATCH if batched else 1) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer, shorter rounds")
    args = parser.parse_args()
    rounds, batches, singles = (3, 30, 200) if args.quick else (5, 100, 1000)
    ray.init(address="local", num_cpus=2, log_to_driver=False)
    clusters: list[rayq.Cluster] = []
    producers: dict[int, rayq.Producer] = {}
    figures: dict[tuple[int, bool], list[float]] = {(k, b): [] for k in SETTINGS for b in (1, 0)}
    try:
        with tempfile.TemporaryDirectory(prefix="rayq-quorum-bench-") as tmp:
            for k in SETTINGS:
                ns = f"bench-quorum-{k}"
                config = rayq.BrokerConfig(
                    store=STORE, broker_role=rayq.BrokerRole.SYNC_MASTER, min_in_sync_replicas=k
                )
                clusters.append(rayq.start(Path(tmp) / ns, config=config, slaves=2, namespace=ns))
                rayq.Admin(namespace=ns).create_topic("Bench", queues=4)
                producers[k] = rayq.Producer(group="bench", namespace=ns)
                producers[k].start()
                measure(producers[k], True, 20)  # warm-up
                measure(producers[k], False, 50)
            for r in range(rounds):
                for k in SETTINGS if r % 2 == 0 else SETTINGS[::-1]:
                    figures[k, True].append(measure(producers[k], True, batches))
                    figures[k, False].append(measure(producers[k], False, singles))
    finally:
        for producer in producers.values():
            producer.shutdown()
        for cluster in clusters:
            cluster.shutdown()
        ray.shutdown()
    for batched in (True, False):
        kind = f"batched ({BATCH} x 1 KiB per call)" if batched else "single (1 KiB per call)"
        medians = {k: statistics.median(figures[k, batched]) for k in SETTINGS}
        for k in SETTINGS:
            print(
                f"SYNC_MASTER, min_in_sync_replicas {k} of 2, {kind}: "
                f"{medians[k]:,.0f} msgs/s (median of {rounds} rounds: "
                f"{', '.join(f'{v:,.0f}' for v in figures[k, batched])})"
            )
            record(
                "quorum_bench",
                "sync_produce",
                medians[k],
                "msgs/s",
                size=1024,
                batch=BATCH if batched else 1,
                min_in_sync_replicas=k,
                slaves=2,
            )
        print(f"  2 of 2 / 1 of 2: {medians[2] / medians[1]:.2f}")


if __name__ == "__main__":
    main()
