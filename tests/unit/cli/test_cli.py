"""The ``rayq`` command's argument parsing (no Ray: running it is an integration test)."""

from __future__ import annotations

import pytest

from rayq.cli.main import make_argument_parser


def test_start_takes_brokers_store_dir_address_and_namespace() -> None:
    """``rayq start`` options parse with their defaults."""
    args = make_argument_parser().parse_args(["start", "--brokers", "2", "--store-dir", "/s"])
    assert (args.command, args.brokers, args.store_dir) == ("start", 2, "/s")
    assert (args.address, args.namespace) == ("auto", "rayq")


def test_a_command_is_required_and_unknown_ones_are_refused() -> None:
    """Without a known command the parser exits with a usage error."""
    parser = make_argument_parser()
    for argv in ([], ["launch"]):
        with pytest.raises(SystemExit) as exc:
            parser.parse_args(argv)
        assert exc.value.code == 2


def test_start_placement_is_local_or_resource() -> None:
    """``--placement resource`` starts one broker per node with a rayq_broker:<name> resource."""
    parser = make_argument_parser()
    assert parser.parse_args(["start"]).placement == "local"
    assert parser.parse_args(["start", "--placement", "resource"]).placement == "resource"
    with pytest.raises(SystemExit):
        parser.parse_args(["start", "--placement", "anywhere"])


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


def test_every_read_command_takes_json_and_address_and_namespace() -> None:
    """Read commands take ``--json``; every command takes ``--address``/``--namespace``."""
    parser = make_argument_parser()
    args = parser.parse_args(["topic", "status", "--topic", "t", "--json", "--namespace", "n"])
    assert (args.command, args.action, args.topic, args.json, args.namespace) == (
        "topic",
        "status",
        "t",
        True,
        "n",
    )
    assert parser.parse_args(["cluster", "health"]).json is False
    with pytest.raises(SystemExit):
        parser.parse_args(["topic", "delete", "--topic", "t", "--json"])  # a write


def test_offset_reset_takes_milliseconds_or_an_iso_time() -> None:
    parser = make_argument_parser()
    base = ["offset", "reset", "--group", "g", "--topic", "t", "--timestamp"]
    assert parser.parse_args([*base, "1000"]).timestamp == 1000
    assert parser.parse_args([*base, "1970-01-01T00:00:01"]).timestamp == 1000
    assert parser.parse_args([*base, "1970-01-01T01:00:01+01:00"]).timestamp == 1000
    with pytest.raises(SystemExit):
        parser.parse_args([*base, "soon"])


def test_main_reports_a_usage_error_on_one_line_with_exit_code_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from rayq.cli.main import main

    assert main(["group", "progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--group" in err
