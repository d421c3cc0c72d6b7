"""What every client (producer, consumers, admin, readers) shares: routes over a transport.

A ``ClientContext`` holds the client's ``Transport`` (``RayTransport`` unless one is
given, e.g. ``rayq.testing.FakeTransport`` in tests) and caches topic routes,
refreshed every ``route_refresh_interval_ms`` and on failure. ``broker_calls`` is
the one place that calls several brokers at once.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from rayq.actors.protocol import ClientRequest, MessageQueue, RouteRequest, TopicRoute
from rayq.actors.protocol.auth import Signer
from rayq.actors.protocol.config import ClientConfig
from rayq.store.errors import (
    BrokerUnavailableError,
    ConfigError,
    RayqError,
    TopicNotFoundError,
)
from rayq.transport.base import BrokerClient, CoordinatorClient, HoldClient, Reply, Transport
from rayq.transport.namespace import current_namespace

logger = logging.getLogger(__name__)

DEFAULT_QUEUES_FOR_NEW_TOPIC = 4
CALL_TIMEOUT_S = 30.0
K = TypeVar("K")
T = TypeVar("T")
A = TypeVar("A")


def bind(ask: Callable[[BrokerClient, A], Reply[T]], arg: A) -> Callable[[BrokerClient], Reply[T]]:
    """``ask`` with its second argument fixed now: for ``broker_calls`` built in a loop,
    where a lambda would see the loop variable's last value (``lambda b, t=t: ...``
    does the same, but its type cannot be inferred)."""
    return lambda b: ask(b, arg)


class ClientContext:
    """Routes and the transport for one client, in one namespace."""

    def __init__(
        self,
        config: ClientConfig | None = None,
        namespace: str | None = None,
        transport: Transport | None = None,
        client_id: str | None = None,
    ) -> None:
        if config is not None and not isinstance(config, ClientConfig):
            raise ConfigError(f"config must be a rayq.ClientConfig, got {type(config).__name__}")
        self.config = config or ClientConfig()
        # The caller's identity in every request (logs now, ACL later).
        self.client_id = client_id or new_client_id()
        if transport is None:
            from rayq.transport.choice import make_transport

            transport = make_transport(self.config.transport, namespace or current_namespace())
        self.transport = transport
        self.namespace = transport.namespace
        creds = self.config.credentials
        self._signer = Signer(creds) if creds is not None else None  # ACL: signs requests
        self._routes: dict[str, tuple[TopicRoute | None, float]] = {}

    @property
    def coordinator(self) -> CoordinatorClient:
        """The coordinator's client, its requests signed as the brokers' are (ACL)."""
        client = self.transport.coordinator()
        if self._signer is None:
            return client
        return CoordinatorClient(self._signer.wrap(client._invoke))

    @property
    def timeout_s(self) -> float:
        return self.config.send_timeout_ms / 1000

    # ------------------------------------------------------------- routes
    def route(self, topic: str, *, refresh: bool = False) -> TopicRoute | None:
        cached = self._routes.get(topic)
        max_age = self.config.route_refresh_interval_ms / 1000
        if refresh or cached is None or time.monotonic() - cached[1] > max_age:
            req = RouteRequest(topic=topic, client_id=self.client_id)
            route = self.coordinator.route(req).result(self.timeout_s).route
            self._routes[topic] = (route, time.monotonic())
            return route
        return cached[0]

    def brokers(self) -> list[str]:
        req = ClientRequest(client_id=self.client_id)
        return self.coordinator.brokers(req).result(self.timeout_s).names

    def write_queues(self, topic: str, *, refresh: bool = False) -> list[MessageQueue]:
        """Queues a producer may send to; for an unknown topic, the queues that sending
        would auto-create on every live broker (the broker refuses if it may not)."""
        route = self.route(topic, refresh=refresh)
        if route is None:
            return [
                MessageQueue(topic, b, q)
                for b in self.brokers()
                for q in range(DEFAULT_QUEUES_FOR_NEW_TOPIC)
            ]
        return route.write_queues()

    def read_queues(self, topic: str, *, refresh: bool = False) -> list[MessageQueue]:
        route = self.route(topic, refresh=refresh)
        if route is None:
            raise TopicNotFoundError(f"topic {topic!r} does not exist on any broker", topic=topic)
        return route.read_queues()

    # ------------------------------------------------------------ brokers
    def broker(self, broker_name: str) -> BrokerClient:
        client = self.transport.broker(broker_name)
        if self._signer is None:
            return client
        return BrokerClient(self._signer.wrap(client._invoke))

    def hold(self, broker_name: str) -> HoldClient:
        client = self.transport.hold(broker_name)
        if self._signer is None:
            return client
        return HoldClient(self._signer.wrap(client._invoke))

    def forget(self, broker_name: str) -> None:
        """Drop cached handles and routes after a failure (looked up again next time)."""
        self.transport.forget(broker_name)
        self._routes.clear()

    def broker_calls(
        self,
        calls: Mapping[K, Callable[[BrokerClient], Reply[T]]],
        timeout_s: float = CALL_TIMEOUT_S,
    ) -> dict[K, T]:
        """Call several brokers at once: ``calls`` maps a key whose first item (or the key
        itself, a str) is a broker name to what to ask that broker. All calls are in
        flight together; BrokerUnavailableError names the broker that did not answer
        (its handle is forgotten); a RayqError a broker raised comes back as itself.
        A call whose socket connection was lost under it (the broker's process ended, or
        its node was removed, while the connection looked open) is sent once more, to the
        replica that serves the broker now, as a Ray call to a restarting actor waits."""
        try:
            return self._broker_calls(calls, timeout_s)
        except BrokerUnavailableError as exc:
            if not exc.details.get("connection_lost"):
                raise
            return self._broker_calls(calls, timeout_s)

    def _broker_calls(
        self,
        calls: Mapping[K, Callable[[BrokerClient], Reply[T]]],
        timeout_s: float,
    ) -> dict[K, T]:
        replies: dict[K, tuple[str, Reply[T]]] = {}
        for key, ask in calls.items():
            name = key if isinstance(key, str) else key[0]  # type: ignore[index]
            try:
                replies[key] = (name, ask(self.broker(name)))
            except BrokerUnavailableError as exc:
                raise _unavailable(name, exc) from None
        out: dict[K, T] = {}
        for key, (name, reply) in replies.items():
            try:
                out[key] = reply.result(timeout_s)
            except BrokerUnavailableError as exc:
                self.forget(name)
                raise _unavailable(name, exc) from None
        return out

    async def broker_calls_async(
        self,
        calls: Mapping[K, Callable[[BrokerClient], Reply[T]]],
        timeout_s: float = CALL_TIMEOUT_S,
        *,
        return_exceptions: bool = False,
    ) -> dict[K, Any]:
        """``broker_calls`` for async code (the push consumer's service); with
        ``return_exceptions`` a broker's error is its answer instead of being raised,
        also when the broker cannot even be looked up (it restarts, its node is gone)."""
        import asyncio

        keys = list(calls)
        names = [k if isinstance(k, str) else k[0] for k in keys]  # type: ignore[index]
        waits: list[Any] = []
        for key, name in zip(keys, names, strict=True):
            try:
                waits.append(calls[key](self.broker(name)).wait())
            except BrokerUnavailableError as exc:
                waits.append(_failed(exc))
        got = await asyncio.wait_for(asyncio.gather(*waits, return_exceptions=True), timeout_s)
        for name, value in zip(names, got, strict=True):
            if isinstance(value, BrokerUnavailableError):
                self.forget(name)
            if isinstance(value, BaseException) and not return_exceptions:
                raise (
                    _unavailable(name, value)
                    if isinstance(value, BrokerUnavailableError)
                    else value
                )
        return dict(zip(keys, got, strict=True))


async def _failed(exc: BaseException) -> Any:
    raise exc


def new_client_id() -> str:
    """``<host>@<pid>@<random>``: unique per client instance."""
    return f"{socket.gethostname()}@{os.getpid()}@{uuid.uuid4().hex[:8]}"


def _unavailable(broker: str, err: BaseException) -> BrokerUnavailableError:
    lost = isinstance(err, BrokerUnavailableError) and err.details.get("connection_lost", False)
    return BrokerUnavailableError(
        f"broker {broker!r} is unavailable: {err}", broker=broker, connection_lost=lost
    )


__all__ = ["CALL_TIMEOUT_S", "ClientContext", "RayqError"]
