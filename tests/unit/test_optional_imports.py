"""``import rayq`` (and its Ray-backed names) never imports pyspark, raydp or Ray Data;
``rayq.connectors.spark`` is imported only when the user imports it."""

from __future__ import annotations

import subprocess
import sys

CODE = """
import sys
import rayq
rayq.Producer, rayq.PullConsumer, rayq.Admin, rayq.start
import rayq.connectors.streaming, rayq.connectors.ranges, rayq.connectors.arrow_io
heavy = sorted(m for m in ("pyspark", "raydp", "ray.data") if m in sys.modules)
print(",".join(heavy) or "none")
"""


def test_import_rayq_does_not_import_spark() -> None:
    out = subprocess.run(
        [sys.executable, "-c", CODE], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    assert out.strip() == "none"


RAY_FREE = [
    "rayq.testing",
    "rayq.transport.base",
    "rayq.actors.protocol",
    "rayq.actors.server.broker_server",
    "rayq.actors.server.routes",
    "rayq.actors.server.tables",
    "rayq.actors.server.schedule",
    "rayq.producer.validation",
    "rayq.producer.sender",
]


def test_the_server_objects_the_protocol_and_the_fake_transport_do_not_import_ray() -> None:
    """Client tests run on rayq.testing without Ray; the actor shells wrap Ray-free objects."""
    code = f"import sys\nfor m in {RAY_FREE!r}: __import__(m)\nprint('ray' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    assert out.strip() == "False"
