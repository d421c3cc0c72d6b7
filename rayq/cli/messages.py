"""The ``rayq message``, ``rayq offset`` and ``rayq dlq`` commands, over ``rayq.Admin``:
look a message up (by key, id or queue offset) and show its trace, reset a group's
offsets (a dry run unless ``--execute``), list and resend dead letters."""

from __future__ import annotations

import argparse
from typing import Any

import msgspec

from rayq.cli.output import emit, message_dict, pick, render_message, show, spinner, utc
from rayq.cli.registry import command
from rayq.cli.session import Session
from rayq.store.properties import DLQ_ORIGIN_TOPIC

# ---------------------------------------------------------------- messages


@command("message", "query")
def _message_query(session: Session, args: argparse.Namespace) -> int:
    found = [
        message_dict(m) for m in session.admin.query_message(args.topic, args.key, max_num=args.max)
    ]
    columns = ["msg_id", "broker_name", "queue_id", "queue_offset", "tags", "keys"]
    rows = [
        [*row, utc(m["store_timestamp"]), m["body"][:60]]
        for row, m in zip(pick(found, columns), found, strict=True)
    ]
    title = f"messages of {args.topic} with key {args.key}"
    show(args, found, title, [*columns, "stored (UTC)", "body"], rows)
    return 0


@command("message", "view")
def _message_view(session: Session, args: argparse.Namespace) -> int:
    msg = message_dict(session.admin.view_message(args.msg_id))
    emit(args, msg, lambda out: render_message(out, msg))
    return 0


@command("message", "get")
def _message_get(session: Session, args: argparse.Namespace) -> int:
    found = session.admin.get_message(args.topic, args.queue, args.offset, args.broker)
    msg = message_dict(found)
    emit(args, msg, lambda out: render_message(out, msg))
    return 0


_TRACE_COLUMNS = [
    "kind",
    "group",
    "client_id",
    "broker",
    "queue_id",
    "queue_offset",
    "cost_ms",
    "status",
    "reconsume_times",
]


@command("message", "trace")
def _message_trace(session: Session, args: argparse.Namespace) -> int:
    found = session.admin.trace(args.msg_id, trace_topic=args.trace_topic)
    events = [msgspec.to_builtins(e) for e in found]
    rows = [[utc(e["timestamp_ms"]), *pick([e], _TRACE_COLUMNS)[0]] for e in events]
    title = f"trace of {args.msg_id}" + ("" if events else " (none recorded)")
    show(args, events, title, ["time (UTC)", *_TRACE_COLUMNS], rows)
    return 0


# ----------------------------------------------------------------- offsets


@command("offset", "reset")
def _offset_reset(session: Session, args: argparse.Namespace) -> int:
    to, value = args.to
    with spinner(f"planning the reset of {args.group} on {args.topic}"):
        plan = session.admin.reset_offsets(
            args.group,
            args.topic,
            to,
            value,
            broker=args.broker,
            queue_id=args.queue,
            execute=args.execute,
        )
    queues = [
        {
            "broker_name": c.queue.broker_name,
            "queue_id": c.queue.queue_id,
            "current": c.current,
            "target": c.target,
        }
        for c in plan
    ]
    data = {
        "group": args.group,
        "topic": args.topic,
        "to": to,
        "value": value,
        "executed": args.execute,
        "queues": queues,
    }
    verb = "reset" if args.execute else "dry run: would reset"
    columns = ["broker_name", "queue_id", "current", "target"]
    show(args, data, f"{verb} {args.group} on {args.topic}", columns, pick(queues, columns))
    if not args.execute and not args.json:
        print("nothing changed: add --execute to apply this plan")
    return 0


def reset_target(words: list[str]) -> tuple[str, int | None]:
    """``--to earliest|latest|offset N|shift N|time T`` as (to, value)."""
    from rayq.cli.args import signed_int, timestamp_ms

    kind, rest = words[0], words[1:]
    if kind in ("earliest", "latest"):
        if rest:
            raise argparse.ArgumentTypeError(f"--to {kind} takes no value, got {rest[0]!r}")
        return kind, None
    parse: dict[str, Any] = {"offset": signed_int, "shift": signed_int, "time": timestamp_ms}
    if kind not in parse:
        raise argparse.ArgumentTypeError(
            f"--to takes earliest, latest, offset N, shift N or time T, got {kind!r}"
        )
    if len(rest) != 1:
        raise argparse.ArgumentTypeError(f"--to {kind} takes one value, e.g. --to {kind} 10")
    value: int = parse[kind](rest[0])
    if kind == "offset" and value < 0:
        raise argparse.ArgumentTypeError(f"--to offset takes an offset >= 0, got {value}")
    return kind, value


# ------------------------------------------------------------ dead letters


@command("dlq", "list")
def _dlq_list(session: Session, args: argparse.Namespace) -> int:
    found = [message_dict(m) for m in session.admin.dead_letters(args.group, max_num=args.max)]
    columns = ["msg_id", "queue_offset", "tags", "keys", "reconsume_times"]
    rows = [
        [*row, m["properties"].get(DLQ_ORIGIN_TOPIC, ""), utc(m["store_timestamp"]), m["body"][:60]]
        for row, m in zip(pick(found, columns), found, strict=True)
    ]
    title = f"dead letters of {args.group}" + ("" if found else " (none)")
    show(args, found, title, [*columns, "topic", "stored (UTC)", "body"], rows)
    return 0


@command("dlq", "resend")
def _dlq_resend(session: Session, args: argparse.Namespace) -> int:
    result = session.admin.resend_dead_letter(args.group, args.msg_id)
    print(
        f"{result.status.value}: dead letter {args.msg_id} sent to %RETRY%{args.group} "
        f"as {result.msg_id} (queue {result.queue.queue_id}, offset {result.queue_offset})"
    )
    return 0
