"""Joining a running Ray cluster as a driver, for ``rayq start``/``stop`` (and
``--address``): Ray's token handled, its start-up noise turned into one line.

Ray 2.60 turns token authentication on for the clusters it starts; a client then
needs ``RAY_AUTH_MODE=token`` and the token (``~/.ray/auth_token``, ``$RAY_AUTH_TOKEN``
or ``$RAY_AUTH_TOKEN_PATH``), or Ray's C++ client prints a ``gcs_client`` error line
per retry for ~20 s and gives up. ``join_ray`` sets ``RAY_AUTH_MODE=token`` when it
is unset and a token is there, checks that something listens at a ``host:port``
address (5 s at most, where Ray would wait for minutes), gives Ray's own connection
tries 5 s rather than 20 (``GCS_TRIES_ENV``), and runs ``ray.init`` with
file descriptor 2 captured: Ray's C++ lines are dropped, anything else is passed
on, and a failure becomes one ``BrokerUnavailableError`` that says what to do.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from rayq.store.errors import BrokerUnavailableError, PermissionDeniedError

AUTH_MODE_ENV: Final = "RAY_AUTH_MODE"
REACH_TIMEOUT_S: Final = 5.0
# How many 1 s tries Ray's driver makes to reach the GCS (Ray's default: 20). Something
# answers at the address by then (checked first), so what still fails (a refused
# token) fails within this many seconds; a value the user set is kept.
GCS_TRIES_ENV: Final = "RAY_gcs_server_port_wait_time_s"
GCS_TRIES: Final = "5"
# Lines of Ray's C++ core and its Python start-up notices: never shown.
_RAY_NOISE: Final = re.compile(
    r"^\[\d{4}-\d\d-\d\d |gcs_client|GcsClient|core_worker|raylet|"
    r"Connecting to existing Ray cluster|Connected to Ray cluster|Token authentication"
)
_AUTH_FAILURE: Final = re.compile(r"Unauthenticated|InvalidAuthToken|AuthenticationError|token")


def join_ray(address: str | None, namespace: str) -> None:
    """``ray.init(address, namespace)`` as a quiet driver; BrokerUnavailableError (or
    PermissionDeniedError for a refused token) in one line when it fails."""
    target = address or os.environ.get("RAY_ADDRESS") or "auto"
    _use_token_if_available()  # before Ray is imported: it reads the mode then
    _check_reachable(target)
    os.environ.setdefault(GCS_TRIES_ENV, GCS_TRIES)
    import ray

    if ray.is_initialized():
        return
    with _captured_stderr() as captured:
        try:
            ray.init(
                address=target,
                namespace=namespace,
                log_to_driver=False,
                logging_level=logging.WARNING,
            )
        except Exception as exc:  # Ray raises ConnectionError, RuntimeError, its own
            failure: Exception | None = exc
        else:
            failure = None
    text = captured.read_text(errors="replace") if captured.exists() else ""
    captured.unlink(missing_ok=True)
    if failure is not None:
        raise _explain(target, failure, text) from None
    _pass_on(text)


def _use_token_if_available() -> None:
    if AUTH_MODE_ENV in os.environ:
        return
    token_file = os.environ.get("RAY_AUTH_TOKEN_PATH") or str(Path.home() / ".ray" / "auth_token")
    if os.environ.get("RAY_AUTH_TOKEN") or Path(token_file).is_file():
        os.environ[AUTH_MODE_ENV] = "token"


def _check_reachable(address: str) -> None:
    """BrokerUnavailableError unless a ``host:port`` address accepts a connection."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or address.startswith(("ray://", "auto", "local")):
        return
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), REACH_TIMEOUT_S):
            pass
    except OSError as exc:
        raise BrokerUnavailableError(
            f"no Ray cluster at {address} ({exc.strerror or exc}): check --address "
            "(the head node's GCS address, host:6379 by default)"
        ) from None


def _explain(address: str, failure: Exception, stderr: str) -> Exception:
    said = " ".join(str(failure).split())
    if _AUTH_FAILURE.search(stderr) or isinstance(failure, PermissionError):
        return PermissionDeniedError(
            f"the Ray cluster at {address} refused this client's token: run with "
            f"{AUTH_MODE_ENV}=token and the cluster's token in ~/.ray/auth_token (or "
            "$RAY_AUTH_TOKEN)"
        )
    if "Could not find any running Ray instance" in said or isinstance(failure, ConnectionError):
        return BrokerUnavailableError(
            f"no Ray cluster found at {address}: start one (`ray start --head`) or pass "
            f"--address HOST:PORT ({said[:200]})"
        )
    return BrokerUnavailableError(f"could not join the Ray cluster at {address}: {said[:300]}")


def _pass_on(text: str) -> None:
    """Write the captured lines that are not Ray's noise to stderr."""
    kept = [line for line in text.splitlines() if line.strip() and not _RAY_NOISE.search(line)]
    if kept:
        os.write(2, ("\n".join(kept) + "\n").encode())


@contextlib.contextmanager
def _captured_stderr() -> Iterator[Path]:
    """File descriptor 2 goes to a temporary file while the block runs."""
    fd, name = tempfile.mkstemp(prefix="rayq-ray-init-", suffix=".log")
    saved = os.dup(2)
    os.dup2(fd, 2)
    os.close(fd)
    try:
        yield Path(name)
    finally:
        os.dup2(saved, 2)
        os.close(saved)
