"""Where the time goes: sample every rayq process with py-spy while a workload runs.

Run: ``.venv/bin/python benchmarks/profile_parts.py {produce,pull,push,...} [--seconds 8]``
(starts and stops its own local Ray; py-spy comes with the ``dev`` extra and needs
permission to ptrace, e.g. root or ``kernel.yama.ptrace_scope=0``).

- ``produce``: one producer sending batches of 100 x 1 KiB in a loop;
- ``pull``: one PullConsumer draining a backlog;
- ``push``: one PushConsumer (no-op listener) draining a backlog of 200,000 (sampling
  starts at once; the drain takes a second or two, so ``--seconds 2``);
- ``e2e``: ~1,000 single messages a second (``send_oneway``) to a PushConsumer;
- ``e2e-sync``: the same, each message sent with a synchronous ``send`` on a fixed
  schedule (push_bench's latency workload);
- ``latency``: the anchors' B = 1 latency case: single messages sent synchronously, as
  fast as they are answered, to a PullConsumer in another process that polls and
  commits after every poll.

For each process (this driver, the broker, its hold service and flusher, consumer
actors) it prints the share of samples in which the process was busy and the
functions with the most inclusive and self samples, so a figure that misses its
target can be traced to Ray calls, encoding, the store, or the listener pool.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import ray

import rayq

BODY = b"x" * 1024
RATE_HZ = 200
# Leaf frames that mean "waiting" (py-spy cannot tell a blocked C call from work).
IDLE_LEAVES = (
    "Worker.main_loop",
    "EpollSelector.select",
    "_worker thread.py",
    "Event.wait",
    "Condition.wait",
    "select ",
)


def produce_loop(stop: threading.Event, topic: str) -> None:
    with rayq.Producer("prof") as producer:
        while not stop.is_set():
            producer.send_batch([rayq.Message(topic, BODY)] * 100)


def trickle_loop(stop: threading.Event, topic: str) -> None:
    """~1,000 single messages a second, as in the end-to-end latency figures."""
    with rayq.Producer("prof-e2e") as producer:
        while not stop.is_set():
            producer.send_oneway(rayq.Message(topic, BODY))
            time.sleep(0.001)


def paced_sync_loop(stop: threading.Event, topic: str) -> None:
    """1,000 single messages a second on a fixed schedule, each sent synchronously."""
    with rayq.Producer("prof-e2e-sync") as producer:
        t0, sent = time.perf_counter(), 0
        while not stop.is_set():
            producer.send(rayq.Message(topic, BODY))
            sent += 1
            time.sleep(max(0.0, t0 + sent / 1000 - time.perf_counter()))


def fill(topic: str, total: int) -> None:
    with rayq.Producer("prof-fill") as producer:
        for _ in range(total // 100):
            producer.send_batch([rayq.Message(topic, BODY)] * 100)


def pull_loop(stop: threading.Event, topic: str) -> None:
    consumer = rayq.PullConsumer("prof-pull", consume_from=rayq.ConsumeFromWhere.FIRST_OFFSET)
    consumer.subscribe(topic)
    consumer.start()
    while not stop.is_set():
        consumer.poll(timeout=0.5)
    consumer.shutdown()


def sync_send_loop(stop: threading.Event, topic: str) -> None:
    with rayq.Producer("prof-sync") as producer:
        while not stop.is_set():
            producer.send(rayq.Message(topic, BODY))


def poll_commit_process(address: str, namespace: str, topic: str, seconds: float) -> None:
    """A consumer process as the anchors run it: poll, commit what it got, again."""
    ray.init(address=address, log_to_driver=False)
    rayq.connect(namespace=namespace)
    consumer = rayq.PullConsumer(
        "prof-lat", consume_from=rayq.ConsumeFromWhere.LAST_OFFSET, auto_commit=False
    )
    consumer.subscribe(topic)
    consumer.start()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if consumer.poll(timeout=0.2):
            consumer.commit()
    consumer.shutdown()
    ray.shutdown()


def noop(msgs: list) -> rayq.ConsumeStatus:
    return rayq.ConsumeStatus.CONSUME_SUCCESS


def processes(extra: dict[str, int] | None = None) -> dict[str, int]:
    """{role: pid} of this driver, ``extra`` processes and every live rayq actor."""
    from ray.util.state import list_actors

    found = {"driver (producer/pull consumer)": os.getpid(), **(extra or {})}
    address = ray.get_runtime_context().gcs_address
    for a in list_actors(address=address, filters=[("state", "=", "ALIVE")]):
        if a.pid and a.class_name in (
            "BrokerActor",
            "PullHoldActor",
            "FlushService",
            "FlusherActor",
            "ConsumerActor",
            "CoordinatorActor",
        ):
            found[f"{a.class_name} {a.name or ''}".strip()] = a.pid
    return found


def record(pids: dict[str, int], seconds: float, out: Path) -> dict[str, Path]:
    spy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")
    if spy is None:
        raise SystemExit("py-spy is not installed: pip install py-spy (the dev extra has it)")
    procs = {}
    for role, pid in pids.items():
        path = out / f"{pid}.txt"
        procs[role] = (
            subprocess.Popen(
                [
                    spy,
                    "record",
                    "--format",
                    "raw",
                    "--nonblocking",
                    "-r",
                    str(RATE_HZ),
                    "-d",
                    str(int(seconds)),
                    "-p",
                    str(pid),
                    "-o",
                    str(path),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            ),
            path,
        )
    for proc, _ in procs.values():
        proc.wait()
    return {role: path for role, (_, path) in procs.items() if path.exists()}


def summarize(role: str, path: Path, seconds: float, top: int) -> None:
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():  # "frame;frame;...;leaf count"
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [
            f.split(" (")[0] + " " + f.split("/")[-1].rstrip(")") if "(" in f else f
            for f in stack.split(";")
        ]
        if frames[-1].startswith(IDLE_LEAVES):
            continue
        total += n
        own[frames[-1]] += n
        for f in set(frames):
            inclusive[f] += n
    busy = total / (RATE_HZ * seconds) * 100
    print(f"\n== {role}: busy {busy:.0f}% of one core ({total} samples of work; waits excluded)")
    print("   inclusive:")
    for f, n in inclusive.most_common(top):
        print(f"   {n / max(total, 1) * 100:5.1f}%  {f}")
    print("   self:")
    for f, n in own.most_common(top):
        print(f"   {n / max(total, 1) * 100:5.1f}%  {f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "workload", choices=["produce", "pull", "push", "e2e", "e2e-sync", "latency"]
    )
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rayq-prof-") as tmp:
        cluster = rayq.start(tmp)
        stop = threading.Event()
        push = None
        try:
            topic = f"prof-{args.workload}"
            rayq.Admin().create_topic(topic, queues=8)
            if args.workload in ("pull", "push"):
                fill(topic, 200_000)
            if args.workload in ("push", "e2e", "e2e-sync"):
                first = rayq.ConsumeFromWhere.FIRST_OFFSET
                push = rayq.PushConsumer("prof-push", consume_from=first)
                push.subscribe(topic)
                push.register_listener(noop)
                push.start()
            extra: dict[str, int] = {}
            if args.workload == "latency":
                ctx = multiprocessing.get_context("spawn")
                consumer = ctx.Process(
                    target=poll_commit_process,
                    args=(
                        ray.get_runtime_context().gcs_address,
                        cluster.namespace,
                        topic,
                        args.seconds + 8,
                    ),
                )
                consumer.start()
                time.sleep(5)  # the consumer process connects and subscribes
                extra["consumer process (poll + commit)"] = consumer.pid or 0
                threading.Thread(target=sync_send_loop, args=(stop, topic), daemon=True).start()
            elif args.workload in ("e2e", "e2e-sync"):
                loop = trickle_loop if args.workload == "e2e" else paced_sync_loop
                threading.Thread(target=loop, args=(stop, topic), daemon=True).start()
            elif args.workload != "push":
                loop = produce_loop if args.workload == "produce" else pull_loop
                threading.Thread(target=loop, args=(stop, topic), daemon=True).start()
            time.sleep(0.0 if args.workload == "push" else 1.0)
            files = record(processes(extra), args.seconds, Path(tmp))
            for role, path in files.items():
                summarize(role, path, args.seconds, args.top)
        finally:
            stop.set()
            if push is not None:
                push.shutdown()
            time.sleep(0.5)
            cluster.shutdown()
            ray.shutdown()


if __name__ == "__main__":
    main()
