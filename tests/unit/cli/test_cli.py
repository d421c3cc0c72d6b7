"""The ``rayq`` command's grammar: options anywhere, --from and --to, usage errors (no Ray,
no deployment: parsing only)."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from rayq.cli.args import fill_defaults
from rayq.cli.main import main
from rayq.cli.parser import ACTIONS, make_argument_parser


def parse(*argv: str) -> argparse.Namespace:
    return fill_defaults(make_argument_parser().parse_args(list(argv)))


@pytest.mark.parametrize(
    "argv",
    [
        ["--url", "rayq://h:1", "topic", "list"],
        ["topic", "--url", "rayq://h:1", "list"],
        ["topic", "list", "--url", "rayq://h:1"],
    ],
    ids=["before-the-command", "between", "after-the-action"],
)
def test_connection_options_are_taken_before_or_after_the_command(argv: list[str]) -> None:
    args = parse(*argv)
    assert (args.command, args.action, args.url) == ("topic", "list", "rayq://h:1")
    assert (args.key_file, args.namespace, args.json) == (None, "rayq", False)


def test_an_option_given_at_two_levels_keeps_the_later_one() -> None:
    """The action's value wins over the top level's (argparse parses the action last)."""
    args = parse("--access-key", "a", "group", "list", "--access-key", "b", "--secret-key", "s")
    assert (args.access_key, args.secret_key) == ("b", "s")


def test_every_command_and_action_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    commands = [[g, a] for g, a in ACTIONS] + [
        [c] for c in ("start", "stop", "status", "send", "consume", "console")
    ]
    for argv in [[], *commands, *[[g] for g in {g for g, _ in ACTIONS}]]:
        assert main([*argv, "--help"]) == 0
        assert "usage: rayq" in capsys.readouterr().out


def test_read_commands_take_json_and_write_commands_refuse_it() -> None:
    assert parse("topic", "status", "-t", "t", "--json").json is True
    assert parse("cluster", "health").json is False
    with pytest.raises(SystemExit):
        make_argument_parser().parse_args(["topic", "delete", "-t", "t", "--json"])


def test_start_keeps_its_options_and_takes_a_config_file() -> None:
    args = parse("start", "--brokers", "2", "--store-dir", "/s", "--config", "broker.toml")
    assert (args.brokers, args.store_dir, args.config) == (2, "/s", "broker.toml")
    assert (args.placement, args.slaves, args.role, args.no_failover) == ("local", 0, None, False)
    args = parse("start", "--slaves", "1", "--role", "SYNC_MASTER", "--no-failover")
    assert (args.slaves, args.role, args.no_failover) == (1, "SYNC_MASTER", True)
    with pytest.raises(SystemExit):
        make_argument_parser().parse_args(["start", "--role", "SLAVE"])


def test_start_takes_slaves_role_and_failover() -> None:
    """Replication options: slaves per broker, the masters' role, failover off."""
    parser = make_argument_parser()
    args = parser.parse_args(["start"])
    # None: the --config file's, else BrokerConfig's default (ASYNC_MASTER, 1)
    assert (args.slaves, args.role, args.no_failover) == (0, None, False)
    args = parser.parse_args(["start", "--slaves", "1", "--role", "SYNC_MASTER", "--no-failover"])
    assert (args.slaves, args.role, args.no_failover) == (1, "SYNC_MASTER", True)
    with pytest.raises(SystemExit):
        parser.parse_args(["start", "--role", "SLAVE"])  # slaves come from --slaves/resources
    assert parser.parse_args(["start"]).min_in_sync_replicas is None
    args = parser.parse_args(["start", "--slaves", "2", "--min-in-sync-replicas", "2"])
    assert args.min_in_sync_replicas == 2


def test_start_reads_a_config_file_and_the_options_given_override_it(tmp_path: Any) -> None:
    """--config FILE is BrokerConfig.from_toml; --role, --min-in-sync-replicas and
    --no-failover, when given, win over it."""
    from rayq.cli.deploy import broker_config

    toml = tmp_path / "broker.toml"
    toml.write_text('broker_role = "SYNC_MASTER"\nmin_in_sync_replicas = 2\n')
    config = broker_config(parse("start", "--config", str(toml)))
    assert (config.broker_role.value, config.min_in_sync_replicas) == ("SYNC_MASTER", 2)
    assert config.auto_failover is True
    config = broker_config(
        parse("start", "--config", str(toml), "--role", "ASYNC_MASTER", "--no-failover")
    )
    assert (config.broker_role.value, config.min_in_sync_replicas) == ("ASYNC_MASTER", 2)
    assert config.auto_failover is False
    assert broker_config(parse("start")).broker_role.value == "ASYNC_MASTER"


