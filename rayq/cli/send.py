"""``rayq send``: one message from ``--body``, else one per line of stdin (kcat -P).

Lines are sent in batches (``Producer.send_batch``, at most ``BATCH_MAX`` messages or
``BATCH_BYTES_MAX`` bytes each), a batch per read of stdin, so a pipe that writes a
line now and then has each line sent as it comes. With ``--json`` each line is an
object ``{"body": ..., "keys": [...], "tags": ..., "properties": {...}}``
(``"body_encoding": "base64"`` for a binary body, as ``rayq consume --json`` prints
it). ``--key``, ``--tag`` and ``-p k=v`` apply to every message; a line's own
``tags`` win and its keys and properties are added. An unknown topic is refused
unless ``--create`` is given.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import json
import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Final

from rayq.cli.registry import command
from rayq.cli.session import Session
from rayq.store.errors import InvalidMessageError, TopicNotFoundError

if TYPE_CHECKING:
    from rayq.actors.protocol import SendResult
    from rayq.store import Message

PRODUCER_GROUP: Final = "rayq_cli_producer"
BATCH_MAX: Final = 256
BATCH_BYTES_MAX: Final = 1024 * 1024
READ_BYTES: Final = 64 * 1024


@command("send")
def _send(session: Session, args: argparse.Namespace) -> int:
    _check_topic(session, args)
    producer = session.producer(PRODUCER_GROUP)
    try:
        if args.body is not None:
            _print_results([producer.send(_message(args, args.body.encode()))])
            return 0
        if sys.stdin.isatty():
            print("one message per line; Ctrl-D ends", file=sys.stderr)
        sent = 0
        for lines in _stdin_chunks(sys.stdin.buffer):
            messages = [_line_message(args, line, sent + i + 1) for i, line in enumerate(lines)]
            for batch in _batches(messages):
                _print_results(producer.send_batch(batch))
            sent += len(messages)
    finally:
        producer.shutdown()
    return 0


def _check_topic(session: Session, args: argparse.Namespace) -> None:
    """Refuse a topic that does not exist (a typo must not create one) unless --create."""
    admin = session.admin
    try:
        admin.route(args.topic)
    except TopicNotFoundError:
        if not args.create:
            raise TopicNotFoundError(
                f"topic {args.topic!r} does not exist; create it with `rayq topic create -t "
                f"{args.topic}` or pass --create",
                topic=args.topic,
            ) from None
        admin.create_topic(args.topic, queues=args.queues)


def _print_results(results: list[SendResult]) -> None:
    for r in results:
        print(
            f"{r.status.value} msg_id={r.msg_id} broker={r.queue.broker_name} "
            f"queue={r.queue.queue_id} offset={r.queue_offset}"
        )
    sys.stdout.flush()


def _message(
    args: argparse.Namespace,
    body: bytes,
    *,
    keys: list[str] | None = None,
    tags: str | None = None,
    properties: dict[str, str] | None = None,
) -> Message:
    from rayq.store import Message

    return Message(
        args.topic,
        body,
        tags=tags if tags is not None else args.tag,
        keys=[*args.key, *(keys or [])],
        properties={**dict(args.property), **(properties or {})},
    )


def _line_message(args: argparse.Namespace, line: bytes, number: int) -> Message:
    """The message of one line of stdin (``number`` counts from 1, for errors)."""
    if not args.json:
        return _message(args, line)
    try:
        obj = json.loads(line)
    except ValueError as exc:
        raise InvalidMessageError(f"stdin line {number} is not JSON ({exc})") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("body"), str):
        raise InvalidMessageError(
            f'stdin line {number}: expected an object with a "body" string, e.g. '
            '{"body": "hello", "keys": ["k1"], "tags": "TagA", "properties": {"a": "1"}}'
        )
    return _message(
        args,
        _json_body(obj, number),
        keys=_str_list(obj.get("keys", []), "keys", number),
        tags=_optional_str(obj.get("tags"), "tags", number),
        properties=_str_dict(obj.get("properties", {}), "properties", number),
    )


def _json_body(obj: dict[str, Any], number: int) -> bytes:
    encoding = obj.get("body_encoding", "text")
    if encoding == "text":
        return str(obj["body"]).encode()
    if encoding == "base64":
        try:
            return base64.b64decode(obj["body"], validate=True)
        except (binascii.Error, ValueError):
            raise InvalidMessageError(f"stdin line {number}: body is not base64") from None
    raise InvalidMessageError(
        f'stdin line {number}: body_encoding must be "text" or "base64", got {encoding!r}'
    )


def _str_list(value: object, name: str, number: int) -> list[str]:
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InvalidMessageError(f"stdin line {number}: {name} must be a list of strings")
    return list(value)


def _optional_str(value: object, name: str, number: int) -> str | None:
    if value is not None and not isinstance(value, str):
        raise InvalidMessageError(f"stdin line {number}: {name} must be a string")
    return value


def _str_dict(value: object, name: str, number: int) -> dict[str, str]:
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise InvalidMessageError(f"stdin line {number}: {name} must map strings to strings")
    return dict(value)


def _stdin_chunks(stream: Any) -> Iterator[list[bytes]]:
    """The non-empty lines of ``stream`` (a binary file), a list per read; a last line
    without its newline counts."""
    fd = stream.fileno()
    pending = b""
    while chunk := os.read(fd, READ_BYTES):
        *lines, pending = (pending + chunk).split(b"\n")
        kept = [line.removesuffix(b"\r") for line in lines if line.strip()]
        if kept:
            yield kept
    if pending.strip():
        yield [pending.removesuffix(b"\r")]


def _batches(messages: list[Message]) -> Iterator[list[Message]]:
    batch: list[Message] = []
    size = 0
    for msg in messages:
        if batch and (len(batch) >= BATCH_MAX or size + len(msg.body) > BATCH_BYTES_MAX):
            yield batch
            batch, size = [], 0
        batch.append(msg)
        size += len(msg.body)
    if batch:
        yield batch


__all__ = ["PRODUCER_GROUP"]
