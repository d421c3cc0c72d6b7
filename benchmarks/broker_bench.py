"""Broker figures through Ray, all parts on this machine.

Run: ``.venv/bin/python benchmarks/broker_bench.py [--quick]`` (starts and stops its
own local Ray). Prints: produce throughput (1 producer, batches of 100, async flush,
1 KiB and 128 B; sequential and with 4 batches in flight), sync single-message send
latency p50/p99, end-to-end latency (send -> poll returns) at ~1,000 msgs/s with
long polling, SYNC_FLUSH produce throughput with 4 concurrent senders,
``send_async`` of single 1 KiB messages, pull throughput draining a backlog with
one PullConsumer, the same produce/consume workload on ``ray.util.queue.Queue``,
and the broker process's CPU time per put of 100 x 1 KiB (its own counters). The client
transport is the default's, or ``RAYQ_TRANSPORT`` (``direct``, ``ray``).
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import rayq
from rayq.store import FlushDiskType
from rayq.transport.choice import transport_name

try:
    from results import progress, record, record_latency
except ImportError:  # run as a module
    from benchmarks.results import progress, record, record_latency

BENCH = "broker_bench"


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(p / 100 * len(values)))]


def produce_batches(
    producer: rayq.Producer, topic: str, size: int, total: int, in_flight: int
) -> float:
    body = b"x" * size
    batches = total // 100

    def one(i: int) -> None:
        producer.send_batch([rayq.Message(topic, body, keys=[f"k{i}"]) for _ in range(100)])

    with progress(batches, f"produce {size} B x {in_flight} in flight") as advance:

        def step(i: int) -> None:
            one(i)
            advance(1)

        t0 = time.perf_counter()
        if in_flight == 1:
            for i in range(batches):
                step(i)
        else:
            with ThreadPoolExecutor(in_flight) as pool:
                list(pool.map(step, range(batches)))
        return batches * 100 / (time.perf_counter() - t0)


def sync_latency(producer: rayq.Producer, n: int) -> list[float]:
    lat = []
    for i in range(n):
        t0 = time.perf_counter()
        producer.send(rayq.Message("latency", b"x" * 1024, keys=[f"l{i}"]))
        lat.append((time.perf_counter() - t0) * 1000)
    return lat


def end_to_end(producer: rayq.Producer, n: int) -> list[float]:
    rayq.Admin().create_topic("e2e", queues=4)
    consumer = rayq.PullConsumer("e2e", consume_from=rayq.ConsumeFromWhere.LAST_OFFSET)
    consumer.subscribe("e2e")
    consumer.start()
    consumer.poll(timeout=0.2)
    sent: dict[str, float] = {}
    lat: list[float] = []
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            now_msgs = consumer.poll(timeout=0.5)
            t = time.perf_counter()
            lat.extend((t - sent[m.keys[0]]) * 1000 for m in now_msgs if m.keys[0] in sent)

    reader = threading.Thread(target=read)
    reader.start()
    for i in range(n):
        key = f"e{i}"
        sent[key] = time.perf_counter()
        producer.send_oneway(rayq.Message("e2e", b"x" * 1024, keys=[key]))
        time.sleep(0.001)
    time.sleep(1.0)
    done.set()
    reader.join()
    consumer.shutdown()
    return lat


def send_async_rate(producer: rayq.Producer, n: int) -> float:
    body = b"x" * 1024
    t0 = time.perf_counter()
    futures = [producer.send_async(rayq.Message("async", body)) for _ in range(n)]
    for f in futures:
        f.result(timeout=120)
    return n / (time.perf_counter() - t0)


def drain(topic: str, expected: int) -> float:
    consumer = rayq.PullConsumer("drain", consume_from=rayq.ConsumeFromWhere.FIRST_OFFSET)
    consumer.subscribe(topic)
    consumer.start()
    t0 = time.perf_counter()
    got = 0
    while got < expected:
        got += len(consumer.poll(timeout=2.0))
    rate = got / (time.perf_counter() - t0)
    consumer.shutdown()
    return rate


def ray_queue_rate(total: int, size: int) -> float:
    from ray.util.queue import Queue

    q = Queue(maxsize=0)
    body = b"x" * size
    t0 = time.perf_counter()
    for _ in range(total // 100):
        q.put_nowait_batch([body] * 100)
    got = 0
    while got < total:
        got += len(q.get_nowait_batch(min(1000, total - got)))
    rate = total / (time.perf_counter() - t0)
    q.shutdown()
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    total = 20_000 if args.quick else 200_000
    backlog = 50_000 if args.quick else 1_000_000
    with tempfile.TemporaryDirectory(prefix="rayq-bench-") as tmp:
        cluster = rayq.start(tmp)
        try:
            run_async_flush(total, backlog)
        finally:
            cluster.shutdown()
    with tempfile.TemporaryDirectory(prefix="rayq-bench-") as tmp:
        cluster = rayq.start(
            tmp, config=rayq.BrokerConfig(flush_disk_type=FlushDiskType.SYNC_FLUSH)
        )
        try:
            with rayq.Producer("bench-sync") as producer:
                rate = produce_batches(producer, "sync", 1024, total, 4)
            print(f"SYNC_FLUSH produce, 4 senders x batches of 100 x 1 KiB: {rate:>10,.0f} msgs/s")
            record(BENCH, "produce_sync_flush", rate, "msgs/s", size=1024, batch=100, in_flight=4)
        finally:
            cluster.shutdown()


def broker_cpu_s() -> float:
    """The broker process's CPU time so far (user + system), read from its own counters."""
    import ray

    from rayq.actors.protocol import broker_actor_name

    broker = ray.get_actor(broker_actor_name("broker-a"), namespace="rayq")

    def cpu(_self: object) -> float:
        import os

        t = os.times()
        return t.user + t.system

    return float(ray.get(broker.__ray_call__.remote(cpu)))


