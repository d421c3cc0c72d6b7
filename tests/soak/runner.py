"""One soak run: clients, bad input and the nemesis on a Deployment, then the checker.

``run(settings, dep, run_id)`` uses a running :class:`~soak.deployment.Deployment`
(topics and groups are named after ``run_id``, so runs can share one);
``run_standalone(settings)`` starts one and always stops it.
"""

from __future__ import annotations

import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import ray

import rayq
from soak.bad_input import BUILT_IN, BadClient, HostileAction, HostileContext, canary_snapshot
from soak.checker import Report, check
from soak.clients import ERRORS, Observer, ProducerClient, PullClient, PushClient
from soak.deployment import BROKER, SLAVE, Deployment
from soak.history import (
    ASYNC,
    IDEMPOTENT,
    ORDERED,
    ORDERLY,
    PUSH,
    SYNC,
    TRANSACTIONAL,
    Delivery,
    History,
    Invariant,
    Send,
    Subscribed,
)
from soak.nemesis import Nemesis
from soak.schedule import format_schedule, make_schedule


@dataclass
class Settings:
    seed: int
    duration_s: float = 60.0
    mean_gap_s: float = 10.0
    drain_s: float = 60.0  # at most this long after the faults for deliveries to catch up
    bad_every_s: float = 1.0
    actions: list[HostileAction] = field(default_factory=lambda: list(BUILT_IN))
    history_out: Path | None = None  # written always if set; on failure to a temp file


def retried(fn, what: str, timeout_s: float = 60.0, also=()):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return fn()
        except (*ERRORS, *also):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def run(settings: Settings, dep: Deployment, run_id: str) -> Report:
    ns = dep.namespace
    schedule = make_schedule(settings.seed, settings.duration_s, settings.mean_gap_s)
    banner = format_schedule(settings.seed, schedule)
    print(f"soak {run_id}: {settings.duration_s:.0f}s, " + banner, flush=True)
    history = History()
    admin = rayq.Admin(namespace=ns)
    topics = {name: f"soak-{run_id}-{name}" for name in ("plain", "ordered", "tx", "canary")}
    for name, topic in topics.items():
        queues = 2 if name == "canary" else 4
        retried(lambda t=topic, q=queues: admin.create_topic(t, queues=q), name)
    canary_group = f"soak-{run_id}-canary-g"
    before = retried(lambda: canary_snapshot(admin, topics["canary"], canary_group), "snapshot")

    push = PushClient(f"soak-{run_id}-push", PUSH, (topics["plain"], topics["tx"]), history, ns)
    orderly = PushClient(f"soak-{run_id}-orderly", ORDERLY, (topics["ordered"],), history, ns)
    puller = PullClient(f"soak-{run_id}-pull", topics["plain"], history, ns)
    producers = [
        ProducerClient(f"{run_id}sync", SYNC, topics["plain"], history, ns),
        ProducerClient(f"{run_id}async", ASYNC, topics["plain"], history, ns),
        ProducerClient(f"{run_id}idem", IDEMPOTENT, topics["plain"], history, ns),
        ProducerClient(f"{run_id}tx", TRANSACTIONAL, topics["tx"], history, ns),
        ProducerClient(f"{run_id}ord", ORDERED, topics["ordered"], history, ns),
    ]
    groups = [push.group, orderly.group, puller.group]
    observer = Observer(history, ns, groups, [push, orderly])
    ctx = HostileContext(
        ns,
        topics["canary"],
        canary_group,
        producers[0].producer,
        admin,
        __import__("random").Random(settings.seed),
    )
    bad = BadClient(ctx, settings.actions, history, settings.bad_every_s)
    nemesis = Nemesis(dep, history, schedule, {"push": push, "orderly": orderly}, settings.seed)
    loops = [*producers, puller, observer]
    try:
        for loop in loops:
            loop.start()
        bad.start()
        t0 = time.time()
        nemesis.run(t0, t0 + settings.duration_s)
        bad.stop()
        for p in producers:
            p.stop()
        for p in producers:
            p.join()
        # Producers stay open through the drain: the broker checks a transaction sent
        # as UNKNOWN back with its producer only after ``transaction_timeout``.
        drained = _drain(history, settings.drain_s, observer)
        print(f"  drained in {drained:.1f}s", flush=True)
        _final_invariants(history, dep, admin, topics["canary"], canary_group, before)
    finally:
        for loop in loops:
            loop.stop()
        for loop in loops:
            loop.join()
        bad.stop()
        for p in producers:
            p.close()
        for client in (push, orderly, puller):
            client.close()
        observer.drain()
    report = check(history)
    print(report.format(), flush=True)
    out = settings.history_out
    if out is None and not report.ok:
        out = Path(tempfile.mkstemp(prefix=f"soak-{settings.seed}-", suffix=".jsonl")[1])
    if out is not None:
        history.dump(out)
        print(f"  history: {out} (check it again: python -m soak --check {out})", flush=True)
    if not report.ok:
        print(
            f"FAILED: seed {settings.seed} (replay: --seed {settings.seed})\n{banner}", flush=True
        )
    return report


def _missing(history: History) -> int:
    """Acknowledged deliveries still missing (sends x subscribed groups)."""
    got: dict[str, set[str]] = defaultdict(set)
    for d in history.of(Delivery):
        got[d.group].add(d.key)
    subs: list[Subscribed] = history.of(Subscribed)
    missing = 0
    for s in history.of(Send):
        if s.ok and s.tx_final != "ROLLBACK":
            missing += sum(s.topic in g.topics and s.key not in got[g.group] for g in subs)
    return missing


def _drain(history: History, drain_s: float, observer: Observer) -> float:
    start = time.monotonic()
    while time.monotonic() - start < drain_s:
        observer.drain()
        if _missing(history) == 0:
            break
        time.sleep(1.0)
    time.sleep(2.0)  # late redeliveries and commits still count
    observer.drain()
    return time.monotonic() - start


def _final_invariants(
    history: History, dep: Deployment, admin: rayq.Admin, canary: str, group: str, before: dict
) -> None:
    for replica in (BROKER, SLAVE):
        try:
            # a replica whose node just came back is placed again meanwhile: until then
            # Ray has no actor of its name (ValueError), which is no answer yet
            retried(lambda r=replica: dep.info(r), replica, timeout_s=60, also=(ValueError,))
            history.add(Invariant(f"{replica} answers", True, t=time.time()))
        except (*ERRORS, ValueError) as exc:
            history.add(Invariant(f"{replica} answers", False, repr(exc)[:200], time.time()))
    try:
        ray.get(dep.actor("rayq-coordinator").ready.remote(), timeout=30)
        history.add(Invariant("coordinator answers", True, t=time.time()))
    except (*ERRORS, ValueError) as exc:
        history.add(Invariant("coordinator answers", False, repr(exc)[:200], time.time()))
    try:
        after = retried(lambda: canary_snapshot(admin, canary, group), "snapshot")
    except ERRORS as exc:
        history.add(Invariant("canary readable", False, repr(exc)[:300], time.time()))
        return
    for what, was in before.items():
        now = after[what]
        history.add(
            Invariant(f"canary {what} unchanged", now == was, f"{was} -> {now}", time.time())
        )


def run_standalone(settings: Settings, namespace: str = "rayq-soak") -> Report:
    with tempfile.TemporaryDirectory(prefix="rayq-soak-") as root:
        dep = Deployment(namespace, Path(root))
        try:
            return run(settings, dep, f"s{settings.seed % 100000}")
        finally:
            dep.close()
