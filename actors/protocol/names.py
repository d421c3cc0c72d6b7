"""Names of the server actors in their Ray namespace (one place for every name)."""

from __future__ import annotations

COORDINATOR_NAME = "rayq-coordinator"


BROKER_ACTOR_PREFIX = "rayq-broker-"


CONSUMER_ACTOR_PREFIX = "rayq-consumer-"


def broker_actor_name(broker_name: str) -> str:
    return f"{BROKER_ACTOR_PREFIX}{broker_name}"


def flusher_actor_name(broker_name: str) -> str:
    return f"rayq-flusher-{broker_name}"


def hold_actor_name(broker_name: str) -> str:
    return f"rayq-pullhold-{broker_name}"


PAGE_READER_ACTOR_PREFIX = "rayq-reader-"


PAGE_READERS = 2  # per replica: the cores a node gives one Spark scan's page building


def page_reader_actor_name(broker_name: str, index: int) -> str:
    """A replica's page reader ``index`` (actors/page_reader.py)."""
    return f"{PAGE_READER_ACTOR_PREFIX}{broker_name}-{index}"


def replica_actor_names(broker_name: str) -> list[str]:
    """Every actor of one replica: broker, flusher, hold service, page readers."""
    return [
        broker_actor_name(broker_name),
        flusher_actor_name(broker_name),
        hold_actor_name(broker_name),
        *(page_reader_actor_name(broker_name, i) for i in range(PAGE_READERS)),
    ]


def consumer_actor_name(client_id: str) -> str:
    return f"{CONSUMER_ACTOR_PREFIX}{client_id}"
