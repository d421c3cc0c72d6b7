"""The ``rayq topic`` and ``rayq group`` commands, over ``rayq.Admin``.

An unknown topic or group is an error (exit 1) in every command that names one:
``group progress`` of a group no broker knows does not print an empty table.
"""

from __future__ import annotations

import argparse

import msgspec

from rayq.cli.output import pick, queue_dict, show, utc
from rayq.cli.registry import command
from rayq.cli.session import Session

# ------------------------------------------------------------------ topics


@command("topic", "list")
def _topic_list(session: Session, args: argparse.Namespace) -> int:
    data = [
        {"topic": t, "brokers": sorted(d.broker_name for d in r.queues)}
        for t, r in sorted(session.admin.routes().items())
    ]
    rows = [[d["topic"], ", ".join(d["brokers"])] for d in data]
    show(args, data, "topics", ["topic", "brokers"], rows)
    return 0


@command("topic", "route")
def _topic_route(session: Session, args: argparse.Namespace) -> int:
    route = session.admin.route(args.topic)
    columns = ["broker_name", "read_queue_nums", "write_queue_nums", "perm", "read_from"]
    data = msgspec.to_builtins(route)
    show(args, data, f"route of {args.topic}", columns, pick(data["queues"], columns))
    return 0


@command("topic", "status")
def _topic_status(session: Session, args: argparse.Namespace) -> int:
    data = [
        {
            **queue_dict(s.queue),
            "min_offset": s.min_offset,
            "max_offset": s.max_offset,
            "last_store_timestamp": s.last_store_timestamp,
        }
        for s in session.admin.topic_stats(args.topic)
    ]
    columns = ["broker_name", "queue_id", "min_offset", "max_offset"]
    rows = [
        [*row, utc(d["last_store_timestamp"])]
        for row, d in zip(pick(data, columns), data, strict=True)
    ]
    show(args, data, f"status of {args.topic}", [*columns, "last stored (UTC)"], rows)
    return 0


@command("topic", "create")
def _topic_create(session: Session, args: argparse.Namespace) -> int:
    if args.perm is None:
        session.admin.create_topic(args.topic, queues=args.queues)
    else:
        session.admin.create_topic(args.topic, queues=args.queues, perm=args.perm)
    print(f"topic {args.topic} created with {args.queues} queues on each live broker")
    return 0


@command("topic", "update")
def _topic_update(session: Session, args: argparse.Namespace) -> int:
    session.admin.update_topic(args.topic, queues=args.queues, perm=args.perm)
    print(f"topic {args.topic} updated")
    return 0


@command("topic", "delete")
def _topic_delete(session: Session, args: argparse.Namespace) -> int:
    session.admin.delete_topic(args.topic)
    print(f"topic {args.topic} deleted")
    return 0


# ------------------------------------------------------------------ groups


@command("group", "list")
def _group_list(session: Session, args: argparse.Namespace) -> int:
    groups = session.admin.groups()
    show(args, groups, "groups", ["group"], [[g] for g in groups])
    return 0


@command("group", "progress")
def _group_progress(session: Session, args: argparse.Namespace) -> int:
    admin = session.admin
    everything = admin.consumer_progress(args.group)
    if not everything:
        admin.group_config(args.group)  # GroupNotFoundError for a group no broker knows
    if args.topic is not None:
        admin.route(args.topic)  # TopicNotFoundError
    progress = [p for p in everything if args.topic is None or p.queue.topic == args.topic]
    queues = [
        {
            **queue_dict(p.queue),
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
def _group_connections(session: Session, args: argparse.Namespace) -> int:
    admin = session.admin
    members = sorted(admin.group_connections(args.group).items())
    if not members and not admin.consumer_progress(args.group):
        admin.group_config(args.group)  # GroupNotFoundError for a group no broker knows
    data = [{"client_id": m, "queues": [queue_dict(q) for q in qs]} for m, qs in members]
    rows = [
        [m, ", ".join(f"{q.topic}@{q.broker_name}:{q.queue_id}" for q in qs) or "-"]
        for m, qs in members
    ]
    show(args, data, f"consumers of {args.group}", ["client_id", "queues"], rows)
    return 0


@command("group", "create")
def _group_create(session: Session, args: argparse.Namespace) -> int:
    session.admin.create_group(
        args.group,
        consume_enable=not args.disable,
        retry_max_times=args.retry_max_times,
        consume_message_orderly=args.orderly,
    )
    print(f"group {args.group} created on each live broker")
    return 0


@command("group", "update")
def _group_update(session: Session, args: argparse.Namespace) -> int:
    names = (
        "consume_enable",
        "consume_broadcast_enable",
        "consume_message_orderly",
        "retry_max_times",
    )
    changes = {n: getattr(args, n) for n in names if getattr(args, n) is not None}
    cfg = session.admin.update_group(args.group, **changes)
    print(f"group {args.group} updated: {msgspec.to_builtins(cfg)}")
    return 0


@command("group", "delete")
def _group_delete(session: Session, args: argparse.Namespace) -> int:
    session.admin.delete_group(args.group, clean_offsets=args.clean_offsets)
    print(f"group {args.group} deleted")
    return 0
