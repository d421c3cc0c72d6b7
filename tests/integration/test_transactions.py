"""Transactional messages on a Ray deployment: the real broker actor, its check timer,
producers in other processes, a broker restart.

Checks run every 0.5 s here for halves older than 0.5 s (defaults: 60 s and 6 s).
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import ray

import rayq
from rayq.actors.protocol import broker_actor_name

pytestmark = pytest.mark.integration

NAMESPACE = "test-transactions"
BROKER_OVERRIDES = {
    "transaction_timeout": 500,
    "transaction_check_interval": 500,
    "transaction_check_max": 1000,
}
POLL = rayq.ClientConfig(check_request_poll_ms=100)
DEADLINE_S = 60.0


class Listener:
    """Answers ``local`` when executing and ``check`` (changeable) when checked."""

    def __init__(self, local: Any, check: Any = rayq.TransactionStatus.UNKNOWN) -> None:
        self.local, self.check = local, check
        self.checked: list[str] = []

    def execute_local_transaction(self, msg: rayq.Message, arg: Any) -> Any:
        return self.local

    def check_local_transaction(self, msg: rayq.MessageExt) -> Any:
        self.checked.append(msg.msg_id)
        return self.check


class DiesInTransaction:
    """A listener whose process dies between the half message and its end."""

    def execute_local_transaction(self, msg: rayq.Message, arg: Any) -> Any:
        os._exit(1)

    def check_local_transaction(self, msg: rayq.MessageExt) -> Any:
        return rayq.TransactionStatus.UNKNOWN


@ray.remote(num_cpus=0, max_retries=0)
def send_and_die(namespace: str, group: str, topic: str, body: bytes) -> None:
    rayq.connect(namespace=namespace)
    producer = rayq.TransactionProducer(group, DiesInTransaction(), config=POLL)
    producer.send_in_transaction(rayq.Message(topic, body))


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def wait_for(check: Callable[[], bool], what: str, timeout: float = DEADLINE_S) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


class Reader:
    """A pull consumer from the start of a topic, collecting bodies."""

    def __init__(self, topic: str) -> None:
        first = rayq.ConsumeFromWhere.FIRST_OFFSET
        self.consumer = rayq.PullConsumer(unique("cg"), consume_from=first)
        self.consumer.subscribe(topic)
        self.consumer.start()
        self.bodies: list[bytes] = []

    def read(self, seconds: float = 0.5) -> list[bytes]:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.bodies += [m.body for m in self.consumer.poll(timeout=0.2)]
        return self.bodies

    def close(self) -> None:
        self.consumer.shutdown()


@pytest.fixture
def topic(cluster: rayq.Cluster) -> str:
    name = unique("tx")
    rayq.Admin().create_topic(name, queues=2)
    return name


def test_commit_rollback_and_checked(cluster: rayq.Cluster, topic: str) -> None:
    # each its own group: the checks of the open half go to ``unknown`` alone
    commit = rayq.TransactionProducer(
        unique("txg"), Listener(rayq.TransactionStatus.COMMIT), config=POLL
    )
    rollback = rayq.TransactionProducer(
        unique("txg"), Listener(rayq.TransactionStatus.ROLLBACK), config=POLL
    )
    later = Listener(rayq.TransactionStatus.UNKNOWN)  # checks answered UNKNOWN for now
    unknown = rayq.TransactionProducer(unique("txg"), later, config=POLL)
    reader = Reader(topic)
    try:
        assert commit.send_in_transaction(rayq.Message(topic, b"c")).local_state.value == "COMMIT"
        rollback.send_in_transaction(rayq.Message(topic, b"r"))
        result = unknown.send_in_transaction(rayq.Message(topic, b"u"))
        wait_for(lambda: reader.read(0.2) == [b"c"], "the commit")
        wait_for(lambda: len(later.checked) >= 2, "two checks of the open half")
        assert reader.read(0.5) == [b"c"]  # the half of "u", checked twice, is not visible
        later.check = rayq.TransactionStatus.COMMIT
        wait_for(lambda: sorted(reader.read(0.2)) == [b"c", b"u"], "the checked commit")
        assert result.msg_id in later.checked
        assert sorted(reader.read(2.0)) == [b"c", b"u"]  # exactly one copy each
    finally:
        reader.close()
        for p in (commit, rollback, unknown):
            p.shutdown()


def test_producer_dies_between_half_and_end(cluster: rayq.Cluster, topic: str) -> None:
    group = unique("txg")
    with pytest.raises(ray.exceptions.WorkerCrashedError):
        ray.get(send_and_die.remote(NAMESPACE, group, topic, b"orphan"), timeout=120)
    survivor = Listener(rayq.TransactionStatus.UNKNOWN, check=rayq.TransactionStatus.COMMIT)
    other = rayq.TransactionProducer(group, survivor, config=POLL)
    other.start()
    reader = Reader(topic)
    try:
        wait_for(lambda: reader.read(0.2) == [b"orphan"], "the orphan's commit by another producer")
        assert len(survivor.checked) == 1
        assert reader.read(1.5) == [b"orphan"]
    finally:
        reader.close()
        other.shutdown()


def test_broker_restart_with_open_halves(
    cluster: rayq.Cluster, topic: str, restart: Callable[[Any], None]
) -> None:
    group = unique("txg")
    listener = Listener(rayq.TransactionStatus.UNKNOWN)  # checks answered UNKNOWN for now
    producer = rayq.TransactionProducer(group, listener, config=POLL)
    reader = Reader(topic)
    try:
        sent = [producer.send_in_transaction(rayq.Message(topic, b"m%d" % i)) for i in range(5)]
        wait_for(lambda: len(set(listener.checked)) == 5, "a check of every half")
        broker = ray.get_actor(broker_actor_name("broker-a"), namespace=NAMESPACE)
        restart(broker)
        wait_for(lambda: _alive(), "the broker to restart")
        listener.checked.clear()
        listener.check = rayq.TransactionStatus.COMMIT
        expected = sorted(b"m%d" % i for i in range(5))
        wait_for(lambda: sorted(reader.read(0.2)) == expected, "the commits after the restart")
        assert sorted(reader.read(1.5)) == expected
        assert {r.msg_id for r in sent} <= set(listener.checked)
    finally:
        reader.close()
        producer.shutdown()


def _alive() -> bool:
    try:
        broker = ray.get_actor(broker_actor_name("broker-a"), namespace=NAMESPACE)
        return ray.get(broker.ready.remote(), timeout=5) == "broker-a"
    except Exception:
        return False
