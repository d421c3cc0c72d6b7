"""Topics: the list (queues, messages, rate, last store time) and one topic's queues
with their offsets, last store time and rate (rayq/console/rates.py).

The list hides the system topics (``%RETRY%``, ``%DLQ%``, ``RMQ_SYS_``) unless asked
for them (``?system=1``)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from rayq.console.rates import RateMeter, total
from rayq.console.web import console_of, session_of, show

SYSTEM_PREFIXES = ("%RETRY%", "%DLQ%", "RMQ_SYS_")


async def topic_list(request: Request) -> Response:
    system = request.query_params.get("system") == "1"
    admin = session_of(request).admin
    rates = console_of(request).rates
    return await show(request, "topics.html", _topics, admin, rates, system, nav="topics")


async def topic(request: Request) -> Response:
    name = request.path_params["topic"]
    admin = session_of(request).admin
    rates = console_of(request).rates
    return await show(request, "topic.html", _topic, admin, rates, name, nav="topics", topic=name)


def _topics(admin: Any, meter: RateMeter, system: bool) -> dict[str, Any]:
    names = [t for t in admin.topics() if system or not t.startswith(SYSTEM_PREFIXES)]
    rows = []
    for name in sorted(names):
        stats = admin.topic_stats(name)
        rows.append(
            {
                "topic": name,
                "queues": len(stats),
                "messages": sum(s.max_offset - s.min_offset for s in stats),
                "rate": total(meter.observe(stats)),
                "last_store": max((s.last_store_timestamp for s in stats), default=0),
            }
        )
    return {"rows": rows, "system": system}


def _topic(admin: Any, meter: RateMeter, name: str) -> dict[str, Any]:
    stats = sorted(admin.topic_stats(name), key=lambda s: s.queue)
    rates = meter.observe(stats)
    rows = [{"stats": s, "rate": rates[s.queue]} for s in stats]
    return {"rows": rows, "rate": total(rates)}


ROUTES = [
    Route("/topics", topic_list, methods=["GET"]),
    Route("/topics/{topic}", topic, methods=["GET"]),
]
