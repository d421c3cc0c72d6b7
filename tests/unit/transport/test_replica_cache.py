"""``RayTransport``'s choice of replica (no Ray: actor lookups and the coordinator are
fakes). While a master is lost the coordinator names a slave to read from; once the
master is back every call must reach the master again, whatever order client threads
looked things up in. A client is cached by the replica it calls, so a lookup that
raced with the master's return cannot leave a slave's client under the master's name
(which sent every later send to the slave: "is a SLAVE: it takes no sends")."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from rayq.actors.protocol import DataEndpointRequest, ReadReplicaReply
from rayq.actors.protocol.names import broker_actor_name
from rayq.transport.ray_actors import RayTransport


class Handle:
    """A fake actor handle: records which actor each call reached."""

    def __init__(self, name: str, calls: list[str]) -> None:
        self.name, self.calls = name, calls

    def __getattr__(self, method: str) -> Any:
        handle = self

        class Method:
            @staticmethod
            def remote(*args: Any) -> str:
                handle.calls.append(handle.name)
                return f"ref:{handle.name}"

        return Method


class Reply:
    def __init__(self, replica: str) -> None:
        self.replica = replica

    def result(self, timeout_s: float | None = None) -> ReadReplicaReply:
        return ReadReplicaReply(replica=self.replica)


class Coordinator:
    """Answers ``read_replica`` with ``serving`` (what the test sets)."""

    def __init__(self) -> None:
        self.serving = "broker-a"

    def read_replica(self, req: Any) -> Reply:
        return Reply(self.serving)


def transport(on_lookup: Callable[[str], None] = lambda name: None) -> tuple[Any, list[str]]:
    t = RayTransport.__new__(RayTransport)  # no Ray: the fields __init__ would set
    t.namespace = "ns"
    t._coordinator = Coordinator()
    t._brokers, t._holds, t._replicas = {}, {}, {}
    calls: list[str] = []

    def actor(name: str) -> Handle:
        on_lookup(name)
        return Handle(name, calls)

    t._actor = actor
    return t, calls


def endpoint_call(t: Any) -> None:
    t.broker("broker-a").data_endpoint(DataEndpointRequest())


def test_reads_go_to_the_slave_while_the_master_is_lost_and_back_to_the_master() -> None:
    t, calls = transport()
    endpoint_call(t)
    t._coordinator.serving = "broker-a#1"
    t.forget("broker-a")  # a call to the master failed
    endpoint_call(t)
    t._coordinator.serving = "broker-a"
    endpoint_call(t)  # still the slave: the master is asked for again a few seconds on
    name, _ = t._replicas["broker-a"]
    t._replicas["broker-a"] = (name, time.monotonic() - 1)  # ... and that time has come
    endpoint_call(t)
    assert calls == [
        broker_actor_name(n) for n in ("broker-a", "broker-a#1", "broker-a#1", "broker-a")
    ]


def test_a_lookup_racing_with_the_masters_return_leaves_no_slave_under_the_masters_name() -> None:
    slave = broker_actor_name("broker-a#1")
    t: Any = None

    def master_back_meanwhile(name: str) -> None:
        """While one thread looks up the slave's actor, another finds the master back."""
        if name == slave and t._coordinator.serving != "broker-a":
            t._coordinator.serving = "broker-a"
            t.forget("broker-a")
            assert t.replica_of("broker-a") == "broker-a"

    t, calls = transport(master_back_meanwhile)
    t._coordinator.serving = "broker-a#1"
    endpoint_call(t)  # this thread goes on with the slave it was told of: one call there
    endpoint_call(t)
    endpoint_call(t)
    assert calls == [slave, broker_actor_name("broker-a"), broker_actor_name("broker-a")]
    assert t.broker_replica("broker-a#1") is not t.broker("broker-a")
