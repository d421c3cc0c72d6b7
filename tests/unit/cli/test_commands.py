"""The ``rayq`` commands run by ``main`` against the in-process fake deployment
(``rayq.testing.FakeTransport``: real brokers and stores, no Ray, no sockets)."""

from __future__ import annotations

import base64
import json
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import rayq
from rayq.cli.main import main
from rayq.store.names import dlq_topic
from rayq.testing import FakeCluster, FakeTransport, fill_topic, poll_until, wait_until


class Cli:
    """``rayq <argv>`` against one fake cluster, with its output captured."""

    def __init__(self, cluster: FakeCluster, capsys: pytest.CaptureFixture[str]) -> None:
        self.cluster = cluster
        self.transport = FakeTransport(cluster)
        self.capsys = capsys
        self.admin = rayq.Admin(transport=self.transport)

    def __call__(self, *argv: str, code: int = 0) -> str:
        self.capsys.readouterr()
        got = main(list(argv), transport=self.transport)
        out, err = self.capsys.readouterr()
        assert got == code, f"rayq {' '.join(argv)} exited {got}: {out}{err}"
        if code == 1:
            assert out == "" and len(err.strip().splitlines()) == 1, err
            return err
        return out

    def json(self, *argv: str) -> Any:
        return json.loads(self(*argv, "--json"))

    def lines(self, *argv: str) -> list[Any]:
        return [json.loads(line) for line in self(*argv, "--json").splitlines()]


@pytest.fixture()
def cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Any:
    with FakeCluster(tmp_path / "store") as cluster:
        yield Cli(cluster, capsys)


