"""Replication figures: what a slave costs the producer, how far it lags, how fast failover is.

Run: ``.venv/bin/python benchmarks/replication_bench.py [--quick] [--part PART]`` with
PART one of produce, concurrent, chunks, failover (default: all).

* **produce**: one producer sending 1 KiB messages in batches of 100 (each acknowledged,
  as the anchors harness does), to one broker with no slave, then to an ASYNC_MASTER
  and a SYNC_MASTER each with one slave, all on this machine in one run; msgs/s and the
  ratio to the no-slave figure (targets: async >= 0.9, sync >= 0.6). Under the
  replicated loads, the master's reported replication lag is sampled every 20 ms
  (bytes and ms; p50 and p99).
* **concurrent**: the same with four senders at once, no slave against SYNC_MASTER
  (concurrent sends share the slave's fetches: group commit).
* **chunks**: the SYNC_MASTER run with the slave's chunks capped at 96 KiB (passed
  inline by Ray), 1 MiB and 4 MiB (through the object store), to choose the default.
* **failover**: a Ray cluster of a head and two broker nodes (master, slave) on this
  machine, ASYNC_MASTER; a producer sends single messages and a consumer polls; the
  master's node is removed. Printed: seconds from the removal to the first send
  acknowledged by the promoted master, and to the first message sent after the
  removal reaching the consumer (targets: <= 5 s each).
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path

import ray

import rayq
from rayq.cluster import server_actor
from rayq.store import StoreConfig

STORE = StoreConfig(
    commitlog_segment_size_bytes=256 << 20,
    disk_warning_ratio=1.0,
    disk_max_used_space_ratio=1.0,
    disk_clean_forcibly_ratio=1.0,
)
BODY = b"x" * 1024
BATCH = 100


def produce_run(
    root: Path,
    role: rayq.BrokerRole,
    slaves: int,
    batches: int,
    chunk: int = 4 << 20,
    senders: int = 1,
) -> tuple:
    ns = f"bench-repl-{role.value.lower()}-{slaves}-{chunk}-{senders}"
    ray.init(address="local", num_cpus=2, namespace=ns, log_to_driver=False)
    config = rayq.BrokerConfig(store=STORE, broker_role=role, ha_transfer_batch_bytes=chunk)
    cluster = rayq.start(root / ns, config=config, slaves=slaves, namespace=ns)
    lags: list[tuple[int, int]] = []
    stop = threading.Event()

    def sample() -> None:
        master = server_actor("rayq-broker-broker-a", ns)
        while not stop.is_set():
            for r in ray.get(master.broker_info.remote()).replicas:
                lags.append((r.lag_bytes, r.lag_ms))
            time.sleep(0.02)

    try:
        rayq.Admin(namespace=ns).create_topic("Bench", queues=4)
        with rayq.Producer(group="bench", namespace=ns) as producer:
            msgs = [rayq.Message("Bench", BODY) for _ in range(BATCH)]
            for _ in range(20):  # warm-up
                producer.send_batch(msgs)
            sampler = threading.Thread(target=sample, daemon=True)
            if slaves:
                sampler.start()
            statuses: set = set()

            def send(n: int) -> None:
                for _ in range(n):
                    statuses.update(r.status for r in producer.send_batch(msgs))

            t0 = time.perf_counter()
            threads = [
                threading.Thread(target=send, args=(batches // senders,)) for _ in range(senders)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            seconds = time.perf_counter() - t0
            batches = batches // senders * senders
            stop.set()
            if slaves:
                sampler.join()
    finally:
        cluster.shutdown()
        ray.shutdown()
    return batches * BATCH / seconds, lags, statuses


def pct(values: list[int], q: float) -> float:
    if not values:
        return 0.0
    values = sorted(values)
    return float(values[min(len(values) - 1, int(q * len(values)))])


def bench_produce(batches: int) -> None:
    with tempfile.TemporaryDirectory(prefix="rayq-repl-bench-") as tmp:
        root = Path(tmp)
        base, _, _ = produce_run(root, rayq.BrokerRole.ASYNC_MASTER, 0, batches)
        print(f"produce 1 KiB x {BATCH}, no slave:          {base:>9,.0f} msgs/s")
        for role in (rayq.BrokerRole.ASYNC_MASTER, rayq.BrokerRole.SYNC_MASTER):
            rate, lags, statuses = produce_run(root, role, 1, batches)
            lag_bytes = [b for b, _ in lags]
            lag_ms = [m for _, m in lags]
            print(
                f"produce 1 KiB x {BATCH}, {role.value:<12} + slave: {rate:>9,.0f} msgs/s "
                f"({rate / base:.2f}x no slave; target >= "
                f"{'0.9' if role is rayq.BrokerRole.ASYNC_MASTER else '0.6'}); statuses "
                f"{sorted(s.value for s in statuses)}"
            )
            print(
                f"    replication lag under that load ({len(lags)} samples): bytes p50 "
                f"{pct(lag_bytes, 0.5):,.0f} p99 {pct(lag_bytes, 0.99):,.0f}; ms p50 "
                f"{pct(lag_ms, 0.5):.1f} p99 {pct(lag_ms, 0.99):.1f}"
            )


def bench_concurrent(batches: int) -> None:
    """Four senders at once: SYNC_MASTER sends share the slave's round trips."""
    with tempfile.TemporaryDirectory(prefix="rayq-repl-bench-") as tmp:
        base, _, _ = produce_run(Path(tmp), rayq.BrokerRole.ASYNC_MASTER, 0, batches, senders=4)
        rate, _, _ = produce_run(Path(tmp), rayq.BrokerRole.SYNC_MASTER, 1, batches, senders=4)
        print(
            f"4 senders, 1 KiB x {BATCH}: no slave {base:,.0f} msgs/s, SYNC_MASTER + slave "
            f"{rate:,.0f} msgs/s ({rate / base:.2f}x)"
        )


