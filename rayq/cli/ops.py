"""The ``rayq`` commands that operate a running deployment: topic, group, message and
offset here, cluster, broker, send and consume in ``rayq.cli.cluster``; over
``rayq.Admin`` and the clients.

Each command gathers plain data (dicts, lists) once; ``--json`` prints that as one
JSON document, otherwise rich renders it as tables. Waits show a spinner on stderr.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import msgspec
from rich.console import Console
from rich.table import Table

from rayq.actors.protocol import MessageQueue
from rayq.admin.admin import Admin
from rayq.store.message import MessageExt

Handler = Callable[[Admin, argparse.Namespace], int]
_HANDLERS: dict[tuple[str, str | None], Handler] = {}
_MESSAGE_FIELDS = (
    "topic",
    "msg_id",
    "offset_msg_id",
    "tags",
    "keys",
    "queue_id",
    "queue_offset",
    "commitlog_offset",
    "store_size",
    "born_timestamp",
    "store_timestamp",
    "born_host",
    "store_host",
    "reconsume_times",
    "broker_name",
    "sys_flag",
    "flag",
)


def run(args: argparse.Namespace) -> int:
    """Run the parsed command against the deployment ``connect`` attached to."""
    import rayq.cli.cluster  # noqa: F401  (registers its commands)

    admin = Admin(namespace=args.namespace)
    return _HANDLERS[args.command, getattr(args, "action", None)](admin, args)


def command(group: str, action: str | None = None) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        _HANDLERS[group, action] = fn
        return fn

    return register


# ------------------------------------------------------------------ output


def _console() -> Console:
    return Console(file=sys.stdout, soft_wrap=False, width=160 if not sys.stdout.isatty() else None)


def emit(args: argparse.Namespace, data: Any, render: Callable[[Console], None]) -> None:
    """``data`` as JSON with ``--json``, else what ``render`` draws."""
    if getattr(args, "json", False):
        print(json.dumps(msgspec.to_builtins(data), indent=2, sort_keys=True))
    else:
        render(_console())


def show(
    args: argparse.Namespace, data: Any, title: str, columns: list[str], rows: list[list[Any]]
) -> None:
    """``data`` as JSON with ``--json``, else ``rows`` as a table."""
    emit(args, data, lambda console: console.print(table(title, columns, rows)))


def pick(dicts: list[dict[str, Any]], keys: list[str]) -> list[list[Any]]:
    """The values of ``keys`` of each dict, as table rows."""
    return [[d[k] for k in keys] for d in dicts]


def table(title: str, columns: list[str], rows: list[list[Any]]) -> Table:
    table = Table(title=title, title_justify="left")
    for name in columns:
        table.add_column(name.replace("_", " "), overflow="fold")
    for row in rows:
        table.add_row(*("" if v is None else str(v) for v in row))
    return table


@contextmanager
def spinner(text: str) -> Iterator[None]:
    """A spinner on stderr while a wait lasts (nothing when stderr is not a terminal)."""
    with Console(stderr=True).status(text):
        yield


def utc(ms: int) -> str:
    if ms <= 0:
        return "-"
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).isoformat(
        timespec="milliseconds"
    )


def _queue(mq: MessageQueue) -> dict[str, Any]:
    return {"topic": mq.topic, "broker_name": mq.broker_name, "queue_id": mq.queue_id}


def _body(body: bytes) -> tuple[str, str]:
    """(encoding, text): the body as UTF-8 text when it decodes, else as hex."""
    try:
        return "text", body.decode("utf-8")
    except UnicodeDecodeError:
        return "hex", body.hex()


def message_dict(msg: MessageExt) -> dict[str, Any]:
    out = {name: getattr(msg, name, None) for name in _MESSAGE_FIELDS}
    out["properties"] = dict(msg.properties)
    out["body_encoding"], out["body"] = _body(msg.body)
    return out


def _render_message(console: Console, msg: dict[str, Any]) -> None:
    headers = [[k, msg[k]] for k in _MESSAGE_FIELDS if k not in ("topic",)]
    headers.insert(0, ["topic", msg["topic"]])
    for k in ("born_timestamp", "store_timestamp"):
        headers.append([f"{k} (UTC)", utc(msg[k])])
    console.print(table("headers", ["field", "value"], headers))
    console.print(
        table("properties", ["key", "value"], sorted([k, v] for k, v in msg["properties"].items()))
    )
    console.print(f"body ({msg['body_encoding']}):")
    console.print(msg["body"], markup=False, highlight=False)


# ------------------------------------------------------------------ topics


@command("topic", "list")
def _topic_list(admin: Admin, args: argparse.Namespace) -> int:
    data = [
        {"topic": t, "brokers": sorted(d.broker_name for d in r.queues)}
        for t, r in sorted(admin.routes().items())
    ]
    rows = [[d["topic"], ", ".join(d["brokers"])] for d in data]
    show(args, data, "topics", ["topic", "brokers"], rows)
    return 0


@command("topic", "route")
def _topic_route(admin: Admin, args: argparse.Namespace) -> int:
    route = admin.route(args.topic)
    columns = ["broker_name", "read_queue_nums", "write_queue_nums", "perm", "read_from"]
    data = msgspec.to_builtins(route)
    show(args, data, f"route of {args.topic}", columns, pick(data["queues"], columns))
    return 0


@command("topic", "status")
def _topic_status(admin: Admin, args: argparse.Namespace) -> int:
    data = [
        {
            **_queue(s.queue),
            "min_offset": s.min_offset,
            "max_offset": s.max_offset,
            "last_store_timestamp": s.last_store_timestamp,
        }
        for s in admin.topic_stats(args.topic)
    ]
    columns = ["broker_name", "queue_id", "min_offset", "max_offset"]
    rows = [
        [*row, utc(d["last_store_timestamp"])]
        for row, d in zip(pick(data, columns), data, strict=True)
    ]
    show(args, data, f"status of {args.topic}", [*columns, "last stored (UTC)"], rows)
    return 0


@command("topic", "create")
def _topic_create(admin: Admin, args: argparse.Namespace) -> int:
    if args.perm is None:
        admin.create_topic(args.topic, queues=args.queues)
    else:
        admin.create_topic(args.topic, queues=args.queues, perm=args.perm)
    print(f"topic {args.topic} created with {args.queues} queues on each live broker")
    return 0


@command("topic", "update")
def _topic_update(admin: Admin, args: argparse.Namespace) -> int:
    admin.update_topic(args.topic, queues=args.queues, perm=args.perm)
    print(f"topic {args.topic} updated")
    return 0


@command("topic", "delete")
def _topic_delete(admin: Admin, args: argparse.Namespace) -> int:
    admin.delete_topic(args.topic)
    print(f"topic {args.topic} deleted")
    return 0


# ------------------------------------------------------------------ groups


@command("group", "list")
def _group_list(admin: Admin, args: argparse.Namespace) -> int:
    groups = admin.groups()
    show(args, groups, "groups", ["group"], [[g] for g in groups])
    return 0


@command("group", "progress")
def _group_progress(admin: Admin, args: argparse.Namespace) -> int:
    progress = [
        p
        for p in admin.consumer_progress(args.group)
        if args.topic is None or p.queue.topic == args.topic
    ]
    queues = [
        {
            **_queue(p.queue),
            "committed_offset": p.committed_offset,
            "max_offset": p.max_offset,
            "lag": p.lag,
        }
        for p in progress
    ]
    sums = ["committed_offset", "max_offset", "lag"]
    total = {k: sum(q[k] for q in queues) for k in sums}
    data = {"group": args.group, "queues": queues, "total": total}
    columns = ["topic", "broker_name", "queue_id", *sums]
    rows = [*pick(queues, columns), ["total", "", "", *pick([total], sums)[0]]]
    show(args, data, f"progress of {args.group}", columns, rows)
    return 0


@command("group", "connections")
def _group_connections(admin: Admin, args: argparse.Namespace) -> int:
    members = sorted(admin.group_connections(args.group).items())
    data = [{"client_id": m, "queues": [_queue(q) for q in qs]} for m, qs in members]
    rows = [
        [m, ", ".join(f"{q.topic}@{q.broker_name}:{q.queue_id}" for q in qs) or "-"]
        for m, qs in members
    ]
    show(args, data, f"consumers of {args.group}", ["client_id", "queues"], rows)
    return 0


@command("group", "create")
def _group_create(admin: Admin, args: argparse.Namespace) -> int:
    admin.create_group(
        args.group,
        consume_enable=not args.disable,
        retry_max_times=args.retry_max_times,
        consume_message_orderly=args.orderly,
    )
    print(f"group {args.group} created on each live broker")
    return 0


@command("group", "update")
def _group_update(admin: Admin, args: argparse.Namespace) -> int:
    names = (
        "consume_enable",
        "consume_broadcast_enable",
        "consume_message_orderly",
        "retry_max_times",
    )
    changes = {n: getattr(args, n) for n in names if getattr(args, n) is not None}
    cfg = admin.update_group(args.group, **changes)
    print(f"group {args.group} updated: {msgspec.to_builtins(cfg)}")
    return 0


@command("group", "delete")
def _group_delete(admin: Admin, args: argparse.Namespace) -> int:
    admin.delete_group(args.group, clean_offsets=args.clean_offsets)
    print(f"group {args.group} deleted")
    return 0


# ---------------------------------------------------------------- messages


@command("message", "query")
def _message_query(admin: Admin, args: argparse.Namespace) -> int:
    found = [message_dict(m) for m in admin.query_message(args.topic, args.key, max_num=args.max)]
    columns = ["msg_id", "broker_name", "queue_id", "queue_offset", "tags", "keys"]
    rows = [
        [*row, utc(m["store_timestamp"]), m["body"][:60]]
        for row, m in zip(pick(found, columns), found, strict=True)
    ]
    title = f"messages of {args.topic} with key {args.key}"
    show(args, found, title, [*columns, "stored (UTC)", "body"], rows)
    return 0


@command("message", "view")
def _message_view(admin: Admin, args: argparse.Namespace) -> int:
    msg = message_dict(admin.view_message(args.msg_id))
    emit(args, msg, lambda c: _render_message(c, msg))
    return 0


@command("message", "get")
def _message_get(admin: Admin, args: argparse.Namespace) -> int:
    msg = message_dict(admin.get_message(args.topic, args.queue, args.offset, args.broker))
    emit(args, msg, lambda c: _render_message(c, msg))
    return 0


# ----------------------------------------------------------------- offsets


@command("offset", "reset")
def _offset_reset(admin: Admin, args: argparse.Namespace) -> int:
    old = {
        (p.queue.broker_name, p.queue.queue_id): p.committed_offset
        for p in admin.consumer_progress(args.group)
        if p.queue.topic == args.topic
    }
    if args.dry_run:
        with spinner(f"looking up the offsets of {args.topic} at {args.timestamp}"):
            new = admin.offsets_at(args.topic, args.timestamp)
    else:
        with spinner(f"resetting {args.group} on {args.topic}"):
            new = admin.reset_offset(args.group, args.topic, args.timestamp)
    data = {
        "group": args.group,
        "topic": args.topic,
        "timestamp_ms": args.timestamp,
        "dry_run": args.dry_run,
        "queues": [
            {
                "broker_name": q.broker_name,
                "queue_id": q.queue_id,
                "old_offset": old.get((q.broker_name, q.queue_id), -1),
                "new_offset": o,
            }
            for q, o in sorted(new.items())
        ],
    }
    title = ("would reset" if args.dry_run else "reset") + f" {args.group} on {args.topic}"
    columns = ["broker_name", "queue_id", "old_offset", "new_offset"]
    show(args, data, title, columns, pick(data["queues"], columns))
    return 0
