"""The ``rayq`` command: deploy, inspect, operate and stop rayq on a running Ray cluster.

    rayq start  [--config FILE] [--brokers 1] [--store-dir DIR] [--placement local|resource]
                [--wait-brokers N] [--wait-timeout S] [--slaves N]
                [--role ASYNC_MASTER|SYNC_MASTER] [--min-in-sync-replicas K]
                [--no-failover]
    rayq status | stop
    rayq topic   list | route | status | create | update | delete
    rayq group   list | progress | connections | create | update | delete
    rayq message query --topic T --key K | view --id ID | get --topic T --queue Q --offset O
    rayq offset  reset --group G --topic T --timestamp MS|ISO [--dry-run]
    rayq cluster list | health
    rayq broker  status | config --broker NAME
    rayq send    --topic T --body TEXT;   rayq consume --topic T [--count N]

Every command takes ``--address`` (default auto) and ``--namespace`` (default rayq);
every read command takes ``--json`` (one JSON document on stdout, for scripts).
Exit codes: 0 ok, 1 a rayq error (one line on stderr), 2 bad usage. ``cluster
health`` exits 1 when some actor is FAIL. ``start`` leaves the actors running
(they are detached) and exits; drivers attach with ``rayq.connect()``.
"""

from __future__ import annotations

import argparse
import datetime
import logging
import sys
from typing import Any, NoReturn

from rayq.actors.protocol.config import NAMESPACE


