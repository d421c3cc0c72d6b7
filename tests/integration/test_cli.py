"""The ``rayq`` command against a live deployment (one broker and its slave), in-process.

Every command runs through ``rayq.cli.main.main`` with its output captured; ``--json``
output is parsed back; bad arguments exit 2 with one line on stderr; a rayq error
exits 1 with one line. The last tests kill actors for good (health FAIL), so they
run last in this module.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import ray

import rayq
from rayq.cli.main import main
from rayq.cluster import running_actors

pytestmark = pytest.mark.integration

NAMESPACE = "rayq-test-cli"
BROKER = "broker-a"
SLAVE = "broker-a#1"
# One broker with one slave (so health covers slaves); the shared ``cluster`` fixture
# (conftest.py: small store files, no disk limits) starts it.
SLAVES = 1
BROKER_OVERRIDES = {"auto_failover": False}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def cli(capsys: pytest.CaptureFixture[str], *argv: str, code: int = 0) -> str:
    """Run ``rayq <argv> --namespace NAMESPACE``; assert the exit code; return stdout."""
    capsys.readouterr()
    got = main([*argv, "--namespace", NAMESPACE])
    out, err = capsys.readouterr()
    assert got == code, f"rayq {' '.join(argv)} exited {got}: {out}{err}"
    return out


def cli_json(capsys: pytest.CaptureFixture[str], *argv: str, code: int = 0) -> Any:
    return json.loads(cli(capsys, *argv, "--json", code=code))


def test_rayq_help_runs_as_a_program() -> None:
    """The installed ``rayq`` program's ``--help`` lists the command groups, exit code 0."""
    program = Path(sys.executable).with_name("rayq")
    argv = [str(program)] if program.exists() else [sys.executable, "-m", "rayq.cli.main"]
    out = subprocess.run([*argv, "--help"], capture_output=True, text=True, check=True)
    for name in ("topic", "group", "message", "offset", "cluster", "broker", "send", "consume"):
        assert name in out.stdout


