"""How rayq's Java sources (rayq/connectors/jvm/) become a jar: the one recipe for the jar
a wheel carries (built by the wheel's build backend, build_backend/rayq_build.py) and for
the one compiled on first use (spark_jar.py).

``javac --release 17`` compiles every ``*.java`` under the sources' root against the
PySpark and Ray jars of the Python environment this runs in; the jar holds the classes
and a service entry that names the source, so ``spark.read.format("rayq")`` resolves the
short name (Spark finds sources through ``java.util.ServiceLoader``):

    io/rayq/spark/*.class
    META-INF/services/org.apache.spark.sql.sources.DataSourceRegister   # io.rayq.spark.RayqSource

A packaged jar has a record of what it was built with beside it (``rayq-spark.json``):
``{"pyspark": "3.5.7", "ray": "2.60.0", "java_release": "17", "sources": "<digest>"}``,
the digest being ``sources_digest`` of the sources it was compiled from.

Standard library only at import time (pyspark and ray are imported inside functions):
the build backend loads this file by its path, before rayq or its dependencies are
installed.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tempfile
import zipfile
from pathlib import Path

# The class Spark loads for ``format(SOURCE_CLASS)`` (or its short name, "rayq").
SOURCE_CLASS = "io.rayq.spark.RayqSource"
# The service interface Spark looks short names up through.
REGISTER = "org.apache.spark.sql.sources.DataSourceRegister"
# The Java release the classes target: the JRE the deployment runs (cluster.yaml).
JAVA_RELEASE = "17"
JAR_NAME = "rayq-spark.jar"
BUILT_WITH_NAME = "rayq-spark.json"
COMPILE_TIMEOUT_S = 300


def sources(root: Path) -> list[Path]:
    """The Java sources under ``root``, in a fixed order."""
    return sorted(root.rglob("*.java"))


def sources_digest(root: Path) -> str:
    """A digest of the sources under ``root`` (their paths and contents)."""
    digest = hashlib.blake2b(digest_size=8)
    for path in sources(root):
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def versions() -> dict[str, str]:
    """The versions of the PySpark and Ray installed here (what a build compiles against)."""
    import pyspark
    import ray

    return {"pyspark": pyspark.__version__, "ray": ray.__version__}


def classpath() -> list[Path]:
    """The jars the sources compile against: PySpark's (Spark, Arrow, Jackson), Ray's."""
    import pyspark
    import ray

    return [Path(pyspark.__file__).parent / "jars", Path(ray.__file__).parent / "jars"]


def build(root: Path, target: Path, javac: str) -> None:
    """Compile the sources under ``root`` into the jar ``target``, atomically (a concurrent
    build leaves one whole jar). Raises OSError or subprocess.SubprocessError."""
    target.parent.mkdir(parents=True, exist_ok=True)
    jars = os.pathsep.join(str(p / "*") for p in classpath())
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".build-") as tmp:
        classes = Path(tmp) / "classes"
        cmd = [javac, "-nowarn", "--release", JAVA_RELEASE, "-d", str(classes), "-cp", jars]
        _run([*cmd, *map(str, sources(root))])
        built = Path(tmp) / target.name
        with zipfile.ZipFile(built, "w", zipfile.ZIP_DEFLATED) as out:  # a jar is a zip
            for path in sorted(classes.rglob("*.class")):
                out.write(path, path.relative_to(classes).as_posix())
            out.writestr(f"META-INF/services/{REGISTER}", SOURCE_CLASS + "\n")
        os.replace(built, target)


def build_packaged(root: Path, out_dir: Path, javac: str) -> Path:
    """The jar a wheel carries: ``out_dir/rayq-spark.jar``, and beside it the record of
    what it was built with (``rayq-spark.json``). Returns the jar's path."""
    target = out_dir / JAR_NAME
    build(root, target, javac)
    built_with = {**versions(), "java_release": JAVA_RELEASE, "sources": sources_digest(root)}
    (out_dir / BUILT_WITH_NAME).write_text(json.dumps(built_with, indent=2) + "\n")
    return target


def _run(cmd: list[str]) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S)
    if done.returncode != 0:
        raise subprocess.SubprocessError(
            f"{Path(cmd[0]).name} exited with {done.returncode}: {done.stderr.strip()[-2000:]}"
        )
