"""Spark tests: RayDP sessions on Ray. Skipped locally when the spark extra is missing,
failing on CI instead (as tests/conftest.py's ``on_ci``)."""

from __future__ import annotations

import importlib.util
import os
import shutil

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
