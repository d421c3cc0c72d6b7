"""The layer contracts of ``make lint`` (pyproject's ``[tool.importlinter]``) name every
actor module: the protocol and the clients may import none of them, and a forbidden
list does not grow by itself when a new actor module is added."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _contract(name: str) -> dict[str, list[str]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts = config["tool"]["importlinter"]["contracts"]
    return next(c for c in contracts if c["name"] == name)


def _actor_modules() -> set[str]:
    """The modules of actors/ beside its protocol and server packages."""
    return {f"rayq.actors.{p.stem}" for p in (ROOT / "actors").glob("*.py") if p.stem != "__init__"}


def test_the_protocol_may_import_no_actor_module() -> None:
    forbidden = set(_contract("protocol imports only store")["forbidden_modules"])
    assert _actor_modules() | {"rayq.actors.server"} <= forbidden


def test_the_clients_may_import_no_actor_module() -> None:
    contract = _contract("clients reach the server only through protocol and a transport")
    assert _actor_modules() | {"rayq.actors.server"} <= set(contract["forbidden_modules"])
