"""The installed ``rayq`` program against a live deployment, in subprocesses.

One deployment for the module (the shared ``cluster`` fixture); each test runs the real
``rayq`` as a user would, finding the deployment through the ``rayq.url`` and
``rayq.key`` files ``rayq.start`` wrote in its store directory (``RAYQ_HOME``) or
through ``--url``/``--key-file``. The commands' logic is unit-tested against the fake
(tests/unit/cli); here: the connection, the main paths, and the exit codes.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import ray

import rayq

pytestmark = pytest.mark.integration

NAMESPACE = "rayq-test-cli"
# A guard against a hang (the old command waited minutes for a bad address); the
# commands' own limit is 5 s, which a loaded CI machine must not turn into a failure.
HANG_S = 60.0


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def program() -> list[str]:
    found = Path(sys.executable).with_name("rayq")
    return [str(found)] if found.exists() else [sys.executable, "-m", "rayq.cli.main"]


@pytest.fixture(scope="module")
def env(cluster: rayq.Cluster) -> dict[str, str]:
    """A client's environment: the deployment's store directory as RAYQ_HOME, and
    nothing of Ray's or of the test process's own connection."""
    assert cluster.store_dir is not None
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("RAYQ_", "RAY_"))}
    return {**clean, "RAYQ_HOME": str(cluster.store_dir)}


def run(
    env: dict[str, str], *argv: str, code: int = 0, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [*program(), *argv],
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=HANG_S,
        check=False,
    )
    assert done.returncode == code, f"rayq {' '.join(argv)} exited {done.returncode}: {done}"
    if code == 0:
        assert done.stderr == "", done.stderr  # no Ray noise, no warnings
    else:
        assert done.stdout == ""
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    return done


def lines(done: subprocess.CompletedProcess[str]) -> list[Any]:
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_topic_list_reaches_the_deployment_without_importing_ray(
    env: dict[str, str], cluster: rayq.Cluster
) -> None:
    """`rayq topic list` finds the deployment through RAYQ_HOME's files; no module of Ray
    is imported (python -X importtime lists every import)."""
    topic = unique("listed")
    rayq.Admin(namespace=NAMESPACE).create_topic(topic, queues=1)
    listed = json.loads(run(env, "topic", "list", "--json").stdout)
    assert {"topic": topic, "brokers": ["broker-a"]} in listed
    script = program()  # the rayq script is Python: run it with -X importtime
    traced = subprocess.run(
        [sys.executable, "-X", "importtime", *script[-1:], "topic", "list"]
        if script[0] != sys.executable
        else [sys.executable, "-X", "importtime", *script[1:], "topic", "list"],
        env=env,
        capture_output=True,
        text=True,
        timeout=HANG_S,
        check=False,
    )
    assert traced.returncode == 0, traced.stderr
    imported = re.findall(r"^import time:.*\|\s*(\S+)$", traced.stderr, re.MULTILINE)
    assert "rayq.cli.registry" in imported  # the listing covers the command
    assert [m for m in imported if m == "ray" or m.startswith("ray.")] == []


def test_send_from_stdin_refuses_an_unknown_topic_then_creates_it(env: dict[str, str]) -> None:
    topic = unique("stdin")
    err = run(env, "send", "-t", topic, stdin="a\nb\n", code=1).stderr
    assert f"topic '{topic}' does not exist" in err and "--create" in err
    assert topic not in rayq.Admin(namespace=NAMESPACE).topics()
    sent = run(env, "send", "-t", topic, "--create", "--queues", "1", stdin="a\nb\nc\n")
    assert [line.split()[0] for line in sent.stdout.splitlines()] == ["SEND_OK"] * 3


def test_consume_without_a_group_prints_the_same_twice(env: dict[str, str]) -> None:
    """No group, no commit: a second run prints the same messages."""
    topic = unique("twice")
    run(env, "send", "-t", topic, "--create", stdin="one\ntwo\nthree\n")
    argv = ("consume", "-t", topic, "--from", "earliest", "-n", "3", "--json")
    first = lines(run(env, *argv))
    assert sorted(m["body"] for m in first) == ["one", "three", "two"]
    assert lines(run(env, *argv)) == first
    assert run(env, "consume", "-t", topic, "--from", "latest").stdout == ""


def test_consume_follow_prints_what_arrives_and_ends_on_ctrl_c(env: dict[str, str]) -> None:
    topic = unique("follow")
    run(env, "send", "-t", topic, "--create", "-m", "old")
    follower = subprocess.Popen(
        [*program(), "consume", "-t", topic, "--from", "latest", "--follow"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert follower.stdout is not None
        deadline = time.monotonic() + HANG_S
        got = ""
        while "new" not in got and time.monotonic() < deadline:  # sent until it is seen
            run(env, "send", "-t", topic, "-m", "new")
            got += _read_available(follower.stdout, 1.0)
        follower.send_signal(signal.SIGINT)
        out, err = follower.communicate(timeout=HANG_S)
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.communicate()
    assert "old" not in got + out and "new" in got
    assert (follower.returncode, err) == (0, "")


def _read_available(stream: Any, wait_s: float) -> str:
    import select

    ready, _, _ = select.select([stream], [], [], wait_s)
    return os.read(stream.fileno(), 65536).decode() if ready else ""


def test_group_progress_and_offset_reset(env: dict[str, str]) -> None:
    """An unknown group exits 1; a group's reset is a dry run until --execute."""
    err = run(env, "group", "progress", "-g", "nosuch", code=1).stderr
    assert "consumer group 'nosuch' does not exist" in err
    topic, group = unique("reset"), unique("cg")
    run(env, "send", "-t", topic, "--create", "--queues", "1", stdin="1\n2\n3\n")
    run(env, "consume", "-t", topic, "-g", group, "-n", "2")
    progress = json.loads(run(env, "group", "progress", "-g", group, "--json").stdout)
    assert progress["total"] == {"committed_offset": 2, "max_offset": 3, "lag": 1}
    reset = ("offset", "reset", "-g", group, "-t", topic, "--to", "earliest", "--json")
    dry = json.loads(run(env, *reset).stdout)
    assert [(q["current"], q["target"]) for q in dry["queues"]] == [(2, 0)]
    assert json.loads(run(env, "group", "progress", "-g", group, "--json").stdout) == progress
    done = json.loads(run(env, *reset, "--execute").stdout)
    assert done["executed"] is True
    after = json.loads(run(env, "group", "progress", "-g", group, "--json").stdout)
    assert after["total"]["lag"] == 3


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--url", "rayq://127.0.0.1:1"], "cannot reach"),
        (["--url", "http://nowhere"], "rayq://"),
        (["--url", "rayq://127.0.0.1:1", "--key-file", "/nonexistent/rayq.key"], "key file"),
    ],
    ids=["nothing-listening", "not-a-rayq-url", "no-key-file"],
)
def test_a_bad_url_or_key_file_is_one_line_and_exit_1(
    env: dict[str, str], argv: list[str], says: str
) -> None:
    assert says in run(env, "topic", "list", *argv, code=1).stderr


