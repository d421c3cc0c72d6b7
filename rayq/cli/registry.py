"""Which function runs each ``rayq`` command, and the module that holds it.

A command module registers its functions with ``@command(group, action)``; ``handler``
imports only the module of the command being run, so a call pays for nothing else.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from typing import Final

from rayq.cli.session import Session

Handler = Callable[[Session, argparse.Namespace], int]
_HANDLERS: dict[tuple[str, str | None], Handler] = {}
MODULES: Final[dict[str, str]] = {
    "topic": "rayq.cli.topics",
    "group": "rayq.cli.topics",
    "message": "rayq.cli.messages",
    "offset": "rayq.cli.messages",
    "dlq": "rayq.cli.messages",
    "cluster": "rayq.cli.cluster",
    "broker": "rayq.cli.cluster",
    "status": "rayq.cli.cluster",
    "send": "rayq.cli.send",
    "consume": "rayq.cli.consume",
    "start": "rayq.cli.deploy",
    "stop": "rayq.cli.deploy",
    "console": "rayq.cli.deploy",
}


def command(group: str, action: str | None = None) -> Callable[[Handler], Handler]:
    """Register the decorated function as ``rayq <group> [<action>]``."""

    def register(fn: Handler) -> Handler:
        _HANDLERS[group, action] = fn
        return fn

    return register


def handler(group: str, action: str | None) -> Handler:
    """The function of ``rayq <group> [<action>]`` (importing its module)."""
    importlib.import_module(MODULES[group])
    return _HANDLERS[group, action]
