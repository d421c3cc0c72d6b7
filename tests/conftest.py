"""Shared test helpers. Nothing Ray-specific lives here.

Integration and Spark tests skip when a dependency is missing locally but must
fail on CI instead (dramatiq's conftest does the same): use ``on_ci()``.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import settings


def on_ci() -> bool:
    """True when running under CI (the CI environment variable is set and not empty)."""
    return bool(os.environ.get("CI"))


@pytest.fixture(scope="session")
def ci() -> bool:
    """Fixture form of ``on_ci()``."""
    return on_ci()


# Tests never assert timings (the machine is shared and noisy): Hypothesis's per-example
# deadline (200 ms by default) is off for every property test.
settings.register_profile("rayq", deadline=None)
settings.load_profile("rayq")


# `make test` runs the suite on two pytest-xdist workers (``-n 2 --dist loadgroup``).
# Each module is one group, so its module-scoped fixtures (one Ray session, one rayq
# deployment, one Spark session) are made once, on one worker. Modules that start a
# Spark session share a group, so they run one after another on one worker: two Spark
# sessions at once would not fit 2 cores, and the shared-memory test counts every
# executor's slot files.
SERIAL_GROUPS = {"tests/spark/": "spark"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        path = item.nodeid.split("::")[0]
        group = next((g for prefix, g in SERIAL_GROUPS.items() if path.startswith(prefix)), path)
        item.add_marker(pytest.mark.xdist_group(group))
