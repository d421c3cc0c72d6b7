"""rayq's web console: a small server-rendered site over ``rayq.Admin``, in the spirit
of rocketmq-dashboard and Kafka UI (docs/guide/console.md).

    rayq console                       # or:
    import rayq.console
    rayq.console.serve(port=8080, url="rayq://10.0.0.5:9876", key="<hex of rayq.key>")

Pages: cluster health, topics (queues, bounds, rates), groups (lag per queue,
consumers), message lookup by id, key or time with the trace, dead letters with
resend, offset reset with a dry run and a confirmation. A browser logs in with the
deployment key (and, with ACL on, an ACL account): the broker's ACL decides what
each login may read and change.

Built on Starlette (routing, forms, signed session cookie, static files) with Jinja2
templates, served by uvicorn: small, well-kept and typed; it needs no front-end
build, and its TestClient drives the app in-process for tests. The pages are plain
HTML forms and one style sheet, with no script and no external asset, so they work
offline. Admin calls block, so pages run them in Starlette's thread pool
(rayq/console/web.py). Needs the ``console`` extra: ``pip install "rayq[console]"``.

Layout: ``app`` (``create_app``, ``serve``), ``web`` (shared page machinery and the
login guard), ``sessions`` (login check, server-side sessions), ``forms`` (reading
fields), ``rates`` (messages per second), ``pages/`` (one module per page),
``templates/`` and ``static/``.
"""

from rayq.console.app import create_app, serve

__all__ = ["create_app", "serve"]
