"""spark_jar: the jar a wheel carries is preferred; otherwise rayq's Spark source compiles
into a cached jar, or is None (and Spark reads fall back to Python tasks, with one
warning from ``session()``) when there is no JDK or the sources do not compile."""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import sys
import types
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rayq.connectors import jar_build, spark_jar


@pytest.fixture(autouse=True)
def fresh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """An empty jar cache, and no packaged jar unless a test makes one."""
    monkeypatch.setenv("RAYQ_JAR_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(spark_jar, "PACKAGED", tmp_path / "jars")
    spark_jar.jar.cache_clear()
    yield
    spark_jar.jar.cache_clear()


@pytest.fixture
def need_javac(ci: bool) -> None:
    """Compiling needs a JDK: skip without one locally, fail on CI (make venv installs it)."""
    if shutil.which("javac") is None:
        reason = "no JDK (javac) on this machine (make venv installs openjdk-17-jdk-headless)"
        if ci:
            pytest.fail(reason)
        pytest.skip(reason)


def packaged(pyspark: str | None = None, sources: str | None = None) -> Path:
    """A fake packaged jar (not a real one: these tests never load it), with its record
    of what it was built with (by default: the installed PySpark and sources)."""
    jars = spark_jar.PACKAGED
    jars.mkdir()
    (jars / jar_build.JAR_NAME).write_bytes(b"PK\x05\x06" + bytes(18))  # an empty zip
    built_with = {
        "pyspark": pyspark or jar_build.versions()["pyspark"],
        "ray": "2.60.0",
        "java_release": jar_build.JAVA_RELEASE,
        "sources": sources or jar_build.sources_digest(spark_jar.SOURCES),
    }
    (jars / jar_build.BUILT_WITH_NAME).write_text(json.dumps(built_with))
    return jars / jar_build.JAR_NAME


def no_javac(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spark_jar.shutil, "which", lambda _name: None)


def fake_build(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """jar_build.build writes an empty file instead of compiling; returns the targets."""
    built: list[Path] = []

    def build(_root: Path, target: Path, _javac: str) -> None:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(b"")
        built.append(target)

    monkeypatch.setattr(spark_jar.shutil, "which", lambda _name: "/opt/jdk/bin/javac")
    monkeypatch.setattr(jar_build, "build", build)
    return built


def warnings_in(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.usefixtures("need_javac")
def test_builds_once_into_the_cache() -> None:
    built = spark_jar.jar()
    assert built is not None and built.parent == spark_jar.cache_dir()
    with zipfile.ZipFile(built) as jar:
        assert "io/rayq/spark/RayqSource.class" in jar.namelist()
        services = jar.read(f"META-INF/services/{jar_build.REGISTER}").decode()
    assert services.split() == [spark_jar.SOURCE_CLASS]  # format("rayq") resolves
    stamp = built.stat().st_mtime_ns
    spark_jar.jar.cache_clear()
    assert spark_jar.jar() == built and built.stat().st_mtime_ns == stamp  # not rebuilt
    assert [p.name for p in built.parent.iterdir()] == [built.name]  # no build leftovers


def test_no_jdk_means_no_jar(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    no_javac(monkeypatch)
    with caplog.at_level(logging.DEBUG, logger="rayq.connectors.spark_jar"):
        assert spark_jar.jar() is None
    assert "no JDK" in caplog.text
    assert warnings_in(caplog) == []  # session() warns, once
    assert not spark_jar.cache_dir().exists()


@pytest.mark.usefixtures("need_javac")
def test_sources_that_do_not_compile_mean_no_jar(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    broken = tmp_path / "jvm" / "io" / "rayq" / "spark"
    broken.mkdir(parents=True)
    (broken / "Broken.java").write_text("package io.rayq.spark; class Broken { nope }\n")
    monkeypatch.setattr(spark_jar, "SOURCES", tmp_path / "jvm")
    assert spark_jar.jar() is None
    assert "could not build" in caplog.text and "Broken.java" in caplog.text
    assert list(spark_jar.cache_dir().iterdir()) == []  # no half-built jar


def test_the_packaged_jar_is_preferred(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Given a packaged jar built with the installed PySpark from the installed sources,
    when a JDK is there too, then jar() uses the packaged one, compiles nothing, and
    says which jar at INFO."""
    jar = packaged()
    built = fake_build(monkeypatch)
    with caplog.at_level(logging.INFO, logger="rayq.connectors.spark_jar"):
        assert spark_jar.jar() == jar
    assert built == [] and not spark_jar.cache_dir().exists()
    assert f"rayq's Spark jar: {jar} (packaged" in caplog.text
    assert warnings_in(caplog) == []


def test_a_packaged_jar_from_other_sources_is_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stale jar (built from sources since edited) never hides the installed sources:
    they are compiled on first use."""
    packaged(sources="0123456789abcdef")
    built = fake_build(monkeypatch)
    assert spark_jar.jar() == built[0] and built[0].parent == spark_jar.cache_dir()


def test_another_pyspark_minor_prefers_a_first_use_build(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    packaged(pyspark="3.4.1")
    built = fake_build(monkeypatch)
    with caplog.at_level(logging.INFO, logger="rayq.connectors.spark_jar"):
        assert spark_jar.jar() == built[0]
    assert "was built with PySpark 3.4.1" in caplog.text
    assert warnings_in(caplog) == []


def test_another_pyspark_minor_without_a_jdk_uses_the_packaged_jar_and_warns(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    jar = packaged(pyspark="3.4.1")
    no_javac(monkeypatch)
    assert spark_jar.jar() == jar
    [warning] = warnings_in(caplog)
    assert "PySpark 3.4.1" in warning and "no JDK" in warning and str(jar) in warning


def test_a_patch_release_of_pyspark_is_no_skew(monkeypatch: pytest.MonkeyPatch) -> None:
    major, minor, *_ = jar_build.versions()["pyspark"].split(".")
    jar = packaged(pyspark=f"{major}.{minor}.99")
    fake_build(monkeypatch)
    assert spark_jar.jar() == jar


# session() with a stand-in for RayDP: no Ray, no Spark.


@pytest.fixture
def session_configs(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """Calls rqspark.session() with a fake raydp.init_spark; yields the configs it got."""
    from rayq.connectors import spark as rqspark

    got: dict[str, str] = {}

    def init_spark(*_args: Any, configs: dict[str, str], **_kwargs: Any) -> object:
        got.update(configs)
        return object()

    raydp = types.ModuleType("raydp")
    raydp.init_spark = init_spark  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "raydp", raydp)
    # session() asks only whether Ray is up: a stand-in module, so Ray's own logging
    # filters (left on handlers by an earlier Ray session) still see Ray as it is
    monkeypatch.setattr(rqspark, "ray", types.SimpleNamespace(is_initialized=lambda: True))
    monkeypatch.setattr(rqspark, "_ray_logs_dir", lambda: None)
    monkeypatch.setattr(rqspark, "quiet_children", contextlib.nullcontext)
    monkeypatch.setattr(rqspark, "_session", None)
    monkeypatch.setattr(rqspark.spark_bridge, "install", lambda spark: got.update(bridge="on"))
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    yield got
    monkeypatch.setattr(rqspark, "_session", None)


def test_session_without_a_jar_or_a_jdk_warns_once_what_to_install(
    session_configs: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Given no packaged jar and no JDK, when a session starts, then exactly one WARNING
    says Spark uses Python tasks and what to install, and no jar is configured."""
    from rayq.connectors import spark as rqspark

    no_javac(monkeypatch)
    with caplog.at_level(logging.DEBUG):
        rqspark.session("no-jar")
    [warning] = warnings_in(caplog)
    assert "Python tasks" in warning
    assert "openjdk-17-jdk-headless" in warning and "wheel that carries the jar" in warning
    assert "spark.jars" not in session_configs


def test_session_with_a_packaged_jar_needs_no_jdk(
    session_configs: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from rayq.connectors import spark as rqspark

    jar = packaged()
    no_javac(monkeypatch)
    rqspark.session("packaged")
    assert warnings_in(caplog) == []
    assert session_configs["spark.jars"] == str(jar)
    assert session_configs["spark.driver.extraClassPath"] == str(jar)
    assert session_configs["bridge"] == "on"  # readStream/writeStream plan through it
