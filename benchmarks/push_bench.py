"""Push-consumer figures through Ray, all parts on this machine, each beside a floor
measured in the same run.

Run: ``.venv/bin/python benchmarks/push_bench.py [--quick]`` (starts and stops its own
local Ray). Prints:

- drain: one PushConsumer with a no-op listener draining a 1 KiB backlog on 8 queues
  (default ``pull_batch_size`` and 256), the same with 2 consumers, and one
  PullConsumer draining the same backlog (its default ``poll_max_messages``); the
  ratio push / pull against its target (>= 0.8). Rates count from ``start()``
  returning (the consumer joined and owns its queues) to the last message consumed.
- end-to-end latency (send -> listener called) at ~1,000 msgs/s, single messages
  sent with a synchronous ``Producer.send`` each, paced on a fixed schedule; beside
  it the bare-actor floor: the same paced sends as one synchronous call each to a
  plain async Ray actor holding a list, and a consumer actor that long-polls it
  (asyncio.Event, as ``anchors/adapters/ray_actor_list.py``) and calls the same
  listener; the ratio of the p50s against its target (<= 0.5 since the socket data
  plane, issue 28; it was <= 2 over Ray calls). Also rayq with
  ``send_oneway`` (the accumulator's ``linger_ms``), for reference.
- the hand-over time: from a consumer's death (`ray.kill` of its actor) to its queues
  being consumed again by the survivor, over several kills (p50, max; `--part failover`).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import ray

import rayq

try:
    from results import record, record_latency
except ImportError:  # run as a module
    from benchmarks.results import record, record_latency

BENCH = "push_bench"

SETTLE_S = 0.5  # after a consumer has started, before the first timed send


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


def drain_rate(topic: str, total: int, consumers: int, batch: int | None) -> float:
    """Messages a second that ``consumers`` PushConsumers of a new group consume of the
    backlog, from all of them having started (together, each from its own thread) to the
    last message consumed; what they consumed before that is left out."""
    group = f"bench-{uuid.uuid4().hex[:6]}"
    config = rayq.ClientConfig() if batch is None else rayq.ClientConfig(pull_batch_size=batch)
    started = []
    for _ in range(consumers):
        c = rayq.PushConsumer(group, consume_from=rayq.ConsumeFromWhere.FIRST_OFFSET, config=config)
        c.subscribe(topic)
        c.register_listener(noop)
        started.append(c)
    threads = [threading.Thread(target=c.start) for c in started]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    t0 = time.perf_counter()
    before = sum(c.stats()["consumed"] for c in started)
    while (done := sum(c.stats()["consumed"] for c in started)) < total:
        time.sleep(0.02)
    elapsed = time.perf_counter() - t0
    for c in started:
        c.shutdown()
    if done - before < total // 2:  # drained before all had started: no figure
        return float("nan")
    return (done - before) / elapsed


def pull_drain_rate(topic: str, total: int) -> float:
    """The same backlog drained by one PullConsumer (as broker_bench.py does)."""
    group = f"bench-pull-{uuid.uuid4().hex[:6]}"
    consumer = rayq.PullConsumer(group, consume_from=rayq.ConsumeFromWhere.FIRST_OFFSET)
    consumer.subscribe(topic)
    consumer.start()
    t0 = time.perf_counter()
    got = 0
    while got < total:
        got += len(consumer.poll(timeout=2.0))
    rate = got / (time.perf_counter() - t0)
    consumer.shutdown()
    return rate


def paced(n: int, rate: float, send: Callable[[bytes], Any]) -> None:
    """``send`` the current time, ``n`` times, on a fixed schedule of ``rate`` a second
    (a late send does not push the later ones back)."""
    t0 = time.perf_counter()
    for i in range(n):
        send(repr(time.time()).encode())
        delay = t0 + (i + 1) / rate - time.perf_counter()
        if delay > 0:
            time.sleep(delay)


def latencies(rows: list[tuple[int, float, float]]) -> list[float]:
    """The rows' latencies in ms (plot.py draws their CDF)."""
    return [(done - sent) * 1000 for _, sent, done in rows]


