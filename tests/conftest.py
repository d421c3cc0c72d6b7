"""Shared test helpers. Nothing Ray-specific lives here.

Integration and Spark tests skip when a dependency is missing locally but must
fail on CI instead (dramatiq's conftest does the same): use ``on_ci()``.
"""

from __future__ import annotations

import os

import pytest


def on_ci() -> bool:
    """True when running under CI (the CI environment variable is set and not empty)."""
    return bool(os.environ.get("CI"))


@pytest.fixture(scope="session")
def ci() -> bool:
    """Fixture form of ``on_ci()``."""
    return on_ci()
