"""The pull consumer's share of a group's queues, and its life cycle, against the
in-process fake cluster (no Ray): allocation strategies, broadcasting with local
offsets, the ``MessageQueueListener``, and RocketMQ's ``ServiceState``."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

import rayq
from rayq.actors.protocol import ConsumeFromWhere, MessageModel, MessageQueue
from rayq.actors.protocol.config import ClientConfig
from rayq.actors.server.allocation import STRATEGIES, AllocateStrategy
from rayq.consumer.pull import PullConsumer
from rayq.service_state import ServiceState
from rayq.store.errors import BrokerUnavailableError, ClientError, ClosedError, ConfigError
from rayq.store.message import MessageExt
from rayq.testing import FakeCluster, FakeTransport, poll_until

TOPIC = "orders"
FAST = ClientConfig(rebalance_interval_ms=1, auto_commit_interval_ms=1_000_000)
QUEUES = [MessageQueue(TOPIC, "broker-a", q) for q in range(4)]


@pytest.fixture
def cluster_options() -> dict[str, Any]:
    return {"under": "brokers", "topics": {TOPIC: 4}}


def consumer(cluster: FakeCluster, **kwargs: Any) -> PullConsumer:
    kwargs.setdefault("config", FAST)
    return PullConsumer(
        "cg", consume_from=ConsumeFromWhere.FIRST_OFFSET, transport=FakeTransport(cluster), **kwargs
    )


def send(cluster: FakeCluster, n: int, prefix: str = "m") -> list[bytes]:
    bodies = [f"{prefix}{i}".encode() for i in range(n)]
    with rayq.Producer("pg", transport=FakeTransport(cluster)) as producer:
        for b in bodies:
            producer.send(rayq.Message(TOPIC, b))
    return bodies


def rebalance(*consumers: PullConsumer) -> None:
    """Past ``rebalance_interval_ms`` (1 ms), each poll takes the consumer's current share
    (call it while there is nothing to read: what a poll returns is dropped)."""
    time.sleep(0.01)
    for c in consumers:
        assert c.poll(0) == []


# ------------------------------------------------------------------ service state
def test_start_runs_once_and_the_state_follows_rocketmq(cluster: FakeCluster) -> None:
    c = consumer(cluster)
    c.subscribe(TOPIC)
    assert c.service_state is ServiceState.CREATE_JUST
    c.start()
    assert c.service_state is ServiceState.RUNNING
    with pytest.raises(ClientError, match="start\\(\\) may be called once"):
        c.start()
    assert c.service_state is ServiceState.RUNNING  # the refused start changed nothing
    c.shutdown()
    assert c.service_state is ServiceState.SHUTDOWN_ALREADY
    with pytest.raises(ClosedError):
        c.start()
    c.shutdown()  # again: nothing happens


def test_a_failed_start_leaves_start_failed_and_no_second_try(cluster: FakeCluster) -> None:
    c = consumer(cluster)
    c.subscribe(TOPIC)
    cluster.fail_next("broker-a", "query_offsets", BrokerUnavailableError, times=10)
    with pytest.raises(BrokerUnavailableError):
        c.start()
    assert c.service_state is ServiceState.START_FAILED
    with pytest.raises(ClientError, match="START_FAILED"):
        c.start()
    with pytest.raises(ClientError, match="not started"):
        c.poll(0)
    c.shutdown()
    assert c.service_state is ServiceState.SHUTDOWN_ALREADY


# ---------------------------------------------------------- allocation strategies
@pytest.mark.parametrize(
    "strategy",
    [
        AllocateStrategy.AVERAGELY,
        AllocateStrategy.AVERAGELY_BY_CIRCLE,
        AllocateStrategy.CONSISTENT_HASH,
    ],
)
def test_a_group_splits_queues_by_its_allocate_strategy(
    cluster: FakeCluster, strategy: AllocateStrategy
) -> None:
    c1, c2 = (consumer(cluster, allocate_strategy=strategy) for _ in range(2))
    for c in (c1, c2):
        c.subscribe(TOPIC)
        c.start()
    rebalance(c1, c2)
    expected = STRATEGIES[strategy](QUEUES, [c1.client_id, c2.client_id])
    assert c1.assignment() == expected[c1.client_id]
    assert c2.assignment() == expected[c2.client_id]
    bodies = send(cluster, 12)
    got: list[MessageExt] = []
    deadline = time.monotonic() + 10
    while len(got) < 12 and time.monotonic() < deadline:
        got += c1.poll(0.05) + c2.poll(0.05)
    assert sorted(m.body for m in got) == sorted(bodies)  # each message once
    for c in (c1, c2):
        c.shutdown()


def test_averagely_by_circle_deals_queues_in_turn(cluster: FakeCluster) -> None:
    """Not the default's contiguous blocks: q0 q2 to one consumer, q1 q3 to the other."""
    c1, c2 = (
        consumer(cluster, allocate_strategy=AllocateStrategy.AVERAGELY_BY_CIRCLE) for _ in range(2)
    )
    for c in (c1, c2):
        c.subscribe(TOPIC)
        c.start()
    rebalance(c1, c2)
    assert sorted([c1.assignment(), c2.assignment()]) == [
        [QUEUES[0], QUEUES[2]],
        [QUEUES[1], QUEUES[3]],
    ]
    for c in (c1, c2):
        c.shutdown()


