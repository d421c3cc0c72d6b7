"""The ``rayq`` command line's grammar: every command, its options and their help.

``ACTIONS`` lists the commands that come in groups (``rayq topic list``) and
``make_argument_parser`` adds the single ones (``start``, ``send``, ``consume``...).
The connection options (``rayq.cli.args.connection_options``) are accepted at every
level, before or after the command.
"""

from __future__ import annotations

import argparse
from typing import Any

from rayq.cli.args import (
    Parser,
    boolean,
    connection_options,
    json_option,
    nonneg_int,
    positive_int,
    property_pair,
    ratio,
    start_position,
)

DESCRIPTION = """\
Operate a rayq deployment: topics, groups, messages, offsets, dead letters; send and
consume (kcat-style); start and stop a deployment on Ray.

It reaches the deployment by its rayq:// URL (--url, $RAYQ_URL, or the rayq.url file
that `rayq start` writes in $RAYQ_HOME or ./rayq-data) without joining Ray. Exit
codes: 0 ok, 1 an error (one line on stderr), 2 bad usage."""

Arg = tuple[tuple[str, ...], dict[str, Any]]
TOPIC: Arg = (("--topic", "-t"), {"required": True, "help": "topic name"})
GROUP: Arg = (("--group", "-g"), {"required": True, "help": "consumer group name"})
MSG_ID: Arg = (
    ("--id", "-i"),
    {"required": True, "dest": "msg_id", "help": "unique message id (or offset message id)"},
)
BROKER: Arg = (
    ("--broker", "-b"),
    {"required": True, "help": "broker replica (<name>, or <name>#<id> for a slave)"},
)
QUEUES: Arg = (("--queues",), {"type": positive_int, "help": "read and write queues"})
PERM: Arg = (("--perm",), {"type": nonneg_int, "help": "4 read | 2 write (default 6)"})
MAX: Arg = (("--max",), {"type": positive_int, "default": 32, "help": "at most (default 32)"})