def test_a_wrong_key_is_refused_in_one_line(
    env: dict[str, str], cluster: rayq.Cluster, tmp_path: Path
) -> None:
    assert cluster.store_dir is not None
    url = (Path(cluster.store_dir) / "rayq.url").read_text().strip()
    wrong = tmp_path / "wrong.key"
    wrong.write_text("ab" * 32 + "\n")
    err = run(env, "--url", url, "--key-file", str(wrong), "topic", "list", code=1).stderr
    assert "refused the key" in err
    right = str(Path(cluster.store_dir) / "rayq.key")
    away = {k: v for k, v in env.items() if k != "RAYQ_HOME"}
    assert run(away, "topic", "--url", url, "list", "--key-file", right).stdout


def test_start_and_stop_a_second_deployment_through_ray(
    env: dict[str, str], tmp_path: Path
) -> None:
    """`rayq start` joins the Ray cluster (its token handled), prints the store and
    URL, and exits; `rayq status` reaches it by that URL; `rayq stop` ends it."""
    address = ray.get_runtime_context().gcs_address
    other = f"{NAMESPACE}-2"
    store = tmp_path / "second"
    started = run(
        env, "start", "--address", address, "--namespace", other, "--store-dir", str(store)
    )
    assert f"store: {store}" in started.stdout
    url = re.search(r"^url: (rayq://\S+)", started.stdout, re.MULTILINE)
    assert url is not None
    try:
        status = run({**env, "RAYQ_HOME": str(store)}, "status", "--json").stdout
        assert json.loads(status)["url"] == url.group(1)
    finally:
        run(env, "stop", "--address", address, "--namespace", other)
    from rayq.cluster import running_actors

    assert running_actors(other) == []
