"""Joining Ray for ``rayq start``/``stop``: the token, the reachability check and the
one-line errors (the helpers; no Ray is started)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

import rayq
from rayq.cli import ray_join


def test_token_mode_is_set_when_a_token_is_there_and_the_mode_is_unset(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        # set, then deleted: monkeypatch records each name's value from before the test
        # (a delenv of an unset name records nothing, and the mode the code sets below
        # would then outlive the test and break every later Ray start of the process)
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path))
    ray_join._use_token_if_available()
    assert "RAY_AUTH_MODE" not in ray_join.os.environ  # no token: left alone
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text("t" * 32)
    ray_join._use_token_if_available()
    assert ray_join.os.environ["RAY_AUTH_MODE"] == "token"
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # the user's choice stays
    ray_join._use_token_if_available()
    assert ray_join.os.environ["RAY_AUTH_MODE"] == "disabled"


def test_an_address_where_nothing_listens_is_refused_at_once() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(rayq.BrokerUnavailableError, match=f"no Ray cluster at 127.0.0.1:{port}"):
        ray_join._check_reachable(f"127.0.0.1:{port}")
    ray_join._check_reachable("auto")  # left to Ray: nothing to check


def test_ray_failures_become_one_line_that_says_what_to_do() -> None:
    refused = ray_join._explain("h:6379", RuntimeError("x"), "gcs_client.cc:210: Unauthenticated")
    assert isinstance(refused, rayq.PermissionDeniedError) and "RAY_AUTH_MODE=token" in str(refused)
    missing = ray_join._explain(
        "auto", ConnectionError("Could not find any running Ray instance"), ""
    )
    assert isinstance(missing, rayq.BrokerUnavailableError) and "ray start --head" in str(missing)
    other = ray_join._explain("h:6379", ValueError("odd\n  thing"), "")
    assert "\n" not in str(other) and "odd thing" in str(other)


def test_rays_own_lines_are_dropped_and_others_passed_on(
    capfd: pytest.CaptureFixture[str],
) -> None:
    ray_join._pass_on(
        "[2026-11-28 08:00:00,000 I 1 1] gcs_client.cc:210: Failed to get cluster ID\n"
        "2026-11-28 08:00:00,000\tINFO worker.py:1 -- Connecting to existing Ray cluster\n"
        "a real warning\n"
    )
    assert capfd.readouterr().err == "a real warning\n"
