"""What every client (producer, consumers, admin) shares: routes, broker handles, calls.

A ``ClientContext`` finds the coordinator in the Ray namespace, caches topic routes
(refreshed every ``route_refresh_interval_ms`` and on failure) and broker and
pull-hold handles by name, and turns what a remote call raised into rayq errors:
the RayqError an actor raised comes back as itself, a dead or unreachable actor
as ``BrokerUnavailableError``.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import ray

from rayq.actors.config import ClientConfig
from rayq.actors.protocol import (
    COORDINATOR_NAME,
    MessageQueue,
    TopicRoute,
    broker_actor_name,
    hold_actor_name,
)
from rayq.cluster import current_namespace
from rayq.store.errors import BrokerUnavailableError, RayqError, TopicNotFoundError

logger = logging.getLogger(__name__)

DEFAULT_QUEUES_FOR_NEW_TOPIC = 4


def unwrap(exc: BaseException) -> BaseException:
    """The rayq error an actor raised, or BrokerUnavailableError for a lost actor."""
    if isinstance(exc, ray.exceptions.RayTaskError):
        cause = exc.cause if hasattr(exc, "cause") else None
        if isinstance(cause, RayqError):
            return cause
    if isinstance(exc, RayqError):
        return exc
    if isinstance(exc, ray.exceptions.RayActorError | ray.exceptions.ActorUnavailableError):
        return BrokerUnavailableError(f"a broker actor is not reachable: {exc}")
    if isinstance(exc, ray.exceptions.GetTimeoutError | TimeoutError):
        return BrokerUnavailableError(f"a broker did not answer in time: {exc}")
    return exc


def call(ref: Any, timeout_s: float | None = None) -> Any:
    """``ray.get`` with rayq errors."""
    try:
        return ray.get(ref, timeout=timeout_s)
    except Exception as exc:
        raise unwrap(exc) from None


class ClientContext:
    """Routes and handles for one client, in one Ray namespace."""

    def __init__(self, config: ClientConfig | None = None, namespace: str | None = None) -> None:
        self.config = config or ClientConfig()
        self.namespace = namespace or current_namespace()
        if not ray.is_initialized():
            raise BrokerUnavailableError(
                "Ray is not initialized: call rayq.start() (embedded) or rayq.connect() first"
            )
        try:
            self.coordinator = ray.get_actor(COORDINATOR_NAME, namespace=self.namespace)
        except ValueError:
            raise BrokerUnavailableError(
                f"no rayq deployment in Ray namespace {self.namespace!r}: "
                "start one with rayq.start()"
            ) from None
        self._routes: dict[str, tuple[TopicRoute | None, float]] = {}
        self._brokers: dict[str, Any] = {}
        self._holds: dict[str, Any] = {}

    # ------------------------------------------------------------- routes
    def route(self, topic: str, *, refresh: bool = False) -> TopicRoute | None:
        cached = self._routes.get(topic)
        max_age = self.config.route_refresh_interval_ms / 1000
        if refresh or cached is None or time.monotonic() - cached[1] > max_age:
            route = call(self.coordinator.route.remote(topic), self.config.send_timeout_ms / 1000)
            self._routes[topic] = (route, time.monotonic())
            return route
        return cached[0]

    def brokers(self) -> list[str]:
        return call(self.coordinator.brokers.remote(), self.config.send_timeout_ms / 1000)

    def write_queues(self, topic: str, *, refresh: bool = False) -> list[MessageQueue]:
        """Queues a producer may send to; for an unknown topic, the queues that sending
        would auto-create on every live broker (the broker refuses if it may not)."""
        route = self.route(topic, refresh=refresh)
        if route is None:
            return [MessageQueue(topic, b, q) for b in self.brokers()
                    for q in range(DEFAULT_QUEUES_FOR_NEW_TOPIC)]  # fmt: skip
        return route.write_queues()

    def read_queues(self, topic: str, *, refresh: bool = False) -> list[MessageQueue]:
        route = self.route(topic, refresh=refresh)
        if route is None:
            raise TopicNotFoundError(f"topic {topic!r} does not exist on any broker", topic=topic)
        return route.read_queues()

    # ------------------------------------------------------------ handles
    def broker(self, broker_name: str) -> Any:
        handle = self._brokers.get(broker_name)
        if handle is None:
            handle = self._brokers[broker_name] = self._actor(broker_actor_name(broker_name))
        return handle

    def hold(self, broker_name: str) -> Any:
        handle = self._holds.get(broker_name)
        if handle is None:
            handle = self._holds[broker_name] = self._actor(hold_actor_name(broker_name))
        return handle

    def forget(self, broker_name: str) -> None:
        """Drop cached handles and routes after a failure (looked up again next time)."""
        self._brokers.pop(broker_name, None)
        self._holds.pop(broker_name, None)
        self._routes.clear()

    def _actor(self, name: str) -> Any:
        try:
            return ray.get_actor(name, namespace=self.namespace)
        except ValueError:
            raise BrokerUnavailableError(f"actor {name} is not running") from None
