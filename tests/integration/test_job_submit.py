"""examples/producer_consumer_job.py through ``ray job submit``, as docs/guide/deploy.md
shows it: a Ray head of its own (``ray start --head``), ``rayq start`` against it, the
``produce`` and ``consume`` jobs, ``rayq status`` and ``rayq stop``.

The head is this test's alone: its own temp dir, free ports for every server it runs
(other Ray instances on the machine keep theirs, 8265 included), and its own token
(Ray 2.60's token authentication, ``RAY_AUTH_MODE=token`` with ``RAY_AUTH_TOKEN``, so
``~/.ray/auth_token`` is neither read nor written). ``ray stop`` would stop every Ray
instance on the machine, so the test ends the head's processes itself, by pid: the
``ray start`` process is the leader of a session of its own, and every process in that
session or below one of them is the head's.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, suppress
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="finds processes in /proc"),
]
ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent  # the venv's ray, rayq and python: first on PATH
MESSAGES = 300
PORT_FLAGS = (
    "--port",
    "--dashboard-port",
    "--ray-client-server-port",
    "--dashboard-agent-listen-port",
    "--dashboard-agent-grpc-port",
    "--runtime-env-agent-port",
    "--metrics-export-port",
    "--node-manager-port",
    "--object-manager-port",
)


@dataclass(frozen=True)
class Head:
    env: dict[str, str]  # for every command run against the head
    dashboard_url: str  # where `ray job submit` sends jobs


def free_ports(n: int) -> list[int]:
    """``n`` distinct ports no one listens on now (held open together while chosen)."""
    with ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(n)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]


def stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, session id) of a live process; None when it is gone or a zombie
    (which a container's init may never reap)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    state, ppid, _, sid = text[text.rindex(")") + 2 :].split()[:4]  # after "pid (comm) "
    return None if state in "ZX" else (int(ppid), int(sid))


def processes_of(session: int) -> set[int]:
    """The processes in ``session`` and, transitively, their children (a child may
    start a session of its own: Ray's job drivers do)."""
    parents = {
        pid: found
        for pid in (int(p) for p in os.listdir("/proc") if p.isdigit())
        if (found := stat(pid)) is not None
    }
    mine = {pid for pid, (_, sid) in parents.items() if sid == session}
    while more := {pid for pid, (ppid, _) in parents.items() if ppid in mine} - mine:
        mine |= more
    return mine


def end_processes(session: int, grace_s: float = 5.0) -> set[int]:
    """SIGTERM every process of ``session`` (found all at once, before any ends, so
    none is reparented unseen), SIGKILL what is left after ``grace_s`` (gcs_server
    takes 15 s on SIGTERM; nothing of this head's is kept); returns the pids that had
    to be killed."""
    pids = processes_of(session)
    for pid in pids:
        with_pid(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while (alive := {p for p in pids if stat(p) is not None}) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in alive:
        with_pid(pid, signal.SIGKILL)
    while {p for p in alive if stat(p) is not None} and time.monotonic() < deadline + 5:
        time.sleep(0.2)
    return alive


def with_pid(pid: int, sig: signal.Signals) -> None:
    with suppress(ProcessLookupError):  # it ended meanwhile
        os.kill(pid, sig)


def run(head: Head, *argv: str, timeout: float = 180) -> str:
    """A command against the head, from the repo root; its stdout (stderr on failure)."""
    done = subprocess.run(
        argv, cwd=ROOT, env=head.env, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, (
        f"{' '.join(argv)} exited {done.returncode}:\n{done.stdout}{done.stderr}"
    )
    return done.stdout


@pytest.fixture
def head() -> Iterator[Head]:
    """A Ray head of this test's own (see the module's docstring), ended by pid."""
    temp_dir = tempfile.mkdtemp(prefix="rqj-")  # short: Ray's socket paths live in it
    ports = dict(zip(PORT_FLAGS, free_ports(len(PORT_FLAGS)), strict=True))
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env |= {
        "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}",  # the jobs' `python` is this venv's
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN": secrets.token_hex(32),
        "RAY_USAGE_STATS_ENABLED": "0",
    }
    start = subprocess.Popen(
        [
            "ray",
            "start",
            "--head",
            "--node-ip-address=127.0.0.1",
            "--num-cpus=2",
            "--include-dashboard=true",
            "--disable-usage-stats",
            f"--temp-dir={temp_dir}",
            *(f"{flag}={port}" for flag, port in ports.items()),
        ],
        env=env,  # its PATH finds this venv's ray first
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its session holds the head's processes
    )
    try:
        out, _ = start.communicate(timeout=120)
        assert start.returncode == 0, out
        yield Head(
            # `rayq` commands find the head through RAY_ADDRESS (their --address is "auto")
            env=env | {"RAY_ADDRESS": f"127.0.0.1:{ports['--port']}"},
            dashboard_url=f"http://127.0.0.1:{ports['--dashboard-port']}",
        )
    finally:
        start.kill()  # only if still running (a start that hung)
        start.wait()
        end_processes(start.pid)
        left = processes_of(start.pid)
        shutil.rmtree(temp_dir, ignore_errors=True)
    assert not left, f"processes of the test's Ray head still running: {sorted(left)}"


def test_producer_consumer_job_through_ray_job_submit(head: Head, tmp_path: Path) -> None:
    """deploy.md's flow: rayq deployed with ``rayq start``; ``produce`` and ``consume``
    submitted as Ray jobs read back every message with no lag left; status and stop."""
    started = run(head, "rayq", "start", "--store-dir", str(tmp_path / "store"))
    assert "rayq running in namespace 'rayq'" in started
    job = [
        "ray",
        "job",
        "submit",
        "--address",
        head.dashboard_url,
        "--working-dir",
        "examples",
        "--",
        "python",
        "producer_consumer_job.py",
    ]
    produced = run(head, *job, "produce", "--messages", str(MESSAGES))
    assert f"produced {MESSAGES} messages in" in produced, produced
    assert re.search(r"Job 'raysubmit_\w+' succeeded", produced), produced
    consumed = run(head, *job, "consume", "--messages", str(MESSAGES))
    assert f"consumed {MESSAGES} messages; lag left: 0" in consumed, consumed
    assert re.search(r"Job 'raysubmit_\w+' succeeded", consumed), consumed
    status = run(head, "rayq", "status")
    assert "topics:" in status and "job-orders" in status, status
    assert "rayq stopped in namespace 'rayq'" in run(head, "rayq", "stop")
