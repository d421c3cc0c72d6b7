"""Logging in and out.

A login gives the deployment key and, with ACL on, an ACL account's access key and
secret key. The key is checked here (constant time); the account by the deployment
itself: the session's ``Admin`` is made with those credentials and lists the topics,
which the coordinator refuses for an unknown account or a wrong secret. Only then is
a session opened.
"""

from __future__ import annotations

from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from rayq.actors.protocol.auth import Credentials
from rayq.console.sessions import check_login_key
from rayq.console.web import SESSION_KEY, Console, console_of, form_of, render, status_of
from rayq.store.errors import PermissionDeniedError, RayqError


async def login_page(request: Request) -> Response:
    return render(request, "login.html", next=_next(request.query_params.get("next")))


async def login(request: Request) -> Response:
    form = await request.form()
    fields = {k: v for k, v in form.items() if isinstance(v, str)}
    console = console_of(request)
    target = _next(fields.get("next"))
    access_key = fields.get("access_key", "").strip()
    try:
        admin = await run_in_threadpool(
            _open_admin, console, fields.get("key", ""), access_key, fields.get("secret_key", "")
        )
    except RayqError as exc:
        return render(
            request,
            "login.html",
            status_of(exc),
            error=str(exc),
            next=target,
            access_key=access_key,
        )
    who = access_key or (
        console.default_credentials.access_key if console.default_credentials else ""
    )
    request.session[SESSION_KEY] = console.sessions.open(admin, who)
    return RedirectResponse(target, status_code=303)


async def logout(request: Request) -> Response:
    await form_of(request)
    console_of(request).sessions.close(request.session.get(SESSION_KEY))
    request.session.clear()
    return RedirectResponse("/login", status_code=303)


def _open_admin(console: Console, key: str, access_key: str, secret_key: str) -> Any:
    check_login_key(console.deployment_key, key)
    if bool(access_key) != bool(secret_key):
        raise PermissionDeniedError(
            "enter both the access key and the secret key of your ACL account (or neither "
            "when the deployment has no ACL)"
        )
    credentials = (
        Credentials(access_key=access_key, secret_key=secret_key)
        if access_key
        else console.default_credentials
    )
    admin = console.make_admin(credentials)
    admin.topics()  # with ACL on: refused for an unknown account or a wrong secret
    return admin


def _next(raw: str | None) -> str:
    """Where to go after logging in: a path of this site, else the cluster page."""
    if (
        raw
        and raw.startswith("/")
        and not raw.startswith(("//", "/login"))
        and "\\" not in raw  # browsers read /\ as //, another host
    ):
        return raw
    return "/"


ROUTES = [
    Route("/login", login_page, methods=["GET"]),
    Route("/login", login, methods=["POST"]),
    Route("/logout", logout, methods=["POST"]),
]
