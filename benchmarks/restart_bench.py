"""How long each server actor kind takes to serve again after Ray restarts it.

Run: ``.venv/bin/python benchmarks/restart_bench.py`` (starts and stops its own local
Ray). A producer sends 1 KiB messages from a thread and a PushConsumer consumes;
then the flusher, the hold service, the coordinator and the broker are killed in
turn (``ray.kill(no_restart=False)``: Ray restarts each), and the time from the
kill until service is back is printed:

- flusher: until its durable offset passes what the broker had written after the kill;
- hold: until a pull held in the hold service is answered by a new message;
- coordinator: until a new Producer's send succeeds, a new Admin lists the topic and
  the push consumer receives a message sent after the kill;
- broker: until a send succeeds (and the push consumer receives again).

At the end: how many acknowledged messages the push consumer did not receive (0).
"""

from __future__ import annotations

import argparse
import struct
import tempfile
import threading
import time
from collections.abc import Callable

import ray

import rayq
from rayq.actors.protocol import (
    COORDINATOR_NAME,
    PullRequest,
    PullStatus,
    broker_actor_name,
    flusher_actor_name,
    hold_actor_name,
)
from rayq.cluster import server_actor

NAMESPACE = "rayq-restart-bench"
BROKER = "broker-a"
TARGET_S = 2.0
GIVE_UP_S = 60.0
STAMP = "<d"  # each body starts with its send time (time.time()), a little-endian double


@ray.remote(num_cpus=0)
class Sink:
    """Msg ids and the newest send time a listener saw."""

    def __init__(self) -> None:
        self.ids: set[str] = set()
        self.newest_sent = 0.0

    def add(self, ids: list[str], newest_sent: float) -> None:
        self.ids.update(ids)
        self.newest_sent = max(self.newest_sent, newest_sent)

    def newest(self) -> float:
        return self.newest_sent

    def all_ids(self) -> set[str]:
        return set(self.ids)


class Listener:
    def __init__(self, sink: object) -> None:
        self.sink = sink

    def __call__(self, msgs: list[rayq.MessageExt]) -> rayq.ConsumeStatus:
        newest = max(struct.unpack_from(STAMP, m.body)[0] for m in msgs)
        self.sink.add.remote([m.msg_id for m in msgs], newest)  # type: ignore[attr-defined]
        return rayq.ConsumeStatus.CONSUME_SUCCESS


class Traffic:
    def __init__(self, topic: str, batch: int = 10, pause_s: float = 0.02) -> None:
        self.topic = topic
        self.batch = batch
        self.pause_s = pause_s
        self.producer = rayq.Producer(group="bench-traffic")
        self.acked: set[str] = set()
        self.failed = 0
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        pad = b"x" * (1024 - struct.calcsize(STAMP))
        while not self.stopped.is_set():
            msgs = [
                rayq.Message(self.topic, struct.pack(STAMP, time.time()) + pad)
                for _ in range(self.batch)
            ]
            try:
                results = self.producer.send_batch(msgs)
                self.acked.update(r.msg_id for r in results if r.status is rayq.SendStatus.SEND_OK)
            except rayq.RayqError:
                self.failed += 1
                time.sleep(0.05)
            time.sleep(self.pause_s)

    def stop(self) -> set[str]:
        self.stopped.set()
        self.thread.join(30)
        self.producer.shutdown()
        return set(self.acked)


def stamped(topic: str) -> rayq.Message:
    return rayq.Message(topic, struct.pack(STAMP, time.time()))


def until(check: Callable[[], bool], what: str) -> float:
    """Seconds from now until ``check()`` is true (exceptions count as false)."""
    start = time.monotonic()
    while time.monotonic() - start < GIVE_UP_S:
        try:
            if check():
                return time.monotonic() - start
        except Exception:  # the actor is restarting
            pass
        time.sleep(0.02)
    raise TimeoutError(f"{what}: not back after {GIVE_UP_S:.0f} s")


def actor(name: str) -> object:
    return ray.get_actor(name, namespace=NAMESPACE)


def push_receives_after(sink: object, t_wall: float) -> Callable[[], bool]:
    return lambda: ray.get(sink.newest.remote(), timeout=10) > t_wall  # type: ignore[attr-defined]


def bench_flusher(topic: str) -> tuple[float, str]:
    flusher = actor(flusher_actor_name(BROKER))
    ray.kill(flusher, no_restart=False)
    t0 = time.monotonic()
    signed = server_actor(broker_actor_name(BROKER), NAMESPACE)
    written = ray.get(signed.flush_targets.remote(), timeout=10).written
    until(lambda: ray.get(flusher.durable.remote(), timeout=10) >= written, "flusher")  # type: ignore[attr-defined]
    return time.monotonic() - t0, f"durable offset past {written}"


