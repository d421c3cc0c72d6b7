"""A group's dead letters (``Admin.dead_letters``: its ``%DLQ%<group>`` topic, oldest
first) with a resend button per message (``Admin.resend_dead_letter``: the group's
retry topic gets a copy, so that group consumes it again)."""

from __future__ import annotations

from typing import Any, Final

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from rayq.console.forms import text
from rayq.console.web import form_of, session_of, show, status_of
from rayq.store.errors import RayqError

SHOWN_MAX: Final[int] = 200


async def dead_letters(request: Request) -> Response:
    group = request.path_params["group"]
    admin = session_of(request).admin
    return await show(
        request, "dead_letters.html", _letters, admin, group, nav="groups", group=group
    )


async def resend(request: Request) -> Response:
    group = request.path_params["group"]
    admin = session_of(request).admin
    try:
        form = await form_of(request)
        msg_id = text(form, "msg_id", "the message id")
        result = await run_in_threadpool(admin.resend_dead_letter, group, msg_id)
    except RayqError as exc:
        return await show(
            request,
            "dead_letters.html",
            _letters,
            admin,
            group,
            status=status_of(exc),
            nav="groups",
            group=group,
            error=str(exc),
        )
    return await show(
        request,
        "dead_letters.html",
        _letters,
        admin,
        group,
        nav="groups",
        group=group,
        resent=msg_id,
        result=result,
    )


def _letters(admin: Any, group: str) -> dict[str, Any]:
    return {"letters": admin.dead_letters(group, max_num=SHOWN_MAX)}


ROUTES = [
    Route("/groups/{group}/dlq", dead_letters, methods=["GET"]),
    Route("/groups/{group}/dlq/resend", resend, methods=["POST"]),
]
