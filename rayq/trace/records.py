"""Trace records: what a traced client writes to the trace topic, and the timeline
``Admin.trace`` makes of them.

A trace message (a message of ``ClientConfig.trace_topic``, ``RMQ_SYS_TRACE_TOPIC`` by
default) carries the records of one or more traced calls. Its KEYS are the ids of
every message its records name (at most ``KEYS_PER_MESSAGE``), so the broker's key
index finds the records of a message id (``Admin.query_message(trace_topic, msg_id)``).
Its tag is ``TRACE_TAG``.

Body: UTF-8 JSON (msgspec), an array of records, each an object tagged by ``"type"``.
Per-message facts are columns (lists of one length, one entry per message), so a
batch of 100 sends is one record, not 100:

``{"type": "send", ...}`` (``SendTrace``): one put of a producer, as the broker
answered it: ``group`` (producer group), ``client_id``, ``topic``, ``broker``,
``queue_id``, ``born_ms`` (when the send began: its first message's born timestamp),
``cost_ms`` (from then to the answer), ``status`` (the ``SendStatus`` name; the end of
a transaction: ``COMMIT``, ``ROLLBACK`` or ``UNKNOWN``), and the columns ``msg_ids``,
``keys`` (each message's keys, space-separated), ``tags`` (null: none) and
``queue_offsets`` (-1 for a transaction's half message, which is in no queue yet).

``{"type": "consume", ...}`` (``ConsumeTrace``): one delivery to a consumer, or one
settlement: ``group`` (consumer group), ``client_id``, ``status`` (below),
``started_ms``, ``cost_ms``, and the columns ``msg_ids``, ``topics``, ``keys``,
``tags``, ``brokers``, ``queue_ids``, ``queue_offsets``, ``reconsume_times``.

Consume statuses: a push listener's answer (``CONSUME_SUCCESS``, ``RECONSUME_LATER``;
orderly: ``SUCCESS``, ``SUSPEND_CURRENT_QUEUE_A_MOMENT``, ``COMMIT``, ``ROLLBACK``) or
``EXCEPTION`` (it raised; its cost is the listener's time); ``POLLED`` (a
``PullConsumer.poll`` returned it); ``RECEIVED``, ``ACK``, ``CHANGE_INVISIBLE_DURATION``
and ``NACK`` (a ``SimpleConsumer``'s steps; the cost is the call's).

Decoding is lenient about what it does not know: a record of another type, or a
body that is not this JSON, is skipped (logged), so a newer writer never breaks
``Admin.trace``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from typing import Final, Literal

import msgspec

logger = logging.getLogger(__name__)

TRACE_TAG: Final[str] = "rayq-trace"
# A trace message names at most this many message ids in its KEYS (33 characters each:
# 3.2 KB, within any broker's max_properties_size_bytes, 4 KiB in StoreConfig.for_tests,
# 32 KiB by default).
KEYS_PER_MESSAGE: Final[int] = 96
# A trace message's body stays under this (uncompressed JSON), well within any broker's
# max_message_size_bytes (16 KiB in StoreConfig.for_tests, 4 MiB by default).
BODY_MAX_BYTES: Final[int] = 12 * 1024
# The order of events of one time: a send before its store before its consumes.
_KIND_ORDER: Final[dict[str, int]] = {"send": 0, "store": 1, "consume": 2}

TraceKind = Literal["send", "store", "consume"]


class TraceEvent(msgspec.Struct, frozen=True, kw_only=True):
    """One step of a message's life, as ``Admin.trace(msg_id)`` returns it.

    ``kind``: ``"send"`` (a producer sent it: ``group`` is the producer group,
    ``timestamp_ms`` when the send began, ``cost_ms`` until the broker answered,
    ``status`` the SendStatus name), ``"store"`` (the broker stored it: ``broker``,
    ``queue_id``, ``queue_offset``, ``timestamp_ms`` the store time) or ``"consume"``
    (a consumer of ``group`` got or settled it: ``status`` says how, ``timestamp_ms``
    when it began, ``cost_ms`` how long it took, ``reconsume_times`` how often it had
    been consumed again before).
    """

    kind: TraceKind
    msg_id: str
    topic: str
    group: str
    client_id: str
    keys: list[str]
    tags: str | None
    broker: str
    queue_id: int
    queue_offset: int
    timestamp_ms: int
    cost_ms: int
    status: str
    reconsume_times: int = 0


class SendTrace(msgspec.Struct, tag="send", kw_only=True):
    """One put as the broker answered it (module doc)."""

    group: str
    client_id: str
    topic: str
    broker: str
    queue_id: int
    born_ms: int
    cost_ms: int
    status: str
    msg_ids: list[str]
    keys: list[str]
    tags: list[str | None]
    queue_offsets: list[int]

    def slice(self, start: int, stop: int) -> SendTrace:
        return msgspec.structs.replace(
            self,
            msg_ids=self.msg_ids[start:stop],
            keys=self.keys[start:stop],
            tags=self.tags[start:stop],
            queue_offsets=self.queue_offsets[start:stop],
        )


class ConsumeTrace(msgspec.Struct, tag="consume", kw_only=True):
    """One delivery or settlement of some messages to a consumer (module doc)."""

    group: str
    client_id: str
    status: str
    started_ms: int
    cost_ms: int
    msg_ids: list[str]
    topics: list[str]
    keys: list[str]
    tags: list[str | None]
    brokers: list[str]
    queue_ids: list[int]
    queue_offsets: list[int]
    reconsume_times: list[int]

    def slice(self, start: int, stop: int) -> ConsumeTrace:
        return msgspec.structs.replace(
            self,
            msg_ids=self.msg_ids[start:stop],
            topics=self.topics[start:stop],
            keys=self.keys[start:stop],
            tags=self.tags[start:stop],
            brokers=self.brokers[start:stop],
            queue_ids=self.queue_ids[start:stop],
            queue_offsets=self.queue_offsets[start:stop],
            reconsume_times=self.reconsume_times[start:stop],
        )


TraceRecord = SendTrace | ConsumeTrace

_encoder: Final = msgspec.json.Encoder()
_decoder: Final = msgspec.json.Decoder(list[TraceRecord])


def encode_body(records: Sequence[TraceRecord]) -> bytes:
    """The body of a trace message holding ``records``."""
    return _encoder.encode(records)


def decode_body(body: bytes) -> list[TraceRecord]:
    """The records of a trace message's body ([] for a body this version cannot read)."""
    try:
        return _decoder.decode(body)
    except msgspec.DecodeError as exc:
        logger.warning("a trace message's body is not rayq trace JSON; skipped: %s", exc)
        return []


