"""Config files: ``BrokerConfig.from_toml``, ``rayq.start(config=path)`` and ``rayq start
--config`` read every BrokerConfig field (the store's in ``[store]``); whatever is wrong
is a ConfigError naming the file and the key, raised before anything starts (no Ray)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import msgspec
import pytest

import rayq
from rayq.cli.main import main
from rayq.cluster import START_LOGGER, announce, default_store_dir

ROOT = Path(__file__).resolve().parents[3]


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "broker.toml"
    path.write_text(text)
    return path


def test_every_field_of_the_example_file_is_read(tmp_path: Path) -> None:
    """examples/broker.toml holds the defaults; a file sets top-level and [store] keys."""
    assert rayq.BrokerConfig.from_toml(ROOT / "examples" / "broker.toml") == rayq.BrokerConfig()
    path = _write(
        tmp_path,
        'broker_name = "b1"\nflush_disk_type = "SYNC_FLUSH"\nacl_enable = true\n'
        'broker_role = "SYNC_MASTER"\nmin_in_sync_replicas = 2\n'
        "[store]\nflush_interval_ms = 200\nfile_reserved_hours = 1.5\n",
    )
    config = rayq.BrokerConfig.from_toml(path)
    assert (config.broker_name, config.acl_enable, config.min_in_sync_replicas) == ("b1", True, 2)
    assert config.flush_disk_type is rayq.FlushDiskType.SYNC_FLUSH
    assert config.broker_role is rayq.BrokerRole.SYNC_MASTER
    assert (config.store.flush_interval_ms, config.store.file_reserved_hours) == (200, 1.5)
    assert rayq.BrokerConfig.from_toml(str(path)) == config  # a str path too


def test_every_broker_config_field_round_trips_through_a_file(tmp_path: Path) -> None:
    """A file written from a config with every field changed reads back equal."""
    import tomllib

    changed = rayq.BrokerConfig(
        broker_name="x", default_topic_queue_nums=9, store=rayq.StoreConfig.for_tests()
    )
    values = msgspec.to_builtins(changed)
    lines = [f"{k} = {_toml(v)}" for k, v in values.items() if k != "store"]
    lines += ["[store]", *(f"{k} = {_toml(v)}" for k, v in values["store"].items())]
    path = _write(tmp_path, "\n".join(lines) + "\n")
    assert tomllib.loads(path.read_text())["default_topic_queue_nums"] == 9
    assert rayq.BrokerConfig.from_toml(path) == changed


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value + '"'
    return repr(value)


@pytest.mark.parametrize(
    ("text", "key", "says"),
    [
        ('flush_disk_typ = "SYNC_FLUSH"\n', "flush_disk_typ", "did you mean 'flush_disk_type'"),
        ("[store]\nflush_intervl_ms = 1\n", "store.flush_intervl_ms", "in [store]"),
        ('flush_disk_type = "SYNC"\n', "flush_disk_type", "allowed: 'ASYNC_FLUSH', 'SYNC_FLUSH'"),
        ("[store]\nflush_interval_ms = -3\n", "store.flush_interval_ms", ">= 1"),
        ('default_topic_queue_nums = "4"\n', "default_topic_queue_nums", "Expected `int`"),
        ("store = 5\n", "store", "Expected `object`"),
        ("min_in_sync_replicas = 0\n", "min_in_sync_replicas", "1..64"),
        ('broker_role = "SLAVE"\n', "", "broker id 0 is the master"),
        ('message_delay_level = "1x"\n', "", "1x"),
    ],
)
def test_an_unknown_key_or_a_bad_value_names_the_file_and_the_key(
    tmp_path: Path, text: str, key: str, says: str
) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(rayq.ConfigError) as caught:
        rayq.BrokerConfig.from_toml(path)
    message = str(caught.value)
    assert str(path) in message and says in message
    if key:
        assert repr(key) in message and caught.value.details["field"] == key


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda d: d / "missing.toml", "not found"),
        (lambda d: d, "is a directory"),
        (lambda d: _write(d, "broker_name = \n"), "not valid TOML"),
        (lambda d: _bytes(d, b"\xff\xfe = 1\n"), "not valid TOML"),
    ],
)
def test_a_missing_unreadable_or_broken_file_is_a_config_error(
    tmp_path: Path, make, says: str
) -> None:
    path = make(tmp_path)
    with pytest.raises(rayq.ConfigError, match=says):
        rayq.BrokerConfig.from_toml(path)


def _bytes(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / "binary.toml"
    path.write_bytes(data)
    return path


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_an_unreadable_file_is_a_config_error(tmp_path: Path) -> None:
    path = _write(tmp_path, "")
    path.chmod(0)
    with pytest.raises(rayq.ConfigError, match="cannot be read"):
        rayq.BrokerConfig.from_toml(path)


def test_store_config_reads_a_file_of_its_own(tmp_path: Path) -> None:
    path = _write(tmp_path, "flush_interval_ms = 7\n")
    assert rayq.StoreConfig.from_toml(path).flush_interval_ms == 7
    with pytest.raises(rayq.ConfigError, match="unknown key 'broker_name'"):
        rayq.StoreConfig.from_toml(_write(tmp_path, 'broker_name = "b"\n'))


def test_start_refuses_a_bad_config_file_before_starting_anything(tmp_path: Path) -> None:
    """rayq.start(config=path) reads the file first: a bad one raises with Ray untouched
    (ray.init raises in unit tests)."""
    with pytest.raises(rayq.ConfigError, match="unknown key 'nope'"):
        rayq.start(tmp_path, config=_write(tmp_path, "nope = 1\n"))
    with pytest.raises(rayq.ConfigError, match="BrokerConfig or the path"):
        rayq.start(tmp_path, config={"broker_name": "b"})  # type: ignore[arg-type]
    assert [p.name for p in tmp_path.iterdir()] == ["broker.toml"]  # no store was made


def test_rayq_start_with_a_bad_config_file_exits_1_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, '[store]\nflush_interval_ms = "soon"\n')
    assert main(["start", "--config", str(path), "--store-dir", str(tmp_path / "s")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "store.flush_interval_ms" in err and str(path) in err
    assert not (tmp_path / "s").exists()


def test_the_default_store_is_rayq_home_else_rayq_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAYQ_HOME", str(tmp_path / "home"))
    assert default_store_dir() == tmp_path / "home"
    monkeypatch.delenv("RAYQ_HOME")
    monkeypatch.chdir(tmp_path)
    assert default_store_dir() == tmp_path / "rayq-data"


def test_the_session_never_writes_rayq_data_into_the_checkout() -> None:
    """tests/conftest.py points RAYQ_HOME at a temp dir for the whole session."""
    assert default_store_dir() != Path.cwd() / "rayq-data"
    assert not (ROOT / "rayq-data").exists()


def test_the_start_line_goes_to_stderr_unless_logging_is_configured(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """With no handler anywhere on its way, ``announce`` adds a stderr handler (one line);
    setting the logger's level to WARNING silences it."""
    log = logging.getLogger(START_LOGGER)
    monkeypatch.setattr(log, "propagate", False)  # as if the root logger had no handler
    monkeypatch.setattr(log, "handlers", [])
    monkeypatch.setattr(log, "level", logging.NOTSET)
    announce("rayq started: stores under /x")
    assert capsys.readouterr().err == "rayq started: stores under /x\n"
    log.setLevel(logging.WARNING)
    announce("rayq started: again")
    assert capsys.readouterr().err == ""
