"""Delayed messages, send-back to retry and dead-letter topics, and a broker restart,
through the public API (Producer, PullConsumer, Admin) and the broker's typed protocol
(``ClientContext().broker(...)``).

Timing assertions are only "not before it is due" and generous "arrives within N s".
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest
import ray

import rayq
import rayq.cluster
from rayq.actors.protocol import (
    ListGroupsRequest,
    SendBackItem,
    SendBackRequest,
    SendBackResult,
    broker_actor_name,
)
from rayq.actors.server.table_files import SCHEDULE_TOPIC
from rayq.admin.admin import Admin
from rayq.consumer.pull import ConsumeFromWhere, PullConsumer
from rayq.store import Message, MessageExt
from rayq.store import properties as P
from rayq.store.errors import InvalidOffsetError
from rayq.transport.base import BrokerClient
from rayq.transport.context import ClientContext

T = TypeVar("T")

pytestmark = pytest.mark.integration

BROKER = "broker-a"
NAMESPACE = "rayq-test-delay-and-retry"
# Level 1: 1 s, level 2: 2 s, level 3 (and above, clamped): 1 s. Progress is persisted
# every 500 ms so the restart test need not wait long.
BROKER_OVERRIDES = {"message_delay_level": "1s 2s 1s", "persist_offset_interval_ms": 500}
ARRIVAL_LIMIT_S = 30.0


@pytest.fixture(scope="module")
def admin(cluster: rayq.cluster.Cluster) -> Admin:
    return Admin(namespace=cluster.namespace)


@pytest.fixture(scope="module")
def producer(cluster: rayq.cluster.Cluster) -> Iterator[rayq.Producer]:
    with rayq.Producer(group="pg", namespace=cluster.namespace) as p:
        yield p


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def new_topic(admin: Admin) -> str:
    topic = f"dl-{uuid.uuid4().hex[:8]}"
    admin.create_topic(topic, queues=1)
    return topic


def consumer(topic: str, group: str | None = None) -> PullConsumer:
    c = PullConsumer(
        group or f"g-{uuid.uuid4().hex[:8]}",
        namespace=NAMESPACE,
        consume_from=ConsumeFromWhere.FIRST_OFFSET,
    )
    c.subscribe(topic)
    c.start()
    return c


def poll_until(c: PullConsumer, n: int, limit_s: float = ARRIVAL_LIMIT_S) -> list[MessageExt]:
    got: list[MessageExt] = []
    deadline = time.monotonic() + limit_s
    while len(got) < n and time.monotonic() < deadline:
        got += c.poll(timeout=0.5)
    return got


def broker() -> BrokerClient:
    return ClientContext(namespace=NAMESPACE).broker(BROKER)


def send_back(group: str, commitlog_offset: int) -> SendBackResult:
    """What a push consumer does with a failed message (max 1 reconsume here)."""
    req = SendBackRequest(
        group=group, items=[SendBackItem(commitlog_offset)], max_reconsume_times=1
    )
    result = broker().send_back(req).result(30)
    assert isinstance(result, SendBackResult)
    return result


def test_a_delayed_message_is_not_seen_before_its_level_and_is_seen_after(
    admin: Admin, producer: rayq.Producer
) -> None:
    topic = new_topic(admin)
    c = consumer(topic)
    t0 = now_ms()
    delayed = producer.send(Message(topic, b"in 2 s", tags="TagD", keys=["dk"], delay_level=2))
    clamped = producer.send(Message(topic, b"level 9 -> 3 (1 s)", delay_level=9))
    producer.send(Message(topic, b"now"))
    first = poll_until(c, 1, limit_s=10)
    assert [m.body for m in first] == [b"now"]
    got = first + poll_until(c, 2)
    c.shutdown()
    by_body = {m.body: m for m in got}
    assert set(by_body) == {b"now", b"in 2 s", b"level 9 -> 3 (1 s)"}
    late = by_body[b"in 2 s"]
    assert late.store_timestamp >= t0 + 2000  # never before its time
    assert by_body[b"level 9 -> 3 (1 s)"].store_timestamp >= t0 + 1000
    assert late.msg_id == delayed.msg_id and late.tags == "TagD" and late.keys == ["dk"]
    assert late.topic == topic and late.queue_id == 0
    assert not {P.DELAY, P.REAL_TOPIC, P.REAL_QID} & late.properties.keys()
    assert by_body[b"level 9 -> 3 (1 s)"].msg_id == clamped.msg_id
    assert [m.body for m in admin.query_message(topic, "dk")] == [b"in 2 s"]
    assert admin.view_message(delayed.msg_id).body == b"in 2 s"
    assert SCHEDULE_TOPIC not in admin.topics()


def test_deliver_at_messages_arrive_in_time_order_and_never_early(
    admin: Admin, producer: rayq.Producer
) -> None:
    topic = new_topic(admin)
    c = consumer(topic)
    t0 = now_ms()
    dues = {b"c": t0 + 3000, b"a": t0 + 1500, b"b": t0 + 2200}
    for body, due in dues.items():
        producer.send(Message(topic, body, deliver_at_ms=due))
    got = poll_until(c, 3)
    c.shutdown()
    assert [m.body for m in got] == [b"a", b"b", b"c"]
    for m in got:
        assert m.store_timestamp >= dues[m.body]
        assert P.DELIVER_AT_MS not in m.properties


def test_send_back_goes_to_retry_after_a_delay_then_to_the_dlq(
    admin: Admin, producer: rayq.Producer
) -> None:
    topic, group = new_topic(admin), f"cg-{uuid.uuid4().hex[:8]}"
    sent = producer.send(Message(topic, b"fails", tags="T", keys=["rk"]))
    c = consumer(topic, group)
    [orig] = poll_until(c, 1)
    c.shutdown()

    t0 = now_ms()
    res = send_back(group, orig.commitlog_offset)
    assert res.topics == [f"%RETRY%{group}"] and res.reconsume_times == [1]
    retry = consumer(f"%RETRY%{group}", group)
    [r1] = poll_until(retry, 1)
    assert r1.store_timestamp >= t0 + 1000  # level 3 + 0 = 3: 1 s in this table
    assert r1.body == b"fails" and r1.reconsume_times == 1 and r1.msg_id == sent.msg_id
    assert r1.properties[P.RETRY_TOPIC] == topic
    assert r1.properties[P.ORIGIN_MESSAGE_ID] == sent.msg_id

    res = send_back(group, r1.commitlog_offset)
    assert res.topics == [f"%DLQ%{group}"] and res.reconsume_times == [2]
    dlq = consumer(f"%DLQ%{group}", group)
    [dead] = poll_until(dlq, 1)
    assert dead.body == b"fails" and dead.reconsume_times == 2
    assert dead.properties[P.RETRY_TOPIC] == topic
    assert dead.properties[P.ORIGIN_MESSAGE_ID] == sent.msg_id
    assert poll_until(retry, 1, limit_s=2) == []  # the dead letter is not retried
    retry.shutdown()
    dlq.shutdown()
    assert {f"%RETRY%{group}", f"%DLQ%{group}"} <= set(admin.topics())


def test_bad_send_back_raises_and_the_broker_keeps_serving(
    admin: Admin, producer: rayq.Producer
) -> None:
    topic = new_topic(admin)
    with pytest.raises(InvalidOffsetError):
        broker().send_back(SendBackRequest(group="cg", items=[SendBackItem(2**40)])).result(30)
    assert producer.send(Message(topic, b"still fine")).queue_offset == 0


def test_a_broker_restart_keeps_delay_progress(
    admin: Admin,
    producer: rayq.Producer,
    retried: Callable[[Callable[[], T]], T],
    restart: Callable[[Any], None],
) -> None:
    topic = new_topic(admin)
    c = consumer(topic)
    producer.send(Message(topic, b"before", delay_level=1))
    assert [m.body for m in poll_until(c, 1)] == [b"before"]
    c.shutdown()
    time.sleep(1.5)  # past persist_offset_interval_ms: the delivery is recorded on disk

    t0 = now_ms()
    producer.send(Message(topic, b"at", deliver_at_ms=t0 + 3000))
    producer.send(Message(topic, b"level", delay_level=2))
    restart(ray.get_actor(broker_actor_name(BROKER), namespace=NAMESPACE))
    # restarted: recovered store and delay progress
    retried(lambda: broker().groups(ListGroupsRequest()).result(30))

    reader = consumer(topic)
    got = poll_until(reader, 3)
    got += poll_until(reader, 1, limit_s=3)  # and nothing more comes
    reader.shutdown()
    assert Counter(m.body for m in got) == {b"before": 1, b"at": 1, b"level": 1}
    at = next(m for m in got if m.body == b"at")
    assert at.store_timestamp >= t0 + 3000
