"""Reaching a deployment from outside Ray, without Ray: the bootstrap endpoint
(actors/server/gateway.py) over a real ``CoordinatorService``, ``RemoteTransport``,
and the URL, key and files of rayq/bootstrap.py."""

from __future__ import annotations

import os
import socket
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import rayq
from rayq import bootstrap
from rayq.actors.protocol import ClientRequest, DataEndpoint
from rayq.actors.protocol.server_key import ServerKey
from rayq.actors.server.coordinator_peers import NoPeers
from rayq.actors.server.coordinator_service import CoordinatorService
from rayq.actors.server.gateway import Gateway
from rayq.testing.fake_broker import LoopThread
from rayq.transport.choice import make_transport, remote, set_remote
from rayq.transport.remote import RemoteTransport

KEY = bytes(range(32))


class Deployment:
    """A coordinator service and its bootstrap endpoint on an event-loop thread."""

    def __init__(self) -> None:
        self.loop = LoopThread()
        self.asked: list[tuple[str, str]] = []

        async def make() -> Gateway:
            service = CoordinatorService(NoPeers("t"), server_key=ServerKey.new())
            service.skip_rebuild()
            gateway = Gateway(service, self.lookup, KEY)
            await gateway.start("127.0.0.1", 0)
            return gateway

        self.gateway = self.loop.run(make())
        self.port = self.gateway.server.port
        self.url = f"rayq://127.0.0.1:{self.port}"

    async def lookup(self, replica: str, service: str) -> DataEndpoint:
        self.asked.append((replica, service))
        return DataEndpoint(
            host="10.1.2.3", port=4242, unix_path="", node_id="n", key=b"k" * 32, max_frame_bytes=9
        )

    def close(self) -> None:
        self.loop.run(self.gateway.close())
        self.gateway.service.close()
        self.loop.close()


@pytest.fixture()
def deployment() -> Iterator[Deployment]:
    d = Deployment()
    yield d
    d.close()


def test_a_client_with_the_key_calls_the_coordinator_and_learns_where_brokers_listen(
    deployment: Deployment,
) -> None:
    transport = RemoteTransport(deployment.url, "127.0.0.1", deployment.port, KEY)
    try:
        topics = transport.coordinator().topics(ClientRequest()).result(5)
        assert topics.names == []
        found = transport.endpoint("hold", "broker-a#1")
        assert (found.host, found.port) == ("10.1.2.3", 4242)
        assert deployment.asked == [("broker-a#1", "hold")]
        assert transport.replica_of("broker-a#1") == "broker-a#1"  # a slave is itself
    finally:
        transport.close()


def test_a_wrong_key_is_refused_at_connect_with_permission_denied(deployment: Deployment) -> None:
    with pytest.raises(rayq.PermissionDeniedError, match="refused the key"):
        RemoteTransport(deployment.url, "127.0.0.1", deployment.port, b"\0" * 32)
    # the endpoint still serves the right key afterwards
    RemoteTransport(deployment.url, "127.0.0.1", deployment.port, KEY).close()


def test_nothing_listening_and_a_silent_server_fail_fast_and_clearly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("rayq.transport.remote.OPEN_TIMEOUT_S", 0.5)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: refused
        with pytest.raises(rayq.BrokerUnavailableError, match="cannot reach"):
            RemoteTransport(f"rayq://127.0.0.1:{port}", "127.0.0.1", port, KEY)
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen()
    port = silent.getsockname()[1]
    accepted: list[socket.socket] = []
    threading.Thread(target=lambda: accepted.append(silent.accept()[0]), daemon=True).start()
    started = time.monotonic()
    try:
        with pytest.raises(rayq.BrokerUnavailableError, match="did not answer as a rayq"):
            RemoteTransport(f"rayq://127.0.0.1:{port}", "127.0.0.1", port, KEY)
        assert time.monotonic() - started < 0.5 * 2 + 1.0  # connect and handshake, with slack
    finally:
        for conn in accepted:
            conn.close()
        silent.close()


