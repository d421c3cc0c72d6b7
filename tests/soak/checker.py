"""The history checker: reads a whole :class:`~soak.history.History` and reports.

What it allows (the contracts), precisely:

* **Lost.** A send acknowledged with SEND_OK (``Send.ok``) must reach every group that
  subscribes to its topic by the end of the run; a transactional one only if its
  transaction ends as COMMIT. Sends answered with an error or a weaker status
  (FLUSH_SLAVE_TIMEOUT, SLAVE_NOT_AVAILABLE, ...) need not arrive.
* **Order.** Ordered sends of one sharding key that were acknowledged must sit in one
  queue at increasing offsets in sequence order. An orderly group's deliveries of a
  queue, in time order, never skip ahead: each offset is at most one past the highest
  delivered before (going back is a redelivery, judged below).
* **Producer duplicates.** A message key stored at two positions (broker, queue,
  offset): never allowed for idempotent and transactional producers; allowed (counted)
  for the others, whose retries after a lost answer may store a message twice.
  Redeliveries through a retry topic (``reconsume_times > 0``) are not stored copies.
* **Redeliveries** (a group given one message at one position more than once: a
  failover that cut records puts other messages at the same offsets) are allowed only for
  what was uncommitted when a fault struck: the position's first delivery and its
  repeat must both fall around one fault (the fault started before the repeat and
  ended, plus ``GRACE_S``, after the first delivery), and the position must not have
  been committed (as last observed on the brokers, at the later of the first delivery
  and the fault's start; for the loss of the master's node, which fails it over,
  ``METADATA_LAG_S`` before its start, as the promoted slave's copy of the offsets may
  be that old).
  Anything else is a duplicate beyond the contract.
* **Transactions** are one message each: a rolled-back one is never delivered, a
  committed, acknowledged one is delivered (also counted as lost if not).
* **Offsets.** A committed offset, observed on the brokers or committed by a pull
  consumer, never moves back, except across a fault that restarted or failed over the
  broker: its offsets since the last persist or metadata sync may be lost
  (at-least-once), and a failover that cut records a consumer had read moves it back
  to the cut (Kafka's KIP-320).
* **Bad input** is refused with a ``RayqError``, and does not kill its target outside
  a fault; the end-of-run invariants (the canary topic, routes and offsets unchanged,
  every actor answering) hold.
* **Resume times**, per fault: from its injection to the first acknowledged send begun
  after it, and to the first delivery of a message sent after it (on the fault's
  broker, if it hit one). Reported as p50/p99 per fault kind; never a violation.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass, field
from itertools import pairwise

from soak.history import (
    IDEMPOTENT,
    ORDERED,
    ORDERLY,
    TRANSACTIONAL,
    BadRequest,
    Commit,
    Delivery,
    Fault,
    History,
    Invariant,
    Send,
    Subscribed,
)

GRACE_S = 15.0  # a fault's effects (restart, rebalance, failover, offset sync) last this long
# A slave copies its master's committed offsets every second in the soak's deployment
# (``slave_sync_metadata_interval_ms``): allowing for a loaded machine, a promoted slave
# may lack the commits of the last few seconds before the failover.
METADATA_LAG_S = 5.0
BROKER_FAULTS = ("ray_kill", "sigkill", "torn_tail", "node")
NO_PRODUCER_DUPLICATES = (IDEMPOTENT, TRANSACTIONAL)
EXAMPLES = 10  # violations listed per kind


@dataclass
class Report:
    sent: int = 0
    acknowledged: int = 0
    delivered: int = 0  # deliveries, all groups
    lost: list[str] = field(default_factory=list)
    order: list[str] = field(default_factory=list)
    producer_duplicates_allowed: int = 0
    redeliveries_allowed: int = 0
    duplicates: list[str] = field(default_factory=list)  # beyond the contract
    transactions: list[str] = field(default_factory=list)
    offsets: list[str] = field(default_factory=list)
    bad_input: list[str] = field(default_factory=list)
    bad_requests: int = 0
    invariants: list[str] = field(default_factory=list)
    resume: dict[str, list[tuple[float | None, float | None]]] = field(default_factory=dict)
    faults: int = 0
    fault_errors: list[str] = field(default_factory=list)  # nemesis could not apply (info)

    @property
    def violations(self) -> dict[str, list[str]]:
        return {
            "acknowledged lost": self.lost,
            "order violations": self.order,
            "duplicates beyond contract": self.duplicates,
            "transaction violations": self.transactions,
            "offset regressions": self.offsets,
            "bad input": self.bad_input,
            "invariants": self.invariants,
        }

    @property
    def ok(self) -> bool:
        return not any(self.violations.values())

    def format(self) -> str:
        lines = [
            f"messages sent {self.sent}, acknowledged {self.acknowledged}, "
            f"delivered {self.delivered} (all groups)",
            f"faults {self.faults} (not applied: {len(self.fault_errors)}), "
            f"bad requests {self.bad_requests}",
            f"duplicates allowed: {self.producer_duplicates_allowed} stored twice, "
            f"{self.redeliveries_allowed} redelivered",
        ]
        for name, found in self.violations.items():
            lines.append(f"{name}: {len(found)}")
            lines += [f"    {v}" for v in found[:EXAMPLES]]
        lines += [f"    not applied: {e}" for e in self.fault_errors[:EXAMPLES]]
        lines.append("time to resume after a fault (p50 / p99 s; n = faults, never = no resume):")
        lines.append(f"  {'kind':<10} {'n':>3}  {'sends':>15}  {'deliveries':>15}")
        for kind, rows in sorted(self.resume.items()):
            sends = _p50_p99([s for s, _ in rows])
            deliveries = _p50_p99([d for _, d in rows])
            lines.append(f"  {kind:<10} {len(rows):>3}  {sends:>15}  {deliveries:>15}")
        lines.append("RESULT: " + ("OK" if self.ok else "VIOLATIONS"))
        return "\n".join(lines)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def _p50_p99(values: list[float | None]) -> str:
    done = [v for v in values if v is not None]
    never = len(values) - len(done)
    text = f"{percentile(done, 0.5):.1f}/{percentile(done, 0.99):.1f}" if done else "-"
    return text + (f" never {never}" if never else "")


Position = tuple[str, int, int]  # broker, queue, offset


class _Commits:
    """Broker-observed committed offsets of one group, by (topic, broker, queue), in time
    order (a group's topics have queues of the same ids, at unrelated offsets)."""

    def __init__(self, commits: list[Commit]) -> None:
        self.times: dict[tuple[str, str, int], list[float]] = defaultdict(list)
        self.values: dict[tuple[str, str, int], list[int]] = defaultdict(list)
        for c in sorted(commits, key=lambda c: c.t):
            self.times[(c.topic, c.broker, c.queue)].append(c.t)
            self.values[(c.topic, c.broker, c.queue)].append(c.offset)

    def at(self, topic: str, broker: str, queue: int, t: float) -> int:
        """The last observed committed offset at or before ``t`` (-1: none seen)."""
        times = self.times.get((topic, broker, queue), [])
        i = bisect.bisect_right(times, t)
        return self.values[(topic, broker, queue)][i - 1] if i else -1


def check(history: History) -> Report:
    sends: list[Send] = history.of(Send)
    deliveries: list[Delivery] = history.of(Delivery)
    faults: list[Fault] = sorted(history.of(Fault), key=lambda f: f.t_start)
    commits: list[Commit] = history.of(Commit)
    report = Report(
        sent=len(sends),
        acknowledged=sum(s.ok for s in sends),
        delivered=len(deliveries),
        faults=len(faults),
        fault_errors=[f"#{f.index} {f.kind} {f.target}: {f.error}" for f in faults if f.error],
    )
    _check_lost_and_transactions(report, sends, deliveries, history.of(Subscribed))
    _check_order(report, sends, deliveries, history.of(Subscribed))
    _check_duplicates(report, sends, deliveries, faults, commits)
    _check_offsets(report, commits, faults)
    _check_bad_input(report, history.of(BadRequest), faults)
    report.invariants += [f"{i.name}: {i.detail}" for i in history.of(Invariant) if not i.ok]
    _resume_times(report, sends, deliveries, faults)
    return report


def _check_lost_and_transactions(
    report: Report, sends: list[Send], deliveries: list[Delivery], groups: list[Subscribed]
) -> None:
    got: dict[str, set[str]] = defaultdict(set)
    for d in deliveries:
        got[d.group].add(d.key)
    lost: dict[str, list[str]] = defaultdict(list)  # key -> groups that never got it
    for s in sends:
        if s.contract == TRANSACTIONAL and s.tx_final == "ROLLBACK":
            seen = sorted(g for g, keys in got.items() if s.key in keys)
            if seen:
                report.transactions.append(f"rolled back {s.key} delivered to {seen}")
            continue
        if not s.ok:
            continue
        for sub in groups:
            if s.topic in sub.topics and s.key not in got[sub.group]:
                lost[s.key].append(sub.group)
    for key, missing in lost.items():
        s = next(x for x in sends if x.key == key)
        where = f"{s.broker}/{s.queue}@{s.offset}"
        report.lost.append(f"{key} ({s.contract}, {s.topic} {where}) never reached {missing}")
        if s.contract == TRANSACTIONAL:
            report.transactions.append(f"committed {key} not visible to {missing}")


def _check_order(
    report: Report, sends: list[Send], deliveries: list[Delivery], groups: list[Subscribed]
) -> None:
    by_key: dict[str, list[Send]] = defaultdict(list)
    for s in sends:
        if s.contract == ORDERED and s.ok:
            by_key[s.sharding_key].append(s)
    for sharding_key, acked in by_key.items():
        acked.sort(key=lambda s: s.seq)
        queues = {(s.broker, s.queue) for s in acked}
        if len(queues) > 1:
            report.order.append(f"sharding key {sharding_key} sent to {len(queues)} queues")
            continue
        for a, b in pairwise(acked):
            if b.offset <= a.offset:
                report.order.append(
                    f"sharding key {sharding_key}: {b.key} at offset {b.offset} is not after "
                    f"{a.key} at {a.offset}"
                )
    orderly = {g.group for g in groups if g.contract == ORDERLY}
    streams: dict[tuple[str, str, str, int], list[Delivery]] = defaultdict(list)
    for d in deliveries:
        if d.group in orderly:
            streams[(d.group, d.topic, d.broker, d.queue)].append(d)
    for (group, topic, broker, queue), stream in streams.items():
        highest = -1
        for d in sorted(stream, key=lambda d: (d.t, d.instance, d.n)):
            if d.offset > highest + 1:
                report.order.append(
                    f"{group} {topic} {broker}/{queue}: offset {d.offset} ({d.key}) delivered "
                    f"with {highest + 1}..{d.offset - 1} never delivered before"
                )
            highest = max(highest, d.offset)


def _check_duplicates(
    report: Report,
    sends: list[Send],
    deliveries: list[Delivery],
    faults: list[Fault],
    commits: list[Commit],
) -> None:
    contract = {s.key: s.contract for s in sends}
    positions: dict[str, set[Position]] = defaultdict(set)
    for s in sends:
        if s.ok and s.offset >= 0 and s.contract != TRANSACTIONAL:  # tx: the half's offset
            positions[s.key].add((s.broker, s.queue, s.offset))
    for d in deliveries:
        if d.reconsume_times == 0:
            positions[d.key].add((d.broker, d.queue, d.offset))
    for key, where in positions.items():
        if len(where) > 1:
            if contract.get(key) in NO_PRODUCER_DUPLICATES:
                report.duplicates.append(f"{key} ({contract[key]}) stored at {sorted(where)}")
            else:
                report.producer_duplicates_allowed += len(where) - 1
    by_group: dict[str, list[Commit]] = defaultdict(list)
    for c in commits:
        if c.source == "broker":
            by_group[c.group].append(c)
    observed = {g: _Commits(cs) for g, cs in by_group.items()}
    first: dict[tuple[str, str, Position, str], Delivery] = {}
    for d in sorted(deliveries, key=lambda d: (d.t, d.instance, d.n)):
        # a position and the message there: after a failover cut records, the same
        # offsets hold other messages, and reading those is no redelivery
        at = (d.group, d.topic, (d.broker, d.queue, d.offset), d.key)
        if at not in first:
            first[at] = d
            continue
        t1 = first[at].t
        seen = observed.get(d.group, _Commits([]))
        if any(
            f.t_start <= d.t
            and f.t_end + GRACE_S >= t1
            and seen.at(d.topic, d.broker, d.queue, max(t1, f.t_start - _offsets_lost(f)))
            <= d.offset
            for f in faults
        ):
            report.redeliveries_allowed += 1
        else:
            report.duplicates.append(
                f"{d.group} got {d.key} ({d.topic} {d.broker}/{d.queue}@{d.offset}) again at "
                f"t={d.t:.1f} (first at {t1:.1f}) with no fault around it, or after its commit"
            )


def _offsets_lost(f: Fault) -> float:
    """How far back before ``f`` committed offsets may be lost: the loss of the master's
    node fails it over to a slave whose copy of the offsets is as old as its last
    metadata sync."""
    return METADATA_LAG_S if f.kind == "node" and f.target == "node:master" else 0.0


def _check_offsets(report: Report, commits: list[Commit], faults: list[Fault]) -> None:
    broker_faults = [f for f in faults if f.kind in BROKER_FAULTS and f.broker]
    streams: dict[tuple[str, str, str, str, int], list[Commit]] = defaultdict(list)
    for c in commits:
        streams[(c.source, c.group, c.topic, c.broker, c.queue)].append(c)
    for (source, group, topic, broker, queue), stream in streams.items():
        stream.sort(key=lambda c: c.t)
        for a, b in pairwise(stream):
            if b.offset >= a.offset:
                continue
            excused = any(
                f.broker == broker and f.t_start <= b.t and f.t_end + GRACE_S >= a.t
                for f in broker_faults
            )
            if not excused:
                report.offsets.append(
                    f"{group} {topic} {broker}/{queue} ({source}): {a.offset} at t={a.t:.1f} "
                    f"-> {b.offset} at t={b.t:.1f}"
                )


def _check_bad_input(report: Report, bad: list[BadRequest], faults: list[Fault]) -> None:
    report.bad_requests = len(bad)
    for r in bad:
        if not r.refused:
            report.bad_input.append(f"{r.action} at t={r.t:.1f} was accepted: {r.error}")
        elif r.actor_died and not any(f.t_start - 1.0 <= r.t <= f.t_end + GRACE_S for f in faults):
            report.bad_input.append(f"{r.action} at t={r.t:.1f} left its target dead: {r.error}")


def _resume_times(
    report: Report, sends: list[Send], deliveries: list[Delivery], faults: list[Fault]
) -> None:
    started = {s.key: s.t_start for s in sends}
    acked = sorted((s for s in sends if s.ok), key=lambda s: s.t)
    got = sorted(deliveries, key=lambda d: d.t)
    for f in faults:
        send = next(
            (
                s.t
                for s in acked
                if s.t_start >= f.t_start and (not f.broker or s.broker == f.broker)
            ),
            None,
        )
        delivery = next(
            (
                d.t
                for d in got
                if started.get(d.key, -1.0) >= f.t_start and (not f.broker or d.broker == f.broker)
            ),
            None,
        )
        report.resume.setdefault(f.kind, []).append(
            (
                None if send is None else send - f.t_start,
                None if delivery is None else delivery - f.t_start,
            )
        )
