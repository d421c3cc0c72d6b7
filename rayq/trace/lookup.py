"""``Admin.trace(msg_id)``: one message's timeline from the trace topic.

The trace messages that name ``msg_id`` come from the brokers' key index
(``Admin.query_message(trace_topic, msg_id)``); their records give the message's send,
store and consume events (records.py). The store event's time is estimated by the
producer (midway through the send); while the message is still stored where the
event says, its own store time replaces the estimate. An id with neither trace
records nor a stored message is an ``InvalidMessageError``, as ``Admin.view_message``
says for it; a stored message that no traced client touched has an empty timeline.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import msgspec

from rayq.store.errors import InvalidMessageError, RayqError, TopicNotFoundError
from rayq.trace.records import TraceEvent, decode_body, in_time_order, timeline

if TYPE_CHECKING:
    from rayq.admin.admin import Admin

# Trace messages read for one id at most (its send, and many consumes and retries).
TRACE_QUERY_MAX: Final[int] = 4096


def trace_of(admin: Admin, msg_id: object, trace_topic: str) -> list[TraceEvent]:
    """The events of ``msg_id`` recorded in ``trace_topic``, oldest first."""
    if not isinstance(msg_id, str) or not msg_id:
        raise InvalidMessageError(f"msg_id must be a non-empty str, got {msg_id!r}")
    try:
        found = admin.query_message(trace_topic, msg_id, max_num=TRACE_QUERY_MAX)
    except TopicNotFoundError:  # nothing was ever traced in this deployment
        found = []
    events = timeline((r for m in found for r in decode_body(m.body)), msg_id)
    if events:
        return in_time_order([_stored_at(admin, e) for e in events])
    try:
        admin.view_message(msg_id)
    except InvalidMessageError:
        raise InvalidMessageError(
            f"no message with id {msg_id!r} on any broker and no trace of it in "
            f"{trace_topic!r} (wrong id, removed by retention, or sent without "
            "ClientConfig(trace_enable=True))",
            msg_id=msg_id,
        ) from None
    return []  # stored, never traced


def _stored_at(admin: Admin, event: TraceEvent) -> TraceEvent:
    """A store event with the time the broker stored the message, when it is still at
    the place the event names (else as estimated); other events as they are."""
    if event.kind != "store" or event.queue_offset < 0:
        return event
    try:
        stored = admin.get_message(event.topic, event.queue_id, event.queue_offset, event.broker)
    except RayqError:  # removed by retention, or its broker is away
        return event
    if stored.msg_id != event.msg_id:
        return event
    return msgspec.structs.replace(event, timestamp_ms=stored.store_timestamp)
