"""The ``rayq`` command: ``main(argv) -> int`` parses, connects and runs one command.

    rayq [--url rayq://HOST:PORT] [--key-file F] [--access-key AK --secret-key SK]
         COMMAND [ACTION] [options]

    rayq topic   list | route | status | create | update | delete
    rayq group   list | progress | connections | create | update | delete
    rayq message query | view | get | trace
    rayq offset  reset -g G -t T --to earliest|latest|offset N|shift N|time T [--execute]
    rayq dlq     list -g G | resend -g G --id ID
    rayq cluster list | health;   rayq broker status | config -b NAME;   rayq status
    rayq send -t T [--body TEXT | < lines] [--json] [--key K] [--tag T] [-p k=v] [--create]
    rayq consume -t T [--from earliest|latest|OFFSET|TIME] [-n N] [--follow] [--group G]
    rayq start [--config FILE] [...];  rayq stop;  rayq console [--host H] [--port P]

Exit codes: 0 ok, 1 a rayq error (an unknown topic or group included; one line on
stderr), 2 bad usage. ``cluster health`` exits 1 when some actor is FAIL.

Only ``start`` and ``stop`` import Ray (they place or end actors); every other command
talks to the deployment over its socket (``rayq.cli.session``), and imports only the
module that holds it (``rayq.cli.registry``).
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import TYPE_CHECKING

from rayq.cli.args import fill_defaults
from rayq.cli.parser import make_argument_parser
from rayq.cli.session import Session
from rayq.store.errors import RayqError

if TYPE_CHECKING:
    from rayq.transport.base import Transport


def main(argv: list[str] | None = None, *, transport: Transport | None = None) -> int:
    """Run ``rayq <argv>``; the exit code. ``transport``: reach the deployment over it
    (a test's ``rayq.testing.FakeTransport``) instead of connecting."""
    parser = make_argument_parser()
    try:
        args = fill_defaults(parser.parse_args(argv))
        _check_usage(parser, args)
    except SystemExit as exc:  # --help (0) or a usage error (2), already printed
        return exc.code if isinstance(exc.code, int) else 2
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    from rayq.cli.registry import handler

    what = " ".join(filter(None, [args.command, getattr(args, "action", None)]))
    session = Session(args, transport)
    joined_before = _in_ray()
    try:
        return handler(args.command, getattr(args, "action", None))(session, args)
    except RayqError as exc:
        message = " ".join(str(exc).split())
        print(f"rayq {what}: {message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"rayq {what}: interrupted", file=sys.stderr)
        return 130
    finally:
        if not joined_before and _in_ray():  # a command joined Ray (start, stop, --address)
            sys.modules["ray"].shutdown()


def _check_usage(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Usage errors argparse cannot see (exit code 2, one line)."""
    if args.command == "offset":
        from rayq.cli.messages import reset_target

        try:
            args.to = reset_target(args.to)
        except argparse.ArgumentTypeError as exc:
            parser.error(f"argument --to: {exc}")
    if args.command == "consume" and args.no_commit and args.group is None:
        parser.error("--no-commit goes with --group (without a group nothing is committed)")
    if args.command == "send" and args.body is not None and args.json:
        parser.error("--json reads stdin lines as JSON; it does not go with --body")


def _in_ray() -> bool:
    """This process is a Ray driver now (never imports Ray to find out)."""
    ray = sys.modules.get("ray")
    return ray is not None and bool(ray.is_initialized())


if __name__ == "__main__":
    sys.exit(main())
