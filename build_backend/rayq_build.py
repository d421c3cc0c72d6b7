"""rayq's build backend: setuptools' (``setuptools.build_meta``), plus rayq's Spark jar in
every wheel built where there is a JDK, as pyspark ships its jars.

pyproject.toml names this module (``[build-system] build-backend``, ``backend-path``)
and its ``build_py`` command (``[tool.setuptools.cmdclass]``). Two things differ from
plain setuptools:

- ``get_requires_for_build_wheel`` adds PySpark and Ray (as pyproject.toml pins them,
  Ray without extras): the jar compiles against their jars, so an isolated ``pip wheel .``
  installs them into its build environment. Editable installs and sdists do not need
  them and do not get them (``pip install -e .`` stays quick).
- ``BuildPyWithJar`` compiles rayq/connectors/jvm/ with ``javac`` into
  ``rayq/connectors/jars/rayq-spark.jar`` in the build directory, with
  ``rayq-spark.json`` (the PySpark and Ray it was compiled against) beside it, by
  rayq/connectors/jar_build.py's recipe (loaded by its path: rayq is not installed
  here). Without ``javac`` it says so and builds the wheel without the jar (rayq then
  compiles one on first use where a JDK is, else uses Python tasks); a jar that fails
  to compile fails the build. An editable install builds no jar: the sources in the
  checkout are compiled on first use, so edits to them take effect, and nothing is
  written into the source tree.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import sys
import tomllib
from pathlib import Path
from types import ModuleType
from typing import Any

from setuptools import build_meta
from setuptools.build_meta import *  # noqa: F403 (the other PEP 517 hooks, as they are)
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parents[1]
JVM_PACKAGE = ("rayq", "connectors")
# PySpark and Ray, as pyproject.toml pins them (the spark extra; the dependencies).
JVM_BUILD_PACKAGES = ("pyspark", "ray")


def get_requires_for_build_wheel(config_settings: dict[str, Any] | None = None) -> list[str]:
    """setuptools' requirements, and the PySpark and Ray the jar compiles against."""
    return [*build_meta.get_requires_for_build_wheel(config_settings), *jvm_build_requires()]


def jvm_build_requires(pyproject: Path = ROOT / "pyproject.toml") -> list[str]:
    """``JVM_BUILD_PACKAGES`` as pyproject.toml requires them, without extras."""
    project = tomllib.loads(pyproject.read_text())["project"]
    declared = [*project["dependencies"], *project["optional-dependencies"]["spark"]]
    found = []
    for name in JVM_BUILD_PACKAGES:
        spec = next(d for d in declared if re.match(rf"{name}\b(?![-_.])", d))
        found.append(re.sub(r"\[[^]]*\]", "", spec.split(";")[0]).strip())
    return found


class BuildPyWithJar(build_py):
    """``build_py``, then rayq's Spark jar into the build directory (see the module doc)."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:
            _say("rayq: editable install, no packaged Spark jar (compiled on first use)")
            return
        package = Path(self.build_lib, *JVM_PACKAGE)
        shutil.rmtree(package / "jars", ignore_errors=True)  # none from an earlier build
        javac = shutil.which("javac")
        if javac is None:
            _say(
                "rayq: no JDK (javac) on PATH: this wheel carries no Spark jar; rayq will "
                "compile one on first use where a JDK is, else Spark uses Python tasks. "
                "Install a JDK (e.g. openjdk-17-jdk-headless) to build the jar into the wheel."
            )
            return
        jar = _jar_build().build_packaged(package / "jvm", package / "jars", javac)
        _say(f"rayq: built rayq's Spark jar into the wheel: {jar.relative_to(self.build_lib)}")

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        outputs: list[str] = super().get_outputs(include_bytecode)
        jars = Path(self.build_lib, *JVM_PACKAGE, "jars")
        if not self.editable_mode and jars.is_dir():
            outputs += [str(p) for p in sorted(jars.iterdir())]
        return outputs


def _jar_build() -> ModuleType:
    """rayq/connectors/jar_build.py, loaded by its path (it imports only the standard
    library, and PySpark and Ray inside its functions)."""
    path = ROOT.joinpath(*JVM_PACKAGE, "jar_build.py")
    spec = importlib.util.spec_from_file_location("rayq_jar_build", path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _say(line: str) -> None:
    print(line, file=sys.stderr)  # the build's output (pip shows it with -v)
