"""Cluster health: each actor OK, WARN or FAIL and why (``Admin.health``), and the
broker replicas the coordinator knows (``Admin.broker_table``)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from rayq.admin.health import worst
from rayq.console.web import session_of, show


async def cluster(request: Request) -> Response:
    return await show(request, "cluster.html", _health, session_of(request).admin, nav="cluster")


def _health(admin: Any) -> dict[str, Any]:
    actors = admin.health()
    return {
        "actors": actors,
        "level": worst([a.level for a in actors]).value,
        "brokers": admin.broker_table(),
    }


ROUTES = [Route("/", cluster, methods=["GET"])]
