"""Start-up notices of child processes that a user cannot act on, filtered out.

The Spark driver is a JVM that RayDP starts as a child of the Python driver, writing to
the same stdout and stderr: log4j's and Spark's start-up notices (the loopback host name, the
missing native Hadoop library, "Setting default log level", a log4j status error about
a configuration it then does without) and the INFO lines of Ray's C++ core ("GcsClient
has no Cluster ID"). ``quiet_children()`` gives the children started inside it pipes
for stdout and stderr; daemon threads copy every other line to the real ones for as long
as they live, so real warnings and errors still show. This process's own stdout and
stderr are back as they were when the block ends.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from collections.abc import Iterator
from typing import Final

NOTICES: Final = re.compile(
    rb"WARN Utils: (Your hostname|Set SPARK_LOCAL_IP)"
    rb"|WARN NativeCodeLoader: Unable to load native-hadoop"
    rb"|^Setting default log level to"
    rb"|^To adjust logging level use sc\.setLogLevel"
    rb"|StatusConsoleListener Reconfiguration failed: No configuration found"
    rb"|gcs_client\.cc:\d+: GcsClient has no Cluster ID set"
)


@contextlib.contextmanager
def quiet_children() -> Iterator[None]:
    """Children started in this block write stdout and stderr through the ``NOTICES``
    filter (log4j's status logger writes to stdout, the rest to stderr)."""
    with _filtered(1), _filtered(2):
        yield


@contextlib.contextmanager
def _filtered(fd: int) -> Iterator[None]:
    try:
        real = os.dup(fd)
        read, write = os.pipe()
    except OSError:  # nothing to filter (a closed fd): leave it
        yield
        return
    os.dup2(write, fd)
    os.close(write)
    threading.Thread(
        target=_copy, args=(read, real), name=f"rayq-quiet-fd{fd}", daemon=True
    ).start()
    try:
        yield
    finally:
        os.dup2(real, fd)  # ours again; the children keep the pipe


def _copy(read: int, out: int) -> None:
    """Copy lines from ``read`` to ``out`` but the notices, until every writer is gone."""
    with os.fdopen(read, "rb", buffering=0) as pipe, os.fdopen(out, "wb", buffering=0) as dest:
        pending = b""
        while chunk := pipe.read(65536):
            *lines, pending = (pending + chunk).split(b"\n")
            kept = [line for line in lines if not NOTICES.search(line)]
            if kept:
                dest.write(b"\n".join(kept) + b"\n")
        if pending and not NOTICES.search(pending):
            dest.write(pending)