def bench_chunks(batches: int) -> None:
    """The slave's chunk size: inline (under Ray's 100 KiB) against the object store."""
    with tempfile.TemporaryDirectory(prefix="rayq-repl-bench-") as tmp:
        for chunk in (96 << 10, 1 << 20, 4 << 20):
            rate, lags, _ = produce_run(Path(tmp), rayq.BrokerRole.SYNC_MASTER, 1, batches, chunk)
            lag_bytes = [b for b, _ in lags]
            print(
                f"SYNC_MASTER, chunks of at most {chunk >> 10:>5} KiB: {rate:>9,.0f} msgs/s; "
                f"lag bytes p50 {pct(lag_bytes, 0.5):,.0f} p99 {pct(lag_bytes, 0.99):,.0f}"
            )


def bench_failover() -> None:
    from ray.cluster_utils import Cluster

    ns = "bench-failover"
    with tempfile.TemporaryDirectory(prefix="rayq-failover-bench-") as tmp:
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
        master_node = cluster.add_node(num_cpus=0, resources={"rayq_broker:broker-a": 1})
        cluster.add_node(num_cpus=0, resources={"rayq_broker:broker-a#1": 1})
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, namespace=ns, log_to_driver=False)
        config = rayq.BrokerConfig(store=STORE, broker_role=rayq.BrokerRole.ASYNC_MASTER)
        deployment = rayq.start(Path(tmp), placement="resource", namespace=ns, config=config)
        stop = threading.Event()
        sent_ok: list[tuple[float, bytes]] = []
        received: list[tuple[float, bytes]] = []

        def send() -> None:
            with rayq.Producer(group="fo", namespace=ns) as producer:
                i = 0
                while not stop.is_set():
                    body = f"{i}".encode()
                    try:
                        if producer.send(rayq.Message("Fo", body)).status.value == "SEND_OK":
                            sent_ok.append((time.monotonic(), body))
                    except rayq.RayqError:
                        time.sleep(0.01)
                    i += 1
                    time.sleep(0.005)

        def consume() -> None:
            first = rayq.ConsumeFromWhere.FIRST_OFFSET
            consumer = rayq.PullConsumer("fo-c", namespace=ns, consume_from=first)
            consumer.subscribe("Fo")
            consumer.start()
            while not stop.is_set():
                try:
                    for m in consumer.poll(timeout=0.5):
                        received.append((time.monotonic(), m.body))
                except rayq.RayqError:
                    time.sleep(0.05)
            consumer.shutdown()

        try:
            rayq.Admin(namespace=ns).create_topic("Fo", queues=2)
            threads = [threading.Thread(target=send), threading.Thread(target=consume)]
            for t in threads:
                t.start()
            time.sleep(3)
            lost_at = time.monotonic()
            cluster.remove_node(master_node)
            time.sleep(12)
            stop.set()
            for t in threads:
                t.join(60)
            after = [(t, b) for t, b in sent_ok if t > lost_at]
            first_send = after[0][0] - lost_at if after else float("nan")
            sent_after = {b for _, b in after}
            got = [t for t, b in received if b in sent_after]
            first_read = min(got) - lost_at if got else float("nan")
            print(
                f"failover (ASYNC_MASTER, master node removed): first acknowledged send on "
                f"the promoted master after {first_send:.2f} s (target <= 5 s); consumers "
                f"received a message sent after the loss {first_read:.2f} s after it "
                f"(target <= 5 s)"
            )
        finally:
            deployment.shutdown()
            ray.shutdown()
            cluster.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parts = ("produce", "concurrent", "chunks", "failover")
    parser.add_argument("--part", choices=parts, default=None)
    args = parser.parse_args()
    if args.part in (None, "produce"):
        bench_produce(100 if args.quick else 400)
    if args.part in (None, "concurrent"):
        bench_concurrent(100 if args.quick else 400)
    if args.part in (None, "chunks"):
        bench_chunks(100 if args.quick else 300)
    if args.part in (None, "failover"):
        bench_failover()


if __name__ == "__main__":
    main()
