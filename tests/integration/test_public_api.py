"""Every name ``rayq`` exports resolves (the Ray-backed ones are imported lazily)."""

from __future__ import annotations

import pytest

import rayq

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("name", rayq.__all__)
def test_exported_name_resolves(name: str) -> None:
    """``rayq.<name>`` imports and is not None."""
    assert getattr(rayq, name) is not None
