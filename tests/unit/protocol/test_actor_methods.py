"""Each thin actor class defines ``__init__`` and its registry operations, nothing else.

Ray exposes every method of an actor class to every driver, ``_``-methods too, so a
helper method on an actor would be an operation outside the protocol (one that could
append, read or run anything). The actors' work lives in Ray-free services
(actors/server/), their methods are the registry's (actors/protocol/registry.py).
"""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from rayq import actors
from rayq.actors.broker import BrokerActor
from rayq.actors.data_plane import DataPlane
from rayq.actors.flusher import FlusherActor
from rayq.actors.page_reader import PageReaderActor
from rayq.actors.protocol import registry
from rayq.actors.pull_hold import PullHoldActor
from rayq.actors.server.broker_runtime import BrokerRuntime
from rayq.actors.server.endpoint import BrokerEndpoint


def _methods(cls: type) -> set[str]:
    """Everything callable the class itself defines, ``_``-prefixed included."""
    return {n for n, f in vars(cls).items() if callable(f) and n != "__init__"}


@pytest.mark.parametrize(
    ("actor", "service"),
    [
        (BrokerActor, "broker"),
        (PullHoldActor, "hold"),
        (FlusherActor, "flusher"),
        (PageReaderActor, "page_reader"),
    ],
    ids=["broker", "hold", "flusher", "page_reader"],
)
def test_an_actor_class_defines_exactly_its_registry_operations(actor: type, service: str) -> None:
    assert _methods(actor) == set(registry.operations(service))


@pytest.mark.parametrize(
    "service", ["broker", "hold", "flusher", "page_reader"], ids=lambda s: str(s)
)
def test_every_server_operation_names_its_request_and_reply(service: str) -> None:
    for op in registry.operations(service, registry.Caller.SERVER).values():
        assert op.request is None or isinstance(op.request, type), op.key
        assert op.reply is None or isinstance(op.reply, type), op.key


# The actor's lifecycle (its timers, the coordinator's watch, its exit) is the runtime's
# (actors/server/broker_runtime.py); every other operation is the endpoint's.
LIFECYCLE = {"start_services", "park", "shutdown"}
# The socket data plane's addresses and key are the shell's (actors/data_plane.py): it
# starts the socket server in the actor's process, beside the endpoint.
DATA_PLANE = {"data_endpoint"}


def test_the_broker_endpoint_serves_every_other_broker_operation() -> None:
    ops = set(registry.operations("broker"))
    assert ops >= DATA_PLANE and callable(DataPlane.endpoint)
    for name in ops - LIFECYCLE - DATA_PLANE:
        assert inspect.iscoroutinefunction(getattr(BrokerEndpoint, name, None)), name
    for name in LIFECYCLE - {"shutdown"}:
        assert inspect.iscoroutinefunction(getattr(BrokerRuntime, name, None)), name
    assert callable(BrokerRuntime.close)


# Every module that defines a Ray actor class: a shell of scheduling, timers and Ray calls.
SHELLS = ["broker", "pull_hold", "flusher", "page_reader", "coordinator", "consumer"]
MAX_SHELL_LINES = 250


@pytest.mark.parametrize("module", SHELLS)
def test_an_actor_shell_stays_thin(module: str) -> None:
    """The work lives in the Ray-free services; a shell that grows past the bound is
    taking on logic the fake and the socket server would then not share."""
    path = Path(actors.__file__).parent / f"{module}.py"
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_SHELL_LINES, f"actors/{module}.py has {lines} lines"


def test_the_shell_list_names_every_actor_class() -> None:
    """A new actor module is checked too: each module whose class is a Ray actor shell
    (``...Actor`` with an ``__init__``) is in SHELLS."""
    found = set()
    for path in Path(actors.__file__).parent.glob("*.py"):
        text = path.read_text()
        if any(line.startswith("class ") and "Actor:" in line for line in text.splitlines()):
            found.add(path.stem)
    assert found == set(SHELLS)
