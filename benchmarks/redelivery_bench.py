"""Messages consumed again after a push consumer is killed, through Ray (issue 14).

Run: ``.venv/bin/python benchmarks/redelivery_bench.py [--messages N]`` (starts and
stops its own local Ray). One queue holds N messages (default 10,001); a PushConsumer
(commit timer 500 ms) consumes them, its Consumer actor is killed with ``ray.kill``,
and a new PushConsumer of the group takes the queue over. Two runs:

- ``one stuck``: the message at offset 5 sleeps in the listener while all the others
  are consumed; the kill comes once nothing has moved for three commit intervals;
- ``none stuck``: each listener call takes 0.1 s and the kill comes when half the
  backlog is consumed (what was consumed after the last commit, in a pull or by the
  timer, comes again in any design).

For each run it prints: ``in flight`` (messages the killed consumer's listener got
but had not finished), ``redelivered`` (messages the new consumer got that the killed
one's listener had got already), the target (redelivered <= in flight: only what was
in flight comes again) and, for comparison, ``offset only``: what a commit of the
offset alone (RocketMQ's, and rayq's before acked ranges) redelivers, everything from
the group's committed offset on that the killed consumer had got.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from typing import Any

import ray

import rayq

STUCK_OFFSET = 5
BATCH = 32  # consume_message_batch_max_size: one Sink call per listener call
COMMIT_MS = 500
WAIT_S = 120.0
PACE_S = 0.1  # per listener call of the "none stuck" run: the backlog takes a few seconds


@ray.remote(num_cpus=0)
class Sink:
    """Offsets per phase: "started" / "done" by the first consumer, "again" by the second."""

    def __init__(self) -> None:
        self.offsets: dict[str, set[int]] = {"started": set(), "done": set(), "again": set()}

    def add(self, phase: str, offsets: list[int]) -> None:
        self.offsets[phase].update(offsets)

    def get(self) -> dict[str, set[int]]:
        return self.offsets


class Listener:
    """Reports the offsets it gets (and, for the first consumer, finishes) to the Sink;
    with ``stuck`` >= 0 the call holding that offset never returns; each call takes
    ``pace_s`` (so a kill lands mid-backlog)."""

    def __init__(self, sink: Any, first: bool, stuck: int = -1, pace_s: float = 0.0) -> None:
        self.sink, self.first, self.stuck, self.pace_s = sink, first, stuck, pace_s

    def __call__(self, msgs: list[rayq.MessageExt]) -> rayq.ConsumeStatus:
        offsets = [m.queue_offset for m in msgs]
        self.sink.add.remote("started" if self.first else "again", offsets)
        if self.stuck in offsets:
            time.sleep(3600)  # until the actor is killed
        time.sleep(self.pace_s)
        if self.first:
            self.sink.add.remote("done", offsets)
        return rayq.ConsumeStatus.CONSUME_SUCCESS


def consumer(group: str, topic: str, listener: Listener, total: int) -> rayq.PushConsumer:
    config = rayq.ClientConfig(
        auto_commit_interval_ms=COMMIT_MS,
        consume_message_batch_max_size=BATCH,
        consume_concurrently_max_span=2 * total,
    )
    c = rayq.PushConsumer(group, consume_from=rayq.ConsumeFromWhere.FIRST_OFFSET, config=config)
    c.subscribe(topic)
    c.register_listener(listener)
    c.start()
    return c


def committed_offset(group: str, topic: str) -> int:
    progress = [p for p in rayq.Admin().consumer_progress(group) if p.queue.topic == topic]
    return progress[0].committed_offset if progress else -1


def wait_for(check: Any, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.1)


def settled(sink: Any, phase: str, quiet_s: float) -> None:
    """Wait until the Sink's ``phase`` set has not grown for ``quiet_s``."""
    last, since = -1, time.monotonic()
    deadline = since + WAIT_S
    while time.monotonic() - since < quiet_s:
        n = len(ray.get(sink.get.remote())[phase])
        if n != last:
            last, since = n, time.monotonic()
        if time.monotonic() > deadline:
            raise TimeoutError(f"{phase} never settled")
        time.sleep(0.1)


def run(total: int, stuck: bool) -> dict[str, int]:
    topic = f"redeliver-{uuid.uuid4().hex[:6]}"
    group = f"cg-{uuid.uuid4().hex[:6]}"
    rayq.Admin().create_topic(topic, queues=1)
    with rayq.Producer("bench-redeliver") as producer:
        for start in range(0, total, 100):
            producer.send_batch([rayq.Message(topic, b"x" * 100)] * min(100, total - start))
    sink = Sink.remote()
    listener = Listener(sink, True, STUCK_OFFSET) if stuck else Listener(sink, True, pace_s=PACE_S)
    first = consumer(group, topic, listener, total)
    if stuck:
        wait_for(lambda: len(ray.get(sink.get.remote())["done"]) >= total - BATCH, "consumption")
        settled(sink, "done", 3 * COMMIT_MS / 1000)
    else:
        wait_for(lambda: len(ray.get(sink.get.remote())["done"]) >= total // 2, "half")
    offset = committed_offset(group, topic)
    ray.kill(first.actor)
    first._closed = True  # killed: nothing to shut down
    seen = ray.get(sink.get.remote())
    second = consumer(group, topic, Listener(sink, False), total)
    wait_for(lambda: committed_offset(group, topic) >= total, "the new consumer to finish")
    second.shutdown()
    seen = ray.get(sink.get.remote())
    started, done, again = seen["started"], seen["done"], seen["again"]
    return {
        "in flight": len(started - done),
        "redelivered": len(again & started),
        "offset only": len({o for o in started if o >= offset}),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=10_001)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rayq-bench-") as tmp:
        cluster = rayq.start(tmp)
        try:
            for stuck in (True, False):
                got = run(args.messages, stuck)
                print(
                    f"{'one stuck' if stuck else 'none stuck'}, {args.messages:,} messages: "
                    f"redelivered {got['redelivered']:,}, in flight {got['in flight']:,}; "
                    f"offset only would redeliver {got['offset only']:,}"
                )
                if stuck:
                    met = got["redelivered"] <= got["in flight"]
                    print(
                        f"  target (one stuck): redelivered <= in flight: "
                        f"{'met' if met else 'MISSED'}"
                    )
        finally:
            cluster.shutdown()


if __name__ == "__main__":
    main()
