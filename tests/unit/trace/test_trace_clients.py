"""Message trace through the clients, against the in-process fake cluster (no Ray):
each kind of send and consume shows up in ``Admin.trace`` with its fields; an untraced
client writes nothing; bad input and unknown ids are clear errors."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import rayq
import rayq.aio
from rayq import testing as kit
from rayq.actors.protocol import MessageQueue
from rayq.actors.protocol.config import ClientConfig
from rayq.admin.admin import Admin
from rayq.consumer.listener import ConsumeOrderlyStatus
from rayq.consumer.pull import PullConsumer
from rayq.consumer.simple import SimpleConsumer
from rayq.store.message import MessageExt
from rayq.testing import FakeCluster, FakeTransport
from rayq.trace import dispatcher as D

TOPIC = "orders"
TRACED = ClientConfig(trace_enable=True)


@pytest.fixture
def cluster_options() -> dict[str, Any]:
    return {"topics": {TOPIC: 2}}


@pytest.fixture
def transport(cluster: FakeCluster) -> FakeTransport:
    return FakeTransport(cluster)


@pytest.fixture
def admin(transport: FakeTransport) -> Admin:
    return Admin(transport=transport)


def producer(transport: FakeTransport, config: ClientConfig = TRACED) -> rayq.Producer:
    return rayq.Producer("pg", config=config, transport=transport)


def kinds(events: list[rayq.TraceEvent]) -> list[tuple[str, str]]:
    return [(e.kind, e.status) for e in events]


def test_a_traced_send_shows_its_send_and_store(admin: Admin, transport: FakeTransport) -> None:
    with producer(transport) as p:
        res = p.send(rayq.Message(TOPIC, b"x", tags="paid", keys=["order-1", "o2"]))
    send, store = admin.trace(res.msg_id)
    assert kinds([send, store]) == [("send", "SEND_OK"), ("store", "SEND_OK")]
    for e in (send, store):
        assert (e.msg_id, e.topic, e.group, e.tags, e.keys) == (
            res.msg_id,
            TOPIC,
            "pg",
            "paid",
            ["order-1", "o2"],
        )
        assert e.client_id == p.client_id
        assert (e.broker, e.queue_id, e.queue_offset) == (
            res.queue.broker_name,
            res.queue.queue_id,
            res.queue_offset,
        )
    stored = admin.view_message(res.msg_id)  # the message, not its trace record
    assert stored.topic == TOPIC
    assert store.timestamp_ms == stored.store_timestamp
    assert send.timestamp_ms <= store.timestamp_ms
    assert send.cost_ms >= 0


def test_batch_async_oneway_and_orderly_sends_are_traced(
    admin: Admin, transport: FakeTransport, cluster: FakeCluster
) -> None:
    with producer(transport) as p:
        batch = p.send_batch([rayq.Message(TOPIC, b"a"), rayq.Message(TOPIC, b"b")])
        later = p.send_async(rayq.Message(TOPIC, b"c")).result(10)
        ordered = p.send_orderly(rayq.Message(TOPIC, b"d"), sharding_key="k")
        p.send_oneway(rayq.Message(TOPIC, b"e", keys=["oneway"]))
    for res in [*batch, later, ordered]:
        assert kinds(admin.trace(res.msg_id)) == [("send", "SEND_OK"), ("store", "SEND_OK")]
    [oneway] = admin.query_message(TOPIC, "oneway")
    assert [e.kind for e in admin.trace(oneway.msg_id)] == ["send", "store"]


def test_an_untraced_send_has_an_empty_timeline(admin: Admin, transport: FakeTransport) -> None:
    with producer(transport, ClientConfig()) as p:
        res = p.send(rayq.Message(TOPIC, b"plain"))
    assert admin.trace(res.msg_id) == []
    assert D._registry == {}  # no dispatcher was made, none is left


def test_an_unknown_id_and_bad_input_are_clear_errors(
    admin: Admin, transport: FakeTransport
) -> None:
    with producer(transport) as p:  # the trace topic exists
        p.send(rayq.Message(TOPIC, b"x"))
    with pytest.raises(rayq.InvalidMessageError, match="no trace of it"):
        admin.trace("0A0B0C0D0E0F00000000000000000000")
    for bad in ["", None, 42]:
        with pytest.raises(rayq.InvalidMessageError, match="non-empty str"):
            admin.trace(bad)  # type: ignore[arg-type]
    with pytest.raises(rayq.ConfigError, match="trace_topic"):
        admin.trace("X", trace_topic="%DLQ%x")


def test_a_pull_consumers_poll_is_traced(admin: Admin, transport: FakeTransport) -> None:
    with producer(transport) as p:
        res = p.send(rayq.Message(TOPIC, b"x"))
    c = PullConsumer(
        "lg", consume_from=rayq.ConsumeFromWhere.FIRST_OFFSET, config=TRACED, transport=transport
    )
    c.subscribe(TOPIC)
    c.start()
    try:
        [msg] = kit.poll_until(c, 1)
    finally:
        c.shutdown()
    polled = admin.trace(res.msg_id)[-1]
    assert (polled.kind, polled.status, polled.group) == ("consume", "POLLED", "lg")
    assert (polled.client_id, polled.queue_offset) == (c.client_id, msg.queue_offset)


def test_a_simple_consumers_receive_change_and_ack_are_traced(
    admin: Admin, transport: FakeTransport
) -> None:
    with producer(transport) as p:
        res = p.send(rayq.Message(TOPIC, b"x"))
    c = SimpleConsumer("sg", await_duration=0, config=TRACED, transport=transport)
    c.subscribe(TOPIC)
    c.start()
    try:
        [msg] = c.receive()
        c.change_invisible_duration(msg, 60.0)
        c.ack(msg)
    finally:
        c.shutdown()
    assert kinds(admin.trace(res.msg_id))[2:] == [
        ("consume", "RECEIVED"),
        ("consume", "CHANGE_INVISIBLE_DURATION"),
        ("consume", "ACK"),
    ]
    assert {e.group for e in admin.trace(res.msg_id)[2:]} == {"sg"}


def test_push_listeners_are_traced_with_status_and_reconsume_times(
    admin: Admin, transport: FakeTransport, cluster: FakeCluster
) -> None:
    """An orderly listener that suspends a message once: two consume events, the
    second with reconsume_times 1; a concurrent listener's success."""
    with producer(transport) as p:
        res = p.send_orderly(rayq.Message(TOPIC, b"x"), sharding_key="k")
    calls: list[int] = []

    def orderly(msgs: list[MessageExt]) -> ConsumeOrderlyStatus:
        calls.append(msgs[0].reconsume_times)
        if len(calls) == 1:
            return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
        return ConsumeOrderlyStatus.SUCCESS

    def concurrent(msgs: list[MessageExt]) -> rayq.ConsumeStatus:
        return rayq.ConsumeStatus.CONSUME_SUCCESS

    fast = msgspec_replace(TRACED, suspend_current_queue_time_millis=10)
    for group, listener, orderly_ in [("og", orderly, True), ("cg", concurrent, False)]:
        svc = kit.consume_service(
            cluster,
            listener,
            group=group,
            topic=TOPIC,
            orderly=orderly_,
            config=fast,
        )

        async def run(svc: Any = svc, group: str = group) -> None:
            await svc.open()
            await svc.assign(1, [MessageQueue(TOPIC, "broker-a", res.queue.queue_id)])
            await kit.until(lambda: svc.consumed >= 1)
            await svc.shutdown()

        asyncio.run(run())
    consumes = [e for e in admin.trace(res.msg_id) if e.kind == "consume"]
    by_group = sorted((e.group, e.status, e.reconsume_times) for e in consumes)
    assert by_group == [
        ("cg", "CONSUME_SUCCESS", 0),
        ("og", "SUCCESS", 1),
        ("og", "SUSPEND_CURRENT_QUEUE_A_MOMENT", 0),
    ]
    assert all(e.cost_ms >= 0 and e.client_id == "c1" for e in consumes)


