"""The console's pages, one module per part: login, cluster health, topics, groups,
message lookup, dead letters, offset resets. ``routes()`` lists them all."""

from __future__ import annotations

from starlette.routing import BaseRoute

from rayq.console.pages import cluster, dead_letters, groups, login, messages, offsets, topics


def routes() -> list[BaseRoute]:
    return [
        *login.ROUTES,
        *cluster.ROUTES,
        *topics.ROUTES,
        *groups.ROUTES,
        *dead_letters.ROUTES,
        *offsets.ROUTES,
        *messages.ROUTES,
    ]
