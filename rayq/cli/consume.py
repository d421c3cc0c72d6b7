"""``rayq consume``: kcat's consumer (``kcat -C``) for a rayq topic.

Without ``--group`` it reads and commits nothing: a ``PullConsumer`` of the tool
group ``READER_GROUP`` (RocketMQ's tools use ``TOOLS_CONSUMER`` alike) is assigned
every read queue, starts where ``--from`` says (default earliest) and never commits,
so a second run prints the same. ``--group G`` consumes as that group: the group's
share of the queues from its committed offsets (a new group from the earliest), or
from ``--from``, and commits what was printed (unless ``--no-commit``).

It stops after ``-n`` messages, or once every queue is read up to the end it had
when the command started; ``--follow`` keeps waiting for new messages until ``-n``
or Ctrl-C (which ends it cleanly, exit 0).

Output: the body per line (kcat's default); ``--json`` one JSON object per message;
``--format`` a template of the fields of ``record``; ``-v`` a line of metadata
before each body.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING, Any, Final

from rayq.cli.output import body_text
from rayq.cli.registry import command
from rayq.cli.session import Session

if TYPE_CHECKING:
    from rayq.actors.protocol import MessageQueue
    from rayq.consumer.pull import PullConsumer
    from rayq.store.message import MessageExt

READER_GROUP: Final = "rayq_cli_reader"
POLL_S: Final = 0.5
VERBOSE_FORMAT: Final = (
    "{topic} {broker}:{queue_id}@{queue_offset} msg_id={msg_id} tags={tags} keys={keys} "
    "stored={store_timestamp}\n{body}"
)
FIELDS: Final = (
    "topic",
    "broker",
    "queue_id",
    "queue_offset",
    "msg_id",
    "keys",
    "tags",
    "properties",
    "body",
    "body_encoding",
    "born_timestamp",
    "store_timestamp",
    "reconsume_times",
)


def record(msg: MessageExt) -> dict[str, Any]:
    """What ``--json`` prints of a message (``--format`` takes these names)."""
    encoding, body = body_text(msg.body)
    return {
        "topic": msg.topic,
        "broker": msg.broker_name,
        "queue_id": msg.queue_id,
        "queue_offset": msg.queue_offset,
        "msg_id": msg.msg_id,
        "keys": list(msg.keys),
        "tags": msg.tags,
        "properties": dict(msg.properties),
        "body": body,
        "body_encoding": encoding,
        "born_timestamp": msg.born_timestamp,
        "store_timestamp": msg.store_timestamp,
        "reconsume_times": msg.reconsume_times,
    }


def check_format(text: str) -> str:
    """``--format``: a ``str.format`` template over ``FIELDS``."""
    sample = dict.fromkeys(FIELDS, "")
    try:
        text.format(**sample)
    except (KeyError, IndexError, ValueError) as exc:
        raise argparse.ArgumentTypeError(
            f"--format: {exc!s} is not a field; use {{name}} with names of {', '.join(FIELDS)}"
        ) from None
    return text.replace("\\n", "\n").replace("\\t", "\t")


@command("consume")
def _consume(session: Session, args: argparse.Namespace) -> int:
    # TopicNotFoundError for an unknown topic, before anything else
    queues = session.admin.route(args.topic).read_queues()
    consumer = _consumer(session, args, queues)
    try:
        _loop(args, consumer, _position(session, args, consumer))
    except KeyboardInterrupt:
        pass  # Ctrl-C: what was printed is committed below (with --group)
    except BrokenPipeError:  # the reader went away (| head): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    finally:
        if args.group is not None and not args.no_commit:
            consumer.commit()
        consumer.shutdown()
    return 0


def _consumer(
    session: Session, args: argparse.Namespace, queues: list[MessageQueue]
) -> PullConsumer:
    """Started: the tool group's, assigned every queue; or the group's share of them."""
    from rayq.actors.protocol import ConsumeFromWhere

    if args.group is None:
        consumer = session.pull_consumer(READER_GROUP, auto_commit=False)
        consumer.assign(queues)
        for mq in queues:  # placeholders (no offset lookup): ``_position`` seeks each
            consumer.seek(mq, 0)
    else:
        consumer = session.pull_consumer(
            args.group, auto_commit=False, consume_from=ConsumeFromWhere.FIRST_OFFSET
        )
        consumer.subscribe(args.topic)
    consumer.start()
    return consumer


def _position(
    session: Session, args: argparse.Namespace, consumer: PullConsumer
) -> dict[MessageQueue, int]:
    """Seek each assigned queue where ``--from`` says; returns each queue's end now."""
    stats = {s.queue: s for s in session.admin.topic_stats(args.topic)}
    assigned = consumer.assignment()
    start, value = args.start
    if args.group is None and start == "default":
        start = "earliest"
    at_time = (
        session.admin.offsets_at(args.topic, value) if start == "time" and value is not None else {}
    )
    for mq in assigned:
        s = stats.get(mq)
        lo, hi = (s.min_offset, s.max_offset) if s is not None else (0, 0)
        if start == "earliest":
            consumer.seek(mq, lo)
        elif start == "latest":
            consumer.seek(mq, hi)
        elif start == "offset":
            consumer.seek(mq, min(max(value or 0, lo), hi))
        elif start == "time":
            consumer.seek(mq, at_time.get(mq, hi))
    return {mq: stats[mq].max_offset if mq in stats else 0 for mq in assigned}


def _loop(args: argparse.Namespace, consumer: PullConsumer, ends: dict[MessageQueue, int]) -> int:
    """Poll and print until ``--count``, the ends (unless ``--follow``) or Ctrl-C."""
    printed = 0
    while args.count is None or printed < args.count:
        if not args.follow and all(consumer.position(mq) >= end for mq, end in ends.items()):
            break
        batch = consumer.poll(timeout=POLL_S)
        if args.count is not None and printed + len(batch) > args.count:
            _rewind(consumer, batch[args.count - printed :])
            batch = batch[: args.count - printed]
        for msg in batch:
            _print(args, msg)
        printed += len(batch)
        sys.stdout.flush()
    return printed


def _rewind(consumer: PullConsumer, unprinted: list[MessageExt]) -> None:
    """Move each queue back to its first message not printed (so a commit keeps them)."""
    from rayq.actors.protocol import MessageQueue

    first: dict[MessageQueue, int] = {}
    for msg in unprinted:
        mq = MessageQueue(msg.topic, msg.broker_name, msg.queue_id)
        first[mq] = min(first.get(mq, msg.queue_offset), msg.queue_offset)
    for mq, offset in first.items():
        consumer.seek(mq, offset)


def _print(args: argparse.Namespace, msg: MessageExt) -> None:
    if args.json:
        print(json.dumps(record(msg), sort_keys=True))
    elif args.format is not None or args.verbose:
        print((args.format or VERBOSE_FORMAT).format(**record(msg)))
    else:
        sys.stdout.buffer.write(msg.body + b"\n")
