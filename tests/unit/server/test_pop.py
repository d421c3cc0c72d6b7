"""POP consumption on the broker (pop_processor.py, pop_state.py), without Ray: leases,
acks, lease changes, revival to the retry and dead-letter topics, filters, bad handles,
and the state rebuilt from the pop log after a restart."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rayq.actors.protocol import (
    CreateTopicRequest,
    DeleteGroupRequest,
    PullRequest,
    TopicRequest,
    UpdateGroupRequest,
    check,
)
from rayq.actors.protocol.config import BrokerConfig
from rayq.actors.protocol.enums import ConsumeFromWhere
from rayq.actors.protocol.pop import (
    AckRequest,
    ChangeInvisibilityRequest,
    PopRequest,
    PopResponse,
    ReceiptHandle,
    decode_handle,
    encode_handle,
)
from rayq.actors.protocol.records import SubscriptionGroupConfig
from rayq.actors.server.broker_server import BrokerServer
from rayq.actors.server.pop_state import POP_LOG_TOPIC
from rayq.store import FakeClock, InnerMessage, StoreConfig
from rayq.store.codec import decode_records
from rayq.store.errors import InvalidReceiptHandleError, InvalidRequestError
from rayq.store.message import MessageExt
from rayq.store.names import dlq_topic, retry_topic


def open_server(root: Path, clock: FakeClock) -> BrokerServer:
    config = BrokerConfig(store=StoreConfig.for_tests(), enable_property_filter=True)
    srv = BrokerServer(config, str(root))
    srv.store.clock = srv.schedule.clock = clock
    return srv


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def server(tmp_path: Path, clock: FakeClock) -> Iterator[BrokerServer]:
    srv = open_server(tmp_path, clock)
    srv.create_topic(
        CreateTopicRequest(topic="jobs", read_queue_nums=2, write_queue_nums=2, perm=6)
    )
    yield srv
    srv.close()


def send(srv: BrokerServer, n: int, *, queue_id: int = 0, tags: str = "T", start: int = 0) -> None:
    msgs = [
        InnerMessage(
            topic="jobs",
            queue_id=queue_id,
            body=f"m{start + i}".encode(),
            tags=tags,
            properties={"n": str(start + i)},
        )
        for i in range(n)
    ]
    assert srv.store.put_messages(msgs).ok


def pop(srv: BrokerServer, n: int = 32, invisible_ms: int = 10_000, **kw: object) -> PopResponse:
    return srv.pop(
        PopRequest(group="workers", topic="jobs", max_nums=n, invisible_ms=invisible_ms, **kw)
    )  # type: ignore[arg-type]


def bodies(resp: PopResponse) -> list[bytes]:
    return [m.body for m in decode_records(resp.buffer)]


def msgs_of(resp: PopResponse) -> list[MessageExt]:
    return decode_records(resp.buffer)


def ack(srv: BrokerServer, *handles: str, group: str = "workers") -> None:
    srv.ack(AckRequest(group=group, topic="jobs", handles=list(handles)))


def test_each_message_goes_to_one_receiver_until_its_lease_ends(server: BrokerServer) -> None:
    send(server, 3, queue_id=0)
    send(server, 2, queue_id=1, start=3)
    first = pop(server, 4)
    second = pop(server, 4)
    assert first.count == 4 and second.count == 1
    assert sorted(bodies(first) + bodies(second)) == [b"m0", b"m1", b"m2", b"m3", b"m4"]
    assert len(set(first.handles + second.handles)) == 5
    assert pop(server).count == 0  # all leased


def test_acked_messages_never_come_again_and_the_offset_follows(
    server: BrokerServer, clock: FakeClock
) -> None:
    send(server, 4)
    got = pop(server, 4)
    ack(server, got.handles[0], got.handles[1], got.handles[3])
    assert server.tables.consumer_offsets.query("workers", "jobs", 0) == 2  # m2 is still leased
    clock.advance(11_000)
    server.pop_revive_tick()
    again = pop(server)
    assert bodies(again) == [b"m2"]  # only the one not acked, from the retry topic
    (m,) = msgs_of(again)
    assert m.topic == retry_topic("workers") and m.reconsume_times == 1
    assert m.properties["RETRY_TOPIC"] == "jobs"
    assert server.tables.consumer_offsets.query("workers", "jobs", 0) == 4


def test_settling_a_message_not_in_flight_is_refused_and_changes_nothing(
    server: BrokerServer, clock: FakeClock
) -> None:
    send(server, 2)
    got = pop(server, 2)
    ack(server, got.handles[0])
    with pytest.raises(InvalidReceiptHandleError, match="not in flight"):
        ack(server, got.handles[1], got.handles[0])  # all or none: m1 stays leased
    assert server.pop_state.in_flight("workers") == 1
    clock.advance(10_001)
    with pytest.raises(InvalidReceiptHandleError, match=r"lease of message .* ended"):
        ack(server, got.handles[1])
    with pytest.raises(InvalidReceiptHandleError, match="ended"):
        server.change_invisibility(
            ChangeInvisibilityRequest(
                group="workers", topic="jobs", handles=[got.handles[1]], invisible_ms=1000
            )
        )


def test_forged_foreign_and_malformed_handles_are_refused(server: BrokerServer) -> None:
    send(server, 1)
    (handle,) = pop(server, 1).handles
    real = decode_handle(handle)
    forged = encode_handle(
        ReceiptHandle(
            real.group,
            real.broker,
            real.topic,
            real.queue_id,
            real.queue_offset,
            real.lease + 1,
            real.deadline_ms,
        )
    )
    with pytest.raises(InvalidReceiptHandleError, match="not in flight"):
        ack(server, forged)
    with pytest.raises(
        InvalidReceiptHandleError, match="of group 'workers' was given to group 'other'"
    ):
        ack(server, handle, group="other")
    other_broker = encode_handle(msgspec_replace(real, broker="broker-z"))
    with pytest.raises(InvalidReceiptHandleError, match="broker-z"):
        ack(server, other_broker)
    for bad in ["", "not base64 !", "AAAA"]:
        with pytest.raises(InvalidReceiptHandleError, match="receipt handle"):
            ack(server, bad)
    with pytest.raises(InvalidReceiptHandleError, match="twice"):
        ack(server, handle, handle)
    ack(server, handle)  # still in flight after all of that
    assert server.pop_state.in_flight() == 0


def msgspec_replace(handle: ReceiptHandle, **changes: object) -> ReceiptHandle:
    import msgspec

    return msgspec.structs.replace(handle, **changes)


@pytest.mark.parametrize(
    "fields",
    [
        {"max_nums": 0},
        {"max_nums": 1_000_000},
        {"invisible_ms": 0},
        {"invisible_ms": -5},
        {"invisible_ms": 13 * 3600 * 1000},
        {"wait_ms": 3_600_000},
    ],
)
def test_out_of_range_receives_are_refused_at_the_boundary(fields: dict[str, int]) -> None:
    raw = {"group": "workers", "topic": "jobs", **fields}
    import msgspec

    with pytest.raises(InvalidRequestError):
        check(msgspec.msgpack.encode(raw), PopRequest)


def test_a_longer_lease_gives_a_new_handle_and_outlives_the_old_end(
    server: BrokerServer, clock: FakeClock
) -> None:
    send(server, 1)
    (old,) = pop(server, 1, invisible_ms=1000).handles
    reply = server.change_invisibility(
        ChangeInvisibilityRequest(group="workers", topic="jobs", handles=[old], invisible_ms=60_000)
    )
    (new,) = reply.handles
    clock.advance(5000)
    server.pop_revive_tick()
    assert pop(server).count == 0  # still leased
    with pytest.raises(InvalidReceiptHandleError, match="newest handle"):
        ack(server, old)
    ack(server, new)
    with pytest.raises(InvalidReceiptHandleError, match="must be > 0"):
        server.change_invisibility(
            ChangeInvisibilityRequest(group="workers", topic="jobs", handles=[new], invisible_ms=0)
        )


def test_a_nack_releases_at_once_and_counts_a_delivery(server: BrokerServer) -> None:
    send(server, 1)
    (h,) = pop(server, 1).handles
    server.change_invisibility(
        ChangeInvisibilityRequest(
            group="workers", topic="jobs", handles=[h], invisible_ms=0, release=True
        )
    )
    server.pop_revive_tick()
    (m,) = msgs_of(pop(server))
    assert m.body == b"m0" and m.reconsume_times == 1


def test_past_the_groups_retry_max_times_a_message_goes_to_the_dlq(
    server: BrokerServer, clock: FakeClock
) -> None:
    server.update_group(
        UpdateGroupRequest(config=SubscriptionGroupConfig(group_name="workers", retry_max_times=2))
    )
    send(server, 1)
    deliveries = 0
    while True:
        got = pop(server, 1, invisible_ms=1000)
        if not got.count:
            break
        deliveries += 1
        clock.advance(1001)
        server.pop_revive_tick()
    assert deliveries == 3  # the first delivery and two retries
    dead = server.pull(
        PullRequest(group="ops", topic=dlq_topic("workers"), queue_id=0, queue_offset=0)
    )
    (m,) = decode_records(dead.buffer)
    assert m.body == b"m0" and m.properties["DLQ_ORIGIN_TOPIC"] == "jobs"


def test_tag_and_sql_filters_apply_and_skipped_messages_are_not_leased(
    server: BrokerServer,
) -> None:
    send(server, 3, tags="A")
    send(server, 3, tags="B", start=3)
    got = pop(server, expression="B")
    assert bodies(got) == [b"m3", b"m4", b"m5"]
    assert server.pop_state.in_flight() == 3
    send(server, 4, queue_id=1, start=10)
    sql = server.pop(
        PopRequest(
            group="sql", topic="jobs", expression="n > 11", expression_type="SQL92", max_nums=10
        )
    )
    assert sorted(bodies(sql)) == [b"m12", b"m13"]


def test_a_new_group_may_start_at_the_end(server: BrokerServer) -> None:
    send(server, 2)
    assert pop(server, consume_from=ConsumeFromWhere.LAST_OFFSET).count == 0
    send(server, 1, start=2)
    assert bodies(pop(server)) == [b"m2"]


def test_leases_acks_and_cursors_survive_a_restart(tmp_path: Path, clock: FakeClock) -> None:
    srv = open_server(tmp_path, clock)
    srv.create_topic(
        CreateTopicRequest(topic="jobs", read_queue_nums=1, write_queue_nums=1, perm=6)
    )
    send(srv, 5)
    got = pop(srv, 3, invisible_ms=30_000)
    ack(srv, got.handles[0], got.handles[2])
    srv.close()

    srv = open_server(tmp_path, clock)
    try:
        assert srv.pop_state.in_flight() == 1  # m1 is still leased
        assert bodies(pop(srv)) == [b"m3", b"m4"]  # the cursor came back: nothing twice
        ack(srv, got.handles[1])  # the old handle works on the restarted broker
        clock.advance(31_000)
        srv.pop_revive_tick()  # m3, m4's leases ended
        again = sorted(bodies(pop(srv)))
        assert again == [b"m3", b"m4"]
        assert srv.store.max_offset(POP_LOG_TOPIC, 0) == 6  # take, ack, take, ack, revive, take
        assert POP_LOG_TOPIC not in srv.tables.topics  # the broker's own: no route, no config
    finally:
        srv.close()


def test_a_receive_answers_at_most_a_pulls_bytes(tmp_path: Path, clock: FakeClock) -> None:
    config = BrokerConfig(store=StoreConfig.for_tests(), pull_max_bytes=4096)
    srv = BrokerServer(config, str(tmp_path))
    srv.store.clock = clock
    try:
        srv.create_topic(
            CreateTopicRequest(topic="jobs", read_queue_nums=2, write_queue_nums=2, perm=6)
        )
        for q in (0, 1):
            msgs = [InnerMessage(topic="jobs", queue_id=q, body=b"x" * 1000) for _ in range(8)]
            assert srv.store.put_messages(msgs).ok
        first = pop(srv, 32)
        assert 1 <= first.count < 16 and len(first.buffer) <= 4096 + 1100
        rest = 0
        while got := pop(srv, 32).count:
            rest += got
        assert first.count + rest == 16  # nothing skipped: the rest came in later receives
    finally:
        srv.close()


def test_deleting_a_topic_or_a_group_forgets_its_leases_for_good(
    tmp_path: Path, clock: FakeClock
) -> None:
    """Leases of a deleted topic are not redelivered when they end (their messages
    would come again through the retry topic), a group deleted with its offsets starts
    afresh, and a restart's replay does not bring either back."""
    srv = open_server(tmp_path, clock)
    srv.create_topic(
        CreateTopicRequest(topic="jobs", read_queue_nums=1, write_queue_nums=1, perm=6)
    )
    srv.create_topic(
        CreateTopicRequest(topic="other", read_queue_nums=1, write_queue_nums=1, perm=6)
    )
    send(srv, 3)
    assert srv.store.put_messages([InnerMessage(topic="other", queue_id=0, body=b"o")]).ok
    assert pop(srv, invisible_ms=5_000).count == 3
    srv.pop(PopRequest(group="g2", topic="other", invisible_ms=5_000))
    assert srv.pop_state.in_flight() == 4
    srv.delete_topic(TopicRequest(topic="jobs"))
    srv.delete_group(DeleteGroupRequest(group="g2", clean_offsets=True))
    assert srv.pop_state.in_flight() == 0
    clock.advance(6_000)
    assert srv.pop_revive_tick() == []  # nothing of theirs to redeliver
    assert retry_topic("workers") not in srv.tables.topics
    srv.close()

    srv = open_server(tmp_path, clock)
    try:
        assert srv.pop_state.in_flight() == 0 and not srv.pop_state.cursors
        again = srv.pop(PopRequest(group="g2", topic="other", invisible_ms=5_000))
        assert bodies(again) == [b"o"]  # g2 made again: from the start
    finally:
        srv.close()
