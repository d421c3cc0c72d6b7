"""``rayq.SimpleConsumer`` (POP) against the in-process fake cluster (no Ray): many
consumers of one group on few queues, acks, lease changes, nacks, redelivery with a
delivery count, filters, bad input, and leases kept over a broker restart."""

from __future__ import annotations

import pickle
import time
from typing import Any

import pytest

import rayq
from rayq.consumer.simple import ReceivedMessage, SimpleConsumer
from rayq.service_state import ServiceState
from rayq.store.errors import (
    ClientError,
    ClosedError,
    InvalidReceiptHandleError,
    InvalidRequestError,
    TopicNotFoundError,
)
from rayq.testing import FakeCluster, FakeTransport

TOPIC = "jobs"


@pytest.fixture
def cluster_options() -> dict[str, Any]:
    return {"under": "brokers", "topics": {TOPIC: 2}}


def consumer(cluster: FakeCluster, group: str = "workers", **kwargs: Any) -> SimpleConsumer:
    kwargs.setdefault("await_duration", 0)
    c = SimpleConsumer(group, transport=FakeTransport(cluster), **kwargs)
    c.subscribe(TOPIC)
    c.start()
    return c


def send(cluster: FakeCluster, n: int, tags: str | None = None) -> list[bytes]:
    bodies = [f"m{i}".encode() for i in range(n)]
    with rayq.Producer("pg", transport=FakeTransport(cluster)) as producer:
        for b in bodies:
            producer.send(rayq.Message(TOPIC, b, tags=tags))
    return bodies


def drain(c: SimpleConsumer, **kw: Any) -> list[ReceivedMessage]:
    out: list[ReceivedMessage] = []
    while got := c.receive(**kw):
        out += got
    return out


def test_more_consumers_than_queues_share_the_messages_once_each(cluster: FakeCluster) -> None:
    sent = send(cluster, 30)
    workers = [consumer(cluster) for _ in range(5)]  # 5 consumers, 2 queues
    seen: list[bytes] = []
    for _ in range(20):
        for w in workers:
            for m in w.receive(max_messages=2, invisible_duration=30):
                assert m.delivery_count == 1 and m.topic == TOPIC
                seen.append(m.body)
                w.ack(m)
    assert sorted(seen) == sorted(sent)
    for w in workers:
        assert w.receive() == []


def test_a_message_not_acked_comes_again_with_a_higher_delivery_count(
    cluster: FakeCluster,
) -> None:
    send(cluster, 3)
    a, b = consumer(cluster), consumer(cluster)
    got = a.receive(max_messages=3, invisible_duration=0.2)
    a.ack(got[0])
    a.ack(got[2])
    assert b.receive() == []  # m1 is invisible to the others while leased
    time.sleep(0.25)
    cluster.pop_revive_tick()
    (again,) = b.receive()
    assert again.body == got[1].body and again.delivery_count == 2
    assert again.topic == TOPIC  # read from %RETRY%workers, shown as the topic sent to
    b.ack(again)
    time.sleep(0.25)
    cluster.pop_revive_tick()
    assert a.receive() == b.receive() == []


def test_change_invisible_duration_keeps_a_slow_message_and_replaces_its_handle(
    cluster: FakeCluster,
) -> None:
    send(cluster, 1)
    a = consumer(cluster)
    (m,) = a.receive(invisible_duration=0.2)
    old = m.receipt_handle
    a.change_invisible_duration(m, 30)
    assert m.receipt_handle != old
    time.sleep(0.25)
    cluster.pop_revive_tick()
    assert consumer(cluster).receive() == []
    with pytest.raises(InvalidReceiptHandleError, match="newest handle"):
        a.ack_handle(old, TOPIC)
    a.ack(m)
    with pytest.raises(InvalidReceiptHandleError, match="not in flight"):
        a.ack(m)


def test_a_received_message_pickles_with_its_handle(cluster: FakeCluster) -> None:
    send(cluster, 1)
    a = consumer(cluster)
    (m,) = a.receive()
    copy = pickle.loads(pickle.dumps(m))
    assert isinstance(copy, ReceivedMessage) and copy == m
    assert (copy.receipt_handle, copy.delivery_count) == (m.receipt_handle, 1)
    a.ack(copy)  # settled by the copy, as a Ray task would
    with pytest.raises(InvalidReceiptHandleError):
        a.ack(m)


