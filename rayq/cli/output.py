"""What the ``rayq`` commands print: JSON documents, rich tables, messages.

Each command gathers plain data (dicts, lists) once; with ``--json`` it is printed as
one JSON document, otherwise rich renders it as a table. rich is imported only when
a table is drawn (a ``--json`` call or a plain line never pays for it).
"""

from __future__ import annotations

import argparse
import base64
import datetime
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import msgspec

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from rayq.actors.protocol import MessageQueue
    from rayq.store.message import MessageExt

MESSAGE_FIELDS = (
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


def console() -> Console:
    from rich.console import Console

    width = 160 if not sys.stdout.isatty() else None
    return Console(file=sys.stdout, soft_wrap=False, width=width)


def emit(args: argparse.Namespace, data: Any, render: Callable[[Console], None]) -> None:
    """``data`` as JSON with ``--json``, else what ``render`` draws."""
    if getattr(args, "json", False):
        print(json.dumps(msgspec.to_builtins(data), indent=2, sort_keys=True))
    else:
        render(console())


def show(
    args: argparse.Namespace, data: Any, title: str, columns: list[str], rows: list[list[Any]]
) -> None:
    """``data`` as JSON with ``--json``, else ``rows`` as a table."""
    emit(args, data, lambda out: out.print(table(title, columns, rows)))


def pick(dicts: list[dict[str, Any]], keys: list[str]) -> list[list[Any]]:
    """The values of ``keys`` of each dict, as table rows."""
    return [[d[k] for k in keys] for d in dicts]


def table(title: str, columns: list[str], rows: list[list[Any]]) -> Table:
    from rich.table import Table

    drawn = Table(title=title, title_justify="left")
    for name in columns:
        drawn.add_column(name.replace("_", " "), overflow="fold")
    for row in rows:
        drawn.add_row(*("" if v is None else str(v) for v in row))
    return drawn


@contextmanager
def spinner(text: str) -> Iterator[None]:
    """A spinner on stderr while a wait lasts (nothing when stderr is not a terminal)."""
    if not sys.stderr.isatty():
        yield
        return
    from rich.console import Console

    with Console(stderr=True).status(text):
        yield


def utc(ms: int) -> str:
    if ms <= 0:
        return "-"
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).isoformat(
        timespec="milliseconds"
    )


def queue_dict(mq: MessageQueue) -> dict[str, Any]:
    return {"topic": mq.topic, "broker_name": mq.broker_name, "queue_id": mq.queue_id}


def body_text(body: bytes) -> tuple[str, str]:
    """(encoding, text): the body as UTF-8 text when it decodes, else as base64."""
    try:
        return "text", body.decode("utf-8")
    except UnicodeDecodeError:
        return "base64", base64.b64encode(body).decode("ascii")


def message_dict(msg: MessageExt) -> dict[str, Any]:
    """Every field of a message, its properties, and its body as text or base64."""
    out = {name: getattr(msg, name, None) for name in MESSAGE_FIELDS}
    out["properties"] = dict(msg.properties)
    out["body_encoding"], out["body"] = body_text(msg.body)
    return out


def render_message(out: Console, msg: dict[str, Any]) -> None:
    """One message: its headers, properties and body, as tables."""
    headers = [[k, msg[k]] for k in MESSAGE_FIELDS if k not in ("topic",)]
    headers.insert(0, ["topic", msg["topic"]])
    for k in ("born_timestamp", "store_timestamp"):
        headers.append([f"{k} (UTC)", utc(msg[k])])
    out.print(table("headers", ["field", "value"], headers))
    out.print(
        table("properties", ["key", "value"], sorted([k, v] for k, v in msg["properties"].items()))
    )
    out.print(f"body ({msg['body_encoding']}):")
    out.print(msg["body"], markup=False, highlight=False)
