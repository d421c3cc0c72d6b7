"""What a deployment installs: the wheel, built where there is a JDK, carries rayq's Spark
jar (build_backend/rayq_build.py), and a JVM loads it: its source is registered under the
short name "rayq" (what ``spark.read.format("rayq")`` looks up).

The wheel is built from a copy of the checkout (so no build/ is left in it), with this
environment's setuptools, PySpark and Ray (``--no-build-isolation``: nothing is
downloaded). Without a JDK this skips locally and fails on CI (make venv installs one).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from rayq.connectors import jar_build

ROOT = Path(__file__).resolve().parents[2]
# Not part of a build: the environment, VCS data, caches and build products.
NOT_SOURCES = shutil.ignore_patterns(
    ".venv",
    ".git",
    "build",
    "dist",
    "site",
    "*.egg-info",
    "__pycache__",
    ".*_cache",
    ".hypothesis",
    "bench-results",
)
JAR = "rayq/connectors/jars/" + jar_build.JAR_NAME
BUILT_WITH = "rayq/connectors/jars/" + jar_build.BUILT_WITH_NAME
# Prints the short name of each registered Spark source whose class is args[0].
SHORT_NAMES = """
import java.util.ServiceLoader;
import org.apache.spark.sql.sources.DataSourceRegister;

public class ShortNames {
  public static void main(String[] args) {
    ServiceLoader.load(DataSourceRegister.class).stream()
        .filter(p -> p.type().getName().equals(args[0]))
        .forEach(p -> System.out.println(p.get().shortName()));
  }
}
"""

pytestmark = pytest.mark.slow


@pytest.fixture
def jdk(ci: bool) -> None:
    if shutil.which("javac") is None or shutil.which("java") is None:
        reason = "no JDK on this machine (make venv installs openjdk-17-jdk-headless)"
        if ci:
            pytest.fail(reason)
        pytest.skip(reason)


@pytest.mark.usefixtures("jdk")
def test_the_wheel_carries_rayqs_spark_jar_and_a_jvm_loads_it(tmp_path: Path) -> None:
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=NOT_SOURCES, symlinks=True)
    pip = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [*pip, "-w", str(tmp_path / "dist"), str(src)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [wheel] = (tmp_path / "dist").glob("rayq-*.whl")

    with zipfile.ZipFile(wheel) as whl:
        assert JAR in whl.namelist()
        assert "rayq/py.typed" in whl.namelist()  # PEP 561: checkers use rayq's types
        built_with = json.loads(whl.read(BUILT_WITH))
        jar = tmp_path / jar_build.JAR_NAME
        jar.write_bytes(whl.read(JAR))
    assert built_with["pyspark"] == jar_build.versions()["pyspark"]
    assert built_with["ray"] == jar_build.versions()["ray"]
    assert built_with["sources"] == jar_build.sources_digest(src / "rayq/connectors/jvm")
    with zipfile.ZipFile(jar) as classes:
        assert "io/rayq/spark/RayqSource.class" in classes.namelist()
        services = classes.read(f"META-INF/services/{jar_build.REGISTER}").decode()
    assert services.split() == [jar_build.SOURCE_CLASS]

    (tmp_path / "ShortNames.java").write_text(SHORT_NAMES)
    classpath = os.pathsep.join([str(jar), *(str(p / "*") for p in jar_build.classpath())])
    java = ["java", "-cp", classpath, str(tmp_path / "ShortNames.java"), jar_build.SOURCE_CLASS]
    loaded = subprocess.run(java, capture_output=True, text=True, timeout=300, check=False)
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    assert loaded.stdout.split() == ["rayq"]


# Builds the sdist of the checkout in the working directory with the in-tree backend.
BUILD_SDIST = """
import sys
sys.path.insert(0, "build_backend")
import rayq_build
print(rayq_build.build_sdist(sys.argv[1]))
"""


def test_the_sdist_and_the_wheels_built_from_it_carry_py_typed(tmp_path: Path) -> None:
    """PEP 561's marker is in the sdist, and declared as package data of ``rayq`` (so a
    wheel built from it has it; test_the_wheel_carries... checks a built wheel)."""
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=NOT_SOURCES, symlinks=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, "-c", BUILD_SDIST, str(tmp_path / "dist")],
        cwd=src,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    sdist = tmp_path / "dist" / done.stdout.split()[-1]
    with tarfile.open(sdist) as tar:
        names = [n.split("/", 1)[1] for n in tar.getnames() if "/" in n]
    assert "rayq/py.typed" in names
    import tomllib

    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "py.typed" in pyproject["tool"]["setuptools"]["package-data"]["rayq"]