def bench_hold(topic: str) -> tuple[float, str]:
    hold = actor(hold_actor_name(BROKER))
    admin = rayq.Admin()

    def held_pull_answered() -> bool:
        end = next(s.max_offset for s in admin.topic_stats(topic) if s.queue.queue_id == 0)
        req = PullRequest(
            group="bench-probe", topic=topic, queue_id=0, queue_offset=end, suspend_ms=5_000
        )
        resp = ray.get(hold.pull.remote(req), timeout=10)  # type: ignore[attr-defined]
        return resp.status is PullStatus.FOUND

    ray.kill(hold, no_restart=False)
    t0 = time.monotonic()
    until(held_pull_answered, "hold")
    return time.monotonic() - t0, "a pull held at the queue's end answered"


def bench_coordinator(topic: str, sink: object) -> tuple[float, str]:
    def new_producer_sends() -> bool:
        with rayq.Producer(group="bench-probe") as producer:
            return producer.send(stamped(topic)).status is rayq.SendStatus.SEND_OK

    coordinator = actor(COORDINATOR_NAME)
    ray.kill(coordinator, no_restart=False)
    t0, wall0 = time.monotonic(), time.time()
    until(new_producer_sends, "coordinator: send")
    send = time.monotonic() - t0
    until(lambda: topic in rayq.Admin().topics(), "coordinator: admin")
    admin = time.monotonic() - t0
    until(push_receives_after(sink, wall0), "coordinator: push")
    push = time.monotonic() - t0
    detail = (
        f"new producer sends {send:.2f} s, new admin sees the topic "
        f"{admin:.2f} s, push consumer receives {push:.2f} s"
    )
    return max(send, admin, push), detail


def bench_broker(topic: str, sink: object) -> tuple[float, str]:
    probe = rayq.Producer(group="bench-probe")
    probe.start()
    broker = actor(broker_actor_name(BROKER))
    ray.kill(broker, no_restart=False)
    t0, wall0 = time.monotonic(), time.time()
    try:
        until(lambda: probe.send(stamped(topic)) is not None, "broker: send")
        send = time.monotonic() - t0
        until(push_receives_after(sink, wall0), "broker: push")
        push = time.monotonic() - t0
    finally:
        probe.shutdown()
    return send, f"send {send:.2f} s, push consumer receives again {push:.2f} s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--settle", type=float, default=2.0, help="seconds between kills")
    args = parser.parse_args()
    ray.init(address="local", num_cpus=2, namespace=NAMESPACE, log_to_driver=False)
    try:
        with tempfile.TemporaryDirectory(prefix="rayq-restart-bench-") as store:
            cluster = rayq.start(store, namespace=NAMESPACE)
            try:
                run(args.settle)
            finally:
                cluster.shutdown()
    finally:
        ray.shutdown()


def run(settle_s: float) -> None:
    admin = rayq.Admin()
    topic = "restart-bench"
    admin.create_topic(topic, queues=4)
    sink = Sink.remote()
    consumer = rayq.PushConsumer("bench-cg", consume_from=rayq.ConsumeFromWhere.FIRST_OFFSET)
    consumer.subscribe(topic)
    consumer.register_listener(Listener(sink))
    consumer.start()
    traffic = Traffic(topic)
    try:
        until(push_receives_after(sink, 0.0), "warm-up")
        kinds: list[tuple[str, Callable[[], tuple[float, str]]]] = [
            ("flusher", lambda: bench_flusher(topic)),
            ("hold", lambda: bench_hold(topic)),
            ("coordinator", lambda: bench_coordinator(topic, sink)),
            ("broker", lambda: bench_broker(topic, sink)),
        ]
        for kind, bench in kinds:
            time.sleep(settle_s)
            took, detail = bench()
            print(
                f"restart {kind}: recovered in {took:.2f} s (target <= {TARGET_S:.0f} s)"
                f"  [{detail}]",
                flush=True,
            )
        acked = traffic.stop()
        until(lambda: acked <= ray.get(sink.all_ids.remote(), timeout=30), "drain")  # type: ignore[attr-defined]
        got = ray.get(sink.all_ids.remote(), timeout=30)  # type: ignore[attr-defined]
        print(
            f"acknowledged {len(acked)} messages ({traffic.failed} sends failed and were "
            f"not acknowledged); the push consumer missed {len(acked - got)}"
        )
    finally:
        traffic.stopped.set()
        consumer.shutdown()


if __name__ == "__main__":
    main()
