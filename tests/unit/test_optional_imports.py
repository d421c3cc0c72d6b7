"""``import rayq`` (and its Ray-backed names) never imports pyspark, raydp or Ray Data;
``rayq.spark`` is imported only when the user imports it."""

from __future__ import annotations

import subprocess
import sys

CODE = """
import sys
import rayq
rayq.Producer, rayq.PullConsumer, rayq.Admin, rayq.start
import rayq.streaming, rayq.ranges, rayq.arrow_io
heavy = sorted(m for m in ("pyspark", "raydp", "ray.data") if m in sys.modules)
print(",".join(heavy) or "none")
"""


def test_import_rayq_does_not_import_spark() -> None:
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True,
                         timeout=120, check=True).stdout  # fmt: skip
    assert out.strip() == "none"