def end_to_end(n: int, rate: float, oneway: bool = False) -> list[float]:
    """rayq: a PushConsumer on a 4-queue topic; each message sent by itself."""
    topic = f"push-e2e-{uuid.uuid4().hex[:6]}"
    rayq.Admin().create_topic(topic, queues=4)
    sink = Sink.remote()
    c = rayq.PushConsumer(f"bench-e2e-{uuid.uuid4().hex[:6]}")
    c.subscribe(topic)
    c.register_listener(Timing(sink))
    c.start()
    with rayq.Producer("bench-e2e") as producer:
        time.sleep(SETTLE_S)
        if oneway:
            paced(n, rate, lambda body: producer.send_oneway(rayq.Message(topic, body)))
        else:
            paced(n, rate, lambda body: producer.send(rayq.Message(topic, body)))
    time.sleep(1.0)
    rows = ray.get(sink.get.remote())
    c.shutdown()
    return latencies(rows)


class BareMessage:
    """What the floor's listener reads of a message (as of a MessageExt)."""

    __slots__ = ("body", "queue_id")

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.queue_id = 0


@ray.remote(num_cpus=0)
class BareBroker:
    """The floor's broker: a list and an asyncio.Event (anchors' ray_actor_list)."""

    def __init__(self) -> None:
        self.log: list[bytes] = []
        self.offset = 0
        self.event = asyncio.Event()

    async def append(self, batch: list[bytes]) -> int:
        self.log.extend(batch)
        event, self.event = self.event, asyncio.Event()
        event.set()
        return len(self.log)

    async def read(self, max_n: int, timeout_s: float) -> list[bytes]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self.offset >= len(self.log):
            left = deadline - loop.time()
            if left <= 0:
                return []
            try:
                await asyncio.wait_for(self.event.wait(), left)
            except TimeoutError:
                return []
        out = self.log[self.offset : self.offset + max_n]
        self.offset += len(out)
        return out


@ray.remote(num_cpus=0)
class BareConsumer:
    """The floor's consumer: long-polls the BareBroker and calls the listener."""

    def __init__(self, broker: Any, listener: Callable[[list], Any]) -> None:
        self.broker = broker
        self.listener = listener
        self.running = True

    async def ready(self) -> bool:
        return True

    async def run(self) -> None:
        while self.running:
            bodies = await self.broker.read.remote(1024, 1.0)
            if bodies:
                self.listener([BareMessage(b) for b in bodies])

    async def stop(self) -> None:
        self.running = False


def floor_end_to_end(n: int, rate: float) -> list[float]:
    """The bare-actor floor of ``end_to_end``: one synchronous actor call per send, one
    long-polling consumer actor, the same listener and pacing."""
    sink = Sink.remote()
    broker = BareBroker.remote()
    consumer = BareConsumer.remote(broker, Timing(sink))
    ray.get(consumer.ready.remote())
    running = consumer.run.remote()
    time.sleep(SETTLE_S)
    paced(n, rate, lambda body: ray.get(broker.append.remote([body])))
    time.sleep(1.0)
    ray.get(consumer.stop.remote())
    ray.get(running)
    rows = ray.get(sink.get.remote())
    for actor in (consumer, broker, sink):
        ray.kill(actor)
    return latencies(rows)


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
    ray.kill(sink)
    resumed = [done for q, sent, done in rows if q in victim_queues and sent > killed_at]
    return min(resumed) - killed_at if resumed else float("nan")


def handover_figures(kills: int) -> None:
    """The hand-over time over several kills (each with a new group of two consumers)."""
    gaps = sorted(failover(4.0) for _ in range(kills))
    p50 = statistics.median(gaps)
    print(
        f"consumer killed -> its queues consumed again by the survivor, {kills} kills: "
        f"p50 {p50:.2f} s, max {gaps[-1]:.2f} s ({', '.join(f'{g:.2f}' for g in gaps)})"
    )
    record(BENCH, "consumer_failover", p50, "s")
    record(BENCH, "consumer_failover_max", gaps[-1], "s")


