"""rayq's Spark data source (the Java sources in rayq/connectors/jvm/), compiled once into a jar.

Spark's rayq source (``io.rayq.spark.RayqSource``) is a DataSource V2 reader. Spark
tells it which columns a query uses (a count: none), and each task asks its brokers for
those columns only. It calls the broker actors straight from the executor's JVM (Ray's
cross-language calls: RayDP executors are Ray Java actors), so no Python worker runs in
the read. ``jar()`` compiles the sources with ``javac`` against the installed PySpark and
Ray jars the first time it is needed and keeps the jar in a cache directory:

    $RAYQ_JAR_CACHE (default: $XDG_CACHE_HOME/rayq or ~/.cache/rayq)/
        rayq-spark-<hash>.jar   # <hash>: the sources, the PySpark and Ray versions

Without a JDK (no ``javac``) or when compiling fails, ``jar()`` logs why and returns
None; rayq.connectors.spark then reads through ``mapInArrow`` (Python tasks) as before.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

logger = logging.getLogger(__name__)

SOURCES = Path(__file__).with_name("jvm")
# The class Spark loads for ``format(SOURCE_CLASS)``.
SOURCE_CLASS = "io.rayq.spark.RayqSource"
REGISTER = "org.apache.spark.sql.sources.DataSourceRegister"
COMPILE_TIMEOUT_S = 300


def cache_dir() -> Path:
    """Where built jars are kept (``RAYQ_JAR_CACHE``, else the user's cache dir)."""
    if os.environ.get("RAYQ_JAR_CACHE"):
        return Path(os.environ["RAYQ_JAR_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "rayq"


def _classpath() -> list[Path]:
    """The jars the sources compile against: PySpark's (Spark, Arrow, Jackson), Ray's."""
    import pyspark
    import ray

    return [Path(pyspark.__file__).parent / "jars", Path(ray.__file__).parent / "jars"]


def _sources() -> list[Path]:
    return sorted(SOURCES.rglob("*.java"))


def _fingerprint(sources: list[Path]) -> str:
    import pyspark
    import ray

    digest = hashlib.blake2b(digest_size=8)
    digest.update(f"{pyspark.__version__} {ray.__version__} services".encode())
    for path in sources:
        digest.update(path.relative_to(SOURCES).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


@functools.cache
def jar() -> Path | None:
    """The compiled jar (built now if not cached), or None when it cannot be built."""
    sources = _sources()
    if not sources:
        logger.info("rayq's Java sources are not installed; Spark reads use Python tasks")
        return None
    target = cache_dir() / f"rayq-spark-{_fingerprint(sources)}.jar"
    if target.exists():
        return target
    javac = shutil.which("javac")
    if javac is None:
        logger.info("no JDK (javac) on PATH; Spark reads use Python tasks (mapInArrow)")
        return None
    try:
        return _build(sources, target, javac)
    except (OSError, subprocess.SubprocessError) as exc:
        logger.warning("could not build rayq's Spark source; Spark reads use Python tasks: %s", exc)
        return None


def _build(sources: list[Path], target: Path, javac: str) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    classpath = os.pathsep.join(str(p / "*") for p in _classpath())
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".build-") as tmp:
        classes = Path(tmp) / "classes"
        _run([javac, "-nowarn", "-d", str(classes), "-cp", classpath, *map(str, sources)])
        built = Path(tmp) / target.name
        with zipfile.ZipFile(built, "w", zipfile.ZIP_DEFLATED) as out:  # a jar is a zip
            for path in sorted(classes.rglob("*.class")):
                out.write(path, path.relative_to(classes).as_posix())
            # format("rayq"): Spark finds sources by their short names through this
            out.writestr(f"META-INF/services/{REGISTER}", SOURCE_CLASS + "\n")
        os.replace(built, target)  # atomic: a concurrent build leaves one whole jar
    logger.info("built rayq's Spark source: %s", target)
    return target


def _run(cmd: list[str]) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S)
    if done.returncode != 0:
        raise subprocess.SubprocessError(
            f"{Path(cmd[0]).name} exited with {done.returncode}: {done.stderr.strip()[-2000:]}"
        )
