"""Shared test helpers. Nothing Ray-specific lives here.

Integration and Spark tests skip when a dependency is missing locally but must
fail on CI instead (dramatiq's conftest does the same): use ``on_ci()``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

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


@pytest.fixture(scope="session", autouse=True)
def rayq_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``$RAYQ_HOME`` set to a temp dir for the whole session: a ``rayq.start()`` without
    ``store_dir`` (and the processes a test starts) never writes ``./rayq-data`` into the
    checkout. A test that needs its own store passes ``store_dir`` or sets it again."""
    home = str(tmp_path_factory.mktemp("rayq-home"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RAYQ_HOME", home)
        yield home
