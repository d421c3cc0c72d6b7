"""Pull consumers of one group share a topic's queues through the coordinator."""

from __future__ import annotations

import time

import pytest

import rayq
from rayq.store import InnerMessage, UniqIdGenerator, encode_batch
from rayq.transport.context import ClientContext

pytestmark = pytest.mark.integration
NAMESPACE = "rayq-test-group-sharing"
IDS = UniqIdGenerator()
FAST = rayq.ClientConfig(rebalance_interval_ms=200, member_expiry_ms=30_000)


def send(topic: str, per_queue: int) -> None:
    ctx = ClientContext(namespace=NAMESPACE)
    for q in range(4):
        msgs = [
            InnerMessage(topic=topic, queue_id=q, body=f"{q}-{i}".encode(), uniq_key=IDS.next_id())
            for i in range(per_queue)
        ]
        batch = encode_batch(msgs, max_body_bytes=1 << 14, max_properties_bytes=4096)
        ctx.broker("broker-a").put(batch).result(30)


def consumer(group: str, topic: str) -> rayq.PullConsumer:
    c = rayq.PullConsumer(
        group, consume_from=rayq.ConsumeFromWhere.FIRST_OFFSET, config=FAST, namespace=NAMESPACE
    )
    c.subscribe(topic)
    c.start()
    return c


def settle(*consumers: rayq.PullConsumer) -> list[bytes]:
    """Poll for a few rebalance intervals so every member takes its current share;
    returns the bodies polled meanwhile."""
    got: list[bytes] = []
    for _ in range(10):
        for c in consumers:
            got += [m.body for m in c.poll(timeout=0.05)]
        time.sleep(0.1)
    return got


def test_two_members_split_the_queues_and_read_each_message_once(cluster: rayq.Cluster) -> None:
    """4 queues, 2 members: 2 queues each, disjoint, and every message read exactly once."""
    rayq.Admin(namespace=NAMESPACE).create_topic("shared", queues=4)
    a, b = consumer("g1", "shared"), consumer("g1", "shared")
    settle(a, b)
    qa, qb = set(a.assignment()), set(b.assignment())
    assert len(qa) == len(qb) == 2
    assert not qa & qb
    send("shared", 25)
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < 100 and time.monotonic() < deadline:
        for c in (a, b):
            got += [m.body for m in c.poll(timeout=0.2)]
    assert sorted(got) == sorted(f"{q}-{i}".encode() for q in range(4) for i in range(25))
    a.shutdown()
    b.shutdown()


def test_a_leaving_member_hands_its_queues_over(cluster: rayq.Cluster) -> None:
    """After one member shuts down, the other owns every queue and resumes where it left."""
    rayq.Admin(namespace=NAMESPACE).create_topic("handover", queues=4)
    a, b = consumer("g2", "handover"), consumer("g2", "handover")
    settle(a, b)
    send("handover", 10)
    read = []
    deadline = time.monotonic() + 30
    while len(read) < 40 and time.monotonic() < deadline:
        for c in (a, b):
            read += [m.body for m in c.poll(timeout=0.2)]
    a.shutdown()  # commits and leaves the group
    send("handover", 5)
    more = settle(b)
    assert len(b.assignment()) == 4
    deadline = time.monotonic() + 30
    while len(more) < 20 and time.monotonic() < deadline:
        more += [m.body for m in b.poll(timeout=0.2)]
    assert sorted(more) == sorted(f"{q}-{i}".encode() for q in range(4) for i in range(5))
    b.shutdown()


def test_the_coordinator_allocates_with_the_group_strategy_and_refuses_another(
    cluster: rayq.Cluster,
) -> None:
    """AVERAGELY_BY_CIRCLE deals the queues in turn (not in blocks); a member that asks
    with another strategy gets a ConfigError from the coordinator actor."""
    rayq.Admin(namespace=NAMESPACE).create_topic("circle", queues=4)
    members = []
    for _ in range(2):
        c = rayq.PullConsumer(
            "g3",
            config=FAST,
            namespace=NAMESPACE,
            allocate_strategy=rayq.AllocateStrategy.AVERAGELY_BY_CIRCLE,
        )
        c.subscribe("circle")
        c.start()
        members.append(c)
    settle(*members)
    assert sorted([sorted(q.queue_id for q in c.assignment()) for c in members]) == [
        [0, 2],
        [1, 3],
    ]
    other = rayq.PullConsumer("g3", config=FAST, namespace=NAMESPACE)
    with pytest.raises(rayq.ConfigError, match="allocate_strategy"):
        other.subscribe("circle")
    other.shutdown()
    for c in members:
        c.shutdown()
