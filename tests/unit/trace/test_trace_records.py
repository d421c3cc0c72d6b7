"""Trace records (rayq/trace/records.py) and the dispatcher (rayq/trace/dispatcher.py)
on their own: the JSON body, packing into trace messages, the timeline of one id, and
the dispatcher's batching, bounded buffer, flush and failures, against a sink that
records what it was given (no broker, no Ray)."""

from __future__ import annotations

import threading

import msgspec
import pytest

import rayq
from rayq.store import Message
from rayq.store.errors import BrokerUnavailableError, PermissionDeniedError
from rayq.testing import wait_until
from rayq.trace.dispatcher import TraceDispatcher, TraceStats
from rayq.trace.records import (
    BODY_MAX_BYTES,
    KEYS_PER_MESSAGE,
    TRACE_TAG,
    ConsumeTrace,
    SendTrace,
    decode_body,
    encode_body,
    pack_messages,
    split_records,
    timeline,
)


def send_record(ids: list[str], born_ms: int = 1000, cost_ms: int = 10) -> SendTrace:
    return SendTrace(
        group="pg",
        client_id="p1",
        topic="orders",
        broker="broker-a",
        queue_id=2,
        born_ms=born_ms,
        cost_ms=cost_ms,
        status="SEND_OK",
        msg_ids=ids,
        keys=[f"k-{i} x" for i in ids],
        tags=["paid" for _ in ids],
        queue_offsets=list(range(len(ids))),
    )


def consume_record(
    ids: list[str], started_ms: int, status: str = "CONSUME_SUCCESS"
) -> ConsumeTrace:
    n = len(ids)
    return ConsumeTrace(
        group="cg",
        client_id="c1",
        status=status,
        started_ms=started_ms,
        cost_ms=3,
        msg_ids=ids,
        topics=["orders"] * n,
        keys=[""] * n,
        tags=[None] * n,
        brokers=["broker-a"] * n,
        queue_ids=[2] * n,
        queue_offsets=list(range(n)),
        reconsume_times=[1] * n,
    )


# ----------------------------------------------------------------------- records
def test_a_body_round_trips_and_is_tagged_json() -> None:
    records = [send_record(["A", "B"]), consume_record(["A"], 2000)]
    body = encode_body(records)
    assert decode_body(body) == records
    assert [r["type"] for r in msgspec.json.decode(body)] == ["send", "consume"]


def test_a_body_that_is_not_trace_json_gives_no_records() -> None:
    assert decode_body(b"not json") == []
    assert decode_body(b'[{"type": "future-kind", "x": 1}]') == []


def test_the_timeline_has_send_store_and_consumes_of_one_id_oldest_first() -> None:
    records = [
        consume_record(["B", "A"], 1500, "RECONSUME_LATER"),
        send_record(["A", "B"], born_ms=1000, cost_ms=10),
        consume_record(["A"], 1200),
    ]
    events = timeline(records, "A")
    assert [(e.kind, e.timestamp_ms, e.status) for e in events] == [
        ("send", 1000, "SEND_OK"),
        ("store", 1005, "SEND_OK"),  # midway through the send
        ("consume", 1200, "CONSUME_SUCCESS"),
        ("consume", 1500, "RECONSUME_LATER"),
    ]
    send = events[0]
    assert (send.group, send.client_id, send.keys, send.tags) == ("pg", "p1", ["k-A", "x"], "paid")
    assert (send.broker, send.queue_id, send.queue_offset, send.cost_ms) == ("broker-a", 2, 0, 10)
    consume = events[-1]
    assert (consume.group, consume.queue_offset, consume.reconsume_times) == ("cg", 1, 1)
    assert timeline(records, "C") == []


def test_a_transaction_end_is_a_send_event_without_a_store() -> None:
    end = msgspec.structs.replace(send_record(["T"], born_ms=5000, cost_ms=0), status="COMMIT")
    events = timeline([send_record(["T"]), end], "T")
    assert [(e.kind, e.status) for e in events] == [
        ("send", "SEND_OK"),
        ("store", "SEND_OK"),
        ("send", "COMMIT"),
    ]


def test_records_are_packed_into_messages_of_at_most_keys_max_ids() -> None:
    records = [send_record([f"s{i}" for i in range(5)]), consume_record(["c1", "c2"], 1)]
    packed = list(split_records(records, keys_max=3))
    assert [keys for _, keys in packed] == [["s0", "s1", "s2"], ["s3", "s4", "c1"], ["c2"]]
    # every message id keeps all of its events, whichever message they went to
    rebuilt = [r for part, _ in packed for r in part]
    for mid in ["s0", "s3", "s4", "c1", "c2"]:
        assert timeline(rebuilt, mid) == timeline(records, mid)


def test_messages_stay_under_the_body_limit_and_keep_every_event() -> None:
    """Records too large together are packed into more, smaller messages."""
    records = [send_record([f"s{i}" for i in range(40)]) for _ in range(3)]
    packed = list(pack_messages(records, keys_max=96, body_max=2048))
    assert len(packed) > 3
    assert all(len(body) <= 2048 for body, _, _ in packed)
    rebuilt = [r for body, _, _ in packed for r in decode_body(body)]
    assert timeline(rebuilt, "s7") == timeline(records, "s7")


