"""The nemesis: applies the seeded schedule's faults, one after another, and logs each
as a :class:`~soak.history.Fault` (with when it was repaired).

Targets are resolved when a fault is applied: ``master``/``slave`` are broker-a's
replicas at that moment (failover swaps the nodes), PIDs come from the actor itself.
Only the one PID found is ever signalled.

The full disk: the broker has no switch for it and this machine has no small file
system to fill, so the fault swaps the usage probe of the broker's ``DiskGauge`` (the
``disk_usage`` hook ``MessageStore`` takes; tests/unit/server/test_disk_limit.py uses
the same) for one that reads 150 % used, through ``__ray_call__``: puts then get
DISK_FULL on the real write path until the probe is put back. Retention keeps its own
real measurement, so it deletes nothing (a really full disk would make it delete the
oldest segments, losing what was not consumed: by design, not checked here).
"""

from __future__ import annotations

import logging
import os
import random
import signal
import struct
import time
from pathlib import Path
from typing import Any

import ray

from rayq.store import codec
from soak.clients import PushClient
from soak.deployment import BROKER, SLAVE, Deployment, pid_of
from soak.history import Fault, History
from soak.schedule import (
    DISK_FULL,
    NODE,
    PAUSE,
    RAY_KILL,
    SIGKILL,
    TORN_TAIL,
    Planned,
)

logger = logging.getLogger(__name__)
ROLES = {"master": BROKER, "slave": SLAVE}
PREFIXES = {"broker": "rayq-broker-", "flusher": "rayq-flusher-", "hold": "rayq-pullhold-"}


class Nemesis:
    def __init__(
        self,
        dep: Deployment,
        history: History,
        schedule: list[Planned],
        consumers: dict[str, PushClient],
        seed: int,
    ) -> None:
        self.dep, self.history, self.schedule = dep, history, schedule
        self.consumers = consumers
        self.rng = random.Random(seed ^ 0x5EED)  # garbage bytes of torn tails

    def run(self, t0: float, until: float) -> None:
        """Apply the schedule's faults from ``t0`` on, in this thread (it must be the main
        thread: ``Cluster.add_node`` installs signal handlers), until ``until``."""
        for planned in self.schedule:
            at = t0 + planned.at_s
            if at >= until:
                break
            time.sleep(max(0.0, at - time.time()))
            self.apply(planned)
        time.sleep(max(0.0, until - time.time()))

    def apply(self, p: Planned) -> Fault:
        t_start = time.time()
        error, broker, detail = "", "", ""
        try:
            broker, detail = self._apply(p)
        except Exception as exc:  # the fault is still listed, with why it did not apply
            error = f"{type(exc).__name__}: {exc}"[:300]
            logger.warning("fault %s not applied: %s", p, error)
        fault = Fault(p.index, p.kind, p.target, t_start, time.time(), broker, detail, error)
        self.history.add(fault)
        print(f"  fault {p} -> {detail or error}", flush=True)
        return fault

    # ------------------------------------------------------------- the faults
    def _apply(self, p: Planned) -> tuple[str, str]:
        if p.kind == NODE:
            return self._node(ROLES[p.target.split(":")[1]], p.duration_s)
        if p.kind == DISK_FULL:
            return self._disk_full(ROLES[p.target.split(":")[1]], p.duration_s)
        if p.kind == TORN_TAIL:
            return self._torn_tail(ROLES[p.target.split(":")[1]])
        actor, broker = self._actor(p.target)
        if p.kind == RAY_KILL:
            ray.kill(actor, no_restart=False)
            return broker, "ray.kill"
        pid = pid_of(actor)
        if p.kind == SIGKILL:
            os.kill(pid, signal.SIGKILL)
            return broker, f"SIGKILL pid {pid}"
        assert p.kind == PAUSE, p.kind
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(p.duration_s)
        finally:
            os.kill(pid, signal.SIGCONT)
        return broker, f"SIGSTOP/SIGCONT pid {pid}"

    def _actor(self, target: str) -> tuple[Any, str]:
        """The actor handle of a target and the broker name it belongs to ('' if none)."""
        if target == "coordinator":
            return self.dep.actor("rayq-coordinator"), ""
        part, role = target.split(":")
        if part == "consumer":
            return self.consumers[role].actor, ""
        return self.dep.actor(PREFIXES[part] + ROLES[role]), BROKER

    def _node(self, replica: str, duration_s: float) -> tuple[str, str]:
        node_id = self.dep.info(replica).node_id
        label = self.dep.remove_node(node_id)
        try:
            time.sleep(duration_s)
        finally:
            self.dep.add_node(label)
        return BROKER, f"removed the node of {replica} ({label}) for {duration_s}s"

    def _disk_full(self, replica: str, duration_s: float) -> tuple[str, str]:
        broker = self.dep.actor(f"rayq-broker-{replica}")
        pid = pid_of(broker)
        ray.get(broker.__ray_call__.remote(_fill_disk), timeout=10)
        try:
            time.sleep(duration_s)
        finally:
            try:
                if pid_of(broker) == pid:  # a restarted broker measures the real disk
                    ray.get(broker.__ray_call__.remote(_free_disk), timeout=10)
            except ray.exceptions.RayError as exc:
                logger.warning("could not free the disk of %s: %s", replica, exc)
        return BROKER, f"disk of {replica} full for {duration_s}s"

    def _torn_tail(self, replica: str) -> tuple[str, str]:
        """Stop the broker, write a torn record past its log's end (and cut the file
        there), then kill it: Ray restarts it and recovery must drop the torn bytes."""
        broker = self.dep.actor(f"rayq-broker-{replica}")
        store = Path(self.dep.info(replica).store_dir)
        pid = pid_of(broker)
        os.kill(pid, signal.SIGSTOP)
        try:
            detail = tear(store, self.rng)
        finally:
            os.kill(pid, signal.SIGKILL)
            os.kill(pid, signal.SIGCONT)  # a stopped process dies once it runs
        return BROKER, f"{replica} pid {pid}: {detail}"


