"""Attaching to a deployment: ``rayq.connect()``, inside Ray or from outside it.

``rayq.connect(namespace)`` attaches a Ray driver to the deployment in that Ray
namespace (rayq/cluster.py). ``rayq.connect("rayq://host:port", key=...)`` reaches
one from any process, without Ray: through its bootstrap endpoint (the coordinator's
socket, actors/server/gateway.py) and the deployment key
(rayq/transport/remote.py). Every client of the process then goes over sockets.

Files a deployment's store directory holds for this (``rayq.start`` writes them):

* ``rayq.key``: the deployment key, 64 hex digits and a newline, mode 0600 (readable
  by its user only). Made once and kept, so a deployment started again over the same
  directory has the same key and its clients connect again.
* ``rayq.url``: the bootstrap endpoint, ``rayq://host:port`` and a newline, written at
  each start and removed at shutdown.

``discover()`` finds a deployment to reach: ``$RAYQ_URL`` and ``$RAYQ_KEY``, else
those files in ``$RAYQ_HOME``, else in ``./rayq-data`` (the embedded default's
directory).
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path
from urllib.parse import urlsplit

from rayq.actors.protocol.config import NAMESPACE
from rayq.store.errors import ConfigError

KEY_FILE = "rayq.key"
URL_FILE = "rayq.url"
KEY_BYTES = 32
DEFAULT_HOME = "rayq-data"
SCHEME = "rayq"


def home() -> Path:
    """Where a deployment's files are looked for: ``$RAYQ_HOME``, else ``./rayq-data``."""
    return Path(os.environ.get("RAYQ_HOME") or DEFAULT_HOME)


def parse_url(url: str) -> tuple[str, int]:
    """(host, port) of a ``rayq://host:port`` URL; ConfigError for anything else."""
    example = "rayq://10.0.0.5:9876"
    if not isinstance(url, str) or not url:
        raise ConfigError(f"a deployment URL must be a str like {example}, got {url!r}")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ConfigError(f"bad deployment URL {url!r}: {exc} (want {example})") from None
    if parts.scheme != SCHEME:
        raise ConfigError(f"bad deployment URL {url!r}: the scheme must be rayq:// ({example})")
    if not parts.hostname or port is None or port == 0:
        raise ConfigError(f"bad deployment URL {url!r}: it needs a host and a port ({example})")
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username:
        raise ConfigError(
            f"bad deployment URL {url!r}: only rayq://host:port, nothing after it ({example})"
        )
    return parts.hostname, port


def parse_key(key: str | bytes, where: str = "key") -> bytes:
    """The deployment key from its 64 hex digits (or its 32 bytes); ConfigError else."""
    if isinstance(key, bytes) and len(key) == KEY_BYTES:
        return key
    text = key.decode(errors="replace") if isinstance(key, bytes) else key
    if isinstance(text, str):
        try:
            raw = bytes.fromhex(text.strip())
        except ValueError:
            raw = b""
        if len(raw) == KEY_BYTES:
            return raw
    raise ConfigError(
        f"{where} is not a deployment key: it must be the {2 * KEY_BYTES} hex digits of "
        f"the {KEY_FILE} file `rayq start` writes in its store directory"
    )


def read_key(path: Path) -> bytes:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read the deployment key file {path}: {exc}") from None
    return parse_key(text, f"the key file {path}")


def deployment_key(root: Path) -> bytes:
    """The key of the deployment whose store directory is ``root``: read from its
    ``rayq.key``, else made and written there (mode 0600)."""
    path = root / KEY_FILE
    if path.exists():
        key = read_key(path)
        if stat.S_IMODE(path.stat().st_mode) & 0o077:
            path.chmod(0o600)  # readable by its user only
        return key
    root.mkdir(parents=True, exist_ok=True)
    key = secrets.token_bytes(KEY_BYTES)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(key.hex() + "\n")
    return key


def write_url(root: Path, url: str) -> None:
    (root / URL_FILE).write_text(url + "\n")


def remove_url(root: Path) -> None:
    (root / URL_FILE).unlink(missing_ok=True)


def discover() -> tuple[str, str] | None:
    """(URL, key as hex) of a deployment to reach: ``$RAYQ_URL``/``$RAYQ_KEY``, else the
    ``rayq.url``/``rayq.key`` files in ``$RAYQ_HOME`` or ``./rayq-data``; None if no URL
    or no key is found."""
    root = home()
    url = os.environ.get("RAYQ_URL", "").strip()
    key = os.environ.get("RAYQ_KEY", "").strip()
    try:
        if not url and (root / URL_FILE).exists():
            url = (root / URL_FILE).read_text().strip()
        if not key and (root / KEY_FILE).exists():
            key = (root / KEY_FILE).read_text().strip()
    except OSError:
        return None
    return (url, key) if url and key else None


def connect(
    namespace: str = NAMESPACE, *, key: str | bytes | None = None, address: str | None = None
) -> None:
    """Attach this process to a running deployment.

    ``namespace`` is a Ray namespace (this process joins Ray: ``address`` as
    ``ray.init`` takes it, default auto), or a ``rayq://host:port`` URL: then Ray is not
    used and ``key`` is the deployment key (64 hex digits, or 32 bytes), else
    ``$RAYQ_KEY``, else the ``rayq.key`` file in ``$RAYQ_HOME`` or ``./rayq-data``.
    Raises ConfigError (bad URL, no key), PermissionDeniedError (wrong key) or
    BrokerUnavailableError (nothing answers), within 5 s."""
    if not isinstance(namespace, str) or not namespace:
        raise ConfigError(f"namespace must be a Ray namespace or a rayq:// URL, got {namespace!r}")
    if "://" not in namespace:
        if key is not None:
            raise ConfigError("key= is for a rayq:// URL; a Ray namespace needs none")
        from rayq.cluster import connect_ray

        connect_ray(namespace, address=address)
        return
    if address is not None:
        raise ConfigError("address= is Ray's; a rayq:// URL says where the deployment is")
    host, port = parse_url(namespace)
    raw = find_key(namespace, key)
    from rayq.transport.choice import set_remote
    from rayq.transport.remote import RemoteTransport

    set_remote(RemoteTransport(namespace, host, port, raw))


def disconnect() -> None:
    """Undo ``connect(url)``: later clients of this process use Ray again."""
    from rayq.transport.choice import set_remote

    set_remote(None)


def find_key(url: str, key: str | bytes | None = None) -> bytes:
    """The key to reach ``url`` with: ``key`` (hex or bytes), else ``$RAYQ_KEY``, else
    ``rayq.key`` in ``$RAYQ_HOME`` or ``./rayq-data``; ConfigError if none or a bad one."""
    if key is not None:
        return parse_key(key)
    env = os.environ.get("RAYQ_KEY", "").strip()
    if env:
        return parse_key(env, "RAYQ_KEY")
    path = home() / KEY_FILE
    if path.exists():
        return read_key(path)
    raise ConfigError(
        f"no key to connect to {url}: pass key= (the hex digits of the deployment's "
        f"{KEY_FILE}), set RAYQ_KEY, or set RAYQ_HOME to the deployment's store directory"
    )


__all__ = [
    "KEY_FILE",
    "URL_FILE",
    "connect",
    "deployment_key",
    "disconnect",
    "discover",
    "find_key",
    "home",
    "parse_key",
    "parse_url",
]
