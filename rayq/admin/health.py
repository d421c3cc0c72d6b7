"""Health of a deployment: one record per actor, each check OK, WARN or FAIL with its reason.

``Admin.health()`` asks the coordinator for every broker replica it knows (live
masters, slaves, lost masters, with their last heartbeat) and each replica for its
``BrokerStatus`` (disk, flush and replication state, and whether its flusher and hold
service answer), then judges them here, without Ray:

    actor                        checks
    coordinator                  state
    broker <name> / slave <n#i>  state, heartbeat, disk_ratio, flush_lag, replication_lag
    flusher <replica>            state, flush_lag
    hold <replica>               state

An actor's level is its worst check's; ``rayq cluster health`` exits non-zero if any
actor is FAIL, so a cron job or a readiness probe can use it.
"""

from __future__ import annotations

import enum

import msgspec

from rayq.actors.protocol import BrokerEntry, BrokerStatus
from rayq.actors.protocol.config import replica_name

MiB = 1024 * 1024


class HealthLevel(enum.Enum):
    """How bad a check is; ``worst`` of several is the highest ``rank``."""

    OK = "OK"
    WARN = "WARN"
    FAIL = "FAIL"

    @property
    def rank(self) -> int:
        return _RANKS[self]


_RANKS = {HealthLevel.OK: 0, HealthLevel.WARN: 1, HealthLevel.FAIL: 2}


def worst(levels: list[HealthLevel]) -> HealthLevel:
    """The worst of ``levels`` (OK if there are none)."""
    return max(levels, key=lambda lv: lv.rank, default=HealthLevel.OK)


class HealthCheck(msgspec.Struct, frozen=True, kw_only=True):
    """One measured thing: its name, its value (as shown), the verdict and why."""

    name: str  # state, heartbeat, disk_ratio, flush_lag, replication_lag
    value: str
    level: HealthLevel
    reason: str


class ActorHealth(msgspec.Struct, frozen=True, kw_only=True):
    """One actor's checks and its level (the worst of them)."""

    actor: str  # e.g. "broker broker-a", "slave broker-a#1", "flusher broker-a"
    kind: str  # coordinator, broker, slave, flusher, hold
    replica: str  # the broker replica it belongs to ("" for the coordinator)
    level: HealthLevel
    checks: list[HealthCheck]


class HealthLimits(msgspec.Struct, frozen=True, kw_only=True):
    """Where WARN and FAIL start. A disk ratio left None is the broker's own setting:
    WARN past ``disk_max_used_space_ratio`` (retention deletes files), FAIL past
    ``disk_warning_ratio`` (puts are refused)."""

    disk_warn_ratio: float | None = None
    disk_fail_ratio: float | None = None
    heartbeats_missed_warn: int = 2  # heartbeat intervals without one
    heartbeats_missed_fail: int = 4
    flush_lag_warn_bytes: int = 64 * MiB
    flush_lag_fail_bytes: int = 1024 * MiB
    replication_lag_warn_ms: int = 10_000
    replication_lag_fail_ms: int = 60_000


def check(name: str, value: str, level: HealthLevel, reason: str) -> HealthCheck:
    return HealthCheck(name=name, value=value, level=level, reason=reason)


def actor(actor_name: str, kind: str, replica: str, checks: list[HealthCheck]) -> ActorHealth:
    return ActorHealth(
        actor=actor_name,
        kind=kind,
        replica=replica,
        level=worst([c.level for c in checks]),
        checks=checks,
    )


def coordinator_health(error: str = "") -> ActorHealth:
    state = (
        check("state", "FAILED", HealthLevel.FAIL, error)
        if error
        else check("state", "ALIVE", HealthLevel.OK, "answers")
    )
    return actor("coordinator", "coordinator", "", [state])


def replica_health(
    entry: BrokerEntry, status: BrokerStatus | str, now_ms: int, limits: HealthLimits
) -> list[ActorHealth]:
    """The broker replica ``entry`` (with its ``BrokerStatus``, or why it did not give one),
    its flusher and its hold service."""
    name = replica_name(entry.broker_name, entry.broker_id)
    kind = "broker" if entry.broker_id == 0 else "slave"
    if isinstance(status, str):
        why = (
            "lost: it died or missed its heartbeats, and is not back"
            if entry.lost
            else f"unreachable: {status}"
        )
        checks = [
            check("state", "LOST" if entry.lost else "UNREACHABLE", HealthLevel.FAIL, why),
            _heartbeat(entry, 30_000, now_ms, limits),
        ]
        unknown = check(
            "state", "UNKNOWN", HealthLevel.WARN, f"not checked: {kind} {name} did not answer"
        )
        return [
            actor(f"{kind} {name}", kind, name, checks),
            actor(f"flusher {name}", "flusher", name, [unknown]),
            actor(f"hold {name}", "hold", name, [unknown]),
        ]
    flush_lag = _flush_lag(status, limits)
    checks = [
        check("state", "ALIVE", HealthLevel.OK, f"serving as {status.info.role}"),
        _heartbeat(entry, status.heartbeat_interval_ms, now_ms, limits),
        _disk(status, limits),
        flush_lag,
        _replication(status, limits),
    ]
    flusher = (
        check("state", "FAILED", HealthLevel.FAIL, status.flusher_error)
        if status.flusher_error
        else check("state", "ALIVE", HealthLevel.OK, "answers")
    )
    hold = (
        check("state", "FAILED", HealthLevel.FAIL, status.hold_error)
        if status.hold_error
        else check("state", "ALIVE", HealthLevel.OK, "answers")
    )
    return [
        actor(f"{kind} {name}", kind, name, checks),
        actor(f"flusher {name}", "flusher", name, [flusher, flush_lag]),
        actor(f"hold {name}", "hold", name, [hold]),
    ]


