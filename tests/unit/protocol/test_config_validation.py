"""ClientConfig, BrokerConfig and StoreConfig check their fields when built in code, and the
broadcasting offsets file never leaves ``offset_store_dir``."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import msgspec
import pytest

from rayq.actors.protocol import MessageQueue
from rayq.actors.protocol.config import BrokerConfig, ClientConfig
from rayq.consumer.offset_store import LocalOffsetStore, offsets_path
from rayq.store import FlushDiskType, StoreConfig
from rayq.store.errors import ConfigError, InvalidGroupError

BAD_FIELDS: list[tuple[type[Any], dict[str, Any], str]] = [
    (ClientConfig, {"send_timeout_ms": -1}, ">= 1"),
    (ClientConfig, {"send_timeout_ms": 0}, ">= 1"),
    (ClientConfig, {"pull_batch_size": 0}, ">= 1"),
    (ClientConfig, {"retries": -1}, ">= 0"),
    (ClientConfig, {"send_timeout_ms": "3"}, "got `str`"),
    (ClientConfig, {"send_timeout_ms": 3.5}, "got `float`"),
    (ClientConfig, {"send_timeout_ms": True}, "got `bool`"),
    (ClientConfig, {"namespace": 5}, "got `int`"),
    (BrokerConfig, {"default_topic_queue_nums": 0}, ">= 1"),
    (BrokerConfig, {"pull_max_messages": -5}, ">= 1"),
    (BrokerConfig, {"flush_disk_type": "SYNC_FLUSH"}, "FlushDiskType"),
    (BrokerConfig, {"store": {}}, "StoreConfig"),
    (StoreConfig, {"cq_entries_per_file": 0}, ">= 1"),
    (StoreConfig, {"disk_warning_ratio": 1.5}, "<= 1.0"),
    (StoreConfig, {"max_properties_size_bytes": 40_000}, "<= 32767"),
]


@pytest.mark.parametrize(("cls", "fields", "limit"), BAD_FIELDS)
def test_config_built_in_code_with_a_bad_field_raises_config_error_naming_it(
    cls: type[Any], fields: dict[str, Any], limit: str
) -> None:
    """The error names the field, the value and the limit, as from_dict's would."""
    ((name, value),) = fields.items()

    with pytest.raises(ConfigError) as info:
        cls(**fields)

    text = str(info.value)
    assert f"{cls.__name__}.{name}={value!r}" in text
    assert limit in text
    assert info.value.details["field"] == name


def test_structs_replace_is_validated_too() -> None:
    with pytest.raises(ConfigError, match="send_timeout_ms=-1"):
        msgspec.structs.replace(ClientConfig(), send_timeout_ms=-1)


def test_defaults_and_good_values_still_build() -> None:
    assert ClientConfig().send_timeout_ms == 3_000
    assert BrokerConfig().store == StoreConfig()
    assert StoreConfig(file_reserved_hours=1).file_reserved_hours == 1
    cfg = BrokerConfig(flush_disk_type=FlushDiskType.SYNC_FLUSH, store=StoreConfig.for_tests())
    assert cfg.store_config.flush_disk_type is FlushDiskType.SYNC_FLUSH
    assert ClientConfig(instance_name="host-1@4242:a.b_c%d|e").instance_name.startswith("host")


def test_from_dict_still_reports_bad_values() -> None:
    with pytest.raises(ConfigError, match="default_topic_queue_nums"):
        BrokerConfig.from_dict({"default_topic_queue_nums": 0})


BAD_INSTANCE_NAMES = ["../../x", "/abs/path", "a/b", "..", ".", "", "a\0b", "a\\b", "x\n", "é"]


@pytest.mark.parametrize("name", BAD_INSTANCE_NAMES)
def test_client_config_refuses_an_instance_name_that_is_not_one_plain_path_level(
    name: str,
) -> None:
    with pytest.raises(ConfigError, match="instance_name"):
        ClientConfig(instance_name=name)


def test_client_config_refuses_a_nul_in_offset_store_dir() -> None:
    with pytest.raises(ConfigError, match="offset_store_dir"):
        ClientConfig(offset_store_dir="/tmp/a\0b")


@pytest.mark.parametrize("name", BAD_INSTANCE_NAMES)
def test_local_offset_store_refuses_an_escaping_instance_name_and_creates_nothing(
    tmp_path: Path, name: str
) -> None:
    """Even past ClientConfig (a direct call), nothing is written outside the directory."""
    root = tmp_path / "offsets"

    with pytest.raises(ConfigError):
        LocalOffsetStore(str(root), name, "cg")

    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("group", ["..", "../x", "a/b", "/abs", "g\n"])
def test_local_offset_store_refuses_an_escaping_group(tmp_path: Path, group: str) -> None:
    with pytest.raises(InvalidGroupError):
        LocalOffsetStore(str(tmp_path / "offsets"), "worker-1", group)

    assert list(tmp_path.iterdir()) == []


def test_an_instance_directory_that_links_outside_is_refused(tmp_path: Path) -> None:
    """The resolved path must stay under the directory (a symlinked instance directory)."""
    root = tmp_path / "offsets"
    root.mkdir()
    (root / "worker-1").symlink_to(tmp_path / "elsewhere", target_is_directory=True)

    with pytest.raises(ConfigError, match="outside offset_store_dir"):
        offsets_path(str(root), "worker-1", "cg")


def test_local_offset_store_keeps_its_file_under_the_directory(tmp_path: Path) -> None:
    root = tmp_path / "offsets"
    store = LocalOffsetStore(str(root), "host@1:a.b", "cg")
    mq = MessageQueue("t", "broker-a", 0)
    store.update(mq, 7)
    asyncio.run(store.persist(None, 0))

    assert (root / "host@1:a.b" / "cg" / "offsets.json").is_file()
    reread = LocalOffsetStore(str(root), "host@1:a.b", "cg")
    assert asyncio.run(reread.read([mq])) == {mq: 7}


@pytest.mark.parametrize(
    ("value", "hint"),
    [
        (-1, "it counts the slaves"),
        (0, "a SYNC_MASTER that waits for no slave is an ASYNC_MASTER"),
        (65, "it counts the slaves"),
    ],
)
def test_min_in_sync_replicas_out_of_range_is_refused_with_a_hint(value: int, hint: str) -> None:
    with pytest.raises(ConfigError) as info:
        BrokerConfig(min_in_sync_replicas=value)
    text = str(info.value)
    assert f"min_in_sync_replicas={value}" in text and "1..64" in text and hint in text
    assert info.value.details["field"] == "min_in_sync_replicas"
    with pytest.raises(ConfigError, match="min_in_sync_replicas"):
        BrokerConfig.from_dict({"min_in_sync_replicas": value})


@pytest.mark.parametrize("value", [True, "2", 1.5])
def test_min_in_sync_replicas_of_another_type_is_refused(value: Any) -> None:
    with pytest.raises(ConfigError, match="min_in_sync_replicas"):
        BrokerConfig(min_in_sync_replicas=value)


def test_min_in_sync_replicas_defaults_to_one_and_takes_a_count_of_slaves() -> None:
    assert BrokerConfig().min_in_sync_replicas == 1
    assert BrokerConfig(min_in_sync_replicas=2).min_in_sync_replicas == 2
    assert BrokerConfig.from_dict({"min_in_sync_replicas": 64}).min_in_sync_replicas == 64
