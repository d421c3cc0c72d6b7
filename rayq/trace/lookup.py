"""``Admin.trace(msg_id)``: one message's timeline from the trace topic.

The trace messages that name ``msg_id`` come from the brokers' key index
(``Admin.query_message(trace_topic, msg_id)``); their records give the message's send,
store and consume events (records.py). The store event's time is estimated by the
producer (midway through the send); when the message itself is still stored, its own
store time replaces the estimate. An id with neither trace records nor a stored
message is an ``InvalidMessageError``, as ``Admin.view_message`` says for it; a stored
message that no traced client touched has an empty timeline.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import msgspec

from rayq.store.errors import InvalidMessageError, TopicNotFoundError
from rayq.store.message import MessageExt
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
    try:
        stored: MessageExt | None = admin.view_message(msg_id)
    except InvalidMessageError:
        stored = None
    if not events and stored is None:
        raise InvalidMessageError(
            f"no message with id {msg_id!r} on any broker and no trace of it in "
            f"{trace_topic!r} (wrong id, removed by retention, or sent without "
            "ClientConfig(trace_enable=True))",
            msg_id=msg_id,
        )
    if stored is None:
        return events
    return _stored_at(events, stored)


def _stored_at(events: list[TraceEvent], stored: MessageExt) -> list[TraceEvent]:
    """``events`` with the estimated time of the store event of ``stored`` replaced by
    the time the broker stored it, in time order again."""
    return in_time_order(
        [
            msgspec.structs.replace(e, timestamp_ms=stored.store_timestamp)
            if e.kind == "store"
            and e.broker == stored.broker_name
            and e.queue_id == stored.queue_id
            and e.queue_offset == stored.queue_offset
            else e
            for e in events
        ]
    )
