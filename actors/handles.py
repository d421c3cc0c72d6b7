"""Typed views of the Ray actor handles that server actors call one another through.

A Ray ``ActorHandle`` exposes each method ``m`` as ``handle.m.remote(...)``, which
returns an awaitable ``ObjectRef``. These Protocols name the methods one server actor
calls on another (the coordinator on brokers and Consumer actors, failover on broker
replicas), so a type checker follows every call; ``as_broker``/``as_consumer`` type a
handle found by name.

The coordinator's process holds the deployment's server key (``use_deployment_key``,
set by the coordinator actor): ``as_broker(handle, name)`` there signs the broker's
server operations (protocol/server_key.py ``Signed``), and the replicas it spawns on
failover and rejoin get that key (``deployment_key``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, Generic, Protocol, TypeVar, cast

from rayq.actors.protocol import BrokerInfo, MessageQueue
from rayq.actors.protocol.config import BrokerConfig
from rayq.actors.protocol.server_key import ServerKey, Signed

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class Remote0(Protocol, Generic[T_co]):
    """An actor method without arguments."""

    def remote(self) -> Awaitable[T_co]: ...


class RemoteQueues(Protocol):
    """A Consumer actor's ``assign``/``revoke``: (generation, queues)."""

    def remote(self, generation: int, queues: list[MessageQueue]) -> Awaitable[None]: ...


class BrokerHandle(Protocol):
    """A broker replica's actor, as the coordinator and failover call it."""

    @property
    def park(self) -> Remote0[None]: ...
    @property
    def start_services(self) -> Remote0[Any]: ...
    @property
    def broker_info(self) -> Remote0[BrokerInfo]: ...
    @property
    def broker_config(self) -> Remote0[BrokerConfig]: ...
    @property
    def ready(self) -> Remote0[str]: ...
    @property
    def shutdown(self) -> Remote0[Any]: ...


class ConsumerHandle(Protocol):
    """A push consumer's Consumer actor, as the coordinator calls it."""

    @property
    def park(self) -> Remote0[None]: ...
    @property
    def rejoin(self) -> Remote0[bool]: ...
    @property
    def assign(self) -> RemoteQueues: ...
    @property
    def revoke(self) -> RemoteQueues: ...


_KEY: list[ServerKey] = []  # this process's deployment key (the coordinator's), if any


def use_deployment_key(key: ServerKey) -> None:
    """This process (a server actor's) acts for the deployment of ``key``."""
    _KEY[:] = [key]


def deployment_key() -> ServerKey:
    """This process's deployment key; RuntimeError outside a server actor."""
    if not _KEY:
        raise RuntimeError("no server key in this process: only server actors spawn replicas")
    return _KEY[0]


def as_broker(handle: object, name: str | None = None) -> BrokerHandle:
    """``handle`` typed; with the actor's ``name``, in a process holding the deployment
    key, its server operations are signed."""
    if name is not None and _KEY:
        return cast(BrokerHandle, Signed(handle, _KEY[0], "broker", name))
    return cast(BrokerHandle, handle)


def as_consumer(handle: object) -> ConsumerHandle:
    return cast(ConsumerHandle, handle)


async def within(call: Awaitable[T], timeout_s: float) -> T:
    """One actor call, bounded by ``timeout_s``."""
    return await asyncio.wait_for(call, timeout_s)