def test_nack_redelivers_at_once(cluster: FakeCluster) -> None:
    send(cluster, 1)
    a = consumer(cluster)
    (m,) = a.receive()
    a.nack(m)
    cluster.pop_revive_tick()
    (again,) = a.receive()
    assert again.body == m.body and again.delivery_count == 2


def test_a_handle_of_another_group_is_refused(cluster: FakeCluster) -> None:
    send(cluster, 1)
    (m,) = consumer(cluster, "workers").receive()
    other = consumer(cluster, "others")
    with pytest.raises(InvalidReceiptHandleError, match="given to group 'others'"):
        other.ack(m)
    with pytest.raises(InvalidReceiptHandleError, match="not a receipt handle"):
        other.ack_handle("garbage!", TOPIC)


def test_tag_filters_apply(cluster: FakeCluster) -> None:
    send(cluster, 2, tags="A")
    send(cluster, 3, tags="B")
    c = SimpleConsumer("tagged", transport=FakeTransport(cluster), await_duration=0)
    c.subscribe(TOPIC, "B")
    c.start()
    got = drain(c)
    assert len(got) == 3 and {m.tags for m in got} == {"B"}


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda c: c.receive(max_messages=0), InvalidRequestError, "max_messages"),
        (lambda c: c.receive(max_messages=10**6), InvalidRequestError, "max_messages"),
        (lambda c: c.receive(invisible_duration=0), InvalidRequestError, "> 0"),
        (lambda c: c.receive(invisible_duration=-1), InvalidRequestError, "> 0"),
        (lambda c: c.receive(invisible_duration=13 * 3600), InvalidRequestError, "12 hours"),
        (lambda c: c.receive(invisible_duration="5"), InvalidRequestError, "number"),
        (lambda c: c.ack("not a message"), ClientError, "a message receive"),
    ],
)
def test_bad_input_gets_a_clear_error_and_changes_nothing(
    cluster: FakeCluster, call: Any, error: type[Exception], match: str
) -> None:
    send(cluster, 2)
    c = consumer(cluster)
    with pytest.raises(error, match=match):
        call(c)
    assert len(drain(c)) == 2  # nothing was leased by the refused call


def test_life_cycle_and_unknown_topics(cluster: FakeCluster) -> None:
    c = SimpleConsumer("workers", transport=FakeTransport(cluster))
    with pytest.raises(TopicNotFoundError):
        c.subscribe("nope")
    with pytest.raises(ClientError, match="start"):
        c.receive()
    c.subscribe(TOPIC)
    c.start()
    assert c.service_state is ServiceState.RUNNING
    with pytest.raises(ClientError, match="once"):
        c.start()
    c.shutdown()
    with pytest.raises(ClosedError):
        c.receive()
    with pytest.raises(InvalidRequestError, match="await_duration"):
        SimpleConsumer("workers", await_duration=3600)


def test_receive_waits_for_a_message_sent_meanwhile(cluster: FakeCluster) -> None:
    c = consumer(cluster, await_duration=5)
    import threading

    threading.Timer(0.3, lambda: send(cluster, 1)).start()
    started = time.monotonic()
    got = c.receive()
    assert [m.body for m in got] == [b"m0"]
    assert time.monotonic() - started < 4.5  # woken by the append, not by the wait's end


def test_leases_survive_a_broker_restart(cluster: FakeCluster) -> None:
    send(cluster, 4)
    c = consumer(cluster)
    got = c.receive(max_messages=4, invisible_duration=30)
    c.ack(got[0])
    cluster.restart()
    c.ack(got[1])  # an old handle still names its lease on the restarted broker
    assert c.receive() == []  # got[2], got[3] are still leased: nothing comes twice
    c.nack(got[2])
    cluster.pop_revive_tick()
    assert [m.body for m in c.receive()] == [got[2].body]


