"""The ``rayq`` commands about the deployment itself: ``status``, ``cluster
list``/``health`` and ``broker status``/``config``, over ``rayq.Admin``."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

import msgspec

from rayq.actors.protocol.config import replica_name
from rayq.admin.health import HealthLevel, HealthLimits
from rayq.cli.output import emit, pick, show, utc
from rayq.cli.registry import command
from rayq.cli.session import Session

if TYPE_CHECKING:
    from rich.console import Console


@command("status")
def _status(session: Session, args: argparse.Namespace) -> int:
    """The brokers (live masters) and topics, in two lines."""
    admin = session.admin
    brokers = sorted({e.broker_name for e in admin.broker_table() if not e.lost})
    data = {"url": session.url, "brokers": brokers, "topics": admin.topics()}
    if args.json:
        emit(args, data, lambda out: None)
        return 0
    if session.url:
        print(f"deployment: {session.url}")
    print(f"brokers: {data['brokers']}")
    print(f"topics: {data['topics']}")
    return 0


# ----------------------------------------------------------------- cluster


@command("cluster", "list")
def _cluster_list(session: Session, args: argparse.Namespace) -> int:
    admin = session.admin
    entries = admin.broker_table()
    names = [replica_name(e.broker_name, e.broker_id) for e in entries]
    statuses = admin.statuses([n for n, e in zip(names, entries, strict=True) if not e.lost])
    data: list[dict[str, Any]] = []
    for name, e in zip(names, entries, strict=True):
        status = statuses.get(name, "lost")
        info = None if isinstance(status, str) else status.info
        data.append(
            {
                "broker_name": e.broker_name,
                "broker_id": e.broker_id,
                "replica": name,
                "role": e.role,
                "node_id": e.node_id,
                "lost": e.lost,
                "last_heartbeat_ms": e.last_heartbeat_ms,
                "error": status if isinstance(status, str) else "",
                "disk_ratio": info.disk_ratio if info else None,
                "put_tps": info.put_tps if info else None,
                "written_offset": info.written_offset if info else None,
                "epoch": info.epoch if info else None,
            }
        )
    columns = ["broker_name", "broker_id", "role", "node_id", "state", "disk", "put_tps"]
    rows = [
        [
            *pick([d], columns[:4])[0],
            "LOST" if d["lost"] else "UNREACHABLE" if d["error"] else "ALIVE",
            "-" if d["disk_ratio"] is None else f"{d['disk_ratio']:.1%}",
            "-" if d["put_tps"] is None else f"{d['put_tps']:.1f}",
            d["written_offset"],
            utc(d["last_heartbeat_ms"]),
        ]
        for d in data
    ]
    show(args, data, "brokers", [*columns, "written", "last heartbeat (UTC)"], rows)
    return 0


_STYLE = {HealthLevel.OK: "green", HealthLevel.WARN: "yellow", HealthLevel.FAIL: "red"}


@command("cluster", "health")
def _cluster_health(session: Session, args: argparse.Namespace) -> int:
    limits = HealthLimits(
        disk_warn_ratio=args.disk_warn_ratio, disk_fail_ratio=args.disk_fail_ratio
    )
    records = session.admin.health(limits)

    def render(console: Console) -> None:
        from rich.table import Table

        table = Table(title="health", title_justify="left")
        for name in ("actor", "level", "check", "value", "reason"):
            table.add_column(name, overflow="fold")
        for r in records:
            for i, c in enumerate(r.checks):
                table.add_row(
                    r.actor if i == 0 else "",
                    f"[{_STYLE[r.level]}]{r.level.value}[/]" if i == 0 else "",
                    c.name,
                    c.value,
                    f"[{_STYLE[c.level]}]{c.level.value}[/] {c.reason}",
                )
        console.print(table)

    emit(args, records, render)
    return 1 if any(r.level is HealthLevel.FAIL for r in records) else 0


@command("broker", "status")
def _broker_status(session: Session, args: argparse.Namespace) -> int:
    status = session.admin.broker_status(args.broker)
    data = msgspec.to_builtins(msgspec.structs.replace(status, config={}))
    info = status.info
    rows: list[list[Any]] = [
        ["broker", replica_name(info.broker_name, info.broker_id)],
        ["role", info.role],
        ["node", info.node_id],
        ["store", info.store_dir],
        ["epoch", info.epoch],
        ["written offset", info.written_offset],
        ["flushed offset", status.flushed_offset],
        [
            "disk",
            f"{info.disk_ratio:.1%} (clean past {status.disk_clean_ratio:.0%}, "
            f"full past {status.disk_full_ratio:.0%})",
        ],
        ["put TPS", f"{info.put_tps:.1f}"],
        ["topics", len(info.topics)],
        [
            "slaves",
            ", ".join(f"#{r.broker_id} lag {r.lag_bytes} B / {r.lag_ms} ms" for r in info.replicas)
            or "-",
        ],
        ["flusher", status.flusher_error or "ok"],
        ["hold service", status.hold_error or "ok"],
        ["replication", status.replication_error or "ok"],
    ]
    show(args, data, f"broker {args.broker}", ["field", "value"], rows)
    return 0


@command("broker", "config")
def _broker_config(session: Session, args: argparse.Namespace) -> int:
    config = session.admin.broker_status(args.broker).config
    show(args, config, f"config of {args.broker}", ["setting", "value"], _flatten(config))
    return 0


def _flatten(values: dict[str, Any], prefix: str = "") -> list[list[Any]]:
    rows: list[list[Any]] = []
    for key, value in sorted(values.items()):
        if isinstance(value, dict) and value:
            rows += _flatten(value, f"{prefix}{key}.")
        else:
            rows.append([f"{prefix}{key}", value])
    return rows
