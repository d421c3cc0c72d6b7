"""StoreConfig: RocketMQ defaults, validation that names the field, and the small test preset."""

from __future__ import annotations

from typing import Any

import pytest

from rayq.store import DEFAULT_STORE_CONFIG, FlushDiskType, StoreConfig
from rayq.store.config import parse_delete_when
from rayq.store.errors import ConfigError

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB


def test_defaults_equal_rocketmq_message_store_config() -> None:
    """Defaults follow RocketMQ's MessageStoreConfig."""
    c = StoreConfig()
    assert c.commitlog_segment_size_bytes == 1 * GiB
    assert c.cq_entries_per_file == 300_000
    assert c.max_message_size_bytes == 4 * MiB
    assert c.file_reserved_hours == 72
    assert c.delete_when == "04"
    assert c.disk_max_used_space_ratio == 0.75
    assert c.flush_interval_ms == 500
    assert c.flush_disk_type is FlushDiskType.ASYNC_FLUSH
    assert c.sync_flush_timeout_ms == 5_000
    assert c.index_hash_slots == 5_000_000
    assert c.index_entries_max == 20_000_000
    assert c.max_transfer_count_in_memory == 32
    assert c.max_transfer_bytes_in_memory == 256 * KiB
    assert c.max_transfer_count_on_disk == 8
    assert c.max_transfer_bytes_on_disk == 64 * KiB
    assert c.access_message_in_memory_max_ratio == 0.40


def test_default_store_config_constant_is_the_default() -> None:
    """DEFAULT_STORE_CONFIG equals StoreConfig()."""
    assert StoreConfig() == DEFAULT_STORE_CONFIG


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("flush_interval_ms", 0),
        ("flush_interval_ms", -5),
        ("flush_interval_ms", "fast"),
        ("cq_entries_per_file", 0),
        ("flush_least_pages", -1),
        ("disk_warning_ratio", 1.5),
        ("disk_check_interval_ms", 0),
        ("access_message_in_memory_max_ratio", 0.0),
        ("max_properties_size_bytes", 40_000),
        ("message_index_enable", "yes"),
        ("flush_disk_type", "SOMETIMES"),
    ],
)
def test_from_dict_with_bad_value_raises_config_error_naming_the_field(
    field: str, value: Any
) -> None:
    """A bad value is a ConfigError whose message names the offending field."""
    with pytest.raises(ConfigError) as info:
        StoreConfig.from_dict({field: value})
    assert field in str(info.value)


def test_from_dict_with_unknown_field_raises_config_error_naming_it() -> None:
    """A misspelt key is reported, not ignored."""
    with pytest.raises(ConfigError, match="flush_intervall_ms"):
        StoreConfig.from_dict({"flush_intervall_ms": 500})


def test_from_dict_accepts_valid_values() -> None:
    """Plain TOML/JSON values build a config, enums by value."""
    c = StoreConfig.from_dict({"flush_interval_ms": 200, "flush_disk_type": "SYNC_FLUSH"})
    assert c.flush_interval_ms == 200
    assert c.flush_disk_type is FlushDiskType.SYNC_FLUSH


def test_segment_too_small_for_the_largest_message_raises_config_error() -> None:
    """The segment must hold max message + max properties + 512; the error gives the minimum."""
    need = 4 * MiB + 32767 + 512
    with pytest.raises(ConfigError, match=str(need)) as info:
        StoreConfig.from_dict({"commitlog_segment_size_bytes": need - 1})
    assert "commitlog_segment_size_bytes" in str(info.value)
    assert info.value.details["limit"] == need
    assert (
        StoreConfig.from_dict({"commitlog_segment_size_bytes": need}).commitlog_segment_size_bytes
        == need
    )


def test_segment_too_small_raises_in_the_constructor_too() -> None:
    """StoreConfig(...) validates like from_dict."""
    with pytest.raises(ConfigError):
        StoreConfig(commitlog_segment_size_bytes=64 * KiB)


@pytest.mark.parametrize("spec", ["", "24", "4am", "04;", "04;25", "-1", " ", "04,05"])
def test_bad_delete_when_raises_config_error(spec: str) -> None:
    """delete_when must be hours 00-23 separated by ';'."""
    with pytest.raises(ConfigError, match="delete_when"):
        StoreConfig.for_tests(delete_when=spec)


@pytest.mark.parametrize(
    ("spec", "hours"), [("04", {4}), ("4", {4}), ("00;23", {0, 23}), ("04; 05", {4, 5})]
)
def test_delete_when_parses_to_hours(spec: str, hours: set[int]) -> None:
    """'04' and '04;05' become sets of hours."""
    assert parse_delete_when(spec) == frozenset(hours)
    assert StoreConfig.for_tests(delete_when=spec).delete_when == spec


def test_disk_ratios_must_be_ordered() -> None:
    """max_used <= clean_forcibly <= warning, else ConfigError."""
    with pytest.raises(ConfigError, match="disk_max_used_space_ratio"):
        StoreConfig.for_tests(disk_max_used_space_ratio=0.9, disk_clean_forcibly_ratio=0.85)
    with pytest.raises(ConfigError, match="disk_clean_forcibly_ratio"):
        StoreConfig.for_tests(disk_clean_forcibly_ratio=0.95, disk_warning_ratio=0.9)


def test_for_tests_uses_small_segments() -> None:
    """for_tests(): 64 KiB commit-log segments and 64-entry consume-queue files."""
    c = StoreConfig.for_tests()
    assert c.commitlog_segment_size_bytes == 64 * KiB
    assert c.cq_entries_per_file == 64
    assert c.max_message_size_bytes == 16 * KiB
    assert c.max_properties_size_bytes == 4 * KiB
    assert c.flush_interval_ms == 500  # untouched defaults stay


def test_for_tests_overrides_win_and_are_validated() -> None:
    """Keyword overrides replace the small presets; invalid ones still raise ConfigError."""
    c = StoreConfig.for_tests(cq_entries_per_file=10, max_message_size_bytes=24 * KiB)
    assert c.cq_entries_per_file == 10
    assert c.max_message_size_bytes == 24 * KiB
    assert c.commitlog_segment_size_bytes == 64 * KiB
    with pytest.raises(ConfigError):
        StoreConfig.for_tests(max_message_size_bytes=64 * KiB)  # no longer fits a segment


def test_replace_returns_a_validated_copy() -> None:
    """replace() changes one field and keeps the others; bad values raise."""
    c = StoreConfig.for_tests()
    d = c.replace(flush_interval_ms=100)
    assert d.flush_interval_ms == 100
    assert d.cq_entries_per_file == 64
    assert c.flush_interval_ms == 500
    with pytest.raises(ConfigError):
        c.replace(flush_interval_ms=0)


def test_config_is_frozen() -> None:
    """Fields cannot be assigned after construction."""
    c = StoreConfig.for_tests()
    with pytest.raises(AttributeError):
        c.flush_interval_ms = 1  # type: ignore[misc]
