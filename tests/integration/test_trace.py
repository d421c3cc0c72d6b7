"""Message trace on Ray (one deployment whose brokers do not auto-create topics): a
traced send and a traced push consumer's consumes, a retry through the broker's
%RETRY% topic included, show up in ``Admin.trace`` with their fields; an untraced send
and consume show none; bad input is a clear error."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

import rayq
from rayq import ConsumeFromWhere, ConsumeStatus

pytestmark = pytest.mark.integration

NAMESPACE = "rayq-test-trace"
# the dispatcher must create the trace topic itself; retries come back after 1 s
BROKER_OVERRIDES = {"auto_create_topic_enable": False, "message_delay_level": "1s 1s 1s"}
TOPIC = "traced"
TRACED = rayq.ClientConfig(trace_enable=True)
WAIT_S = 60.0  # generous: what the tests wait for, never a figure they check


def once_later(msgs: list[rayq.MessageExt]) -> ConsumeStatus:
    """Fails each message the first time (it comes back through the retry topic)."""
    if any(m.reconsume_times == 0 for m in msgs):
        return ConsumeStatus.RECONSUME_LATER
    return ConsumeStatus.CONSUME_SUCCESS


def wait_for(check: Callable[[], list[rayq.TraceEvent]], done: Callable[[list], bool]) -> list:
    deadline = time.monotonic() + WAIT_S
    while True:
        got = check()
        if done(got) or time.monotonic() > deadline:
            return got
        time.sleep(0.2)


def test_a_traced_send_and_its_consumes_make_its_timeline(cluster: rayq.Cluster) -> None:
    admin = rayq.Admin()
    admin.create_topic(TOPIC, queues=2)
    with rayq.Producer("trace-pg", config=TRACED) as producer:
        res = producer.send(rayq.Message(TOPIC, b"x", tags="paid", keys=["order-7"]))
    consumer = rayq.PushConsumer(
        "trace-cg", consume_from=ConsumeFromWhere.FIRST_OFFSET, config=TRACED
    )
    consumer.subscribe(TOPIC)
    consumer.register_listener(once_later)
    consumer.start()
    try:
        events = wait_for(
            lambda: admin.trace(res.msg_id),
            lambda got: any(e.status == "CONSUME_SUCCESS" for e in got),
        )
    finally:
        consumer.shutdown()
    assert [(e.kind, e.status, e.reconsume_times) for e in events] == [
        ("send", "SEND_OK", 0),
        ("store", "SEND_OK", 0),
        ("consume", "RECONSUME_LATER", 0),
        ("consume", "CONSUME_SUCCESS", 1),  # again, from %RETRY%trace-cg
    ]
    send, store, later, success = events
    assert (send.group, send.client_id, send.topic) == ("trace-pg", producer.client_id, TOPIC)
    assert (send.tags, send.keys) == ("paid", ["order-7"])
    assert (store.broker, store.queue_id, store.queue_offset) == (
        res.queue.broker_name,
        res.queue.queue_id,
        res.queue_offset,
    )
    stored = admin.get_message(TOPIC, res.queue.queue_id, res.queue_offset)
    assert store.timestamp_ms == stored.store_timestamp  # the broker's own time
    assert {later.group, success.group} == {"trace-cg"}
    assert later.client_id == success.client_id != producer.client_id
    assert (later.topic, later.queue_offset) == (TOPIC, res.queue_offset)
    assert success.topic == TOPIC  # shown as the topic it was sent to
    assert send.timestamp_ms <= later.timestamp_ms <= success.timestamp_ms
    assert "RMQ_SYS_TRACE_TOPIC" in admin.topics()  # created by the dispatcher


def test_an_untraced_message_has_no_events(cluster: rayq.Cluster) -> None:
    admin = rayq.Admin()
    admin.create_topic("untraced", queues=1)
    with rayq.Producer("plain-pg") as producer:
        res = producer.send(rayq.Message("untraced", b"y"))
    puller = rayq.PullConsumer("plain-lg", consume_from=ConsumeFromWhere.FIRST_OFFSET)
    puller.subscribe("untraced")
    puller.start()
    try:
        assert [m.msg_id for m in puller.poll(timeout=10.0)] == [res.msg_id]
    finally:
        puller.shutdown()
    assert admin.trace(res.msg_id) == []


def test_bad_input_is_a_clear_error(cluster: rayq.Cluster) -> None:
    admin = rayq.Admin()
    with pytest.raises(rayq.InvalidMessageError, match="no message with id"):
        admin.trace("00000000000000000000000000000000")
    with pytest.raises(rayq.InvalidMessageError, match="non-empty str"):
        admin.trace("")
    with pytest.raises(rayq.ConfigError, match="trace_topic"):
        rayq.ClientConfig(trace_enable=True, trace_topic="%RETRY%cg")
    with pytest.raises(rayq.ConfigError, match="trace_topic"):
        admin.trace("X", trace_topic="no spaces")
