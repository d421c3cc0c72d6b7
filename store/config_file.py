"""Config files: a typed config Struct read from TOML, as RocketMQ reads ``broker.conf``.

Every field of the Struct is a top-level key; a field that is itself a config Struct
(``BrokerConfig.store``) is a TOML table (``[store]``). Enum fields take their value
(``flush_disk_type = "SYNC_FLUSH"``). Whatever is wrong is a ``ConfigError`` naming the
file and the key, and saying what is allowed: an unknown key (with the closest known
one), a value of the wrong type or range, a file that is missing, unreadable or not
TOML. Nothing is half-applied: the file is read whole, then converted whole.
"""

from __future__ import annotations

import difflib
import enum
import os
import re
import tomllib
import types
import typing
from typing import Any, TypeVar

import msgspec

from .errors import ConfigError

C = TypeVar("C", bound=msgspec.Struct)

# msgspec's ValidationError ends with where it happened: "... - at `$.store.flush_interval_ms`"
_AT = re.compile(r"^(?P<problem>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.S)


def read_toml(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The TOML document at ``path``; ConfigError if it is missing, unreadable or not TOML."""
    where = os.fspath(path)
    try:
        with open(where, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(
            f"config file {where!r} not found (working directory {os.getcwd()!r}); "
            "give the path of a TOML file such as examples/broker.toml",
            file=where,
        ) from None
    except IsADirectoryError:
        raise ConfigError(
            f"config file {where!r} is a directory; give the path of a TOML file", file=where
        ) from None
    except OSError as exc:
        raise ConfigError(
            f"config file {where!r} cannot be read: {exc.strerror or exc}", file=where
        ) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config file {where!r} is not valid TOML: {exc}", file=where) from None


def config_from_toml(path: str | os.PathLike[str], cls: type[C]) -> C:
    """``cls`` built from the TOML file at ``path`` (see the module docstring)."""
    values = read_toml(path)
    return config_from_values(values, cls, os.fspath(path))


def config_from_values(values: dict[str, Any], cls: type[C], source: str) -> C:
    """``cls`` built from a parsed config document; errors name ``source`` and the key."""
    check_keys(values, cls, source, "")
    try:
        return msgspec.convert(values, cls)
    except msgspec.ValidationError as exc:
        raise _value_error(exc, values, cls, source) from None
    except ConfigError as exc:  # a rule across fields (__post_init__)
        field = exc.details.get("field")
        key = f" (key {field!r})" if field else ""
        raise ConfigError(
            f"config file {source!r}{key}: {exc.message}", file=source, field=field or ""
        ) from None


def check_keys(values: dict[str, Any], cls: type[msgspec.Struct], source: str, prefix: str) -> None:
    """ConfigError for the first key of ``values`` that is no field of ``cls`` (recursing
    into tables whose field is a config Struct)."""
    fields = field_types(cls)
    for key, value in values.items():
        if key not in fields:
            raise _unknown_key(key, sorted(fields), source, prefix)
        nested = fields[key]
        if _is_struct(nested) and isinstance(value, dict):
            check_keys(value, nested, source, f"{prefix}{key}.")


def field_types(cls: type[msgspec.Struct]) -> dict[str, Any]:
    """Field name -> type (``Annotated`` constraints and ``Optional`` stripped)."""
    hints = typing.get_type_hints(cls)
    return {name: _plain(hints[name]) for name in cls.__struct_fields__}


def _plain(field_type: Any) -> Any:
    if typing.get_origin(field_type) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(field_type) if a is not type(None)]
        return args[0] if len(args) == 1 else field_type
    return field_type


def _is_struct(field_type: Any) -> bool:
    return isinstance(field_type, type) and issubclass(field_type, msgspec.Struct)


def _unknown_key(key: str, allowed: list[str], source: str, prefix: str) -> ConfigError:
    table = f"[{prefix.rstrip('.')}]" if prefix else "the top level"
    close = difflib.get_close_matches(key, allowed, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return ConfigError(
        f"config file {source!r}: unknown key {prefix + key!r} in {table}; {hint}"
        f"the keys allowed there are: {', '.join(allowed)}",
        file=source,
        field=prefix + key,
    )


def _value_error(
    exc: msgspec.ValidationError, values: dict[str, Any], cls: type[msgspec.Struct], source: str
) -> ConfigError:
    match = _AT.match(str(exc))
    problem = match["problem"] if match else str(exc)
    key = ((match["path"] if match else "") or "").lstrip(".")
    found: Any = values
    for part in key.split(".") if key else []:
        found = found.get(part) if isinstance(found, dict) else None
    return ConfigError(
        f"config file {source!r}: key {key!r} = {found!r} is invalid: {problem}"
        f"{_allowed(cls, key)}",
        file=source,
        field=key,
    )


def _allowed(cls: type[msgspec.Struct], key: str) -> str:
    """``; allowed: ...`` for an enum field, else ``""``."""
    field_type: Any = cls
    for part in key.split(".") if key else []:
        if not _is_struct(field_type):
            return ""
        field_type = field_types(field_type).get(part)
    if isinstance(field_type, type) and issubclass(field_type, enum.Enum):
        return "; allowed: " + ", ".join(repr(m.value) for m in field_type)
    return ""
