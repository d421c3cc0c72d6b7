"""mkdocs hook: the source tree the API reference is read from (mkdocstrings, griffe).

The installed package maps folders onto import names (pyproject.toml
``[tool.setuptools] package-dir``: ``actors/`` is ``rayq.actors``, ``store/`` is
``rayq.store``), which griffe cannot follow from the repository's folders. So before
each build this hook lays out ``build/docs-src/`` as the installed package looks: one
real folder per mapped package, holding symlinks to its files. mkdocs.yml points the
Python handler's ``paths`` at it, and griffe reads the sources without importing them
(no Ray, no Spark at build time).

"""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
TREE = ROOT / "build" / "docs-src"


def package_dirs() -> dict[str, Path]:
    """Import name -> folder, from pyproject.toml (``rayq`` is ``rayq/`` if unmapped)."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapped = {name: ROOT / folder for name, folder in setuptools.get("package-dir", {}).items()}
    return dict(sorted(mapped.items(), key=lambda item: item[0].count(".")))


def lay_out_tree() -> None:
    """``build/docs-src/<import path>``: a folder per mapped package, symlinks inside."""
    shutil.rmtree(TREE, ignore_errors=True)
    mapped = package_dirs()
    for name, folder in mapped.items():
        target = TREE.joinpath(*name.split("."))
        target.mkdir(parents=True, exist_ok=True)
        for entry in folder.iterdir():
            if entry.name == "__pycache__" or f"{name}.{entry.name}" in mapped:
                continue
            link = target / entry.name
            if not link.exists():
                link.symlink_to(entry)


def on_startup(**_: Any) -> None:
    # Before mkdocstrings sets up its Python handler: it expands ``paths`` as globs, so a
    # folder that does not exist yet would be dropped.
    lay_out_tree()
