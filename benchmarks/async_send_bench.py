"""``send_async`` of single messages next to Redis Streams' one-at-a-time produce, one run.

Run: ``.venv/bin/python benchmarks/async_send_bench.py [--n 50000] [--size 1024]``
(starts and stops its own local Ray and, if ``redis-server`` and the ``redis`` package
are there, its own Redis on a free port; nothing is left running).

The shared anchors harness (``../shared/anchors``) sends synchronously, so its B = 1
produce figure is a round trip per message. A rayq producer that does not need each
answer before the next send uses ``send_async``: single messages coalesce per queue
into batches (``linger_ms``, up to 1,000 messages), each batch one ``Broker.put`` (its
records in chunks under Ray's inline limit), four in flight. Printed:

- Redis Streams: one client, ``XADD`` per message, each acknowledged before the next
  (what the anchors' B = 1 produce does);
- rayq ``send_async``: one producer, ``n`` single messages, until every Future is done;
- the ratio (target: ≥ 2×).
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import tempfile
import time

import ray

import rayq


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def redis_rate(n: int, size: int) -> float | None:
    """XADD of single messages, each acknowledged, msgs/s (None without Redis)."""
    try:
        import redis
    except ImportError:
        return None
    server = shutil.which("redis-server")
    if server is None:
        return None
    port = free_port()
    workdir = tempfile.mkdtemp(prefix="rayq-bench-redis-")
    proc = subprocess.Popen(
        [server, "--port", str(port), "--save", "", "--appendonly", "no", "--dir", workdir],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        client = redis.Redis(port=port)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        body = os.urandom(size)
        started = time.perf_counter()
        for _ in range(n):
            client.xadd("bench", {"d": body})
        return n / (time.perf_counter() - started)
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(workdir, ignore_errors=True)


def rayq_async_rate(n: int, size: int) -> float:
    store = tempfile.mkdtemp(prefix="rayq-bench-async-")
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    cluster = rayq.start(store, namespace="rayq-async-bench")
    try:
        rayq.Admin().create_topic("async", queues=4)
        producer = rayq.Producer("async-bench")
        body = os.urandom(size)
        for f in [producer.send_async(rayq.Message("async", body)) for _ in range(2000)]:
            f.result(60)  # warm: routes, handles, the broker's first segment
        started = time.perf_counter()
        futures = [producer.send_async(rayq.Message("async", body)) for _ in range(n)]
        for f in futures:
            f.result(120)
        rate = n / (time.perf_counter() - started)
        producer.shutdown()
        return rate
    finally:
        cluster.shutdown()
        ray.shutdown()
        shutil.rmtree(store, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=50_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--redis-n", type=int, default=10_000)
    args = parser.parse_args()
    redis = redis_rate(args.redis_n, args.size)
    ours = rayq_async_rate(args.n, args.size)
    print(f"rayq send_async single {args.size} B messages: {ours:>10,.0f} msgs/s")
    if redis is None:
        print("Redis Streams XADD one at a time: skipped (no redis-server or redis package)")
        return
    print(f"Redis Streams XADD one at a time ({args.size} B): {redis:>10,.0f} msgs/s")
    print(f"ratio rayq / Redis: {ours / redis:.2f}x (target >= 2x)")


if __name__ == "__main__":
    main()