def _heartbeat(
    entry: BrokerEntry, interval_ms: int, now_ms: int, limits: HealthLimits
) -> HealthCheck:
    if entry.last_heartbeat_ms <= 0:
        return check(
            "heartbeat", "never", HealthLevel.WARN, "no heartbeat since the coordinator started"
        )
    age_ms = max(now_ms - entry.last_heartbeat_ms, 0)
    value = f"{age_ms / 1000:.1f} s ago"
    return _graded(
        "heartbeat",
        value,
        age_ms / interval_ms,
        limits.heartbeats_missed_fail,
        limits.heartbeats_missed_warn,
        f"more than {{limit}} intervals of {interval_ms} ms without a heartbeat",
        f"every {interval_ms} ms",
    )


def _graded(
    name: str, value: str, amount: float, fail: float, warn: float, over: str, ok: str
) -> HealthCheck:
    """FAIL with ``amount`` past ``fail``, WARN past ``warn``, else OK; ``over`` says which
    limit was passed (its ``{limit}``), ``ok`` what holds."""
    for level, limit in ((HealthLevel.FAIL, fail), (HealthLevel.WARN, warn)):
        if amount > limit:
            return check(name, value, level, over.format(limit=limit))
    return check(name, value, HealthLevel.OK, ok)


def _disk(status: BrokerStatus, limits: HealthLimits) -> HealthCheck:
    ratio = status.info.disk_ratio
    fail = status.disk_full_ratio if limits.disk_fail_ratio is None else limits.disk_fail_ratio
    warn = status.disk_clean_ratio if limits.disk_warn_ratio is None else limits.disk_warn_ratio
    value = f"{ratio:.1%}"
    if ratio > fail:
        return check(
            "disk_ratio",
            value,
            HealthLevel.FAIL,
            f"past {fail:.1%}: puts are refused (free disk space)",
        )
    if ratio > warn:
        return check(
            "disk_ratio", value, HealthLevel.WARN, f"past {warn:.1%}: retention deletes old files"
        )
    return check("disk_ratio", value, HealthLevel.OK, f"below {warn:.1%}")


def _flush_lag(status: BrokerStatus, limits: HealthLimits) -> HealthCheck:
    if status.flushed_offset < 0:
        return check(
            "flush_lag",
            "unknown",
            HealthLevel.FAIL,
            status.flusher_error or "the flusher did not say",
        )
    lag = max(status.info.written_offset - status.flushed_offset, 0)
    return _graded(
        "flush_lag",
        f"{lag} B",
        lag,
        limits.flush_lag_fail_bytes,
        limits.flush_lag_warn_bytes,
        "more than {limit} B not yet on disk",
        "the flusher keeps up",
    )


def _replication(status: BrokerStatus, limits: HealthLimits) -> HealthCheck:
    info = status.info
    if info.broker_id != 0:
        if status.replication_error:
            return check("replication_lag", "stopped", HealthLevel.FAIL, status.replication_error)
        return check("replication_lag", "-", HealthLevel.OK, "fetching from its master")
    if not info.replicas:
        return check("replication_lag", "-", HealthLevel.OK, "no slaves")
    lag_ms = max(r.lag_ms for r in info.replicas)
    value = f"{lag_ms} ms"
    gone = [r.broker_id for r in info.replicas if not r.connected]
    if gone and lag_ms <= limits.replication_lag_fail_ms:
        return check("replication_lag", value, HealthLevel.WARN, f"slave(s) {gone} not connected")
    return _graded(
        "replication_lag",
        value,
        lag_ms,
        limits.replication_lag_fail_ms,
        limits.replication_lag_warn_ms,
        "a slave is more than {limit} ms behind",
        "slaves keep up",
    )


__all__ = ["ActorHealth", "HealthCheck", "HealthLevel", "HealthLimits", "worst"]
