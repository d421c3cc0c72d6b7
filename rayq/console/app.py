"""The console's app factory and server: ``create_app`` (an ASGI app, for tests and for
any ASGI server) and ``serve`` (uvicorn, until stopped).

Which deployment it serves:

* ``url`` (``rayq://host:port``): it connects this process to it
  (``rayq.connect(url, key=key)``, no Ray); ``key`` is that deployment's key, else
  found as ``rayq.connect`` finds it (``$RAYQ_KEY``, ``rayq.key`` in ``$RAYQ_HOME`` or
  ``./rayq-data``).
* neither: the deployment ``rayq.discover()`` finds (``$RAYQ_URL``/``$RAYQ_KEY``, or
  the files a ``rayq start`` wrote), connected to as above.
* ``key`` alone: the deployment this process is attached to already (a Ray driver
  that ran ``rayq.start`` or ``rayq.connect(namespace)``; or ``transport``, an
  in-process fake for tests); ``key`` is what logins must give.

Each login gets its own ``rayq.Admin`` with the credentials it gave (rayq/console/
pages/login.py); ``credentials`` are used for logins that give none (a read-only
account, say), else such a login has none, which a deployment with ACL on refuses.
"""

from __future__ import annotations

import logging
import secrets
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.routing import Mount
from starlette.staticfiles import StaticFiles

from rayq.actors.protocol.auth import Credentials
from rayq.actors.protocol.config import ClientConfig
from rayq.bootstrap import connect, discover, find_key, parse_key
from rayq.console import pages
from rayq.console.rates import RateMeter
from rayq.console.sessions import DEFAULT_IDLE_S, DEFAULT_MAX_AGE_S, SessionTable
from rayq.console.web import Console, LoginRequired, SecurityHeaders, templates
from rayq.store.errors import ConfigError
from rayq.transport.base import Transport

logger = logging.getLogger(__name__)
COOKIE = "rayq_console"


def create_app(
    *,
    url: str | None = None,
    key: str | bytes | None = None,
    credentials: Credentials | None = None,
    namespace: str | None = None,
    transport: Transport | None = None,
    idle_s: float = DEFAULT_IDLE_S,
    max_age_s: float = DEFAULT_MAX_AGE_S,
) -> Starlette:
    """The console as an ASGI app, serving the deployment named as the module doc says.
    ``namespace`` and ``transport`` are ``rayq.Admin``'s (for a deployment this process
    is attached to). Sessions end after ``idle_s`` without a request or ``max_age_s``
    after their login. ConfigError when there is no deployment to serve or no key."""
    if credentials is not None and not isinstance(credentials, Credentials):
        raise ConfigError(
            f"credentials must be a rayq.Credentials, got {type(credentials).__name__}"
        )
    deployment_key = attach(url, key)

    def make_admin(creds: Credentials | None) -> Any:
        from rayq.admin.admin import Admin

        return Admin(
            namespace=namespace, config=ClientConfig(credentials=creds), transport=transport
        )

    console = Console(
        deployment_key=deployment_key,
        make_admin=make_admin,
        default_credentials=credentials,
        sessions=SessionTable(idle_s=idle_s, max_age_s=max_age_s),
        rates=RateMeter(),
    )
    static = StaticFiles(packages=[("rayq.console", "static")])
    app = Starlette(
        routes=[*pages.routes(), Mount("/static", app=static, name="static")],
        middleware=[
            Middleware(SecurityHeaders),
            # the cookie holds only a random session id, signed with a key of this
            # process: a console restart ends every session
            Middleware(
                SessionMiddleware,
                secret_key=secrets.token_hex(32),
                session_cookie=COOKIE,
                max_age=int(max_age_s),
                same_site="strict",
            ),
            Middleware(LoginRequired, console=console),
        ],
    )
    app.state.console = console
    app.state.templates = templates()
    return app


def attach(url: str | None, key: str | bytes | None) -> bytes:
    """Connect this process as the module doc says; the deployment key logins must give."""
    if url is None and key is not None:
        return parse_key(key, "key")
    if url is None:
        found = discover()
        if found is None:
            raise ConfigError(
                "no rayq deployment to serve: pass url= and key= (rayq console --url "
                "rayq://host:port --key ...), set $RAYQ_URL and $RAYQ_KEY, or run it where "
                "`rayq start` wrote its rayq-data directory ($RAYQ_HOME)"
            )
        url, key = found
    if key is None:
        key = find_key(url)
    raw = parse_key(key, "key")
    connect(url, key=raw)
    return raw


def serve(
    host: str = "127.0.0.1",
    port: int = 8080,
    *,
    url: str | None = None,
    key: str | bytes | None = None,
    credentials: Credentials | None = None,
) -> None:
    """Serve the console on ``host``:``port`` until stopped (Ctrl-C, SIGTERM); the
    deployment is found as ``create_app`` finds it."""
    import uvicorn

    if not isinstance(port, int) or isinstance(port, bool) or not 0 <= port <= 65535:
        raise ConfigError(f"port must be an int in 0..65535, got {port!r}")
    app = create_app(url=url, key=key, credentials=credentials)
    logger.info("rayq console on http://%s:%d/ (log in with the deployment key)", host, port)
    # uvicorn says where it listens (and errors); no line per request
    uvicorn.run(app, host=host, port=port, log_level="info", access_log=False)