@pytest.fixture()
def stdin_from(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """``stdin_from(data)``: the command's stdin reads ``data`` (a real file: it has a fd)."""
    opened: list[Any] = []

    def feed(data: bytes) -> None:
        path = tmp_path / f"stdin-{len(opened)}"
        path.write_bytes(data)
        opened.append(path.open("r"))
        monkeypatch.setattr(sys, "stdin", opened[-1])

    yield feed
    for handle in opened:
        handle.close()


def poll_until_any(poll: Any) -> list[Any]:
    got: list[Any] = []
    wait_until(lambda: bool(got.extend(poll()) or got))
    return got


# ------------------------------------------------------------------ topics


def test_topic_create_list_route_status_update_delete(cli: Cli) -> None:
    assert "created" in cli("topic", "create", "-t", "orders", "--queues", "3")
    assert {"topic": "orders", "brokers": ["broker-a"]} in cli.json("topic", "list")
    assert "orders" in cli("topic", "list")
    route = cli.json("topic", "route", "-t", "orders")
    assert [(q["broker_name"], q["read_queue_nums"]) for q in route["queues"]] == [("broker-a", 3)]
    status = cli.json("topic", "status", "-t", "orders")
    assert [(s["queue_id"], s["max_offset"]) for s in status] == [(0, 0), (1, 0), (2, 0)]
    cli("topic", "update", "-t", "orders", "--queues", "2", "--perm", "4")
    route = cli.json("topic", "route", "-t", "orders")
    assert [(q["write_queue_nums"], q["perm"]) for q in route["queues"]] == [(2, 4)]
    cli("topic", "delete", "-t", "orders")
    assert "orders" not in [t["topic"] for t in cli.json("topic", "list")]


@pytest.mark.parametrize(
    "argv",
    [
        ["topic", "status", "-t", "nosuch"],
        ["topic", "route", "-t", "nosuch"],
        ["topic", "delete", "-t", "nosuch"],
        ["consume", "-t", "nosuch"],
        ["send", "-t", "nosuch", "-m", "x"],
        ["message", "query", "-t", "nosuch", "-k", "k"],
        ["group", "progress", "-g", "nosuch"],
        ["group", "connections", "-g", "nosuch"],
        ["group", "update", "-g", "nosuch", "--consume-enable", "false"],
        ["offset", "reset", "-g", "nosuch", "-t", "orders", "--to", "earliest"],
        ["offset", "reset", "-g", "cg", "-t", "nosuch", "--to", "earliest"],
        ["dlq", "list", "-g", "nosuch"],
    ],
    ids=lambda argv: "-".join(argv),
)
def test_an_unknown_topic_or_group_is_one_line_and_exit_code_1(cli: Cli, argv: list[str]) -> None:
    cli.admin.create_topic("orders", queues=1)
    cli.admin.create_group("cg")
    err = cli(*argv, code=1)
    assert err.startswith(f"rayq {argv[0]}") and "nosuch" in err
    assert "nosuch" not in cli.admin.topics() and "nosuch" not in cli.admin.groups()


def test_group_progress_shows_committed_max_and_lag_with_totals(cli: Cli) -> None:
    cli.admin.create_topic("orders", queues=2)
    fill_topic(cli.cluster, "orders", 4, batch=1)
    cli("consume", "-t", "orders", "-g", "cg", "-n", "4")
    progress = cli.json("group", "progress", "-g", "cg")
    assert progress["total"] == {"committed_offset": 4, "max_offset": 4, "lag": 0}
    assert "total" in cli("group", "progress", "-g", "cg", "-t", "orders")
    assert "cg" in cli.json("group", "list")


# -------------------------------------------------------------------- send


def test_send_refuses_an_unknown_topic_unless_create_is_given(cli: Cli) -> None:
    err = cli("send", "-t", "typo", "-m", "x", code=1)
    assert "topic 'typo' does not exist" in err and "--create" in err
    assert "typo" not in cli.admin.topics()
    out = cli("send", "-t", "typo", "-m", "x", "--create", "--queues", "2")
    assert out.startswith("SEND_OK msg_id=")
    assert [s.max_offset for s in cli.admin.topic_stats("typo")] in ([1, 0], [0, 1])


def test_send_takes_keys_tags_and_properties_for_the_body(cli: Cli) -> None:
    cli.admin.create_topic("orders", queues=1)
    out = cli("send", "-t", "orders", "-m", "hello", "-k", "k1", "-k", "k2", "--tag", "TagA",
              "-p", "color=blue", "-p", "size=")  # fmt: skip
    msg_id = out.split("msg_id=")[1].split()[0]
    msg = cli.admin.view_message(msg_id)
    assert (msg.body, msg.tags, msg.keys) == (b"hello", "TagA", ["k1", "k2"])
    assert (msg.properties["color"], msg.properties["size"]) == ("blue", "")


def test_send_sends_each_line_of_stdin_in_batches(cli: Cli, stdin_from: Any) -> None:
    """Empty lines are skipped, a last line without a newline counts, CRLF is one end."""
    cli.admin.create_topic("lines", queues=1)
    stdin_from(b"one\ntwo\r\n\nthree\n")
    out = cli("send", "-t", "lines", "--tag", "T")
    assert len(out.splitlines()) == 3 and all(
        line.startswith("SEND_OK") for line in out.splitlines()
    )
    assert [m["body"] for m in cli.lines("consume", "-t", "lines")] == ["one", "two", "three"]
    assert len(cli.cluster.calls_of("put")) == 1  # one batch
    stdin_from(b"four")  # no newline at the end
    cli("send", "-t", "lines")
    assert cli.lines("consume", "-t", "lines", "--from", "3")[0]["body"] == "four"


def test_send_json_lines_carry_body_keys_tags_properties_and_binary_bodies(
    cli: Cli, stdin_from: Any
) -> None:
    cli.admin.create_topic("j", queues=1)
    lines = [
        {"body": "a", "keys": ["k1"], "tags": "X", "properties": {"p": "1"}},
        {"body": base64.b64encode(b"\xff\x00").decode(), "body_encoding": "base64"},
    ]
    stdin_from("\n".join(json.dumps(x) for x in lines).encode())
    cli("send", "-t", "j", "--json", "-k", "all", "--tag", "D", "-p", "q=2")
    got = cli.lines("consume", "-t", "j")
    assert [(m["body"], m["keys"], m["tags"]) for m in got] == [
        ("a", ["all", "k1"], "X"),
        (base64.b64encode(b"\xff\x00").decode(), ["all"], "D"),
    ]
    assert got[1]["body_encoding"] == "base64"
    assert (got[0]["properties"]["p"], got[0]["properties"]["q"]) == ("1", "2")


@pytest.mark.parametrize(
    ("line", "says"),
    [
        (b"not json", "line 2 is not JSON"),
        (b'{"nobody": 1}', '"body" string'),
        (b'{"body": "x", "keys": [1]}', "keys must be a list of strings"),
        (b'{"body": "x", "body_encoding": "base64"}', "not base64"),
    ],
)
def test_a_bad_json_line_is_one_line_exit_1_and_sends_nothing_of_its_read(
    cli: Cli, stdin_from: Any, line: bytes, says: str
) -> None:
    cli.admin.create_topic("j", queues=1)
    stdin_from(b'{"body": "fine"}\n' + line + b"\n")
    assert says in cli("send", "-t", "j", "--json", code=1)
    assert [s.max_offset for s in cli.admin.topic_stats("j")] == [0]


# ----------------------------------------------------------------- consume


def test_consume_without_a_group_commits_nothing_and_prints_the_same_twice(cli: Cli) -> None:
    cli.admin.create_topic("orders", queues=2)
    fill_topic(cli.cluster, "orders", 6, body=b"m", batch=1)
    first = cli.lines("consume", "-t", "orders", "--from", "earliest")
    assert len(first) == 6
    assert first == cli.lines("consume", "-t", "orders")
    assert {m["topic"] for m in first} == {"orders"}
    assert {"queue_id", "queue_offset", "msg_id", "keys", "tags", "properties", "body"} <= set(
        first[0]
    )
    assert cli.admin.consumer_progress("rayq_cli_reader") == []


def test_consume_count_and_plain_and_format_output(cli: Cli) -> None:
    cli.admin.create_topic("one", queues=1)
    with rayq.Producer("pg", transport=cli.transport) as producer:
        for body in (b"first", b"second", b"third"):
            producer.send(rayq.Message("one", body, tags="T"))
    assert cli("consume", "-t", "one", "-n", "2") == "first\nsecond\n"
    out = cli("consume", "-t", "one", "--format", "{queue_offset}:{tags}:{body}")
    assert out == "0:T:first\n1:T:second\n2:T:third\n"
    verbose = cli("consume", "-t", "one", "-v", "-n", "1")
    assert "one broker-a:0@0" in verbose and verbose.endswith("first\n")


def test_consume_from_latest_an_offset_and_a_time(cli: Cli) -> None:
    cli.admin.create_topic("one", queues=1)
    fill_topic(cli.cluster, "one", 3, batch=1)
    assert cli("consume", "-t", "one", "--from", "latest") == ""
    assert [m["queue_offset"] for m in cli.lines("consume", "-t", "one", "--from", "1")] == [1, 2]
    assert [m["queue_offset"] for m in cli.lines("consume", "-t", "one", "--from", "99")] == []
    stored = cli.admin.get_message("one", 0, 2).store_timestamp
    at = cli.lines("consume", "-t", "one", "--from", str(stored))
    assert at[-1]["queue_offset"] == 2 and len(at) <= 3
    assert cli.lines("consume", "-t", "one", "--from", "2999-01-01T00:00:00") == []
    assert len(cli.lines("consume", "-t", "one", "--from", "1970-01-01T00:00:00")) == 3


def test_consume_json_prints_a_binary_body_as_base64(cli: Cli) -> None:
    cli.admin.create_topic("bin", queues=1)
    with rayq.Producer("pg", transport=cli.transport) as producer:
        producer.send(rayq.Message("bin", b"\xff\x00\xfe"))
    (msg,) = cli.lines("consume", "-t", "bin")
    assert (msg["body_encoding"], msg["body"]) == (
        "base64",
        base64.b64encode(b"\xff\x00\xfe").decode(),
    )


def test_consume_as_a_group_commits_what_it_printed_only(cli: Cli) -> None:
    cli.admin.create_topic("one", queues=1)
    fill_topic(cli.cluster, "one", 5, batch=5)  # one pull brings all five
    assert len(cli.lines("consume", "-t", "one", "-g", "cg", "-n", "2")) == 2
    (p,) = cli.admin.consumer_progress("cg")
    assert (p.committed_offset, p.lag) == (2, 3)
    rest = cli.lines("consume", "-t", "one", "-g", "cg")
    assert [m["queue_offset"] for m in rest] == [2, 3, 4]
    assert cli.lines("consume", "-t", "one", "-g", "cg", "--from", "earliest", "--no-commit")
    assert cli.admin.consumer_progress("cg")[0].committed_offset == 5


def test_consume_follow_waits_for_new_messages(cli: Cli) -> None:
    cli.admin.create_topic("live", queues=1)
    result: list[int] = []
    runner = threading.Thread(
        target=lambda: result.append(
            main(["consume", "-t", "live", "--follow", "-n", "2"], transport=cli.transport)
        )
    )
    runner.start()
    try:
        wait_until(lambda: "broker-a" in cli.cluster.calls_of("hold.pull"))  # it waits
        with rayq.Producer("pg", transport=cli.transport) as producer:
            for body in (b"a", b"b"):
                producer.send(rayq.Message("live", body))
    finally:
        runner.join(timeout=60)
    assert result == [0]
    assert cli.capsys.readouterr().out == "a\nb\n"


def test_ctrl_c_ends_consume_cleanly_with_exit_0_and_commits_what_was_printed(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rayq.consumer.pull import PullConsumer

    cli.admin.create_topic("one", queues=1)
    fill_topic(cli.cluster, "one", 1)
    polls: list[int] = []
    real_poll = PullConsumer.poll

    def poll_then_interrupt(self: PullConsumer, timeout: float = 1.0) -> list[Any]:
        polls.append(1)
        if len(polls) > 1:  # the message came with the first poll; then Ctrl-C
            raise KeyboardInterrupt
        return poll_until_any(lambda: real_poll(self, timeout))

    monkeypatch.setattr(PullConsumer, "poll", poll_then_interrupt)
    assert cli("consume", "-t", "one", "-g", "cg", "--follow") == "x\n"
    assert cli.admin.consumer_progress("cg")[0].committed_offset == 1


# ----------------------------------------------------------- offset reset


def test_offset_reset_is_a_dry_run_unless_execute(cli: Cli) -> None:
    cli.admin.create_topic("one", queues=1)
    fill_topic(cli.cluster, "one", 3, batch=1)
    cli("consume", "-t", "one", "-g", "cg")
    dry = cli.json("offset", "reset", "-g", "cg", "-t", "one", "--to", "earliest")
    assert (dry["executed"], [(q["current"], q["target"]) for q in dry["queues"]]) == (
        False,
        [(3, 0)],
    )
    assert "nothing changed" in cli(
        "offset", "reset", "-g", "cg", "-t", "one", "--to", "shift", "-1"
    )
    assert cli.admin.consumer_progress("cg")[0].committed_offset == 3
    done = cli.json("offset", "reset", "-g", "cg", "-t", "one", "--to", "shift", "-2", "--execute")
    assert [(q["current"], q["target"]) for q in done["queues"]] == [(3, 1)]
    assert cli.admin.consumer_progress("cg")[0].committed_offset == 1
    cli("offset", "reset", "-g", "cg", "-t", "one", "--to", "offset", "99", "--execute")
    assert cli.admin.consumer_progress("cg")[0].committed_offset == 3  # clamped to the end
    err = cli("offset", "reset", "-g", "cg", "-t", "one", "--to", "latest", "-q", "5", code=1)
    assert "queue 5" in err


# ----------------------------------------------------------- dead letters


def dead_letters(cli: Cli, group: str, topic: str, n: int) -> list[rayq.MessageExt]:
    consumer = rayq.PullConsumer(
        group,
        consume_from=rayq.ConsumeFromWhere.FIRST_OFFSET,
        auto_commit=False,
        transport=cli.transport,
    )
    consumer.subscribe(topic)
    consumer.start()
    try:
        got = poll_until(consumer, n)[:n]
        assert consumer.send_back(got, delay_level=-1) == [dlq_topic(group)] * n
        return got
    finally:
        consumer.shutdown()


def test_dlq_list_and_resend(cli: Cli) -> None:
    cli.admin.create_topic("orders", queues=1)
    fill_topic(cli.cluster, "orders", 2, body=b"dead", batch=1)
    dead = dead_letters(cli, "cg", "orders", 2)
    listed = cli.json("dlq", "list", "-g", "cg")
    assert sorted(m["msg_id"] for m in listed) == sorted(m.msg_id for m in dead)
    assert "orders" in cli("dlq", "list", "-g", "cg")
    out = cli("dlq", "resend", "-g", "cg", "--id", listed[0]["msg_id"])
    assert out.startswith("SEND_OK") and "%RETRY%cg" in out
    err = cli("dlq", "resend", "-g", "cg", "--id", "0123456789ABCDEF0123456789ABCDEF", code=1)
    assert err.startswith("rayq dlq resend")


# ---------------------------------------------------------------- messages


def test_message_query_view_and_get(cli: Cli) -> None:
    cli.admin.create_topic("orders", queues=1)
    out = cli("send", "-t", "orders", "-m", "hello", "-k", "k2", "-p", "color=blue")
    msg_id = out.split("msg_id=")[1].split()[0]
    assert [m["msg_id"] for m in cli.json("message", "query", "-t", "orders", "-k", "k2")] == [
        msg_id
    ]
    viewed = cli.json("message", "view", "--id", msg_id)
    assert (viewed["body"], viewed["properties"]["color"]) == ("hello", "blue")
    got = cli.json("message", "get", "-t", "orders", "-q", "0", "-o", "0")
    assert got["msg_id"] == msg_id
    assert "hello" in cli("message", "view", "--id", msg_id)
    assert cli("message", "get", "-t", "orders", "-q", "0", "-o", "5", code=1)


# ------------------------------------------------------------ the cluster


def test_status_cluster_list_and_broker_status(cli: Cli) -> None:
    cli.admin.create_topic("orders", queues=1)
    assert cli.json("status") == {"url": "", "brokers": ["broker-a"], "topics": ["orders"]}
    assert [b["replica"] for b in cli.json("cluster", "list")] == ["broker-a"]
    assert cli.json("broker", "status", "-b", "broker-a")["info"]["broker_name"] == "broker-a"


# ------------------------------------------------------------ credentials


def test_half_of_the_acl_credentials_is_an_error(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAYQ_SECRET_KEY", raising=False)
    err = cli("topic", "list", "--access-key", "ak", code=1)
    assert "--secret-key is missing" in err


def test_console_without_its_package_is_a_clear_error(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "rayq.console", None)  # an import of it fails
    err = cli("console", "--url", "rayq://127.0.0.1:1", code=1)
    assert "pip install 'rayq[console]'" in err


NO_RAY = """
import importlib.abc, sys, tempfile
from rayq.cli.main import main
from rayq.testing import FakeCluster, FakeTransport

class RefuseRay(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "ray" or name.startswith("ray."):
            raise ImportError("the rayq command imported ray")

with FakeCluster(tempfile.mkdtemp()) as cluster:
    transport = FakeTransport(cluster)
    sys.meta_path.insert(0, RefuseRay())
    for argv in (["topic", "create", "-t", "t"], ["send", "-t", "t", "-m", "x"],
                 ["consume", "-t", "t", "-n", "1"], ["topic", "list"], ["status"]):
        assert main(argv, transport=transport) == 0, argv
print("ray" in sys.modules)
"""


def test_the_commands_never_import_ray() -> None:
    """topic list, send, consume, status run with any import of ray refused (a fresh
    process: this one may have imported Ray for other tests)."""
    import subprocess

    done = subprocess.run(
        [sys.executable, "-c", NO_RAY], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "False"


ACL_RULES = """
[[accounts]]
access_key = "root"
secret_key = "root-secret-0000"
admin = true

[[accounts]]
access_key = "reader"
secret_key = "reader-secret-2222"
default_topic_perm = "DENY"
default_group_perm = "DENY"
topic_perms = ["orders=SUB"]
"""


def test_with_acl_on_the_commands_sign_with_the_keys_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No keys: refused; --access-key/--secret-key or the environment: allowed as far as
    the account's permissions go."""
    from rayq.actors.protocol.config import BrokerConfig, ClientConfig
    from rayq.store import StoreConfig

    for name in ("RAYQ_ACCESS_KEY", "RAYQ_SECRET_KEY"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "acl.toml").write_text(ACL_RULES)
    config = BrokerConfig(
        store=StoreConfig.for_tests(), acl_enable=True, acl_file=str(tmp_path / "acl.toml")
    )
    with FakeCluster(tmp_path / "store", config=config) as cluster:
        root = rayq.Admin(
            transport=FakeTransport(cluster),
            config=ClientConfig(
                credentials=rayq.Credentials(access_key="root", secret_key="root-secret-0000")
            ),
        )
        root.create_topic("orders", queues=1)
        cli = Cli(cluster, capsys)
        assert "rayq topic list" in cli("topic", "list", code=1)
        admin_keys = ("--access-key", "root", "--secret-key", "root-secret-0000")
        assert "orders" in cli("topic", "list", *admin_keys)
        assert cli("send", "-t", "orders", "-m", "x", *admin_keys).startswith("SEND_OK")
        monkeypatch.setenv("RAYQ_ACCESS_KEY", "reader")
        monkeypatch.setenv("RAYQ_SECRET_KEY", "reader-secret-2222")
        err = cli("send", "-t", "orders", "-m", "y", code=1)
        assert "rayq send" in err
        assert [s.max_offset for s in root.topic_stats("orders")] == [1]


def test_message_trace_shows_a_traced_messages_timeline(cli: Cli) -> None:
    from rayq.actors.protocol.config import ClientConfig

    cli.admin.create_topic("orders", queues=1)
    traced = ClientConfig(trace_enable=True)
    with rayq.Producer("pg", config=traced, transport=cli.transport) as producer:
        sent = producer.send(rayq.Message("orders", b"x", keys=["k1"]))
    events = cli.json("message", "trace", "--id", sent.msg_id)
    assert [(e["kind"], e["group"], e["queue_offset"]) for e in events] == [
        ("send", "pg", sent.queue_offset),
        ("store", "pg", sent.queue_offset),
    ]
    assert "store" in cli("message", "trace", "--id", sent.msg_id)
    with rayq.Producer("pg", transport=cli.transport) as producer:
        plain = producer.send(rayq.Message("orders", b"y"))
    assert cli.json("message", "trace", "--id", plain.msg_id) == []
    err = cli("message", "trace", "--id", "0123456789ABCDEF0123456789ABCDEF", code=1)
    assert err.startswith("rayq message trace")
    assert cli.json("message", "trace", "--id", sent.msg_id, "--trace-topic", "other") == []


def test_console_serves_with_the_deployment_and_account_given(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """rayq console hands rayq.console.serve the host, port, URL, key and ACL account;
    Ctrl-C ends it with exit code 0."""
    import types

    served: list[dict[str, Any]] = []

    def serve(**options: Any) -> None:
        served.append(options)
        raise KeyboardInterrupt

    monkeypatch.setitem(sys.modules, "rayq.console", types.SimpleNamespace(serve=serve))
    key = "ab" * 32
    monkeypatch.setenv("RAYQ_KEY", key)
    cli("console", "--url", "rayq://10.0.0.5:9876", "--port", "8181",
        "--access-key", "ak", "--secret-key", "sk")  # fmt: skip
    [options] = served
    assert (options["host"], options["port"], options["url"]) == (
        "127.0.0.1",
        8181,
        "rayq://10.0.0.5:9876",
    )
    assert options["key"] is None  # the console finds it as rayq.connect does ($RAYQ_KEY)
    assert options["credentials"] == rayq.Credentials(access_key="ak", secret_key="sk")


def test_cluster_health_exits_1_when_an_actor_fails(cli: Cli) -> None:
    """A broker past the disk FAIL limit is FAIL and the exit code 1, the records still
    printed. (The fake's flusher reports no flush lag, so its health is never all OK.)"""

    def disk(ratio: str) -> tuple[int, str]:
        cli.capsys.readouterr()
        argv = ["cluster", "health", "--json", "--disk-fail-ratio", ratio]
        code = main(argv, transport=cli.transport)
        records = json.loads(cli.capsys.readouterr().out)
        broker = next(r for r in records if r["kind"] == "broker")
        return code, next(c["level"] for c in broker["checks"] if c["name"] == "disk_ratio")

    assert disk("1")[1] == "OK"
    assert disk("0") == (1, "FAIL")
