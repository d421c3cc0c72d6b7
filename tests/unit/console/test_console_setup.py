"""Starting the console: which deployment it serves, and what it refuses before
serving anything. No Ray, no web server."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import rayq
import rayq.console
from rayq.console.app import attach


@pytest.fixture(autouse=True)
def _no_deployment_around(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("RAYQ_URL", "RAYQ_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("RAYQ_HOME", str(tmp_path / "nothing-here"))


def test_without_a_deployment_or_a_key_it_says_how_to_name_one() -> None:
    with pytest.raises(rayq.ConfigError, match="no rayq deployment to serve: pass url= and key="):
        rayq.console.create_app()
    with pytest.raises(
        rayq.ConfigError, match=re.escape("no key to connect to rayq://127.0.0.1:1")
    ):
        attach("rayq://127.0.0.1:1", None)


def test_bad_keys_urls_credentials_and_ports_are_refused() -> None:
    with pytest.raises(rayq.ConfigError, match="not a deployment key"):
        rayq.console.create_app(key="not-hex")
    with pytest.raises(rayq.ConfigError, match="bad deployment URL"):
        rayq.console.create_app(url="http://127.0.0.1:80", key="ab" * 32)
    with pytest.raises(rayq.ConfigError, match=re.escape("credentials must be a rayq.Credentials")):
        rayq.console.create_app(key="ab" * 32, credentials=("ops", "secret"))  # type: ignore[arg-type]
    with pytest.raises(rayq.ConfigError, match=re.escape("port must be an int in 0..65535")):
        rayq.console.serve(port=70000, key="ab" * 32)


def test_nothing_listening_at_the_url_is_broker_unavailable() -> None:
    with pytest.raises(rayq.BrokerUnavailableError):
        rayq.console.create_app(url="rayq://127.0.0.1:1", key="ab" * 32)


def test_the_console_imports_no_ray() -> None:
    """It runs outside Ray: serving a rayq:// deployment needs no Ray at all."""
    code = "import sys, rayq.console, rayq.console.app; print('ray' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == "False"