def split_records(
    records: Iterable[TraceRecord], keys_max: int = KEYS_PER_MESSAGE
) -> Iterator[tuple[list[TraceRecord], list[str]]]:
    """``records`` packed into trace messages: (the records of one, its keys), each
    naming at most ``keys_max`` distinct message ids (a larger record is cut)."""
    packed: list[TraceRecord] = []
    keys: dict[str, None] = {}
    for record in records:
        start, n = 0, len(record.msg_ids)
        while start < n:
            room = keys_max - len(keys)
            if room <= 0:
                yield packed, list(keys)
                packed, keys = [], {}
                room = keys_max
            part = record if start == 0 and n <= room else record.slice(start, start + room)
            packed.append(part)
            keys.update(dict.fromkeys(part.msg_ids))
            start += len(part.msg_ids)
    if packed:
        yield packed, list(keys)


def pack_messages(
    records: Sequence[TraceRecord],
    keys_max: int = KEYS_PER_MESSAGE,
    body_max: int = BODY_MAX_BYTES,
) -> Iterator[tuple[bytes, list[str], int]]:
    """``records`` as trace messages: (body, keys, how many records it holds), each
    naming at most ``keys_max`` ids with a body of at most ``body_max`` bytes (a
    message that came out larger is packed again with as many ids as fit)."""
    for part, keys in split_records(records, keys_max):
        body = encode_body(part)
        if len(body) <= body_max or len(keys) == 1:
            yield body, keys, len(part)
            continue
        fit = max(1, len(keys) * body_max // len(body) * 9 // 10)
        yield from pack_messages(part, fit, body_max)


def _keys(joined: str) -> list[str]:
    return joined.split(" ") if joined else []


def send_events(record: SendTrace, msg_id: str) -> list[TraceEvent]:
    """The send and store events of ``msg_id`` in ``record`` (a transaction's end: its
    send event only)."""
    out: list[TraceEvent] = []
    for i, mid in enumerate(record.msg_ids):
        if mid != msg_id:
            continue
        send = TraceEvent(
            kind="send",
            msg_id=mid,
            topic=record.topic,
            group=record.group,
            client_id=record.client_id,
            keys=_keys(record.keys[i]),
            tags=record.tags[i],
            broker=record.broker,
            queue_id=record.queue_id,
            queue_offset=record.queue_offsets[i],
            timestamp_ms=record.born_ms,
            cost_ms=record.cost_ms,
            status=record.status,
        )
        out.append(send)
        if record.status in _END_STATES:
            continue
        # The broker stored it while the send was on its way: midway, as RocketMQ's
        # trace estimates it (Admin.trace puts the stored message's own time instead).
        stored_ms = record.born_ms + record.cost_ms // 2
        out.append(msgspec.structs.replace(send, kind="store", timestamp_ms=stored_ms, cost_ms=0))
    return out


_END_STATES: Final = frozenset({"COMMIT", "ROLLBACK", "UNKNOWN"})


def consume_events(record: ConsumeTrace, msg_id: str) -> list[TraceEvent]:
    """The consume events of ``msg_id`` in ``record``."""
    return [
        TraceEvent(
            kind="consume",
            msg_id=mid,
            topic=record.topics[i],
            group=record.group,
            client_id=record.client_id,
            keys=_keys(record.keys[i]),
            tags=record.tags[i],
            broker=record.brokers[i],
            queue_id=record.queue_ids[i],
            queue_offset=record.queue_offsets[i],
            timestamp_ms=record.started_ms,
            cost_ms=record.cost_ms,
            status=record.status,
            reconsume_times=record.reconsume_times[i],
        )
        for i, mid in enumerate(record.msg_ids)
        if mid == msg_id
    ]


def timeline(records: Iterable[TraceRecord], msg_id: str) -> list[TraceEvent]:
    """The events of ``msg_id`` in ``records``, oldest first."""
    events: list[TraceEvent] = []
    for record in records:
        if isinstance(record, SendTrace):
            events += send_events(record, msg_id)
        else:
            events += consume_events(record, msg_id)
    return in_time_order(events)


def in_time_order(events: list[TraceEvent]) -> list[TraceEvent]:
    """``events`` sorted oldest first (of one time: send, then store, then consume)."""
    return sorted(events, key=lambda e: (e.timestamp_ms, _KIND_ORDER[e.kind]))


__all__ = [
    "KEYS_PER_MESSAGE",
    "TRACE_TAG",
    "ConsumeTrace",
    "SendTrace",
    "TraceEvent",
    "TraceRecord",
    "decode_body",
    "encode_body",
    "in_time_order",
    "pack_messages",
    "send_events",
    "split_records",
    "timeline",
]
