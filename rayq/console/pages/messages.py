"""Message lookup: by id (``Admin.view_message``), by key (``Admin.query_message``)
and by time (``Admin.offsets_at``, then ``Admin.get_message`` from each queue's
offset at that time), and one message with its trace (``Admin.trace``).

Lookups are reads, so their forms are GETs (a result can be bookmarked); each bad
field is a 400 with what it takes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from rayq.console.forms import MAX_NUM_MAX, integer, text, timestamp_ms
from rayq.console.web import session_of, show
from rayq.store.errors import InvalidRequestError, RayqError

BY: Final[tuple[str, ...]] = ("id", "key", "time")
PER_QUEUE_DEFAULT: Final[int] = 5


async def lookup(request: Request) -> Response:
    form = dict(request.query_params)
    by = form.get("by", "")
    admin = session_of(request).admin
    if not by:
        return await show(request, "messages.html", lambda: {}, nav="messages", form=form)
    return await show(request, "messages.html", find, admin, form, nav="messages", form=form)


async def message(request: Request) -> Response:
    msg_id = request.path_params["msg_id"]
    admin = session_of(request).admin
    return await show(request, "message.html", _message, admin, msg_id, nav="messages")


def find(admin: Any, form: Mapping[str, str]) -> dict[str, Any]:
    """The messages a lookup form asks for: ``by`` is id, key or time."""
    by = form.get("by", "")
    if by not in BY:
        raise InvalidRequestError(f"look messages up by one of {', '.join(BY)}, got {by!r}")
    if by == "id":
        return {"found": [admin.view_message(text(form, "msg_id", "the message id"))]}
    topic = text(form, "topic", "the topic")
    max_num = integer(form, "max_num", "max messages", lo=1, hi=MAX_NUM_MAX, default=32)
    if by == "key":
        return {"found": admin.query_message(topic, text(form, "key", "the key"), max_num=max_num)}
    at_ms = timestamp_ms(form.get("time", ""), "the time")
    return {"found": by_time(admin, topic, at_ms, max_num), "at_ms": at_ms}


def by_time(admin: Any, topic: str, at_ms: int, max_num: int) -> list[Any]:
    """The first messages stored at or after ``at_ms`` in each read queue of ``topic``,
    oldest first, at most ``max_num`` in all."""
    ends = {s.queue: s.max_offset for s in admin.topic_stats(topic)}
    per_queue = max(1, min(PER_QUEUE_DEFAULT, max_num))
    found = []
    for queue, offset in admin.offsets_at(topic, at_ms).items():
        last = min(offset + per_queue, ends.get(queue, offset))
        for queue_offset in range(offset, last):
            found.append(admin.get_message(topic, queue.queue_id, queue_offset, queue.broker_name))
    found.sort(key=lambda m: (m.store_timestamp, m.broker_name, m.queue_id, m.queue_offset))
    return found[:max_num]


def _message(admin: Any, msg_id: str) -> dict[str, Any]:
    msg = admin.view_message(msg_id)
    try:
        trace, trace_error = admin.trace(msg_id), ""
    except RayqError as exc:  # the message is shown; why its trace is not, beside it
        trace, trace_error = [], str(exc)
    return {"msg": msg, "trace": trace, "trace_error": trace_error}


ROUTES = [
    Route("/messages", lookup, methods=["GET"]),
    Route("/messages/{msg_id}", message, methods=["GET"]),
]
