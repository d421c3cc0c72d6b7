"""Send-back to %RETRY%<group> / %DLQ%<group> (store/send_back.py, BrokerServer.send_back).

BrokerServer is an undecorated class: these tests run it without Ray.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from pathlib import Path

import pytest

from rayq.actors.protocol import (
    CreateTopicRequest,
    ScheduleStatsRequest,
    SendBackItem,
    SendBackRequest,
    TopicRequest,
    check,
)
from rayq.actors.protocol.config import BrokerConfig
from rayq.actors.server.broker_server import BrokerServer
from rayq.actors.server.table_files import SCHEDULE_TOPIC
from rayq.store import FakeClock, InnerMessage, StoreConfig, UniqIdGenerator
from rayq.store import properties as P
from rayq.store.batch import encode_batch
from rayq.store.codec import decode_records
from rayq.store.errors import (
    InvalidGroupError,
    InvalidOffsetError,
    InvalidRequestError,
    InvalidTopicError,
    PermissionDeniedError,
    RayqError,
)
from rayq.store.message import MessageExt
from rayq.store.names import dlq_topic, is_dlq_topic, is_retry_topic, retry_topic, validate_topic

IDS = UniqIdGenerator()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[BrokerServer]:
    config = BrokerConfig(store=StoreConfig.for_tests(), message_delay_level="1s 2s 3s")
    srv = BrokerServer(config, str(tmp_path))
    clock = FakeClock()
    srv.store.clock = srv.schedule.clock = clock
    yield srv
    srv.close()


def send(srv: BrokerServer, *bodies: bytes, topic: str = "orders") -> list[MessageExt]:
    msgs = [
        InnerMessage(
            topic=topic,
            queue_id=0,
            body=b,
            tags="T",
            keys="key-" + b.decode(),
            uniq_key=IDS.next_id(),
        )
        for b in bodies
    ]
    srv.put(encode_batch(msgs, max_body_bytes=1 << 14, max_properties_bytes=4096))
    return read(srv, topic)


def read(srv: BrokerServer, topic: str) -> list[MessageExt]:
    got = srv.store.get_messages("g", topic, 0, 0, 1000)
    return decode_records(got.buffer) if got.count else []


def back(srv: BrokerServer, *items: tuple[int, int], group: str = "cg", max_times: int = 2):  # type: ignore[no-untyped-def]
    req = SendBackRequest(
        group=group, items=[SendBackItem(o, lv) for o, lv in items], max_reconsume_times=max_times
    )
    return srv.send_back(req)


def wait(srv: BrokerServer, ms: int) -> None:
    srv.store.clock.advance(ms)  # type: ignore[attr-defined]
    srv.schedule_tick()


def test_names_of_group_topics() -> None:
    assert retry_topic("cg") == "%RETRY%cg" and dlq_topic("cg") == "%DLQ%cg"
    assert validate_topic("%RETRY%cg") and validate_topic("%DLQ%cg")
    assert is_retry_topic("%RETRY%cg") and is_dlq_topic("%DLQ%cg")
    assert not is_retry_topic("cg")
    with pytest.raises(InvalidGroupError):
        retry_topic("g" * 125)  # a legal group, but %RETRY%<group> would be too long
    with pytest.raises(InvalidGroupError):
        dlq_topic("bad group")


def test_a_failed_message_goes_to_retry_then_after_max_times_to_dlq(server: BrokerServer) -> None:
    [orig] = send(server, b"m1")
    res = back(server, (orig.commitlog_offset, 0))
    assert res.topics == ["%RETRY%cg"] and res.reconsume_times == [1]
    assert res.msg_ids == [orig.msg_id]
    assert server.topic_config("%RETRY%cg").write_queue_nums == 1
    assert read(server, "%RETRY%cg") == []  # waits for delay level 3 + 0 (clamped: 3 s)
    wait(server, 2999)
    assert read(server, "%RETRY%cg") == []
    wait(server, 1)
    [r1] = read(server, "%RETRY%cg")
    assert r1.body == b"m1" and r1.tags == "T" and r1.keys == ["key-m1"]
    assert r1.reconsume_times == 1 and r1.msg_id == orig.msg_id
    assert r1.properties[P.RETRY_TOPIC] == "orders"
    assert r1.properties[P.ORIGIN_MESSAGE_ID] == orig.msg_id
    assert P.DELAY not in r1.properties

    back(server, (r1.commitlog_offset, 1))  # explicit level 1: 1 s
    wait(server, 1000)
    r2 = read(server, "%RETRY%cg")[-1]
    assert r2.reconsume_times == 2
    assert r2.properties[P.RETRY_TOPIC] == "orders"  # the first topic, not %RETRY%cg
    assert r2.properties[P.ORIGIN_MESSAGE_ID] == orig.msg_id

    res = back(server, (r2.commitlog_offset, 0))  # 3rd failure > max 2: dead
    assert res.topics == ["%DLQ%cg"] and res.reconsume_times == [3]
    [dead] = read(server, "%DLQ%cg")  # at once, no delay
    assert dead.body == b"m1" and dead.reconsume_times == 3
    assert dead.properties[P.DLQ_ORIGIN_TOPIC] == "orders"
    assert dead.properties[P.DLQ_ORIGIN_MESSAGE_ID] == orig.msg_id
    assert server.topic_config("%DLQ%cg").read_queue_nums == 1
    assert {"%RETRY%cg", "%DLQ%cg"} <= set(server.tables.topics.topics())
    assert SCHEDULE_TOPIC not in server.tables.topics.topics()


def test_one_call_sends_back_a_batch_and_a_negative_level_is_dead_at_once(
    server: BrokerServer,
) -> None:
    a, b, c = send(server, b"a", b"b", b"c")
    res = back(server, (a.commitlog_offset, 0), (b.commitlog_offset, -1), (c.commitlog_offset, 2))
    assert res.topics == ["%RETRY%cg", "%DLQ%cg", "%RETRY%cg"]
    assert [m.body for m in read(server, "%DLQ%cg")] == [b"b"]
    wait(server, 2000)
    assert [m.body for m in read(server, "%RETRY%cg")] == [b"c"]
    wait(server, 1000)
    assert [m.body for m in read(server, "%RETRY%cg")] == [b"c", b"a"]


def test_max_reconsume_times_zero_sends_the_first_failure_to_the_dlq(
    server: BrokerServer,
) -> None:
    [m] = send(server, b"m")
    assert back(server, (m.commitlog_offset, 0), max_times=0).topics == ["%DLQ%cg"]


BAD_REQUESTS = [
    (
        "unknown offset",
        lambda o: SendBackRequest(group="cg", items=[SendBackItem(10**9)]),
        InvalidOffsetError,
    ),
    (
        "offset inside a record",
        lambda o: SendBackRequest(group="cg", items=[SendBackItem(o + 3)]),
        InvalidOffsetError,
    ),
    (
        "offset as str",
        lambda o: SendBackRequest(group="cg", items=[SendBackItem(str(o))]),  # type: ignore[arg-type]
        InvalidRequestError,
    ),
    (
        "negative offset",
        lambda o: SendBackRequest(group="cg", items=[SendBackItem(-1)]),
        InvalidRequestError,
    ),
    (
        "level as str",
        lambda o: SendBackRequest(group="cg", items=[SendBackItem(o, "1")]),  # type: ignore[arg-type]
        InvalidRequestError,
    ),
    (
        "bad group",
        lambda o: SendBackRequest(group="a b", items=[SendBackItem(o)]),
        InvalidGroupError,
    ),
    (
        "group too long for a topic",
        lambda o: SendBackRequest(group="g" * 200, items=[SendBackItem(o)]),
        InvalidGroupError,
    ),
    ("no items", lambda o: SendBackRequest(group="cg", items=[]), InvalidRequestError),
    (
        "items not SendBackItem",
        lambda o: SendBackRequest(group="cg", items=[(o, 0)]),  # type: ignore[list-item]
        InvalidRequestError,
    ),
    (
        "max times below -1",
        lambda o: SendBackRequest(group="cg", items=[SendBackItem(o)], max_reconsume_times=-2),
        InvalidRequestError,
    ),
    ("not a request", lambda o: [(o, 0)], InvalidRequestError),
    (
        "a good item then a bad one",
        lambda o: SendBackRequest(group="cg", items=[SendBackItem(o), SendBackItem(o + 1)]),
        InvalidOffsetError,
    ),
]


@pytest.mark.parametrize(("case", "build", "error"), BAD_REQUESTS, ids=[c[0] for c in BAD_REQUESTS])
def test_bad_send_backs_raise_and_write_nothing(
    server: BrokerServer, case: str, build, error: type[RayqError]
) -> None:  # type: ignore[no-untyped-def]
    [m] = send(server, b"m")
    written = server.store.written_offset
    with pytest.raises(error) as info:
        server.send_back(check(build(m.commitlog_offset), SendBackRequest))
    assert str(info.value)
    assert pickle.loads(pickle.dumps(info.value)).message == info.value.message
    assert server.store.written_offset == written
    assert "%RETRY%cg" not in server.tables.topics.topics()
    assert back(server, (m.commitlog_offset, 0)).topics == ["%RETRY%cg"]  # still serving


def test_a_parked_message_cannot_be_sent_back(server: BrokerServer) -> None:
    msg = InnerMessage(
        topic="orders", queue_id=0, body=b"x", uniq_key=IDS.next_id(), properties={P.DELAY: "1"}
    )
    server.put(encode_batch([msg], max_body_bytes=1 << 14, max_properties_bytes=4096))
    got = server.store.get_messages("g", SCHEDULE_TOPIC, 0, 0, 1)
    [parked] = decode_records(got.buffer)
    with pytest.raises(InvalidOffsetError, match="delayed"):
        back(server, (parked.commitlog_offset, 0))


def test_the_schedule_topic_is_not_a_client_topic(server: BrokerServer) -> None:
    with pytest.raises(PermissionDeniedError):
        server.create_topic(
            CreateTopicRequest(topic=SCHEDULE_TOPIC, read_queue_nums=1, write_queue_nums=1, perm=6)
        )
    with pytest.raises(PermissionDeniedError):
        send(server, b"x", topic=SCHEDULE_TOPIC)
    with pytest.raises(PermissionDeniedError):
        server.topic_stats(TopicRequest(topic=SCHEDULE_TOPIC))
    with pytest.raises(InvalidTopicError):
        server.topic_config("bad topic")


@pytest.mark.parametrize(
    "topic",
    ["%RETRY%cg", "%DLQ%cg", "TBW102", "OFFSET_MOVED_EVENT", "rmq_sys_x"],
)
def test_client_puts_to_system_retry_and_dead_letter_topics_are_refused(
    server: BrokerServer, topic: str
) -> None:
    """A client's Broker.put may not write the broker's own topics; send-back still does."""
    with pytest.raises(PermissionDeniedError, match=r"system topic|retry or dead-letter"):
        send(server, b"x", topic=topic)
    assert topic not in server.tables.topics.topics()  # not auto-created either
    [m] = send(server, b"fine")
    assert back(server, (m.commitlog_offset, -1)).topics == ["%DLQ%cg"]  # send-back writes it
    assert [d.body for d in read(server, "%DLQ%cg")] == [b"fine"]
    assert server.topic_config("%DLQ%cg").read_queue_nums == 1  # and it can be read


def test_clients_may_write_the_trace_topic_the_one_system_topic_they_write(
    server: BrokerServer,
) -> None:
    """RMQ_SYS_TRACE_TOPIC holds message trace records, which clients write (as in
    RocketMQ, where it is a system topic but not one clients may not send to)."""
    [m] = send(server, b"record", topic="RMQ_SYS_TRACE_TOPIC")
    assert [d.body for d in read(server, "RMQ_SYS_TRACE_TOPIC")] == [b"record"]
    assert m.topic == "RMQ_SYS_TRACE_TOPIC"


def test_a_scheduled_batch_through_the_broker_put(server: BrokerServer) -> None:
    msgs = [
        InnerMessage(topic="orders", queue_id=1, body=b, uniq_key=IDS.next_id(), properties=p)
        for b, p in ((b"d", {P.DELAY: "1"}), (b"n", {}))
    ]
    batch = encode_batch(msgs, max_body_bytes=1 << 14, max_properties_bytes=4096)
    res = server.put(batch)
    assert len(res.msg_ids) == 2
    assert server.store.max_offset("orders", 1) == 1
    server.store.clock.advance(1000)  # type: ignore[attr-defined]
    assert server.schedule_tick() == {("orders", 1): 2}
    stats = server.schedule_stats(ScheduleStatsRequest())
    assert stats.levels[1] == (1, 1)
