"""Unit tests never start Ray: ``ray.init`` raises for every test in tests/unit/."""

from __future__ import annotations

import sys

import pytest


def _refuse_ray_init(*args: object, **kwargs: object) -> None:
    raise RuntimeError("unit tests must not start Ray")


@pytest.fixture(autouse=True)
def _forbid_ray_init(monkeypatch: pytest.MonkeyPatch) -> None:
    # Look Ray up without importing it: if nothing has imported Ray yet, there is
    # nothing to patch, and importing it here would defeat "store/ never imports Ray".
    ray = sys.modules.get("ray")
    if ray is not None and hasattr(ray, "init"):
        monkeypatch.setattr(ray, "init", _refuse_ray_init)