def verdict(ratio: float, target: float, at_most: bool) -> str:
    met = ratio <= target if at_most else ratio >= target
    bound = "<=" if at_most else ">="
    return f"{ratio:.2f} (target {bound} {target}: {'met' if met else 'MISSED'})"


def drain_figures(total: int) -> float:
    """Prints the drain figures; the push / pull ratio at the default pull_batch_size."""
    fill("push-backlog", total)
    pull = pull_drain_rate("push-backlog", total)
    print(
        f"pull consumption, one PullConsumer, 1 KiB, poll_max_messages "
        f"{rayq.ClientConfig().poll_max_messages}: {pull:>9,.0f} msgs/s"
    )
    record(
        BENCH,
        "consume_pull",
        pull,
        "msgs/s",
        size=1024,
        batch=rayq.ClientConfig().poll_max_messages,
    )
    ratios = []
    for batch in (None, 256):
        one = drain_rate("push-backlog", total, 1, batch)
        two = drain_rate("push-backlog", total, 2, batch)
        size = rayq.ClientConfig().pull_batch_size if batch is None else batch
        print(
            f"push consumption, no-op listener, 1 KiB, pull_batch_size {size:>3}: "
            f"{one:>9,.0f} msgs/s with 1 consumer, {two:>9,.0f} msgs/s with 2 on "
            f"8 queues; 1 consumer / pull consumer = {one / pull:.2f}"
        )
        ratios.append(one / pull)
        record(BENCH, "consume_push", one, "msgs/s", size=1024, batch=size, consumers=1)
        record(BENCH, "consume_push", two, "msgs/s", size=1024, batch=size, consumers=2)
    return ratios[0]


def latency_figures(n: int, rate: float) -> float:
    """Prints the latency figures; rayq's p50 / the floor's p50."""
    floor, send, oneway = (
        floor_end_to_end(n, rate),
        end_to_end(n, rate),
        end_to_end(n, rate, oneway=True),
    )
    for metric, samples in (
        ("e2e_latency_floor", floor),
        ("e2e_latency_push", send),
        ("e2e_latency_push_oneway", oneway),
    ):
        record_latency(BENCH, metric, samples, size=0, batch=1, rate=rate)
    f50, f99 = pct(floor, 50), pct(floor, 99)
    p50, p99 = pct(send, 50), pct(send, 99)
    o50, o99 = pct(oneway, 50), pct(oneway, 99)
    print(
        f"end-to-end latency, ~{rate:,.0f} msgs/s (send -> listener), bare-actor floor: "
        f"p50 {f50:.2f} ms, p99 {f99:.2f} ms"
    )
    print(
        f"end-to-end latency, ~{rate:,.0f} msgs/s (send -> listener), rayq send: "
        f"p50 {p50:.2f} ms, p99 {p99:.2f} ms; p50 / floor p50 = {p50 / f50:.2f}"
    )
    print(
        f"end-to-end latency, ~{rate:,.0f} msgs/s (send -> listener), rayq send_oneway: "
        f"p50 {o50:.2f} ms, p99 {o99:.2f} ms"
    )
    return p50 / f50


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
            targets = []
            if args.part in ("all", "drain"):
                ratio = drain_figures(total)
                targets.append(f"push drain / pull drain {verdict(ratio, 0.8, at_most=False)}")
            if args.part in ("all", "e2e"):
                ratio = latency_figures(2000 if args.quick else 5000, args.rate)
                targets.append(f"push p50 / floor p50 {verdict(ratio, 0.5, at_most=True)}")
            if args.part in ("all", "failover"):
                handover_figures(3 if args.quick else 7)
            if targets:
                print("targets (same run): " + "; ".join(targets))
        finally:
            cluster.shutdown()


if __name__ == "__main__":
    main()
