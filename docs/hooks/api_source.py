"""mkdocs hook: the source tree the API reference is read from (mkdocstrings, griffe).

The installed package maps folders onto import names (pyproject.toml
``[tool.setuptools] package-dir``: ``actors/`` is ``rayq.actors``, ``store/`` is
``rayq.store``), which griffe cannot follow from the repository's folders. So before
each build this hook lays out ``build/docs-src/`` as the installed package looks: one
real folder per mapped package, holding symlinks to its files. mkdocs.yml points the
Python handler's ``paths`` at it, and griffe reads the sources without importing them
(no Ray, no Spark at build time).

``LEGACY_MODULES`` bridges the package reorganisation of issue 26: the reference pages
(docs/reference/) name modules by their new paths; while a new path does not exist
yet in the source tree, its old path is documented instead. Once the reorganisation
has landed every new path exists and the table has no effect: delete it then.
"""

from __future__ import annotations

import re
import shutil
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
TREE = ROOT / "build" / "docs-src"

# new module (what docs/reference/ says) -> the module it is before issue 26
LEGACY_MODULES = {
    "rayq.producer.transaction": "rayq.transaction_producer",
    "rayq.consumer.push": "rayq.push_consumer",
    "rayq.consumer.pull": "rayq.pull_consumer",
    "rayq.admin.health": "rayq.health",
    "rayq.actors.protocol.config": "rayq.actors.config",
    "rayq.actors.protocol.auth": "rayq.actors.auth",
}

_DIRECTIVE = re.compile(r"^(::: )([\w.]+)$", re.MULTILINE)


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


def _module_exists(module: str) -> bool:
    base = TREE.joinpath(*module.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def _legacy(match: re.Match[str]) -> str:
    path = match.group(2)
    for new, old in LEGACY_MODULES.items():
        if (path == new or path.startswith(new + ".")) and not _module_exists(new):
            return match.group(1) + old + path[len(new) :]
    return match.group(0)


def on_startup(**_: Any) -> None:
    # Before mkdocstrings sets up its Python handler: it expands ``paths`` as globs, so a
    # folder that does not exist yet would be dropped.
    lay_out_tree()


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if not page.file.src_uri.startswith("reference/"):
        return markdown
    return _DIRECTIVE.sub(_legacy, markdown)