# (group, action) -> (help, read command (takes --json)?, arguments)
ACTIONS: dict[tuple[str, str], tuple[str, bool, list[Arg]]] = {
    ("topic", "list"): ("every topic and the brokers serving it", True, []),
    ("topic", "route"): ("the brokers, queue counts and permissions of a topic", True, [TOPIC]),
    ("topic", "status"): ("min/max offset and last store time per queue", True, [TOPIC]),
    ("topic", "create"): (
        "create a topic on every live broker",
        False,
        [
            TOPIC,
            (("--queues",), {"type": positive_int, "default": 4, "help": "queues (default 4)"}),
            PERM,
        ],
    ),
    ("topic", "update"): (
        "change a topic's queue count or permission",
        False,
        [TOPIC, QUEUES, PERM],
    ),
    ("topic", "delete"): ("delete a topic and its offsets", False, [TOPIC]),
    ("group", "list"): ("every subscription group", True, []),
    ("group", "progress"): (
        "committed offset, max offset and lag per queue",
        True,
        [GROUP, (("--topic", "-t"), {"help": "only this topic"})],
    ),
    ("group", "connections"): ("the live consumers of a group and their queues", True, [GROUP]),
    ("group", "create"): (
        "create a subscription group on every live broker",
        False,
        [
            GROUP,
            (("--retry-max-times",), {"type": nonneg_int, "default": 16}),
            (("--orderly",), {"action": "store_true", "help": "consume orderly"}),
            (("--disable",), {"action": "store_true", "help": "create it with consuming off"}),
        ],
    ),
    ("group", "update"): (
        "change a group's settings",
        False,
        [
            GROUP,
            (("--consume-enable",), {"type": boolean, "help": "true or false"}),
            (("--consume-broadcast-enable",), {"type": boolean, "help": "true or false"}),
            (("--consume-message-orderly",), {"type": boolean, "help": "true or false"}),
            (("--retry-max-times",), {"type": nonneg_int}),
        ],
    ),
    ("group", "delete"): (
        "delete a subscription group",
        False,
        [GROUP, (("--clean-offsets",), {"action": "store_true", "help": "and its offsets"})],
    ),
    ("message", "query"): (
        "messages of a topic by key (or unique id)",
        True,
        [TOPIC, (("--key", "-k"), {"required": True}), MAX],
    ),
    ("message", "view"): ("one message by its id", True, [MSG_ID]),
    ("message", "get"): (
        "the message at an offset of a queue",
        True,
        [
            TOPIC,
            (("--queue", "-q"), {"type": nonneg_int, "required": True}),
            (("--offset", "-o"), {"type": nonneg_int, "required": True}),
            (("--broker", "-b"), {"help": "broker (needed when several serve the topic)"}),
        ],
    ),
    ("message", "trace"): (
        "a message's trace: its send, store and each consume, oldest first",
        True,
        [
            MSG_ID,
            (
                ("--trace-topic",),
                {"help": "the topic the traced clients wrote to (default RMQ_SYS_TRACE_TOPIC)"},
            ),
        ],
    ),
    ("offset", "reset"): (
        "move a group's offsets on a topic (a dry run unless --execute)",
        True,
        [
            GROUP,
            TOPIC,
            (
                ("--to",),
                {
                    "required": True,
                    "nargs": "+",
                    "metavar": "TARGET",
                    "help": "earliest | latest | offset N | shift N (+/-) | time MS|ISO-8601",
                },
            ),
            (("--broker", "-b"), {"help": "only the queues of this broker"}),
            (("--queue", "-q"), {"type": nonneg_int, "help": "only this queue id"}),
            (("--execute",), {"action": "store_true", "help": "apply the plan"}),
        ],
    ),
    ("dlq", "list"): (
        "a group's dead letters (%%DLQ%%<group>), oldest first",
        True,
        [GROUP, (("--max",), {"type": positive_int, "default": 100, "help": "default 100"})],
    ),
    ("dlq", "resend"): (
        "send a dead letter back to its group (%%RETRY%%<group>)",
        False,
        [GROUP, MSG_ID],
    ),
    ("cluster", "list"): ("brokers, roles, nodes, disk usage and TPS", True, []),
    ("cluster", "health"): (
        "each actor OK, WARN or FAIL; exit 1 on FAIL",
        True,
        [
            (("--disk-warn-ratio",), {"type": ratio, "help": "default: the broker's setting"}),
            (("--disk-fail-ratio",), {"type": ratio, "help": "default: the broker's setting"}),
        ],
    ),
    ("broker", "status"): ("a broker replica's state now", True, [BROKER]),
    ("broker", "config"): ("a broker replica's settings", True, [BROKER]),
}