def test_the_same_id_twice_in_one_message_is_one_key() -> None:
    [(_, keys)] = split_records([send_record(["A"]), consume_record(["A"], 2)])
    assert keys == ["A"]


# -------------------------------------------------------------------- dispatcher
class Sink:
    """Records what the dispatcher writes; ``fail`` makes the next writes raise;
    ``gate`` (when cleared) holds the writes."""

    def __init__(self) -> None:
        self.batches: list[list[Message]] = []
        self.topics: list[str] = []
        self.fail: Exception | None = None
        self.topic_fail: Exception | None = None
        self.gate = threading.Event()
        self.gate.set()
        self.closed = False

    def ensure_topic(self, topic: str) -> None:
        if self.topic_fail is not None:
            raise self.topic_fail
        self.topics.append(topic)

    def send_batch(self, msgs: list[Message]) -> object:
        self.gate.wait(10)
        if self.fail is not None:
            raise self.fail
        self.batches.append(msgs)
        return None

    def close(self) -> None:
        self.closed = True

    def records(self) -> list[SendTrace | ConsumeTrace]:
        return [r for batch in self.batches for m in batch for r in decode_body(m.body)]


def test_records_are_written_in_batches_as_trace_messages_keyed_by_their_ids() -> None:
    sink = Sink()
    d = TraceDispatcher(sink, "RMQ_SYS_TRACE_TOPIC", batch_messages=2)
    try:
        for i in range(600):
            assert d.submit(consume_record([f"id{i}"], i))
        assert d.flush()
    finally:
        d.close()
    assert sink.topics == ["RMQ_SYS_TRACE_TOPIC"]  # made sure of once
    msgs = [m for batch in sink.batches for m in batch]
    assert all(len(batch) <= 2 for batch in sink.batches)
    assert len(msgs) < 600  # many records per trace message
    assert all(m.topic == "RMQ_SYS_TRACE_TOPIC" and m.tags == TRACE_TAG for m in msgs)
    assert all(len(m.keys) <= KEYS_PER_MESSAGE for m in msgs)
    assert all(len(m.body) <= BODY_MAX_BYTES for m in msgs)
    assert sorted(k for m in msgs for k in m.keys) == sorted(f"id{i}" for i in range(600))
    assert [r.msg_ids[0] for r in sink.records()] == [f"id{i}" for i in range(600)]
    assert d.stats() == TraceStats(submitted=600, written=600, dropped=0, failed=0)
    assert sink.closed


def test_a_full_buffer_drops_and_counts_records_without_blocking() -> None:
    sink = Sink()
    sink.gate.clear()  # the first write hangs: the buffer fills up behind it
    d = TraceDispatcher(sink, "t", capacity=10, batch_records=1, linger_ms=0)
    try:
        assert d.submit(consume_record(["first"], 0))
        wait_until(lambda: not d._buffer)  # the thread took it and waits at the gate
        accepted = [d.submit(consume_record([f"m{i}"], i)) for i in range(30)]
        assert accepted.count(True) == 10
        assert d.stats().dropped == 20
    finally:
        sink.gate.set()
        d.close()
    assert d.stats().written == 11
    assert len(sink.records()) == 11


def test_a_failed_write_is_counted_and_the_dispatcher_goes_on() -> None:
    sink = Sink()
    d = TraceDispatcher(sink, "t")
    try:
        sink.fail = BrokerUnavailableError("no broker")
        d.submit(consume_record(["a"], 0))
        assert d.flush()
        sink.fail = None
        d.submit(consume_record(["b"], 1))
        assert d.flush()
    finally:
        d.close()
    assert d.stats().failed == 1
    assert [r.msg_ids for r in sink.records()] == [["b"]]


def test_a_trace_topic_that_cannot_be_created_drops_records_and_is_tried_again_later() -> None:
    sink = Sink()
    sink.topic_fail = PermissionDeniedError("no right to create topics")
    d = TraceDispatcher(sink, "t")
    try:
        d.submit(consume_record(["a"], 0))
        assert d.flush()
        sink.topic_fail = None
        d.submit(consume_record(["b"], 0))
        assert d.flush()  # within RETRY_TOPIC_S of the failure: not asked again yet
    finally:
        d.close()
    assert d.stats().failed == 2
    assert sink.batches == []


def test_a_closed_dispatcher_drops_what_comes_after() -> None:
    sink = Sink()
    d = TraceDispatcher(sink, "t")
    d.submit(consume_record(["a"], 0))
    d.close()
    assert not d.submit(consume_record(["late"], 0))
    assert [r.msg_ids for r in sink.records()] == [["a"]]
    assert d.stats().dropped == 1


@pytest.mark.parametrize("topic", ["%DLQ%g", "%RETRY%g", "SCHEDULE_TOPIC_XXXX", "a b", ""])
def test_a_bad_trace_topic_is_a_config_error(topic: str) -> None:
    with pytest.raises(rayq.ConfigError, match="trace_topic"):
        rayq.ClientConfig(trace_enable=True, trace_topic=topic)


def test_the_default_trace_topic_is_rocketmqs() -> None:
    cfg = rayq.ClientConfig(trace_enable=True)
    assert cfg.trace_topic == "RMQ_SYS_TRACE_TOPIC"
    assert not rayq.ClientConfig().trace_enable
