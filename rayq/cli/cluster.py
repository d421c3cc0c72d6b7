"""The ``rayq`` commands about the deployment itself: ``cluster list``/``health``,
``broker status``/``config``, and ``send``/``consume`` for a quick test message
(registered with ``rayq.cli.ops.command``; output helpers from there)."""

from __future__ import annotations

import argparse
import time
from typing import Any

import msgspec
from rich.console import Console
from rich.table import Table

from rayq.actors.protocol.config import replica_name
from rayq.admin.admin import Admin
from rayq.admin.health import HealthLevel, HealthLimits
from rayq.cli.ops import command, emit, message_dict, pick, show, spinner, utc
from rayq.store.errors import InvalidMessageError

# ----------------------------------------------------------------- cluster


@command("cluster", "list")
def _cluster_list(admin: Admin, args: argparse.Namespace) -> int:
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
def _cluster_health(admin: Admin, args: argparse.Namespace) -> int:
    limits = HealthLimits(
        disk_warn_ratio=args.disk_warn_ratio, disk_fail_ratio=args.disk_fail_ratio
    )
    records = admin.health(limits)

    def render(console: Console) -> None:
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
def _broker_status(admin: Admin, args: argparse.Namespace) -> int:
    status = admin.broker_status(args.broker)
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
def _broker_config(admin: Admin, args: argparse.Namespace) -> int:
    config = admin.broker_status(args.broker).config
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


# ------------------------------------------------------- send and consume


@command("send")
def _send(admin: Admin, args: argparse.Namespace) -> int:
    from rayq.producer.producer import Producer
    from rayq.store import Message

    props = {}
    for item in args.property:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InvalidMessageError(f"--property takes KEY=VALUE, got {item!r}")
        props[key] = value
    keys = [k for k in args.keys.split(",") if k]
    producer = Producer("rayq_cli_producer", namespace=args.namespace)
    try:
        result = producer.send(
            Message(args.topic, args.body.encode(), tags=args.tags, keys=keys, properties=props)
        )
    finally:
        producer.shutdown()
    print(
        f"{result.status.value} msg_id={result.msg_id} broker={result.queue.broker_name} "
        f"queue={result.queue.queue_id} offset={result.queue_offset}"
    )
    return 0


@command("consume")
def _consume(admin: Admin, args: argparse.Namespace) -> int:
    from rayq.actors.protocol import ConsumeFromWhere
    from rayq.consumer.pull import PullConsumer

    start = ConsumeFromWhere.FIRST_OFFSET if args.start == "first" else ConsumeFromWhere.LAST_OFFSET
    consumer = PullConsumer(args.group, consume_from=start, namespace=args.namespace)
    got: list[dict[str, Any]] = []
    try:
        consumer.subscribe(args.topic)
        consumer.start()
        deadline = time.monotonic() + args.timeout
        with spinner(f"waiting for messages of {args.topic}"):
            while len(got) < args.count and time.monotonic() < deadline:
                batch = consumer.poll(timeout=min(1.0, max(deadline - time.monotonic(), 0.0)))
                got += [message_dict(m) for m in batch]
        consumer.commit()
    finally:
        consumer.shutdown()
    columns = ["msg_id", "broker_name", "queue_id", "queue_offset", "tags", "body"]
    show(args, got, f"consumed from {args.topic} as {args.group}", columns, pick(got, columns))
    return 0
