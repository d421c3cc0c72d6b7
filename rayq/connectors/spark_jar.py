"""rayq's Spark data source (the Java sources in rayq/connectors/jvm/) as a jar: the one
the wheel carries, else one compiled on first use.

Spark's rayq source (``io.rayq.spark.RayqSource``) is a DataSource V2 reader. Spark
tells it which columns a query uses (a count: none), and each task asks its brokers for
those columns only. It calls the broker actors straight from the executor's JVM (Ray's
cross-language calls: RayDP executors are Ray Java actors), so no Python worker runs in
the read. ``jar()`` finds the jar (jar_build.py says how one is built):

1. **Packaged**: a wheel built on a machine with a JDK carries it (a JRE is then enough)::

       rayq/connectors/jars/rayq-spark.jar
       rayq/connectors/jars/rayq-spark.json   # the PySpark, Ray and sources it was built from

   It is used unless it was compiled from other sources than the installed ones, or
   against another PySpark minor version than the one installed: then a jar compiled
   on first use is preferred when there is a JDK, else the packaged one is used with a
   warning.
2. **Compiled on first use** (an editable checkout, or a wheel built without a JDK):
   ``javac`` against the installed PySpark and Ray jars, once, kept in a cache::

       $RAYQ_JAR_CACHE (default: $XDG_CACHE_HOME/rayq or ~/.cache/rayq)/
           rayq-spark-<hash>.jar   # <hash>: the sources, the PySpark and Ray versions

Without either (no packaged jar, no ``javac``) or when compiling fails, ``jar()``
returns None; rayq.connectors.spark then reads and writes through Python tasks
(``mapInArrow``), and its ``session()`` warns once about the missing JDK.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from rayq.connectors import jar_build

logger = logging.getLogger(__name__)

SOURCES = Path(__file__).with_name("jvm")
# The class Spark loads for ``format(SOURCE_CLASS)``.
SOURCE_CLASS = jar_build.SOURCE_CLASS
# Where a wheel's build puts the packaged jar (build_backend/rayq_build.py).
PACKAGED = Path(__file__).with_name("jars")


@dataclass(frozen=True)
class Packaged:
    """The jar a wheel carries and what it was built with (``rayq-spark.json``)."""

    path: Path
    built_with: dict[str, str]


def cache_dir() -> Path:
    """Where jars compiled on first use are kept (``RAYQ_JAR_CACHE``, else the user's cache dir)."""
    if os.environ.get("RAYQ_JAR_CACHE"):
        return Path(os.environ["RAYQ_JAR_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "rayq"


def javac() -> str | None:
    """The JDK's compiler on PATH, or None (a JRE alone, or no Java)."""
    return shutil.which("javac")


@functools.cache
def jar() -> Path | None:
    """The jar Spark sessions load: the packaged one, else one compiled on first use (now,
    if not cached); None when there is neither."""
    packaged = _packaged()
    if packaged is None:
        return _first_use()
    skew = _skew(packaged.built_with)
    if skew is None:
        logger.info(
            "rayq's Spark jar: %s (packaged; built with PySpark %s, Ray %s)",
            packaged.path,
            packaged.built_with.get("pyspark", "?"),
            packaged.built_with.get("ray", "?"),
        )
        return packaged.path
    logger.info("rayq's packaged Spark jar %s; compiling one on first use if possible", skew)
    built = _first_use()
    if built is not None:
        return built
    logger.warning(
        "rayq's packaged Spark jar %s, and there is no JDK (javac) to compile one; "
        "using it anyway: %s",
        skew,
        packaged.path,
    )
    return packaged.path


def _packaged() -> Packaged | None:
    """The packaged jar, unless there is none or it was built from other sources than
    the installed ones (a stale jar in a checkout must not hide edits to the sources)."""
    path = PACKAGED / jar_build.JAR_NAME
    if not path.is_file():
        return None
    try:
        built_with = json.loads((PACKAGED / jar_build.BUILT_WITH_NAME).read_text())
    except (OSError, ValueError):
        built_with = {}
    if not isinstance(built_with, dict):
        built_with = {}
    if _sources() and built_with.get("sources") != jar_build.sources_digest(SOURCES):
        logger.info("ignoring %s: it was built from other sources than the installed ones", path)
        return None
    return Packaged(path, {str(k): str(v) for k, v in built_with.items()})


def _skew(built_with: dict[str, str]) -> str | None:
    """Why the packaged jar may not suit the installed PySpark (None: it does)."""
    runtime = jar_build.versions()["pyspark"]
    built = built_with.get("pyspark")
    if built is None:
        return "does not say which PySpark it was built with"
    if _minor(built) != _minor(runtime):
        return f"was built with PySpark {built}, and PySpark {runtime} is installed"
    return None


def _minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def _first_use() -> Path | None:
    """The jar compiled from the installed sources (cached), or None without a JDK or
    when compiling fails."""
    sources = _sources()
    if not sources:
        logger.info("rayq's Java sources are not installed; Spark reads use Python tasks")
        return None
    target = cache_dir() / f"rayq-spark-{_fingerprint(sources)}.jar"
    if target.exists():
        logger.info("rayq's Spark jar: %s (compiled on first use, cached)", target)
        return target
    compiler = javac()
    if compiler is None:  # session() warns, saying what to install
        logger.debug("no JDK (javac) on PATH to compile rayq's Spark source")
        return None
    try:
        jar_build.build(SOURCES, target, compiler)
    except (OSError, subprocess.SubprocessError) as exc:
        logger.warning("could not build rayq's Spark source; Spark reads use Python tasks: %s", exc)
        return None
    logger.info("rayq's Spark jar: %s (compiled on first use)", target)
    return target


def _sources() -> list[Path]:
    return jar_build.sources(SOURCES)


def _fingerprint(sources: list[Path]) -> str:
    found = jar_build.versions()
    digest = hashlib.blake2b(digest_size=8)
    # The recipe's marks: jars cached before it had the service entry are not reused.
    digest.update(f"{found['pyspark']} {found['ray']} release {jar_build.JAVA_RELEASE}".encode())
    digest.update(b" services")
    for path in sources:
        digest.update(path.relative_to(SOURCES).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()