def _fill_disk(actor: Any) -> None:
    disk = actor.endpoint.server.store.disk
    if "usage" not in disk.__dict__.get("_soak", {}):
        disk._soak = {"usage": disk.usage}
    disk.usage = lambda _root: 1.5
    disk.update = lambda _ratio, now_ms: type(disk).update(disk, 1.5, now_ms)
    disk.stale()


def _free_disk(actor: Any) -> None:
    disk = actor.endpoint.server.store.disk
    saved = disk.__dict__.pop("_soak", None)
    if saved is not None:
        disk.usage = saved["usage"]
    disk.__dict__.pop("update", None)
    disk.stale()


def data_end(data: bytes) -> int:
    """Where the records of a commit-log segment end (the first byte no record covers)."""
    pos = 0
    while pos + codec.PREFIX.size <= len(data):
        size, magic = codec.PREFIX.unpack_from(data, pos)
        if size <= 0 or magic not in (codec.MAGIC, codec.QUARANTINE_MAGIC, codec.SPAN_MAGIC):
            return pos
        pos += size
    return min(pos, len(data))


def tear(store: Path, rng: random.Random) -> str:
    """A torn record at the end of the newest commit-log segment: a header that claims
    more bytes than follow, and garbage; the file is cut right after it."""
    segments = sorted(p for p in (store / "commitlog").iterdir() if p.name.isdigit())
    newest = segments[-1]
    data = newest.read_bytes()
    end = data_end(data)
    claimed = rng.randint(64, 4096)
    torn = struct.pack(">iI", claimed, codec.MAGIC) + rng.randbytes(rng.randint(0, 48))
    if end + len(torn) > len(data):
        return f"no room after the records of {newest.name}; killed only"
    with newest.open("r+b") as f:
        f.seek(end)
        f.write(torn)
        f.truncate(end + len(torn))
    return f"{len(torn)} torn bytes at {newest.name}+{end}, file cut there"