def test_connect_by_url_makes_every_later_client_use_it(deployment: Deployment) -> None:
    try:
        rayq.connect(deployment.url, key=KEY.hex())
        assert isinstance(remote(), RemoteTransport)
        assert make_transport("", "any-namespace") is remote()
        with pytest.raises(rayq.ConfigError, match="transport='ray' needs Ray"):
            make_transport("ray", "any-namespace")
        assert rayq.Admin().topics() == []
        with pytest.raises(rayq.ConfigError, match="runs its consumer as a Ray actor"):
            rayq.PushConsumer("cg")
    finally:
        bootstrap.disconnect()
    assert remote() is None


@pytest.mark.parametrize(
    ("url", "match"),
    [
        ("http://h:1", "scheme must be rayq"),
        ("rayq://h", "needs a host and a port"),
        ("rayq://:9876", "needs a host and a port"),
        ("rayq://h:99999", "bad deployment URL"),
        ("rayq://h:1/path", "nothing after it"),
        ("rayq://h:1?x=1", "nothing after it"),
        ("", "must be a Ray namespace or a rayq:// URL"),
    ],
)
def test_a_bad_url_is_a_config_error(url: str, match: str) -> None:
    with pytest.raises(rayq.ConfigError, match=match):
        rayq.connect(url, key=KEY)
    assert remote() is None


def test_keys_are_64_hex_digits_or_32_bytes_and_found_in_the_environment_or_home(
    deployment: Deployment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert bootstrap.parse_key(KEY.hex()) == KEY == bootstrap.parse_key(KEY)
    for bad in ["", "zz" * 32, KEY.hex()[:-2], b"short"]:
        with pytest.raises(rayq.ConfigError, match="not a deployment key"):
            bootstrap.parse_key(bad)
    monkeypatch.setenv("RAYQ_HOME", str(tmp_path))
    monkeypatch.delenv("RAYQ_KEY", raising=False)
    monkeypatch.delenv("RAYQ_URL", raising=False)
    with pytest.raises(rayq.ConfigError, match="no key to connect"):
        rayq.connect(deployment.url)
    assert rayq.discover() is None
    key = bootstrap.deployment_key(tmp_path)  # made, mode 0600
    assert stat.S_IMODE(os.stat(tmp_path / "rayq.key").st_mode) == 0o600
    assert bootstrap.deployment_key(tmp_path) == key  # kept
    bootstrap.write_url(tmp_path, deployment.url)
    assert rayq.discover() == (deployment.url, key.hex())
    monkeypatch.setenv("RAYQ_KEY", KEY.hex())
    assert rayq.discover() == (deployment.url, KEY.hex())
    try:
        rayq.connect(deployment.url)  # the key from RAYQ_KEY
    finally:
        bootstrap.disconnect()
    (tmp_path / "rayq.key").write_text("not a key\n")
    monkeypatch.delenv("RAYQ_KEY")
    with pytest.raises(rayq.ConfigError, match="the key file"):
        rayq.connect(deployment.url)


def test_connect_refuses_a_key_for_a_ray_namespace_and_an_address_for_a_url() -> None:
    with pytest.raises(rayq.ConfigError, match="key= is for a rayq:// URL"):
        rayq.connect("rayq", key=KEY)
    with pytest.raises(rayq.ConfigError, match="address= is Ray's"):
        rayq.connect("rayq://h:1", key=KEY, address="auto")


def test_set_remote_replaces_and_closes_the_old_transport(deployment: Deployment) -> None:
    first = RemoteTransport(deployment.url, "127.0.0.1", deployment.port, KEY)
    set_remote(first)
    second = RemoteTransport(deployment.url, "127.0.0.1", deployment.port, KEY)
    try:
        set_remote(second)
        assert remote() is second
        assert first._conn is None  # closed (made again only if it is used again)
    finally:
        set_remote(None)