def test_a_transaction_is_traced_as_its_half_send_and_its_end(
    admin: Admin, transport: FakeTransport
) -> None:
    class Commit:
        def execute_local_transaction(self, msg: rayq.Message, arg: Any) -> Any:
            return rayq.TransactionStatus.COMMIT

        def check_local_transaction(self, msg: MessageExt) -> Any:
            return rayq.TransactionStatus.COMMIT

    with rayq.TransactionProducer("txg", Commit(), config=TRACED, transport=transport) as p:
        res = p.send_in_transaction(rayq.Message(TOPIC, b"tx"))
    events = admin.trace(res.msg_id)
    assert kinds(events)[0] == ("send", "SEND_OK")
    assert ("send", "COMMIT") in kinds(events)
    assert {e.group for e in events} == {"txg"}


def test_the_aio_producer_shares_the_traced_path(admin: Admin, transport: FakeTransport) -> None:
    async def main() -> rayq.SendResult:
        async with rayq.aio.Producer("apg", config=TRACED, transport=transport) as p:
            return await p.send(rayq.Message(TOPIC, b"x"))

    res = asyncio.run(main())
    assert [(e.kind, e.group) for e in admin.trace(res.msg_id)] == [
        ("send", "apg"),
        ("store", "apg"),
    ]


