"""Spark tests: RayDP sessions on Ray. Skipped locally when the spark extra is missing,
failing on CI instead (as tests/conftest.py's ``on_ci``).

The tests of rayq's JVM source and sink ask for ``need_jar(spark)``: a session without
rayq's Spark jar (none in the wheel, no JDK to compile one) skips them locally and fails
them on CI, where make venv installs a JDK; with a JDK and no jar they fail everywhere.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from collections.abc import Callable
from typing import Any

import pytest

MISSING = [m for m in ("raydp", "pyspark") if importlib.util.find_spec(m) is None]
if shutil.which("java") is None:
    MISSING.append("java")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if not MISSING or os.environ.get("CI"):
        return
    skip = pytest.mark.skip(reason=f"needs {MISSING} (make venv installs the spark extra)")
    for item in items:
        if "tests/spark/" in str(item.fspath):
            item.add_marker(skip)


def _need_jar(spark: Any) -> None:
    from rayq.connectors import spark as rqspark

    if rqspark.has_source(spark):
        return
    if shutil.which("javac") is not None:
        pytest.fail("a JDK is here, yet the session has no rayq Spark jar (see the log)")
    reason = (
        "no rayq Spark jar in this session: no JDK (javac) to compile it "
        "(make venv installs openjdk-17-jdk-headless)"
    )
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def need_jar() -> Callable[[Any], None]:
    """``need_jar(spark)``: returns when ``spark`` has rayq's Spark source and sink."""
    return _need_jar
