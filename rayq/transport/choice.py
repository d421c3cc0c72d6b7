"""Which transport a client uses: the ``RemoteTransport`` of ``rayq.connect(url)`` when
this process is connected to a deployment from outside Ray; else
``ClientConfig.transport``, else the environment variable ``RAYQ_TRANSPORT``, else
``DEFAULT``. ``DirectTransport`` instances are shared per process, Ray session and
namespace: a process keeps one connection to each broker whatever number of clients it
runs."""

from __future__ import annotations

import os
import threading

from rayq.actors.protocol.config import TRANSPORTS
from rayq.store.errors import ConfigError
from rayq.transport.base import Transport

DEFAULT = "direct"
ENV = "RAYQ_TRANSPORT"
_shared: dict[tuple[str, ...], Transport] = {}
_lock = threading.Lock()
_remote: list[Transport] = []  # the one of ``rayq.connect(url)``, if any


def set_remote(transport: Transport | None) -> None:
    """Every later client of this process uses ``transport`` (None: Ray again)."""
    with _lock:
        old = _remote[:]
        _remote[:] = [] if transport is None else [transport]
    for t in old:
        close = getattr(t, "close", None)
        if t is not transport and close is not None:
            close()


def remote() -> Transport | None:
    return _remote[0] if _remote else None


def transport_name(configured: str) -> str:
    name = configured or os.environ.get(ENV, "") or DEFAULT
    if name not in TRANSPORTS - {""}:
        raise ConfigError(
            f"{ENV}={name!r} is not a transport: use 'direct' (sockets) or 'ray' (actor calls)",
            value=name,
        )
    return name


def make_transport(configured: str, namespace: str) -> Transport:
    connected = remote()
    if connected is not None:
        if configured == "ray":
            raise ConfigError(
                "transport='ray' needs Ray, but this process is connected to a deployment "
                "by URL (rayq.connect('rayq://...')): leave ClientConfig.transport unset"
            )
        return connected
    from rayq.transport.ray_actors import RayTransport

    if transport_name(configured) == "ray":
        return RayTransport(namespace)
    import ray

    from rayq.transport.direct import DirectTransport

    context = ray.get_runtime_context() if ray.is_initialized() else None
    session = (context.get_node_id(), context.get_job_id()) if context is not None else ("", "")
    key = (namespace, *session)
    with _lock:
        found = _shared.get(key)
        if found is None:
            found = _shared[key] = DirectTransport(namespace)
        return found


def forget_transports(namespace: str) -> None:
    """Close and drop this process's shared transports to ``namespace``: the deployment
    there was shut down, and a new one started in the same namespace (same Ray session)
    has other actors; clients made after it get fresh transports."""
    with _lock:
        gone = [key for key in _shared if key[0] == namespace]
        closing = [_shared.pop(key) for key in gone]
    for transport in closing:
        close = getattr(transport, "close", None)
        if close is not None:
            close()
