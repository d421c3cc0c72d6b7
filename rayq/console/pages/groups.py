"""Consumer groups: the list (total lag, consumers) and one group's lag per queue
(``Admin.consumer_progress``) and its live consumers with the queues each owns
(``Admin.group_connections``). Listing the groups is an admin operation under ACL;
a form opens a group by name for the other logins."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from rayq.console.web import session_of, show
from rayq.store.errors import GroupNotFoundError


async def group_list(request: Request) -> Response:
    wanted = request.query_params.get("open", "").strip()
    if wanted:  # the "open a group" form: for logins that may not list the groups
        return RedirectResponse(f"/groups/{quote(wanted, safe='')}", status_code=303)
    return await show(request, "groups.html", _groups, session_of(request).admin, nav="groups")


async def group(request: Request) -> Response:
    name = request.path_params["group"]
    admin = session_of(request).admin
    return await show(request, "group.html", group_view, admin, name, nav="groups", group=name)


def _groups(admin: Any) -> dict[str, Any]:
    rows = []
    for name in sorted(admin.groups()):
        progress = admin.consumer_progress(name)
        rows.append(
            {
                "group": name,
                "lag": sum(p.lag for p in progress),
                "topics": sorted({p.queue.topic for p in progress}),
                "consumers": len(admin.group_connections(name)),
            }
        )
    return {"rows": rows}


def group_view(admin: Any, name: str) -> dict[str, Any]:
    """A group's progress and consumers; GroupNotFoundError when no broker has its
    config and it committed nothing."""
    progress = admin.consumer_progress(name)
    if not progress and name not in admin.groups():
        raise GroupNotFoundError(
            f"consumer group {name!r} does not exist: no broker has its config and it has "
            "committed no offset",
            group=name,
        )
    return {
        "progress": progress,
        "lag": sum(p.lag for p in progress),
        "consumers": sorted(admin.group_connections(name).items()),
    }


ROUTES = [
    Route("/groups", group_list, methods=["GET"]),
    Route("/groups/{group}", group, methods=["GET"]),
]
