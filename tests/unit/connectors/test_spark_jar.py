"""spark_jar: rayq's Spark source compiles into a cached jar, or is None (and Spark
reads fall back to Python tasks) when there is no JDK or the sources do not compile."""

from __future__ import annotations

import logging
import shutil
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from rayq.connectors import spark_jar


@pytest.fixture(autouse=True)
def fresh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("RAYQ_JAR_CACHE", str(tmp_path / "cache"))
    spark_jar.jar.cache_clear()
    yield
    spark_jar.jar.cache_clear()


@pytest.mark.skipif(shutil.which("javac") is None, reason="no JDK on this machine")
def test_builds_once_into_the_cache() -> None:
    built = spark_jar.jar()
    assert built is not None and built.parent == spark_jar.cache_dir()
    with zipfile.ZipFile(built) as jar:
        assert "io/rayq/spark/RayqSource.class" in jar.namelist()
    stamp = built.stat().st_mtime_ns
    spark_jar.jar.cache_clear()
    assert spark_jar.jar() == built and built.stat().st_mtime_ns == stamp  # not rebuilt
    assert [p.name for p in built.parent.iterdir()] == [built.name]  # no build leftovers


def test_no_jdk_means_no_jar(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(spark_jar.shutil, "which", lambda _name: None)
    with caplog.at_level(logging.INFO, logger="rayq.connectors.spark_jar"):
        assert spark_jar.jar() is None
    assert "no JDK" in caplog.text
    assert not spark_jar.cache_dir().exists()


@pytest.mark.skipif(shutil.which("javac") is None, reason="no JDK on this machine")
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