def test_ack_many_settles_a_whole_receive_with_one_call_per_broker(cluster: FakeCluster) -> None:
    send(cluster, 40)
    c = consumer(cluster)
    got = c.receive(max_messages=40)
    before = len(cluster.calls_of("ack"))
    c.ack_many(got)
    assert len(cluster.calls_of("ack")) == before + 1
    assert c.receive() == []
    with pytest.raises(InvalidReceiptHandleError, match="not in flight"):
        c.ack_many(got[:1])
    c.ack_many([])  # nothing to settle: no call


def test_leases_survive_a_failover_and_a_cut_log_loses_no_message(cluster: FakeCluster) -> None:
    send(cluster, 6)
    c = consumer(cluster)
    got = c.receive(max_messages=3, invisible_duration=30)
    c.ack(got[0])
    cluster.fail_over(cut_to=cluster.servers["broker-a"].store.written_offset)  # nothing lost
    c.ack(got[1])  # its lease came back with the promoted broker's log
    assert len(drain(c)) == 3  # got[2] still leased: the 3 others only
    # A failover that lost a receive's lease record: its messages are not lost but
    # come again at once (the cursor falls back to what the log holds).
    d = consumer(cluster, "others")
    before = cluster.servers["broker-a"].store.written_offset
    lost = d.receive(max_messages=2, invisible_duration=30)
    cluster.fail_over(cut_to=before)
    again = drain(d)
    assert {m.body for m in lost} <= {m.body for m in again}
    assert len(again) == 6


def test_pull_push_and_pop_groups_read_one_topic_side_by_side(cluster: FakeCluster) -> None:
    sent = send(cluster, 10)
    pop = consumer(cluster, "pop-group")
    pull = rayq.PullConsumer(
        "pull-group",
        consume_from=rayq.ConsumeFromWhere.FIRST_OFFSET,
        transport=FakeTransport(cluster),
    )
    pull.subscribe(TOPIC)
    pull.start()
    from rayq.testing import poll_until

    popped = drain(pop)
    pop.ack_many(popped)
    pulled = poll_until(pull, 10)
    assert sorted(m.body for m in popped) == sorted(sent) == sorted(m.body for m in pulled)
    pull.shutdown()


def lag(cluster: FakeCluster, group: str = "workers") -> int:
    admin = rayq.Admin(transport=FakeTransport(cluster))
    return sum(p.lag for p in admin.consumer_progress(group) if p.queue.topic == TOPIC)


def test_deferred_acks_ride_on_the_next_receive(cluster: FakeCluster) -> None:
    """``ack_many(defer=True)`` makes no call: the acks go with the next receive from
    the broker (one call settles them and leases more), or with ``flush_acks``."""
    send(cluster, 6)
    c = consumer(cluster)
    first = c.receive(max_messages=4, invisible_duration=60)
    c.ack_many(first, defer=True)
    assert lag(cluster) == 6  # nothing settled yet: no call was made
    rest = c.receive(max_messages=4, invisible_duration=60)  # carries the 4 acks
    assert len(rest) == 2 and lag(cluster) == 2
    c.ack_many(rest, defer=True)
    c.flush_acks()
    assert lag(cluster) == 0
    with pytest.raises(InvalidReceiptHandleError):
        c.ack(first[0])  # settled by the receive that carried it
    c.shutdown()


def test_a_refused_deferred_ack_is_logged_and_the_receive_goes_on(
    cluster: FakeCluster, caplog: pytest.LogCaptureFixture
) -> None:
    send(cluster, 2)
    c = consumer(cluster)
    (one, two) = c.receive(max_messages=2, invisible_duration=60)
    c.ack(one)
    c.ack_many([one, two], defer=True)  # ``one`` is settled already: all or none
    send(cluster, 1)
    with caplog.at_level("WARNING", logger="rayq.consumer.simple"):
        (three,) = c.receive(invisible_duration=60)
    assert "refused 2 deferred ack(s)" in caplog.text
    assert three.body == b"m0" and lag(cluster) == 2  # ``two`` is still in flight
    c.ack_many([two, three], defer=True)
    c.shutdown()  # sends the deferred acks
    assert lag(cluster) == 0