def test_config_strategy_reads_exactly_the_configured_queues(cluster: FakeCluster) -> None:
    mine = {0: [QUEUES[0], QUEUES[3]], 1: [QUEUES[1], QUEUES[2]]}
    cs = [
        consumer(cluster, allocate_strategy=AllocateStrategy.CONFIG, allocate_queues=mine[i])
        for i in (0, 1)
    ]
    for c in cs:
        c.subscribe(TOPIC)
        c.start()
    rebalance(*cs)
    assert [c.assignment() for c in cs] == [mine[0], mine[1]]
    overlapping = consumer(
        cluster, allocate_strategy=AllocateStrategy.CONFIG, allocate_queues=[QUEUES[3]]
    )
    with pytest.raises(ConfigError, match="queue"):
        overlapping.subscribe(TOPIC)
    overlapping.shutdown()
    for c in cs:
        c.shutdown()


def test_a_member_with_another_strategy_is_refused(cluster: FakeCluster) -> None:
    c1 = consumer(cluster)
    c1.subscribe(TOPIC)
    c1.start()
    other = consumer(cluster, allocate_strategy=AllocateStrategy.CONSISTENT_HASH)
    with pytest.raises(ConfigError, match="allocate_strategy"):
        other.subscribe(TOPIC)
    rebalance(c1)
    assert c1.assignment() == QUEUES  # the refused member does not count
    c1.shutdown()
    other.shutdown()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"allocate_strategy": "AVERAGELY"}, "allocate_strategy must be"),
        ({"model": "BROADCASTING"}, "model must be"),
        ({"allocate_queues": [QUEUES[0]]}, "goes with allocate_strategy"),
        ({"allocate_strategy": AllocateStrategy.CONFIG}, "goes with allocate_strategy"),
        ({"allocate_strategy": AllocateStrategy.CONFIG, "allocate_queues": ["q0"]}, "list of"),
    ],
)
def test_bad_share_options_are_config_errors(
    cluster: FakeCluster, kwargs: dict[str, Any], match: str
) -> None:
    with pytest.raises(ConfigError, match=match):
        consumer(cluster, **kwargs)


# ------------------------------------------------------------------ the listener
class Recorder(rayq.MessageQueueListener):
    def __init__(self) -> None:
        self.calls: list[tuple[str, list[MessageQueue], list[MessageQueue]]] = []

    def message_queue_changed(
        self, topic: str, all_queues: list[MessageQueue], assigned: list[MessageQueue]
    ) -> None:
        self.calls.append((topic, all_queues, assigned))


def test_the_listener_hears_each_change_of_the_assignment(cluster: FakeCluster) -> None:
    heard = Recorder()
    c1 = consumer(cluster)
    c1.subscribe(TOPIC, listener=heard)
    assert heard.calls == [(TOPIC, QUEUES, QUEUES)]  # the first assignment
    c1.start()
    rebalance(c1)
    assert len(heard.calls) == 1  # nothing changed: nothing told
    c2 = consumer(cluster)
    c2.subscribe(TOPIC)
    rebalance(c1)
    assert heard.calls[1] == (TOPIC, QUEUES, QUEUES[:2]) or heard.calls[1] == (
        TOPIC,
        QUEUES,
        QUEUES[2:],
    )
    assert heard.calls[1][2] == c1.assignment()
    c2.shutdown()
    rebalance(c1)
    assert heard.calls[2] == (TOPIC, QUEUES, QUEUES)
    c1.shutdown()


def test_a_function_listener_is_called_and_what_it_raises_is_logged(
    cluster: FakeCluster, caplog: pytest.LogCaptureFixture
) -> None:
    calls: list[tuple[str, int, int]] = []

    def changed(topic: str, all_queues: list[MessageQueue], assigned: list[MessageQueue]) -> None:
        calls.append((topic, len(all_queues), len(assigned)))
        raise RuntimeError("listener bug")

    c = consumer(cluster)
    c.subscribe(TOPIC, listener=changed)
    assert calls == [(TOPIC, 4, 4)]
    assert c.assignment() == QUEUES  # the assignment stands
    assert "listener" in caplog.text
    with pytest.raises(ConfigError, match="MessageQueueListener"):
        c.subscribe(TOPIC, listener=42)  # type: ignore[arg-type]
    c.shutdown()


# ------------------------------------------------------------------- broadcasting
def test_broadcasting_consumers_each_read_everything_and_keep_offsets_locally(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    offsets_dir = tmp_path / "offsets"

    def local(instance: str) -> PullConsumer:
        cfg = ClientConfig(
            rebalance_interval_ms=1,
            auto_commit_interval_ms=1_000_000,
            offset_store_dir=str(offsets_dir),
            instance_name=instance,
        )
        c = consumer(cluster, model=MessageModel.BROADCASTING, config=cfg)
        c.subscribe(TOPIC)
        c.start()
        return c

    w1, w2 = local("w1"), local("w2")
    assert w1.assignment() == w2.assignment() == QUEUES
    bodies = send(cluster, 8)
    for c in (w1, w2):
        assert sorted(m.body for m in poll_until(c, 8)) == sorted(bodies)
        c.commit()
    assert cluster.server().tables.consumer_offsets.query_all("cg", TOPIC) == {}  # not the broker's
    saved = json.loads((offsets_dir / "w1" / "cg" / "offsets.json").read_text())["offsets"]
    assert sum(saved.values()) == 8
    assert sum(w1.committed(mq) for mq in QUEUES) == 8
    w1.shutdown()
    later = send(cluster, 3, prefix="later")
    again = local("w1")  # resumes from its own file
    assert sorted(m.body for m in poll_until(again, 3)) == sorted(later)
    assert again.poll(0.1) == []
    for c in (again, w2):
        c.shutdown()


def test_broadcasting_refuses_config_allocation(cluster: FakeCluster) -> None:
    with pytest.raises(ConfigError, match="broadcasting"):
        consumer(
            cluster,
            model=MessageModel.BROADCASTING,
            allocate_strategy=AllocateStrategy.CONFIG,
            allocate_queues=[QUEUES[0]],
        )