def run_async_flush(total: int, backlog: int) -> None:
    with rayq.Producer("bench") as producer:
        produce_batches(producer, "p1024", 1024, 1000, 1)  # warm: the route, the connection
        before = broker_cpu_s()
        produce_batches(producer, "p1024", 1024, total, 1)
        per_put = (broker_cpu_s() - before) / (total // 100) * 1000
        transport = transport_name("")
        print(f"broker CPU per put of 100 x 1 KiB ({transport} transport): {per_put:.2f} ms")
        record(BENCH, "broker_cpu_per_put", per_put, "ms", size=1024, batch=100)
        for size in (1024, 128):
            one = produce_batches(producer, f"p{size}", size, total, 1)
            four = produce_batches(producer, f"p{size}", size, total, 4)
            print(
                f"produce {size:>5} B, batches of 100: {one:>10,.0f} msgs/s sequential, "
                f"{four:>10,.0f} msgs/s with 4 in flight"
            )
            record(BENCH, "produce", one, "msgs/s", size=size, batch=100, in_flight=1)
            record(BENCH, "produce", four, "msgs/s", size=size, batch=100, in_flight=4)
        lat = sync_latency(producer, 2000)
        print(f"sync send latency (1 KiB): p50 {pct(lat, 50):.2f} ms, p99 {pct(lat, 99):.2f} ms")
        record_latency(BENCH, "sync_send_latency", lat, size=1024, batch=1)
        lat = end_to_end(producer, 3000)
        print(
            f"end-to-end latency, ~1,000 msgs/s (send -> poll): p50 {pct(lat, 50):.2f} ms, "
            f"p99 {pct(lat, 99):.2f} ms"
        )
        record_latency(BENCH, "e2e_latency_poll", lat, size=1024, batch=1, rate=1000)
        rate = send_async_rate(producer, total)
        print(f"send_async single 1 KiB messages: {rate:>10,.0f} msgs/s")
        record(BENCH, "send_async", rate, "msgs/s", size=1024, batch=1)
        written = 0
        while written < backlog:
            chunk = min(backlog, 100_000)
            produce_batches(producer, "backlog", 1024, chunk, 4)
            written += chunk
    rate = drain("backlog", written)
    print(
        f"drain of a {written:,}-message backlog (1 KiB), one PullConsumer: {rate:>10,.0f} msgs/s"
    )
    record(BENCH, "consume_drain", rate, "msgs/s", size=1024, batch=1024)
    for size in (1024, 128):
        rq = ray_queue_rate(total, size)
        print(
            f"ray.util.queue.Queue produce+consume {size:>5} B, batches of 100: {rq:>10,.0f} msgs/s"
        )
        record(BENCH, "ray_queue_produce_consume", rq, "msgs/s", size=size, batch=100)


if __name__ == "__main__":
    main()
