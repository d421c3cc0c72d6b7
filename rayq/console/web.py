"""What every page of the console shares: the console's state, the login guard, form
reading with its CSRF check, and rendering a page or its error.

Admin calls block (they wait on broker replies), so a page runs them in Starlette's
thread pool (``show``); the event loop only parses requests and renders templates.
A ``RayqError`` from a call or a form becomes the page's error box with its message
and status: 403 for ``PermissionDeniedError`` (the broker's ACL said no, or the
login/CSRF check did), 503 when the deployment does not answer, 400 for every other
(bad input: nothing was changed).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any
from urllib.parse import quote

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rayq.actors.protocol.auth import Credentials
from rayq.console.forms import show_time
from rayq.console.rates import RateMeter
from rayq.console.sessions import Session, SessionTable
from rayq.store.errors import (
    BrokerError,
    BrokerUnavailableError,
    PermissionDeniedError,
    RayqError,
)

SESSION_KEY = "sid"  # the session id's key in the signed cookie
PUBLIC_PATHS = ("/login", "/static/")


@dataclass
class Console:
    """One console process's state: the deployment key logins must give, how to make an
    Admin for a session's credentials, the sessions, and the rate readings."""

    deployment_key: bytes
    make_admin: Callable[[Credentials | None], Any]
    default_credentials: Credentials | None
    sessions: SessionTable
    rates: RateMeter


def templates() -> Jinja2Templates:
    """The console's templates (rayq/console/templates), with its filters."""
    folder = resources.files("rayq.console") / "templates"
    env = Jinja2Templates(directory=str(folder))
    env.env.filters["time"] = show_time
    env.env.filters["rate"] = lambda r: "-" if r is None else f"{r:,.1f}"
    env.env.filters["url"] = lambda s: quote(str(s), safe="")
    env.env.filters["body"] = body_preview
    return env


def body_preview(body: bytes, limit: int = 2048) -> str:
    """A message body as text when it is UTF-8, else as hex; at most ``limit`` bytes."""
    head = body[:limit]
    more = f" … ({len(body)} bytes)" if len(body) > limit else ""
    try:
        return head.decode() + more
    except UnicodeDecodeError:
        return "0x" + head.hex() + more


def console_of(request: Request) -> Console:
    console: Console = request.app.state.console
    return console


def session_of(request: Request) -> Session:
    """The request's session (``LoginRequired`` let it through only with one)."""
    session: Session = request.state.session
    return session


def status_of(exc: RayqError) -> int:
    if isinstance(exc, PermissionDeniedError):
        return 403
    if isinstance(exc, BrokerUnavailableError | BrokerError):
        return 503
    return 400


class LoginRequired:
    """ASGI middleware: every path but the login page and the style sheet needs a live
    session. Without one a GET is sent to the login page and anything else gets 401,
    before any page code runs."""

    def __init__(self, app: ASGIApp, console: Console) -> None:
        self.app = app
        self.console = console

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or path.startswith(PUBLIC_PATHS):
            await self.app(scope, receive, send)
            return
        session = self.console.sessions.get(scope.get("session", {}).get(SESSION_KEY))
        if session is None:
            response: Response
            if scope["method"] in ("GET", "HEAD"):
                response = RedirectResponse(f"/login?next={quote(path)}", status_code=303)
            else:
                response = HTMLResponse(
                    '<p>Log in first: <a href="/login">the login page</a>.</p>', status_code=401
                )
            await response(scope, receive, send)
            return
        scope.setdefault("state", {})["session"] = session
        await self.app(scope, receive, send)


HEADERS = [
    # no framing (a confirm button cannot be clicked through another site's page), no
    # script or style from elsewhere, forms post here only, nothing cached or referred
    (b"content-security-policy", b"default-src 'self'; frame-ancestors 'none'; form-action 'self'"),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-store"),
]


class SecurityHeaders:
    """ASGI middleware: ``HEADERS`` on every response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *HEADERS]
            await send(message)

        await self.app(scope, receive, with_headers)


async def form_of(request: Request) -> Mapping[str, str]:
    """The posted form, as str fields, once its CSRF token is this session's."""
    form = await request.form()
    fields = {k: v for k, v in form.items() if isinstance(v, str)}
    session_of(request).check_csrf(fields.get("csrf", ""))
    return fields


def render(request: Request, template: str, status: int = 200, **context: Any) -> HTMLResponse:
    session = getattr(request.state, "session", None)
    page: HTMLResponse = request.app.state.templates.TemplateResponse(
        request,
        template,
        {"session": session, **context},
        status_code=status,
    )
    return page


async def show(
    request: Request,
    template: str,
    build: Callable[..., Mapping[str, Any]],
    *args: Any,
    status: int = 200,
    **context: Any,
) -> HTMLResponse:
    """Render ``template`` with what ``build(*args)`` returns (run in the thread pool) and
    ``status``, or with the RayqError it raised as the page's error. A caller whose own
    step failed passes that error in ``context`` with its ``status``: the page shows it
    above what ``build`` found."""
    try:
        data = await run_in_threadpool(build, *args)
    except RayqError as exc:
        # the caller's own error (why its action failed) first, if it has one
        return render(request, template, status_of(exc), **{"error": str(exc), **context})
    return render(request, template, status, **{**context, **data})