def test_topic_create_list_route_status_update_delete(
    cluster: rayq.Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    """A topic made by the CLI is listed, routed and has stats; update and delete apply."""
    topic = unique("cli")
    assert "created" in cli(capsys, "topic", "create", "--topic", topic, "--queues", "3")
    listed = cli_json(capsys, "topic", "list")
    assert {"topic": topic, "brokers": [BROKER]} in listed
    assert topic in cli(capsys, "topic", "list")
    route = cli_json(capsys, "topic", "route", "--topic", topic)
    assert [(q["broker_name"], q["read_queue_nums"]) for q in route["queues"]] == [(BROKER, 3)]
    status = cli_json(capsys, "topic", "status", "--topic", topic)
    assert [(s["queue_id"], s["max_offset"]) for s in status] == [(0, 0), (1, 0), (2, 0)]
    assert "max offset" in cli(capsys, "topic", "status", "--topic", topic)
    cli(capsys, "topic", "update", "--topic", topic, "--queues", "2", "--perm", "4")
    route = cli_json(capsys, "topic", "route", "--topic", topic)
    assert [(q["write_queue_nums"], q["perm"]) for q in route["queues"]] == [(2, 4)]
    cli(capsys, "topic", "delete", "--topic", topic)
    assert topic not in [t["topic"] for t in cli_json(capsys, "topic", "list")]


def test_group_create_list_update_delete(
    cluster: rayq.Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    """Group settings made and changed by the CLI are what the brokers hold."""
    group = unique("cg")
    cli(capsys, "group", "create", "--group", group, "--retry-max-times", "3")
    assert group in cli_json(capsys, "group", "list")
    assert group in cli(capsys, "group", "list")
    cli(capsys, "group", "update", "--group", group, "--consume-enable", "false")
    config = rayq.Admin(namespace=NAMESPACE).group_config(group)
    assert (config.consume_enable, config.retry_max_times) == (False, 3)
    cli(capsys, "group", "delete", "--group", group)
    assert group not in cli_json(capsys, "group", "list")


def test_send_consume_progress_and_message_lookups(
    cluster: rayq.Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    """A message sent by the CLI is consumed by it, found by key, id and offset, and the
    group's progress shows it committed."""
    topic, group = unique("msg"), unique("cg")
    cli(capsys, "topic", "create", "--topic", topic, "--queues", "1")
    out = cli(
        capsys,
        "send",
        "--topic",
        topic,
        "--body",
        "hello rayq",
        "--tags",
        "TagA",
        "--keys",
        "k1,k2",
        "--property",
        "color=blue",
    )
    assert out.startswith("SEND_OK msg_id=")
    msg_id = out.split("msg_id=")[1].split()[0]

    consumed = cli_json(capsys, "consume", "--topic", topic, "--group", group, "--count", "1")
    assert [(m["body"], m["msg_id"], m["tags"]) for m in consumed] == [
        ("hello rayq", msg_id, "TagA")
    ]
    progress = cli_json(capsys, "group", "progress", "--group", group)
    assert [(q["topic"], q["committed_offset"], q["lag"]) for q in progress["queues"]] == [
        (topic, 1, 0)
    ]
    assert progress["total"] == {"committed_offset": 1, "max_offset": 1, "lag": 0}
    assert "total" in cli(capsys, "group", "progress", "--group", group, "--topic", topic)

    found = cli_json(capsys, "message", "query", "--topic", topic, "--key", "k2")
    assert [m["msg_id"] for m in found] == [msg_id]
    viewed = cli_json(capsys, "message", "view", "--id", msg_id)
    assert (viewed["body"], viewed["body_encoding"], viewed["keys"]) == (
        "hello rayq",
        "text",
        ["k1", "k2"],
    )
    assert viewed["properties"]["color"] == "blue"
    got = cli_json(capsys, "message", "get", "--topic", topic, "--queue", "0", "--offset", "0")
    assert (got["msg_id"], got["queue_offset"]) == (msg_id, 0)
    text = cli(capsys, "message", "view", "--id", msg_id)
    assert "headers" in text and "color" in text and "hello rayq" in text


def test_message_get_prints_a_binary_body_as_hex(
    cluster: rayq.Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    """A body that is not UTF-8 comes out as hex."""
    topic = unique("bin")
    rayq.Admin(namespace=NAMESPACE).create_topic(topic, queues=1)
    with rayq.Producer(group="pg", namespace=NAMESPACE) as producer:
        producer.send(rayq.Message(topic, b"\xff\x00\xfe"))
    got = cli_json(capsys, "message", "get", "--topic", topic, "--queue", "0", "--offset", "0")
    assert (got["body_encoding"], got["body"]) == ("hex", "ff00fe")
    assert "ff00fe" in cli(capsys, "message", "get", "-t", topic, "-q", "0", "-o", "0")


def test_offset_reset_dry_run_shows_old_and_new_and_changes_nothing(
    cluster: rayq.Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    """--dry-run shows each queue's old and new offset; the reset then applies the new."""
    topic, group = unique("rst"), unique("cg")
    cli(capsys, "topic", "create", "--topic", topic, "--queues", "1")
    for body in ("one", "two", "three"):
        cli(capsys, "send", "--topic", topic, "--body", body)
    cli(capsys, "consume", "--topic", topic, "--group", group, "--count", "3")
    committed = cli_json(capsys, "group", "progress", "--group", group)["total"]
    assert committed["committed_offset"] == 3
    dry = cli_json(
        capsys,
        "offset",
        "reset",
        "--group",
        group,
        "--topic",
        topic,
        "--timestamp",
        "0",
        "--dry-run",
    )
    assert [(q["old_offset"], q["new_offset"]) for q in dry["queues"]] == [(3, 0)]
    assert cli_json(capsys, "group", "progress", "--group", group)["total"] == committed
    done = cli_json(
        capsys,
        "offset",
        "reset",
        "--group",
        group,
        "--topic",
        topic,
        "--timestamp",
        "1970-01-01T00:00:00",
    )
    assert [(q["old_offset"], q["new_offset"]) for q in done["queues"]] == [(3, 0)]
    assert cli_json(capsys, "group", "progress", "--group", group)["total"]["lag"] == 3


def test_group_connections_lists_live_push_consumers_and_their_queues(
    cluster: rayq.Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    """A running push consumer shows with its client id and the queues it owns."""
    topic, group = unique("conn"), unique("cg")
    rayq.Admin(namespace=NAMESPACE).create_topic(topic, queues=2)
    consumer = rayq.PushConsumer(group)
    consumer.subscribe(topic)
    consumer.register_listener(lambda msgs: rayq.ConsumeStatus.CONSUME_SUCCESS)
    consumer.start()
    try:
        deadline = time.monotonic() + 60
        while True:
            members = cli_json(capsys, "group", "connections", "--group", group)
            owned = [q["queue_id"] for m in members for q in m["queues"] if q["topic"] == topic]
            if len(owned) == 2 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert len(members) == 1
        assert sorted(owned) == [0, 1]
        assert members[0]["client_id"] in cli(capsys, "group", "connections", "-g", group)
    finally:
        consumer.shutdown()


def test_cluster_list_and_broker_status_and_config(
    cluster: rayq.Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    """cluster list shows the broker with role, node, disk and TPS; broker status and
    config show its state and settings."""
    brokers = cli_json(capsys, "cluster", "list")
    assert [(b["replica"], b["role"], b["lost"]) for b in brokers] == [
        (BROKER, "ASYNC_MASTER", False),
        (SLAVE, "SLAVE", False),
    ]
    assert 0.0 <= brokers[0]["disk_ratio"] <= 1.0 and brokers[0]["put_tps"] >= 0.0
    assert brokers[0]["node_id"] == ray.get_runtime_context().get_node_id()
    assert SLAVE.split("#")[0] in cli(capsys, "cluster", "list")
    slave = cli_json(capsys, "broker", "status", "--broker", SLAVE)
    assert (slave["info"]["broker_id"], slave["replication_error"]) == (1, "")
    status = cli_json(capsys, "broker", "status", "--broker", BROKER)
    assert status["info"]["broker_name"] == BROKER
    assert status["flushed_offset"] >= 0 and status["flusher_error"] == ""
    assert "flushed offset" in cli(capsys, "broker", "status", "--broker", BROKER)
    config = cli_json(capsys, "broker", "config", "--broker", BROKER)
    assert config["broker_name"] == BROKER
    assert "store.disk_warning_ratio" in cli(capsys, "broker", "config", "--broker", BROKER)


def test_start_status_and_stop_a_second_deployment(
    cluster: rayq.Cluster, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``start`` deploys into another namespace of the same Ray, ``status`` lists it and
    ``stop`` ends every one of its actors."""
    other = f"{NAMESPACE}-2"
    assert main(["start", "--namespace", other, "--store-dir", str(tmp_path)]) == 0
    try:
        assert f"namespace {other!r}" in capsys.readouterr().out
        assert main(["status", "--namespace", other]) == 0
        assert "brokers: ['broker-a']" in capsys.readouterr().out
    finally:
        assert main(["stop", "--namespace", other]) == 0
    assert running_actors(other) == []
    assert running_actors(NAMESPACE) != []


@pytest.mark.parametrize(
    "argv",
    [
        ["topic"],
        ["topic", "create"],
        ["topic", "create", "--topic", "t", "--queues", "0"],
        ["topic", "frobnicate"],
        ["message", "get", "--topic", "t", "--queue", "x", "--offset", "0"],
        ["offset", "reset", "--group", "g", "--topic", "t", "--timestamp", "yesterday"],
        ["group", "update", "--group", "g", "--consume-enable", "maybe"],
        ["cluster", "health", "--disk-fail-ratio", "2"],
        ["send", "--topic", "t"],
    ],
    ids=lambda argv: "-".join(argv[:2]),
)
def test_bad_arguments_exit_2_with_one_line(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """A usage error is one line on stderr and exit code 2, before anything is asked."""
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert len(err.strip().splitlines()) == 1 and "error:" in err


def test_a_rayq_error_exits_1_with_one_line(
    cluster: rayq.Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    """A command the deployment refuses prints the rayq error on one line and exits 1."""
    for argv in (
        ["topic", "route", "--topic", "no-such-topic"],
        ["message", "view", "--id", "0123456789ABCDEF0123456789ABCDEF"],
        ["broker", "status", "--broker", "no-such-broker"],
    ):
        capsys.readouterr()
        assert main([*argv, "--namespace", NAMESPACE]) == 1
        out, err = capsys.readouterr()
        assert out == ""
        assert len(err.strip().splitlines()) == 1 and err.startswith(f"rayq {argv[0]}")


def test_health_is_ok_on_a_healthy_deployment(
    cluster: rayq.Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every actor (coordinator, broker, flusher, hold) is OK; the exit code is 0."""
    records = cli_json(capsys, "cluster", "health")
    assert {r["actor"]: r["level"] for r in records} == {
        "coordinator": "OK",
        f"broker {BROKER}": "OK",
        f"flusher {BROKER}": "OK",
        f"hold {BROKER}": "OK",
        f"slave {SLAVE}": "OK",
        f"flusher {SLAVE}": "OK",
        f"hold {SLAVE}": "OK",
    }
    broker = next(r for r in records if r["kind"] == "broker")
    assert [c["name"] for c in broker["checks"]] == [
        "state",
        "heartbeat",
        "disk_ratio",
        "flush_lag",
        "replication_lag",
    ]
    assert "coordinator" in cli(capsys, "cluster", "health")


def test_health_fails_past_the_disk_limit(
    cluster: rayq.Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    """A disk ratio past the FAIL limit makes the broker FAIL and the exit code 1."""
    records = cli_json(capsys, "cluster", "health", "--disk-fail-ratio", "0", code=1)
    broker = next(r for r in records if r["kind"] == "broker")
    disk = next(c for c in broker["checks"] if c["name"] == "disk_ratio")
    assert (broker["level"], disk["level"]) == ("FAIL", "FAIL")
    assert "puts are refused" in disk["reason"]


def test_health_fails_when_the_flusher_is_killed_for_good(
    cluster: rayq.Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    """A flusher that is gone is FAIL with the reason, and so is the broker's flush lag."""
    ray.kill(ray.get_actor(f"rayq-flusher-{BROKER}", namespace=NAMESPACE), no_restart=True)
    records = cli_json(capsys, "cluster", "health", code=1)
    flusher = next(r for r in records if r["kind"] == "flusher")
    assert flusher["level"] == "FAIL"
    assert "rayq-flusher-" in flusher["checks"][0]["reason"]


@pytest.mark.parametrize(("replica", "kind"), [(SLAVE, "slave"), (BROKER, "broker")])
def test_health_fails_when_a_replica_is_killed_for_good(
    cluster: rayq.Cluster, capsys: pytest.CaptureFixture[str], replica: str, kind: str
) -> None:
    """A slave, then the broker, killed for good is FAIL (lost or unreachable); the exit
    code is 1."""
    ray.kill(ray.get_actor(f"rayq-broker-{replica}", namespace=NAMESPACE), no_restart=True)
    records = cli_json(capsys, "cluster", "health", code=1)
    killed = next(r for r in records if r["kind"] == kind)
    assert killed["level"] == "FAIL"
    assert killed["checks"][0]["value"] in ("LOST", "UNREACHABLE")
