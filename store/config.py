"""StoreConfig: every knob of the storage engine, with RocketMQ's defaults.

A frozen msgspec Struct, so a bad value read from TOML/JSON is reported with its
field name (``StoreConfig.from_dict``). ``StoreConfig.for_tests()`` uses tiny
segments so that rolling to a new segment happens constantly in tests.
"""

from __future__ import annotations

import enum
import functools
import os
import typing
from typing import Annotated, Any, Final, TypeVar

import msgspec
from msgspec import Meta

from .errors import ConfigError

KiB: Final[int] = 1024
MiB: Final[int] = 1024 * KiB
GiB: Final[int] = 1024 * MiB

# Room a record needs beyond body and properties (header, topic, lengths) plus the
# blank record that must always fit at a segment's end.
RECORD_OVERHEAD_MAX_BYTES: Final[int] = 512


class FlushDiskType(enum.Enum):
    ASYNC_FLUSH = "ASYNC_FLUSH"
    SYNC_FLUSH = "SYNC_FLUSH"


Positive = Annotated[int, Meta(gt=0)]
NonNegative = Annotated[int, Meta(ge=0)]
Ratio = Annotated[float, Meta(gt=0.0, le=1.0)]


class StoreConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Storage engine settings (RocketMQ ``MessageStoreConfig`` in snake_case)."""

    commitlog_segment_size_bytes: Positive = 1 * GiB
    # page cache read ahead of the commit log's write position (warm.py); 0: off
    commitlog_warm_ahead_bytes: NonNegative = 32 * MiB
    cq_entries_per_file: Positive = 300_000
    flush_disk_type: FlushDiskType = FlushDiskType.ASYNC_FLUSH
    flush_interval_ms: Positive = 500
    flush_least_pages: NonNegative = 4
    flush_thorough_interval_ms: Positive = 10_000
    flush_cq_interval_ms: Positive = 1_000
    flush_cq_least_pages: NonNegative = 2
    sync_flush_timeout_ms: Positive = 5_000
    file_reserved_hours: Annotated[float, Meta(gt=0)] = 72.0
    delete_when: str = "04"
    disk_max_used_space_ratio: Ratio = 0.75
    disk_clean_forcibly_ratio: Ratio = 0.85
    disk_warning_ratio: Ratio = 0.90
    disk_check_interval_ms: Positive = 1_000  # puts re-measure disk usage at most this often
    delete_files_batch_max: Positive = 10
    max_message_size_bytes: Positive = 4 * MiB
    max_properties_size_bytes: Annotated[int, Meta(gt=0, le=32767)] = 32767
    message_index_enable: bool = True
    index_hash_slots: Positive = 5_000_000
    index_entries_max: Positive = 20_000_000
    max_transfer_count_in_memory: Positive = 32
    max_transfer_bytes_in_memory: Positive = 256 * KiB
    max_transfer_count_on_disk: Positive = 8
    max_transfer_bytes_on_disk: Positive = 64 * KiB
    access_message_in_memory_max_ratio: Ratio = 0.40
    max_filter_scan_entries: Positive = 16_000

    def __post_init__(self) -> None:
        check_fields(self)
        need = self.max_message_size_bytes + self.max_properties_size_bytes
        need += RECORD_OVERHEAD_MAX_BYTES
        if self.commitlog_segment_size_bytes < need:
            raise ConfigError(
                f"commitlog_segment_size_bytes={self.commitlog_segment_size_bytes} cannot hold "
                f"the largest allowed message; it must be at least {need} "
                "(max_message_size_bytes + max_properties_size_bytes + 512)",
                value=self.commitlog_segment_size_bytes,
                limit=need,
            )
        parse_delete_when(self.delete_when)
        if not self.disk_max_used_space_ratio <= self.disk_clean_forcibly_ratio:
            raise ConfigError("disk_max_used_space_ratio must not exceed disk_clean_forcibly_ratio")
        if not self.disk_clean_forcibly_ratio <= self.disk_warning_ratio:
            raise ConfigError("disk_clean_forcibly_ratio must not exceed disk_warning_ratio")

    @classmethod
    def for_tests(cls, **overrides: Any) -> StoreConfig:
        """Small segments (64 KiB commit log, 64-entry consume queues, tiny index)."""
        small: dict[str, Any] = {
            "commitlog_segment_size_bytes": 64 * KiB,
            "cq_entries_per_file": 64,
            "max_message_size_bytes": 16 * KiB,
            "max_properties_size_bytes": 4 * KiB,
            "index_hash_slots": 64,
            "index_entries_max": 256,
        }
        small.update(overrides)
        return cls.from_dict(small)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> StoreConfig:
        """Build from plain values (TOML/JSON); errors name the offending field."""
        return convert_config(values, cls, "store config")

    @classmethod
    def from_toml(cls, path: str | os.PathLike[str]) -> StoreConfig:
        """The settings of a TOML file, one key per field; ConfigError naming the file and
        the key for an unknown key or a bad value (store/config_file.py)."""
        from .config_file import config_from_toml

        return config_from_toml(path, cls)

    def replace(self, **changes: Any) -> StoreConfig:
        return StoreConfig.from_dict({**msgspec.structs.asdict(self), **changes})


C = TypeVar("C")


def convert_config(values: dict[str, Any], cls: type[C], what: str) -> C:
    """``cls`` built from plain values; a bad value is a ConfigError naming its field."""
    try:
        return msgspec.convert(values, cls)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"invalid {what}: {exc}") from None


@functools.cache
def _field_types(cls: type[msgspec.Struct]) -> tuple[tuple[str, Any], ...]:
    hints = typing.get_type_hints(cls, include_extras=True)
    return tuple((name, hints[name]) for name in cls.__struct_fields__)


def check_fields(config: msgspec.Struct) -> None:
    """ConfigError for the first field of ``config`` that breaks its type or ``Meta`` constraint.

    msgspec checks constraints only when it decodes or converts, not when a Struct is built
    in code (``ClientConfig(send_timeout_ms=-1)``), so ``__post_init__`` calls this. A value that
    merely converts (the str ``"ASYNC_FLUSH"`` for an enum field) is refused too.
    """
    cls = type(config)
    for name, field_type in _field_types(cls):
        value = getattr(config, name)
        try:
            converted = msgspec.convert(value, field_type)
        except msgspec.ValidationError as exc:
            problem = str(exc).removesuffix(" - at `$`")
        else:
            if converted == value:
                continue
            problem = f"Expected `{_type_name(field_type)}`, got `{type(value).__name__}`"
        raise ConfigError(
            f"{cls.__name__}.{name}={value!r} is invalid: {problem}; pass a value of that type "
            f"and range{_default_hint(cls, name)}",
            field=name,
            value=repr(value),
            limit=problem,
        )


def _type_name(field_type: Any) -> str:
    base = typing.get_args(field_type)[0] if typing.get_origin(field_type) else field_type
    return getattr(base, "__name__", repr(base))


def _default_hint(cls: type[msgspec.Struct], name: str) -> str:
    default = next(f.default for f in msgspec.structs.fields(cls) if f.name == name)
    if isinstance(default, bool | int | float | str | enum.Enum):
        return f" (the default is {default!r})"
    return ""


def parse_delete_when(spec: str) -> frozenset[int]:
    """``"04"`` or ``"04;05"`` -> hours of the day at which expired files are deleted."""
    hours: set[int] = set()
    for part in spec.split(";"):
        text = part.strip()
        if not text.isdigit() or not 0 <= int(text) <= 23:
            raise ConfigError(
                f"delete_when={spec!r} must be hours 00-23 separated by ';', e.g. '04' or '04;05'",
                value=spec,
            )
        hours.add(int(text))
    return frozenset(hours)


DEFAULT_STORE_CONFIG: Final[StoreConfig] = StoreConfig()
