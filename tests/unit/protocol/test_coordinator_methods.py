"""The coordinator's and the Consumer actor's classes serve exactly their registry
operations: Ray lets any driver call any method of an actor class, ``_``-methods
included, so a helper method would be an operation nobody declared."""

from __future__ import annotations

import pytest

from rayq.actors.consumer import ConsumerActor
from rayq.actors.coordinator import CoordinatorActor
from rayq.actors.protocol import registry


def _methods(cls: type) -> set[str]:
    """Everything callable that the class itself defines, but its constructor."""
    return {n for n, f in vars(cls).items() if callable(f) and n != "__init__"}


@pytest.mark.parametrize(
    ("actor", "service"), [(CoordinatorActor, "coordinator"), (ConsumerActor, "consumer")]
)
def test_actor_methods_are_its_registry_operations(actor: type, service: str) -> None:
    assert _methods(actor) == set(registry.operations(service))


def test_coordinator_server_operations_are_registered_for_servers_only() -> None:
    server = registry.operations("coordinator", registry.Caller.SERVER)
    assert set(server) == {"register_broker", "unregister_broker", "ready", "bootstrap"}
    assert not set(server) & set(registry.operations("coordinator", registry.Caller.CLIENT))