def test_start_with_a_bad_config_file_is_one_line_and_exit_1_before_ray(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    toml = tmp_path / "broker.toml"
    toml.write_text("no_such_setting = 1\n")
    assert main(["start", "--config", str(toml)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no_such_setting" in err


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("earliest", ("earliest", None)),
        ("latest", ("latest", None)),
        ("42", ("offset", 42)),
        ("1700000000000", ("time", 1_700_000_000_000)),
        ("1970-01-01T00:00:01", ("time", 1000)),
        ("1970-01-01T01:00:01+01:00", ("time", 1000)),
    ],
)
def test_consume_from_takes_a_word_an_offset_or_a_time(
    text: str, expected: tuple[str, int | None]
) -> None:
    assert parse("consume", "-t", "t", "--from", text).start == expected


def test_consume_defaults_to_no_group_no_count_no_follow() -> None:
    args = parse("consume", "-t", "t")
    assert (args.group, args.count, args.follow, args.start) == (
        None,
        None,
        False,
        ("default", None),
    )


@pytest.mark.parametrize(
    ("to", "expected"),
    [
        (["earliest"], ("earliest", None)),
        (["latest"], ("latest", None)),
        (["offset", "7"], ("offset", 7)),
        (["shift", "-3"], ("shift", -3)),
        (["shift", "+3"], ("shift", 3)),
        (["time", "1000"], ("time", 1000)),
        (["time", "1970-01-01T00:00:01"], ("time", 1000)),
    ],
)
def test_offset_reset_to_takes_kafkas_targets(
    to: list[str], expected: tuple[str, int | None], monkeypatch: pytest.MonkeyPatch
) -> None:
    from rayq.cli.messages import reset_target

    args = parse("offset", "reset", "-g", "g", "-t", "t", "--to", *to)
    assert reset_target(args.to) == expected
    assert args.execute is False


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["launch"],
        ["topic"],
        ["topic", "create"],
        ["topic", "create", "-t", "t", "--queues", "0"],
        ["topic", "frobnicate"],
        ["group", "progress"],
        ["message", "get", "-t", "t", "--queue", "x", "--offset", "0"],
        ["offset", "reset", "-g", "g", "-t", "t", "--to", "yesterday"],
        ["offset", "reset", "-g", "g", "-t", "t", "--to", "offset"],
        ["offset", "reset", "-g", "g", "-t", "t", "--to", "offset", "-1"],
        ["offset", "reset", "-g", "g", "-t", "t", "--to", "earliest", "3"],
        ["offset", "reset", "-g", "g", "-t", "t", "--to", "time", "soon"],
        ["group", "update", "-g", "g", "--consume-enable", "maybe"],
        ["cluster", "health", "--disk-fail-ratio", "2"],
        ["send"],
        ["send", "-t", "t", "-p", "novalue"],
        ["send", "-t", "t", "--body", "b", "--json"],
        ["consume", "-t", "t", "--from", "yesterday"],
        ["consume", "-t", "t", "-n", "0"],
        ["consume", "-t", "t", "--no-commit"],
        ["consume", "-t", "t", "--json", "-v"],
        ["consume", "-t", "t", "--format", "{nosuch}"],
    ],
    ids=lambda argv: "-".join(argv) or "nothing",
)
def test_a_usage_error_is_one_line_and_exit_code_2(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """Reported before anything is asked of a deployment."""
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert len(err.strip().splitlines()) == 1 and "error:" in err


# ------------------------------------------------------ finding the deployment

KEY = "ab" * 32


@pytest.fixture()
def no_deployment_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> Any:
    """No RAYQ_*/RAY_ADDRESS variables and an empty working directory."""
    for name in ("RAYQ_URL", "RAYQ_KEY", "RAYQ_HOME", "RAY_ADDRESS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def target(*argv: str) -> tuple[str | None, str | None]:
    from rayq.cli.session import Session

    return Session(parse(*argv, "status")).target()


def test_the_deployment_is_found_by_url_then_files_then_ray(
    no_deployment_env: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--url or $RAYQ_URL, else rayq.url/rayq.key in $RAYQ_HOME or ./rayq-data, else
    --address or $RAY_ADDRESS (join Ray: no URL); --key-file overrides the key."""
    home = no_deployment_env / "rayq-data"
    home.mkdir()
    (home / "rayq.url").write_text("rayq://10.0.0.5:9876\n")
    (home / "rayq.key").write_text(KEY + "\n")
    assert target() == ("rayq://10.0.0.5:9876", KEY)
    key_file = no_deployment_env / "other.key"
    key_file.write_text("cd" * 32)
    assert target("--key-file", str(key_file)) == ("rayq://10.0.0.5:9876", "cd" * 32)
    assert target("--url", "rayq://h:1") == ("rayq://h:1", None)  # connect finds the key
    monkeypatch.setenv("RAYQ_URL", "rayq://env:2")
    assert target() == ("rayq://env:2", None)
    monkeypatch.delenv("RAYQ_URL")
    assert target("--address", "10.0.0.5:6379") == (None, None)
    (home / "rayq.url").unlink()
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.5:6379")
    assert target() == (None, None)


def test_no_deployment_to_find_is_one_line_and_exit_1(
    no_deployment_env: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["topic", "list"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--url rayq://HOST:PORT" in err


def test_an_unreadable_key_file_is_one_line_and_exit_1(
    no_deployment_env: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["topic", "list", "--url", "rayq://h:1", "--key-file", "nosuch.key"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot read the key file 'nosuch.key'" in err
