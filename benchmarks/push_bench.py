"""Push-consumer figures through Ray, all parts on this machine.

Run: ``.venv/bin/python benchmarks/push_bench.py [--quick]`` (starts and stops its own
local Ray). Prints: consumption throughput of one PushConsumer with a no-op listener
draining a 1 KiB backlog on 8 queues, the same with 2 consumers, end-to-end latency
(send -> listener called) at ~1,000 msgs/s, and the time from a consumer's death to
its queues being consumed again by the survivor.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
import uuid

import ray

import rayq


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(p / 100 * len(values)))]


@ray.remote(num_cpus=0)
class Sink:
    def __init__(self) -> None:
        self.rows: list[tuple[int, float, float]] = []

    def add(self, rows: list[tuple[int, float, float]]) -> None:
        self.rows.extend(rows)

    def get(self) -> list[tuple[int, float, float]]:
        return list(self.rows)


def noop(msgs: list) -> rayq.ConsumeStatus:
    return rayq.ConsumeStatus.CONSUME_SUCCESS


class Timing:
    """Reports (queue id, send time, listener time) of each message to a Sink, a few
    times a second (one Ray call per message would load the consumer it measures)."""

    def __init__(self, sink: object, flush_s: float = 0.2) -> None:
        self.sink = sink
        self.flush_s = flush_s
        self.rows: list[tuple[int, float, float]] = []
        self.flushed = 0.0
        self.lock = threading.Lock()

    def __getstate__(self) -> dict:
        return {"sink": self.sink, "flush_s": self.flush_s}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["sink"], state["flush_s"])  # type: ignore[misc]

    def __call__(self, msgs: list) -> rayq.ConsumeStatus:
        now = time.time()
        with self.lock:
            self.rows.extend((m.queue_id, float(m.body), now) for m in msgs)
            if now - self.flushed >= self.flush_s:
                self.sink.add.remote(self.rows)  # type: ignore[attr-defined]
                self.rows, self.flushed = [], now
        return rayq.ConsumeStatus.CONSUME_SUCCESS


def fill(topic: str, total: int) -> None:
    body = b"x" * 1024
    with rayq.Producer("bench-fill") as producer:
        for _ in range(total // 100):
            producer.send_batch([rayq.Message(topic, body)] * 100)


def drain_rate(topic: str, total: int, consumers: int, batch: int) -> float:
    group = f"bench-{uuid.uuid4().hex[:6]}"
    config = rayq.ClientConfig(pull_batch_size=batch)
    started = []
    for _ in range(consumers):
        c = rayq.PushConsumer(group, consume_from=rayq.ConsumeFromWhere.FIRST_OFFSET,
                              config=config)  # fmt: skip
        c.subscribe(topic)
        c.register_listener(noop)
        started.append(c)
    t0 = time.perf_counter()
    for c in started:
        c.start()
    while sum(c.stats()["consumed"] for c in started) < total:
        time.sleep(0.05)
    rate = total / (time.perf_counter() - t0)
    for c in started:
        c.shutdown()
    return rate


def end_to_end(n: int, rate: float = 1000.0) -> tuple[float, float]:
    topic = "push-e2e"
    rayq.Admin().create_topic(topic, queues=4)
    sink = Sink.remote()
    c = rayq.PushConsumer("bench-e2e")
    c.subscribe(topic)
    c.register_listener(Timing(sink))
    c.start()
    with rayq.Producer("bench-e2e") as producer:
        for _ in range(n):
            producer.send_oneway(rayq.Message(topic, repr(time.time()).encode()))
            time.sleep(1 / rate)
    time.sleep(1.0)
    rows = ray.get(sink.get.remote())
    c.shutdown()
    lat = [(done - sent) * 1000 for _, sent, done in rows]
    return pct(lat, 50), pct(lat, 99)


def failover(seconds: float) -> float:
    """Seconds from killing one of two consumers to the survivor consuming its queues."""
    topic = "push-failover"
    rayq.Admin().create_topic(topic, queues=4)
    sink = Sink.remote()
    group = f"bench-fo-{uuid.uuid4().hex[:6]}"
    consumers = []
    for _ in range(2):
        c = rayq.PushConsumer(group)
        c.subscribe(topic)
        c.register_listener(Timing(sink))
        c.start()
        consumers.append(c)
    victim, survivor = consumers
    victim_queues = {q.queue_id for q in victim.assignment() if q.topic == topic}
    killed_at = 0.0
    with rayq.Producer("bench-fo") as producer:
        t_end = time.time() + seconds
        while time.time() < t_end:
            if not killed_at and time.time() > t_end - seconds / 2:
                killed_at = time.time()
                ray.kill(victim.actor)
                victim._closed = True  # killed: nothing to shut down
            producer.send(rayq.Message(topic, repr(time.time()).encode()))
            time.sleep(0.005)
    time.sleep(1.0)
    rows = ray.get(sink.get.remote())
    survivor.shutdown()
    resumed = [done for q, sent, done in rows if q in victim_queues and sent > killed_at]
    return min(resumed) - killed_at if resumed else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--part", choices=["all", "drain", "e2e", "failover"], default="all")
    parser.add_argument("--rate", type=float, default=1000.0, help="end-to-end send rate")
    args = parser.parse_args()
    total = 50_000 if args.quick else 200_000
    with tempfile.TemporaryDirectory(prefix="rayq-bench-") as tmp:
        cluster = rayq.start(tmp)
        try:
            rayq.Admin().create_topic("push-backlog", queues=8)
            if args.part in ("all", "drain"):
                fill("push-backlog", total)
            for batch in (32, 256) if args.part in ("all", "drain") else ():
                one = drain_rate("push-backlog", total, 1, batch)
                two = drain_rate("push-backlog", total, 2, batch)
                print(f"push consumption, no-op listener, 1 KiB, pull_batch_size {batch:>3}: "
                      f"{one:>9,.0f} msgs/s with 1 consumer, {two:>9,.0f} msgs/s with 2 on "
                      f"8 queues")  # fmt: skip
            if args.part in ("all", "e2e"):
                p50, p99 = end_to_end(2000 if args.quick else 5000, args.rate)
                print(f"end-to-end latency, ~{args.rate:,.0f} msgs/s (send -> listener): "
                      f"p50 {p50:.2f} ms, p99 {p99:.2f} ms")  # fmt: skip
            if args.part in ("all", "failover"):
                gap = failover(4.0)
                print(f"consumer killed -> its queues consumed again by the survivor: {gap:.2f} s")
        finally:
            cluster.shutdown()


if __name__ == "__main__":
    main()
