"""How a ``rayq`` command reaches a deployment, and the clients it uses there.

``Session.connect`` picks the deployment, first found wins:

1. ``--url`` or ``$RAYQ_URL`` (``rayq://host:port``), with the key from ``--key-file``,
   else ``$RAYQ_KEY``, else the ``rayq.key`` file in ``$RAYQ_HOME`` or ``./rayq-data``
   (``rayq.connect`` looks there);
2. ``rayq.discover()``: the ``rayq.url`` and ``rayq.key`` files ``rayq start`` wrote;
3. ``--address`` (or ``$RAY_ADDRESS``): join that Ray cluster as a driver
   (``rayq.cli.ray_join``: slower, and the only way for ``start`` and ``stop``, which
   place or end actors).

Over a ``rayq://`` URL nothing imports Ray: a call costs a socket round trip, not a
Ray driver's start. ``--access-key``/``--secret-key`` (or ``$RAYQ_ACCESS_KEY``/
``$RAYQ_SECRET_KEY``) sign every request when the deployment has ACL on.

Tests hand a ``transport`` (``rayq.testing.FakeTransport``) instead: no connection is
made and every client is built over it.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rayq.store.errors import ConfigError

if TYPE_CHECKING:
    from rayq.actors.protocol.auth import Credentials
    from rayq.actors.protocol.config import ClientConfig
    from rayq.admin.admin import Admin
    from rayq.consumer.pull import PullConsumer
    from rayq.producer.producer import Producer
    from rayq.transport.base import Transport

URL_ENV = "RAYQ_URL"
RAY_ADDRESS_ENV = "RAY_ADDRESS"
ACCESS_KEY_ENV = "RAYQ_ACCESS_KEY"
SECRET_KEY_ENV = "RAYQ_SECRET_KEY"
NO_DEPLOYMENT = (
    "no rayq deployment to talk to: pass --url rayq://HOST:PORT (or set $RAYQ_URL), run "
    "this where `rayq start` wrote rayq.url (./rayq-data, or $RAYQ_HOME), or pass "
    "--address (or set $RAY_ADDRESS) to join its Ray cluster"
)


class Session:
    """The parsed options' way to the deployment; builds the clients a command uses."""

    def __init__(self, args: argparse.Namespace, transport: Transport | None = None) -> None:
        self._args = args
        self._transport = transport
        self._connected = transport is not None
        self._config: ClientConfig | None = None
        self._admin: Admin | None = None
        self.url = ""  # the rayq:// URL connected to ("" over Ray or a test's transport)
        self.key: str | None = None  # the deployment key used with ``url``

    # ------------------------------------------------------------ connect
    def connect(self) -> None:
        """Reach the deployment (once): see the module doc for the order."""
        if self._connected:
            return
        from rayq.bootstrap import connect

        url, key = self.target()
        if url is not None:
            connect(url, key=key)
            self.url, self.key = url, key
        else:
            from rayq.cli.ray_join import join_ray

            join_ray(self._args.address, self._args.namespace)
            connect(self._args.namespace)
        self._connected = True

    def target(self) -> tuple[str | None, str | None]:
        """(url, key): the rayq:// URL and key to use, or (None, None) to join Ray."""
        from rayq.bootstrap import discover

        key = _read_key_file(self._args.key_file) if self._args.key_file else None
        url = self._args.url or os.environ.get(URL_ENV) or None
        if url is not None:
            return url, key
        if self._args.address is not None:
            return None, None
        found = discover()
        if found is not None:
            return found[0], key if key is not None else found[1]
        if os.environ.get(RAY_ADDRESS_ENV):
            return None, None  # join the Ray cluster it names
        raise ConfigError(NO_DEPLOYMENT)

    # ------------------------------------------------------------ clients
    @property
    def credentials(self) -> Credentials | None:
        """The ACL account's keys (--access-key/--secret-key or the environment)."""
        return _credentials(self._args)

    @property
    def config(self) -> ClientConfig:
        """The clients' config: the ACL credentials, if any were given."""
        if self._config is None:
            from rayq.actors.protocol.config import ClientConfig

            self._config = ClientConfig(credentials=self.credentials)
        return self._config

    @property
    def admin(self) -> Admin:
        if self._admin is None:
            from rayq.admin.admin import Admin

            self.connect()
            self._admin = Admin(config=self.config, transport=self._transport)
        return self._admin

    def producer(self, group: str) -> Producer:
        from rayq.producer.producer import Producer

        self.connect()
        return Producer(group, config=self.config, transport=self._transport)

    def pull_consumer(self, group: str, **options: Any) -> PullConsumer:
        from rayq.consumer.pull import PullConsumer

        self.connect()
        return PullConsumer(group, config=self.config, transport=self._transport, **options)


def _read_key_file(path: str) -> str:
    try:
        text = Path(path).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the key file {path!r}: {exc}") from None
    if not text:
        raise ConfigError(f"the key file {path!r} is empty")
    return text


def _credentials(args: argparse.Namespace) -> Credentials | None:
    """``Credentials`` from --access-key/--secret-key or the environment; None if neither."""
    access = args.access_key or os.environ.get(ACCESS_KEY_ENV) or ""
    secret = args.secret_key or os.environ.get(SECRET_KEY_ENV) or ""
    if not access and not secret:
        return None
    if not access or not secret:
        missing = "--access-key" if not access else "--secret-key"
        raise ConfigError(
            f"ACL credentials need both keys: {missing} is missing (or set "
            f"${ACCESS_KEY_ENV} and ${SECRET_KEY_ENV})"
        )
    from rayq.actors.protocol.auth import Credentials

    return Credentials(access_key=access, secret_key=secret)
