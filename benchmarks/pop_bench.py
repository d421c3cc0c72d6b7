"""POP consumption (``rayq.SimpleConsumer``) against the pull and push consumers, each
figure beside its reference from the same run.

Run: ``.venv/bin/python benchmarks/pop_bench.py [--quick] [--part throughput|uneven|redelivery]``
(starts and stops its own local Ray and one broker). Prints:

- throughput: a backlog of 1 KiB messages on 4 queues drained by one PullConsumer
  (the reference), by one SimpleConsumer (``receive(32)``, every message acknowledged
  on its own: one ``ack_many`` call per receive, then deferred acks riding on the next
  receive) and by four SimpleConsumers (deferred acks), each in its own Ray worker
  process; the POP / pull ratios against the target (>= 0.7).
- uneven work: messages on 2 queues, a handler that sleeps 1-50 ms at random (the same
  seeded sequence for both), 8 POP workers (Ray tasks, one message at a time) against
  8 PushConsumers with one consume thread each (only 2 of them own a queue); time to
  finish all, and the ratio against the target (<= 0.35).
- redelivery: a POP worker (a Ray actor) receives 10 messages with a 3 s lease, acks 4
  and is killed; a second consumer drains the topic: which messages came again, when.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
import uuid

import ray

import rayq

try:
    from push_bench import pull_drain_rate
    from results import record
except ImportError:  # run as a module
    from benchmarks.push_bench import pull_drain_rate
    from benchmarks.results import record

BENCH = "pop_bench"


def fill(topic: str, total: int, body: bytes = b"x" * 1024) -> None:
    with rayq.Producer("pop-bench-fill") as producer:
        for _ in range(total // 100):
            producer.send_batch([rayq.Message(topic, body)] * 100)


def pop_drain(topic: str, group: str, limit: int, defer: bool = True) -> int:
    """Receive and ack until ``limit`` messages or the topic is empty; how many. Each
    message is acked on its own, in one ``ack_many`` per receive: deferred (riding on
    the next receive) or in a call of its own."""
    consumer = rayq.SimpleConsumer(group, await_duration=0.2)
    consumer.subscribe(topic)
    consumer.start()
    got = 0
    while got < limit:
        msgs = consumer.receive(max_messages=32, invisible_duration=60)
        if not msgs:
            break
        consumer.ack_many(msgs, defer=defer)
        got += len(msgs)
    consumer.shutdown()  # sends the last deferred acks
    return got


@ray.remote(num_cpus=0)
class Drainer:
    """A POP consumer in a Ray worker process of its own (started before the clock)."""

    def __init__(self, namespace: str) -> None:
        rayq.connect(namespace=namespace)

    def drain(self, topic: str, group: str, limit: int) -> int:
        return pop_drain(topic, group, limit)


def throughput_figures(total: int, namespace: str) -> tuple[float, float]:
    topic = f"pop-backlog-{uuid.uuid4().hex[:6]}"
    rayq.Admin().create_topic(topic, queues=4)
    fill(topic, total)
    pull = pull_drain_rate(topic, total)
    print(f"drain of {total:,} x 1 KiB, one PullConsumer (reference): {pull:,.0f} msgs/s")
    record(BENCH, "pull_drain", pull, "msgs/s", size=1024)
    t0 = time.perf_counter()
    got = pop_drain(topic, f"pop1n-{uuid.uuid4().hex[:6]}", total, defer=False)
    now = got / (time.perf_counter() - t0)
    print(
        f"drain, one SimpleConsumer (receive 32, ack each, an ack call per receive): "
        f"{now:,.0f} msgs/s ({got:,}; {now / pull:.2f}x pull)"
    )
    record(BENCH, "pop_drain_1_ack_calls", now, "msgs/s", size=1024)
    t0 = time.perf_counter()
    got = pop_drain(topic, f"pop1-{uuid.uuid4().hex[:6]}", total)
    one = got / (time.perf_counter() - t0)
    print(
        f"drain, one SimpleConsumer (receive 32, ack each, acks deferred to the next "
        f"receive): {one:,.0f} msgs/s ({got:,})"
    )
    record(BENCH, "pop_drain_1", one, "msgs/s", size=1024)
    group = f"pop4-{uuid.uuid4().hex[:6]}"
    drainers = [Drainer.remote(namespace) for _ in range(4)]  # type: ignore[attr-defined]
    ray.get([d.__ray_ready__.remote() for d in drainers])
    t0 = time.perf_counter()
    counts = ray.get([d.drain.remote(topic, group, total) for d in drainers])
    four = sum(counts) / (time.perf_counter() - t0)
    for d in drainers:
        ray.kill(d)
    print(
        f"drain, four SimpleConsumers in 4 processes: {four:,.0f} msgs/s "
        f"({sum(counts):,} in all: {counts})"
    )
    record(BENCH, "pop_drain_4", four, "msgs/s", size=1024)
    return one / pull, four / pull


def work_ms(seed: int, n: int) -> list[float]:
    rng = random.Random(seed)
    return [rng.uniform(1, 50) for _ in range(n)]


@ray.remote(num_cpus=0)
class UnevenWorker:
    """One message at a time: receive 1, sleep its body's work, ack (a Ray worker
    process of its own, started before the clock)."""

    def __init__(self, namespace: str) -> None:
        rayq.connect(namespace=namespace)

    def work(self, topic: str, group: str, stop_at: float) -> int:
        consumer = rayq.SimpleConsumer(group, await_duration=0.5)
        consumer.subscribe(topic)
        consumer.start()
        done = 0
        while time.time() < stop_at:
            msgs = consumer.receive(max_messages=1, invisible_duration=30)
            if not msgs:
                break
            for m in msgs:
                time.sleep(float(m.body) / 1000)
                consumer.ack(m)
                done += 1
        consumer.shutdown()
        return done


class Sleeper:
    def __call__(self, msgs: list) -> rayq.ConsumeStatus:
        for m in msgs:
            time.sleep(float(m.body) / 1000)
        return rayq.ConsumeStatus.CONSUME_SUCCESS


def uneven_figures(n: int, namespace: str) -> float:
    works = work_ms(7, n)
    print(
        f"uneven work: {n:,} messages on 2 queues, 1-50 ms each "
        f"({sum(works) / 1000:.0f} s in all), 8 workers"
    )
    # POP: 8 workers over 2 queues
    topic = f"uneven-pop-{uuid.uuid4().hex[:6]}"
    rayq.Admin().create_topic(topic, queues=2)
    with rayq.Producer("pop-bench-uneven") as producer:
        for at in range(0, n, 100):
            producer.send_batch(
                [rayq.Message(topic, f"{w:.3f}".encode()) for w in works[at : at + 100]]
            )
    group = f"uneven-{uuid.uuid4().hex[:6]}"
    workers = [UnevenWorker.remote(namespace) for _ in range(8)]  # type: ignore[attr-defined]
    ray.get([w.__ray_ready__.remote() for w in workers])
    t0 = time.perf_counter()
    counts = ray.get([w.work.remote(topic, group, time.time() + 600) for w in workers])
    pop_s = time.perf_counter() - t0
    for w in workers:
        ray.kill(w)
    print(f"  8 POP workers: {pop_s:.1f} s ({sum(counts):,} done: {counts})")
    record(BENCH, "uneven_pop_s", pop_s, "s")
    # push: 8 consumers, one consume thread each: 2 queues, so 2 of them work
    topic = f"uneven-push-{uuid.uuid4().hex[:6]}"
    rayq.Admin().create_topic(topic, queues=2)
    group = f"uneven-push-{uuid.uuid4().hex[:6]}"
    config = rayq.ClientConfig(consume_thread=1)
    consumers = []
    for _ in range(8):
        c = rayq.PushConsumer(group, consume_from=rayq.ConsumeFromWhere.FIRST_OFFSET, config=config)
        c.subscribe(topic)
        c.register_listener(Sleeper())
        c.start()
        consumers.append(c)
    time.sleep(2)  # the group's queues assigned
    t0 = time.perf_counter()
    with rayq.Producer("pop-bench-uneven") as producer:
        for at in range(0, n, 100):
            producer.send_batch(
                [rayq.Message(topic, f"{w:.3f}".encode()) for w in works[at : at + 100]]
            )
    while sum(c.stats()["consumed"] for c in consumers) < n:
        time.sleep(0.1)
    push_s = time.perf_counter() - t0
    for c in consumers:
        c.shutdown()
    print(f"  8 PushConsumers (consume_thread=1): {push_s:.1f} s")
    record(BENCH, "uneven_push_s", push_s, "s")
    return pop_s / push_s


@ray.remote(num_cpus=0)
class Holder:
    def __init__(self, topic: str, group: str, namespace: str) -> None:
        rayq.connect(namespace=namespace)
        self.consumer = rayq.SimpleConsumer(group, await_duration=1.0)
        self.consumer.subscribe(topic)
        self.consumer.start()

    def take(self, n: int, acks: int) -> list[bytes]:
        msgs = self.consumer.receive(max_messages=n, invisible_duration=3.0)
        for m in msgs[:acks]:
            self.consumer.ack(m)
        return [m.body for m in msgs]


def redelivery_figures(namespace: str) -> None:
    topic = f"redeliver-{uuid.uuid4().hex[:6]}"
    rayq.Admin().create_topic(topic, queues=1)
    with rayq.Producer("pop-bench-redeliver") as producer:
        producer.send_batch([rayq.Message(topic, f"m{i}".encode()) for i in range(20)])
    group = f"redeliver-{uuid.uuid4().hex[:6]}"
    holder = Holder.remote(topic, group, namespace)  # type: ignore[attr-defined]
    held = ray.get(holder.take.remote(10, 4))
    killed = time.perf_counter()
    ray.kill(holder)
    other = rayq.SimpleConsumer(group, await_duration=1.0)
    other.subscribe(topic)
    other.start()
    firsts, again, when = [], [], []
    while time.perf_counter() - killed < 10:
        for m in other.receive(max_messages=32, invisible_duration=30):
            (again if m.delivery_count > 1 else firsts).append(m.body)
            if m.delivery_count > 1:
                when.append(time.perf_counter() - killed)
            other.ack(m)
    other.shutdown()
    unacked = sorted(held[4:])
    print(
        f"redelivery: a worker took {len(held)} with a 3 s lease, acked 4, was killed; "
        f"came again: {len(again)} (its 6 unacked: {sorted(again) == unacked}), "
        f"{min(when, default=float('nan')):.1f}-{max(when, default=float('nan')):.1f} s "
        f"after the kill; first deliveries to the other: {len(firsts)} (the 10 never taken)"
    )
    record(BENCH, "redelivered", len(again), "messages")


def verdict(ratio: float, target: float, at_most: bool) -> str:
    ok = ratio <= target if at_most else ratio >= target
    return f"{ratio:.2f} (target {'<=' if at_most else '>='} {target}: {'met' if ok else 'MISSED'})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--part", choices=["all", "throughput", "uneven", "redelivery"], default="all"
    )
    args = parser.parse_args()
    namespace = "rayq-pop-bench"
    with tempfile.TemporaryDirectory(prefix="rayq-bench-") as tmp:
        cluster = rayq.start(tmp, namespace=namespace)
        try:
            targets = []
            if args.part in ("all", "throughput"):
                one, four = throughput_figures(20_000 if args.quick else 100_000, namespace)
                targets.append(f"POP x1 / pull {verdict(one, 0.7, at_most=False)}")
                targets.append(f"POP x4 / pull {verdict(four, 0.7, at_most=False)}")
            if args.part in ("all", "uneven"):
                ratio = uneven_figures(1_000 if args.quick else 10_000, namespace)
                targets.append(f"uneven POP / push time {verdict(ratio, 0.35, at_most=True)}")
            if args.part in ("all", "redelivery"):
                redelivery_figures(namespace)
            if targets:
                print("targets (same run): " + "; ".join(targets))
        finally:
            cluster.shutdown()
            ray.shutdown()


if __name__ == "__main__":
    main()
