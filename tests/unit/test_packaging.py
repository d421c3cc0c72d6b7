"""The installed layout: the top-level folders store/ and actors/ are importable only
as rayq.store and rayq.actors, and the storage engine never pulls in Ray.

Each check runs in a fresh interpreter (sys.executable) whose working directory is a
temporary directory, so neither the repo root nor this test session's imports leak in.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

# Prints {module name: "ok" | "missing"}; any other import error fails the script.
_IMPORT_PROBE = textwrap.dedent(
    """
    import importlib, json, sys

    result = {}
    for name in sys.argv[1:]:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            result[name] = "missing"
        else:
            result[name] = "ok"
    print(json.dumps(result))
    """
)

# Imports rayq.store and every module under it, then prints the Ray modules loaded.
_RAY_PROBE = textwrap.dedent(
    """
    import importlib, json, pkgutil, sys

    import rayq.store

    for info in pkgutil.walk_packages(rayq.store.__path__, prefix="rayq.store."):
        importlib.import_module(info.name)
    print(json.dumps(sorted(m for m in sys.modules if m == "ray" or m.startswith("ray."))))
    """
)


def _run_python(code: str, *args: str, cwd: Path) -> str:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_top_level_folders_are_only_importable_under_rayq(tmp_path: Path) -> None:
    """`store` and `actors` do not exist as top-level modules; `rayq.store` and `rayq.actors` do."""
    names = ["store", "actors", "rayq.store", "rayq.actors"]

    result = json.loads(_run_python(_IMPORT_PROBE, *names, cwd=tmp_path))

    assert result == {
        "store": "missing",
        "actors": "missing",
        "rayq.store": "ok",
        "rayq.actors": "ok",
    }


def test_importing_the_store_does_not_import_ray(tmp_path: Path) -> None:
    """rayq.store and all its submodules load without putting `ray` in sys.modules."""
    ray_modules = json.loads(_run_python(_RAY_PROBE, cwd=tmp_path))

    assert ray_modules == []


def test_every_package_folder_is_listed_in_pyproject() -> None:
    """Each folder of rayq/, actors/ and store/ with an __init__.py is a package that
    pyproject.toml installs (under its rayq.* name), and each listed one exists."""
    import tomllib

    root = Path(__file__).resolve().parents[2]
    config = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    prefixes = {"rayq": "rayq", "actors": "rayq.actors", "store": "rayq.store"}
    found = set()
    for top, name in prefixes.items():
        for init in (root / top).rglob("__init__.py"):
            parts = init.parent.relative_to(root / top).parts
            found.add(".".join([name, *parts]))
    assert set(config["packages"]) == found
    for package, folder in config["package-dir"].items():
        assert (root / folder / "__init__.py").exists(), package
