"""Argument types and the options every ``rayq`` command shares.

The shared options (how to reach a deployment) are added to the top parser, to each
command group's parser and to each action's parser, all with ``default=SUPPRESS``: an
option given at any of those levels is kept, and ``fill_defaults`` sets the rest
afterwards. So ``rayq --url U topic list``, ``rayq topic --url U list`` and ``rayq topic
list --url U`` parse alike (argparse's ``parents`` with suppressed defaults, as pip
and the AWS CLI share options).
"""

from __future__ import annotations

import argparse
import datetime
from typing import Any, NoReturn

NAMESPACE = "rayq"  # rayq.actors.protocol.config.NAMESPACE, without importing it here

# dest -> default, for the options of CONNECTION (None: resolved from the environment)
_DEFAULTS: dict[str, Any] = {
    "url": None,
    "key_file": None,
    "access_key": None,
    "secret_key": None,
    "address": None,
    "namespace": NAMESPACE,
    "json": False,
}


class Parser(argparse.ArgumentParser):
    """argparse, with a usage error reported on one line (and exit code 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def connection_options() -> Parser:
    """A parent parser with the options that say how to reach a deployment."""
    common = Parser(add_help=False, argument_default=argparse.SUPPRESS)
    group = common.add_argument_group("connection (before or after the command)")
    group.add_argument(
        "--url",
        metavar="rayq://HOST:PORT",
        help="the deployment (default: $RAYQ_URL, else the rayq.url file that `rayq start` "
        "wrote in $RAYQ_HOME or ./rayq-data)",
    )
    group.add_argument(
        "--key-file",
        metavar="FILE",
        help="file holding the deployment key (default: $RAYQ_KEY holds the key itself, "
        "else the rayq.key file next to rayq.url)",
    )
    group.add_argument(
        "--access-key", metavar="AK", help="ACL access key (default: $RAYQ_ACCESS_KEY)"
    )
    group.add_argument(
        "--secret-key", metavar="SK", help="ACL secret key (default: $RAYQ_SECRET_KEY)"
    )
    group.add_argument(
        "--address",
        metavar="HOST:PORT",
        help="Ray address, for start/stop (and to join Ray when no rayq:// URL is known); "
        "default auto",
    )
    group.add_argument("--namespace", metavar="NS", help="Ray namespace of rayq (default rayq)")
    return common


def json_option() -> Parser:
    """A parent parser with ``--json`` (read commands)."""
    parent = Parser(add_help=False, argument_default=argparse.SUPPRESS)
    parent.add_argument("--json", action="store_true", help="print JSON (for scripts)")
    return parent


def fill_defaults(args: argparse.Namespace) -> argparse.Namespace:
    """Set the shared options nobody gave to their defaults."""
    for name, value in _DEFAULTS.items():
        if not hasattr(args, name):
            setattr(args, name, value)
    return args


# ------------------------------------------------------------------ types


def nonneg_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def positive_int(text: str) -> int:
    value = nonneg_int(text)
    if value == 0:
        raise argparse.ArgumentTypeError("must be >= 1, got 0")
    return value


def signed_int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None


def ratio(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be in 0..1, got {value}")
    return value


def timestamp_ms(text: str) -> int:
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


def boolean(text: str) -> bool:
    if text.lower() in ("true", "1", "yes", "on"):
        return True
    if text.lower() in ("false", "0", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"not true or false: {text!r}")


def property_pair(text: str) -> tuple[str, str]:
    """``k=v`` (a user property)."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"a property is KEY=VALUE, got {text!r}")
    return key, value


# (start, value): ``--from earliest|latest|<offset>|<time>``
START_WORDS = ("earliest", "latest")


def start_position(text: str) -> tuple[str, int | None]:
    """``--from``: earliest, latest, a queue offset (digits, below 10**12) or a time
    (ms since the epoch, 10**12 and up, or ISO 8601)."""
    if text in START_WORDS:
        return text, None
    if text.isdigit():
        value = int(text)
        return ("time", value) if value >= 10**12 else ("offset", value)
    try:
        return "time", timestamp_ms(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"--from takes earliest, latest, an offset, ms since the epoch or an ISO 8601 "
            f"time, got {text!r}"
        ) from None