class _Parser(argparse.ArgumentParser):
    """argparse, with a usage error reported on one line (and exit code 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _nonneg_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _positive_int(text: str) -> int:
    value = _nonneg_int(text)
    if value == 0:
        raise argparse.ArgumentTypeError("must be >= 1, got 0")
    return value


def _ratio(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be in 0..1, got {value}")
    return value


def _timestamp_ms(text: str) -> int:
    """Milliseconds since the epoch, or an ISO 8601 time (UTC unless it says otherwise)."""
    if text.isdigit():
        return int(text)
    try:
        when = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not milliseconds since the epoch nor an ISO 8601 time: {text!r}"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return int(when.timestamp() * 1000)


def _bool(text: str) -> bool:
    if text.lower() in ("true", "1", "yes", "on"):
        return True
    if text.lower() in ("false", "0", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"not true or false: {text!r}")


def _common(json_output: bool) -> _Parser:
    common = _Parser(add_help=False)
    common.add_argument("--address", default="auto", help="Ray address (default: auto)")
    common.add_argument("--namespace", default=NAMESPACE, help="Ray namespace of rayq")
    if json_output:
        common.add_argument("--json", action="store_true", help="print JSON (for scripts)")
    return common


# (group, command) -> (help, read command?, arguments: (flags, keyword arguments)...)
_Arg = tuple[tuple[str, ...], dict[str, Any]]
_TOPIC: _Arg = (("--topic", "-t"), {"required": True, "help": "topic name"})
_GROUP: _Arg = (("--group", "-g"), {"required": True, "help": "consumer group name"})
_BROKER: _Arg = (
    ("--broker", "-b"),
    {"required": True, "help": "broker replica (<name>, or <name>#<id> for a slave)"},
)
_QUEUES: _Arg = (("--queues",), {"type": _positive_int, "help": "read and write queues"})
_PERM: _Arg = (("--perm",), {"type": _nonneg_int, "help": "4 read | 2 write (default 6)"})
_COMMANDS: dict[tuple[str, str], tuple[str, bool, list[_Arg]]] = {
    ("topic", "list"): ("every topic and the brokers serving it", True, []),
    ("topic", "route"): ("the brokers, queue counts and permissions of a topic", True, [_TOPIC]),
    ("topic", "status"): ("min/max offset and last store time per queue", True, [_TOPIC]),
    ("topic", "create"): (
        "create a topic on every live broker",
        False,
        [
            _TOPIC,
            (
                ("--queues",),
                {"type": _positive_int, "default": 4, "help": "read and write queues (default 4)"},
            ),
            _PERM,
        ],
    ),
    ("topic", "update"): (
        "change a topic's queue count or permission",
        False,
        [_TOPIC, _QUEUES, _PERM],
    ),
    ("topic", "delete"): ("delete a topic and its offsets", False, [_TOPIC]),
    ("group", "list"): ("every subscription group", True, []),
    ("group", "progress"): (
        "committed offset, max offset and lag per queue",
        True,
        [_GROUP, (("--topic", "-t"), {"help": "only this topic"})],
    ),
    ("group", "connections"): (
        "the live consumers of a group and their queues",
        True,
        [_GROUP],
    ),
    ("group", "create"): (
        "create a subscription group on every live broker",
        False,
        [
            _GROUP,
            (("--retry-max-times",), {"type": _nonneg_int, "default": 16}),
            (("--orderly",), {"action": "store_true", "help": "consume orderly"}),
            (("--disable",), {"action": "store_true", "help": "create it with consuming off"}),
        ],
    ),
    ("group", "update"): (
        "change a group's settings",
        False,
        [
            _GROUP,
            (("--consume-enable",), {"type": _bool, "help": "true or false"}),
            (("--consume-broadcast-enable",), {"type": _bool, "help": "true or false"}),
            (("--consume-message-orderly",), {"type": _bool, "help": "true or false"}),
            (("--retry-max-times",), {"type": _nonneg_int}),
        ],
    ),
    ("group", "delete"): (
        "delete a subscription group",
        False,
        [
            _GROUP,
            (
                ("--clean-offsets",),
                {"action": "store_true", "help": "delete its committed offsets too"},
            ),
        ],
    ),
    ("message", "query"): (
        "messages of a topic by key (or unique id)",
        True,
        [
            _TOPIC,
            (("--key", "-k"), {"required": True}),
            (("--max",), {"type": _positive_int, "default": 32, "help": "at most (default 32)"}),
        ],
    ),
    ("message", "view"): (
        "one message by its id",
        True,
        [
            (
                ("--id", "-i"),
                {"required": True, "dest": "msg_id", "help": "unique id or offset message id"},
            )
        ],
    ),
    ("message", "get"): (
        "the message at an offset of a queue",
        True,
        [
            _TOPIC,
            (("--queue", "-q"), {"type": _nonneg_int, "required": True}),
            (("--offset", "-o"), {"type": _nonneg_int, "required": True}),
            (("--broker", "-b"), {"help": "broker (needed when several serve the topic)"}),
        ],
    ),
    ("offset", "reset"): (
        "move a group's offsets on a topic to a time",
        True,
        [
            _GROUP,
            _TOPIC,
            (
                ("--timestamp",),
                {
                    "type": _timestamp_ms,
                    "required": True,
                    "help": "milliseconds since the epoch, or ISO 8601 (UTC)",
                },
            ),
            (("--dry-run",), {"action": "store_true", "help": "show old and new offsets only"}),
        ],
    ),
    ("cluster", "list"): ("brokers, roles, nodes, disk usage and TPS", True, []),
    ("cluster", "health"): (
        "each actor OK, WARN or FAIL; exit 1 on FAIL",
        True,
        [
            (("--disk-warn-ratio",), {"type": _ratio, "help": "default: the broker's setting"}),
            (("--disk-fail-ratio",), {"type": _ratio, "help": "default: the broker's setting"}),
        ],
    ),
    ("broker", "status"): ("a broker replica's state now", True, [_BROKER]),
    ("broker", "config"): ("a broker replica's settings", True, [_BROKER]),
}


def _add_start(sub: Any, common: argparse.ArgumentParser) -> None:
    cmd = sub.add_parser("start", parents=[common], help="start a coordinator and brokers")
    cmd.add_argument("--brokers", type=int, default=1, help="brokers to start (1..26)")
    cmd.add_argument(
        "--store-dir",
        default=None,
        help="directory for the stores (default $RAYQ_HOME or ./rayq-data)",
    )
    cmd.add_argument(
        "--config",
        default=None,
        metavar="FILE",
        help="a TOML file of BrokerConfig fields (as examples/broker.toml); the "
        "--role, --min-in-sync-replicas and --no-failover given override it",
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
        "--wait-timeout",
        type=float,
        default=300.0,
        help="seconds to wait for --wait-brokers (default 300)",
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
        default=None,
        help="the masters' replication role (default: the config's, else ASYNC_MASTER)",
    )
    cmd.add_argument(
        "--min-in-sync-replicas",
        type=int,
        default=None,
        metavar="K",
        help="with --role SYNC_MASTER: slaves that must have a send before it is "
        "acknowledged (default: the config's, else 1)",
    )
    cmd.add_argument(
        "--no-failover",
        action="store_true",
        help="never promote a slave (it then serves reads only)",
    )


def make_argument_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="rayq",
        description=__doc__.replace("``", "`"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    plain, reading = _common(False), _common(True)
    _add_start(sub, plain)
    sub.add_parser("status", parents=[plain], help="list brokers and topics")
    sub.add_parser(
        "stop", parents=[plain], help="stop every rayq actor (stores recover at the next start)"
    )
    groups: dict[str, Any] = {}
    for (group, name), (text, read, arguments) in _COMMANDS.items():
        if group not in groups:
            parent = sub.add_parser(group, help=f"{group} commands")
            groups[group] = parent.add_subparsers(dest="action", required=True, metavar="ACTION")
        cmd = groups[group].add_parser(name, parents=[reading if read else plain], help=text)
        for flags, options in arguments:
            cmd.add_argument(*flags, **options)
    send = sub.add_parser("send", parents=[plain], help="send one test message")
    send.add_argument("--topic", "-t", required=True)
    send.add_argument("--body", required=True, help="the body (UTF-8 text)")
    send.add_argument("--tags", default=None)
    send.add_argument("--keys", default="", help="comma-separated keys")
    send.add_argument(
        "--property",
        "-p",
        action="append",
        default=[],
        metavar="K=V",
        help="a user property (repeatable)",
    )
    consume = sub.add_parser("consume", parents=[reading], help="pull and print messages")
    consume.add_argument("--topic", "-t", required=True)
    consume.add_argument("--group", "-g", default="rayq_cli_consumer")
    consume.add_argument(
        "--count",
        "-n",
        type=_positive_int,
        default=1,
        help="stop once this many are printed (default 1; a whole poll is printed)",
    )
    consume.add_argument(
        "--timeout", type=float, default=10.0, help="stop after this many seconds (default 10)"
    )
    consume.add_argument(
        "--from",
        dest="start",
        choices=("first", "last"),
        default="first",
        help="where a new group starts (default first)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        args = make_argument_parser().parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error (2), already printed
        return exc.code if isinstance(exc.code, int) else 2
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    import ray

    from rayq.store.errors import RayqError

    owns_ray = not ray.is_initialized()
    what = " ".join(filter(None, [args.command, getattr(args, "action", None)]))
    try:
        if args.command == "start":
            return _start(args)
        from rayq.cluster import connect

        connect(args.namespace, address=args.address)
        if args.command in ("status", "stop"):
            return _status(args) if args.command == "status" else _stop(args)
        from rayq.cli.ops import run

        return run(args)
    except (RayqError, ConnectionError) as exc:  # ConnectionError: no Ray at --address
        message = " ".join(str(exc).split())
        print(f"rayq {what}: {message}", file=sys.stderr)
        return 1
    finally:
        if owns_ray and ray.is_initialized():
            ray.shutdown()


def _start(args: argparse.Namespace) -> int:
    import msgspec

    from rayq.actors.protocol.config import BrokerConfig, BrokerRole
    from rayq.cluster import start

    if args.wait_brokers:
        _wait_for_broker_nodes(args)
    config = BrokerConfig.from_toml(args.config) if args.config else BrokerConfig()
    overrides = {
        "broker_role": BrokerRole(args.role) if args.role else None,
        "auto_failover": False if args.no_failover else None,
        "min_in_sync_replicas": args.min_in_sync_replicas,
    }
    config = msgspec.structs.replace(
        config, **{k: v for k, v in overrides.items() if v is not None}
    )
    cluster = start(
        args.store_dir,
        args.brokers,
        namespace=args.namespace,
        address=args.address,
        placement=args.placement,
        slaves=args.slaves,
        config=config,
    )
    print(
        f"rayq running in namespace {args.namespace!r}: brokers {cluster.broker_names} "
        f"(replicas {cluster.replicas}), stores under {cluster.store_dir}"
    )
    return 0


def _status(args: argparse.Namespace) -> int:
    from rayq.actors.protocol import ClientRequest
    from rayq.transport.context import CALL_TIMEOUT_S
    from rayq.transport.ray_actors import RayTransport

    coordinator = RayTransport(args.namespace).coordinator()
    print(f"brokers: {coordinator.brokers(ClientRequest()).result(CALL_TIMEOUT_S).names}")
    print(f"topics: {coordinator.topics(ClientRequest()).result(CALL_TIMEOUT_S).names}")
    return 0


def _stop(args: argparse.Namespace) -> int:
    from rayq.actors.protocol import ClientRequest, broker_actor_name
    from rayq.actors.protocol.config import REPLICA_SEPARATOR
    from rayq.cluster import Cluster, running_actors
    from rayq.store.errors import PermissionDeniedError
    from rayq.transport.context import CALL_TIMEOUT_S
    from rayq.transport.ray_actors import RayTransport

    prefix = broker_actor_name("")
    replicas = [a[len(prefix) :] for a in running_actors(args.namespace) if a.startswith(prefix)]
    coordinator = RayTransport(args.namespace).coordinator()
    try:
        brokers = coordinator.brokers(ClientRequest()).result(CALL_TIMEOUT_S).names
    except PermissionDeniedError:  # ACL on (no credentials here): the masters' actor names
        brokers = [r for r in replicas if REPLICA_SEPARATOR not in r]
    slaves = [r for r in replicas if r not in brokers]
    Cluster(
        args.namespace,
        brokers,
        None,
        owns_ray=False,
        replicas=[*brokers, *slaves],
    ).shutdown()
    print(f"rayq stopped in namespace {args.namespace!r}")
    return 0


def _wait_for_broker_nodes(args: argparse.Namespace) -> None:
    import time

    import ray
    from rich.console import Console

    from rayq.cluster import broker_nodes
    from rayq.store.errors import BrokerUnavailableError

    ray.init(address=args.address, namespace=args.namespace, log_to_driver=False)
    deadline = time.monotonic() + args.wait_timeout
    with Console(stderr=True).status("waiting for broker nodes") as spinner:
        while len(found := broker_nodes()) < args.wait_brokers:
            if time.monotonic() > deadline:
                raise BrokerUnavailableError(
                    f"only {len(found)} of {args.wait_brokers} broker nodes joined within "
                    f"{args.wait_timeout:.0f} s: {sorted(found)}"
                )
            spinner.update(f"waiting for broker nodes: {len(found)} of {args.wait_brokers}")
            time.sleep(2)


if __name__ == "__main__":
    sys.exit(main())