def make_argument_parser() -> argparse.ArgumentParser:
    conn = connection_options()
    reading = json_option()
    parser = Parser(
        prog="rayq",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[conn],
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_start(sub, conn)
    sub.add_parser("stop", parents=[conn], help="stop every rayq actor (joins Ray)")
    sub.add_parser("status", parents=[conn, reading], help="the brokers and topics")
    groups: dict[str, Any] = {}
    for (group, name), (text, read, arguments) in ACTIONS.items():
        if group not in groups:
            parent = sub.add_parser(group, parents=[conn], help=f"{group} commands")
            groups[group] = parent.add_subparsers(dest="action", required=True, metavar="ACTION")
        parents = [conn, reading] if read else [conn]
        cmd = groups[group].add_parser(name, parents=parents, help=text, description=text)
        for flags, options in arguments:
            cmd.add_argument(*flags, **options)
    _add_send(sub, conn)
    _add_consume(sub, conn)
    console = sub.add_parser("console", parents=[conn], help="serve the web console")
    console.add_argument("--host", default="127.0.0.1", help="default 127.0.0.1")
    console.add_argument("--port", type=nonneg_int, default=8080, help="default 8080")
    return parser


def _add_start(sub: Any, conn: argparse.ArgumentParser) -> None:
    cmd = sub.add_parser(
        "start",
        parents=[conn],
        help="start a coordinator and brokers on a running Ray cluster, and exit",
    )
    cmd.add_argument(
        "--config",
        metavar="FILE",
        help="a TOML file of BrokerConfig fields (as examples/broker.toml); the --role, "
        "--min-in-sync-replicas and --no-failover given override it",
    )
    cmd.add_argument("--brokers", type=int, default=1, help="brokers to start (1..26)")
    cmd.add_argument(
        "--store-dir", default=None, help="store directory (default: $RAYQ_HOME or ./rayq-data)"
    )
    cmd.add_argument(
        "--placement",
        choices=("local", "resource"),
        default="local",
        help="local: --brokers on this node; resource: one broker per node "
        "with a rayq_broker:<name> resource",
    )
    cmd.add_argument(
        "--wait-brokers",
        type=int,
        default=0,
        help="with --placement resource: first wait for this many broker nodes to join",
    )
    cmd.add_argument(
        "--wait-timeout", type=float, default=300.0, help="seconds to wait (default 300)"
    )
    cmd.add_argument(
        "--slaves",
        type=int,
        default=0,
        help="with --placement local: slaves per broker (default 0); with "
        "resource: nodes with rayq_broker:<name>#<id> are slaves",
    )
    cmd.add_argument(
        "--role",
        choices=("ASYNC_MASTER", "SYNC_MASTER"),
        help="the masters' replication role (default: the config's, else ASYNC_MASTER)",
    )
    cmd.add_argument(
        "--min-in-sync-replicas",
        type=positive_int,
        metavar="K",
        help="with --role SYNC_MASTER: slaves that must have a send before it is "
        "acknowledged (default: the config's, else 1)",
    )
    cmd.add_argument(
        "--no-failover",
        action="store_true",
        help="never promote a slave (it then serves reads only)",
    )


def _add_send(sub: Any, conn: argparse.ArgumentParser) -> None:
    send = sub.add_parser(
        "send",
        parents=[conn],
        help="send --body, or one message per line of stdin",
        description="Send the --body, else one message per line of stdin (batched).",
    )
    send.add_argument("--topic", "-t", required=True)
    send.add_argument("--body", "-m", help="the body (UTF-8 text); default: lines of stdin")
    send.add_argument(
        "--json",
        action="store_true",
        help='stdin lines are {"body": ..., "keys": [...], "tags": ..., "properties": {...}}',
    )
    send.add_argument("--key", "-k", action="append", default=[], help="a key (repeatable)")
    send.add_argument("--tag", default=None, help="the tag of every message")
    send.add_argument(
        "--property",
        "-p",
        action="append",
        default=[],
        type=property_pair,
        metavar="K=V",
        help="a user property (repeatable)",
    )
    send.add_argument("--create", action="store_true", help="create the topic if it is unknown")
    send.add_argument(
        "--queues", type=positive_int, default=4, help="queues of a topic --create makes"
    )


def _add_consume(sub: Any, conn: argparse.ArgumentParser) -> None:
    from rayq.cli.consume import check_format

    consume = sub.add_parser(
        "consume",
        parents=[conn],
        help="print a topic's messages (kcat-style; no group, no commit by default)",
        description="Print a topic's messages: by default from the earliest, without a "
        "group and without committing, up to the end it has now.",
    )
    consume.add_argument("--topic", "-t", required=True)
    consume.add_argument(
        "--from",
        dest="start",
        type=start_position,
        default=("default", None),
        metavar="WHERE",
        help="earliest | latest | an offset | a time (ms since the epoch or ISO 8601); "
        "default: earliest, or the group's committed offsets with --group",
    )
    consume.add_argument("--count", "-n", type=positive_int, help="stop after N messages")
    consume.add_argument(
        "--follow", "-f", action="store_true", help="keep waiting for new messages (Ctrl-C ends)"
    )
    consume.add_argument("--group", "-g", help="consume as this group, and commit")
    consume.add_argument("--no-commit", action="store_true", help="with --group: commit nothing")
    out = consume.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="one JSON object per message")
    out.add_argument(
        "--format",
        type=check_format,
        help="a template of {topic} {broker} {queue_id} {queue_offset} {msg_id} {keys} "
        "{tags} {properties} {body} {store_timestamp} ...",
    )
    out.add_argument(
        "--verbose", "-v", action="store_true", help="a line of metadata before each body"
    )