def test_clients_of_one_deployment_share_one_dispatcher(transport: FakeTransport) -> None:
    a, b = producer(transport), producer(transport)
    try:
        assert a._tracer is not None and b._tracer is not None
        assert a._tracer.dispatcher is b._tracer.dispatcher
    finally:
        a.shutdown()
        assert len(D._registry) == 1  # b still holds it
        b.shutdown()
    assert D._registry == {}


def test_the_trace_topic_is_created_when_the_brokers_do_not_auto_create(
    make_cluster: Any,
) -> None:
    cluster = make_cluster(
        topics={TOPIC: 1},
        config=rayq.BrokerConfig(
            auto_create_topic_enable=False, store=rayq.StoreConfig.for_tests()
        ),
    )
    transport = FakeTransport(cluster)
    with producer(transport) as p:
        res = p.send(rayq.Message(TOPIC, b"x"))
    admin = Admin(transport=transport)
    assert "RMQ_SYS_TRACE_TOPIC" in admin.topics()
    assert [e.kind for e in admin.trace(res.msg_id)] == ["send", "store"]


def msgspec_replace(cfg: ClientConfig, **changes: Any) -> ClientConfig:
    import msgspec

    return msgspec.structs.replace(cfg, **changes)


def test_the_aio_consumers_share_the_traced_paths(admin: Admin, transport: FakeTransport) -> None:
    """rayq.aio's PullConsumer polls and SimpleConsumer receives, lease changes and acks are
    traced as the sync clients' are."""
    with producer(transport) as p:
        res = p.send(rayq.Message(TOPIC, b"x"))

    async def main() -> None:
        puller = rayq.aio.PullConsumer(
            "alg",
            consume_from=rayq.ConsumeFromWhere.FIRST_OFFSET,
            config=TRACED,
            transport=transport,
        )
        puller.subscribe(TOPIC)
        await puller.start()
        got: list[MessageExt] = []
        for _ in range(100):
            got += await puller.poll(0.05)
            if got:
                break
        await puller.shutdown()
        simple = rayq.aio.SimpleConsumer(
            "asg", await_duration=0, config=TRACED, transport=transport
        )
        simple.subscribe(TOPIC)
        await simple.start()
        [msg] = await simple.receive()
        await simple.change_invisible_duration(msg, 30.0)
        await simple.ack(msg)
        await simple.shutdown()

    asyncio.run(main())
    steps = [(e.group, e.status) for e in admin.trace(res.msg_id) if e.kind == "consume"]
    assert ("alg", "POLLED") in steps
    assert [s for g, s in steps if g == "asg"] == ["RECEIVED", "CHANGE_INVISIBLE_DURATION", "ACK"]
