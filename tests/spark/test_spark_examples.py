"""examples/spark_pipeline.py runs end to end in its own process with its own local Ray
and RayDP session, as ``make demo-spark`` runs it (shortened by its flags). (The
Structured Streaming example's query runs in test_structured_streaming.py's session.)"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.integration]
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run_example(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``python examples/<script> <args>``; its output, whatever its exit code."""
    return subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def summary(out: str) -> tuple[int, int]:
    """The clicks sent and the clicks the sink's last counts add up to, from the last line."""
    last = out.splitlines()[-1]
    found = re.fullmatch(r"sent (\d+) clicks; the sink's final counts add up to (\d+) .*", last)
    assert found, out
    return int(found[1]), int(found[2])


def test_spark_pipeline_counts_every_click_into_page_counts() -> None:
    """spark_pipeline.py (``make demo-spark``): every click sent is counted in the
    page_counts its PullConsumer reads back, and it prints only its own lines."""
    run = run_example("spark_pipeline.py", "--seconds", "3", "--rate", "50")
    assert run.returncode == 0, run.stdout + run.stderr
    out = run.stdout
    assert run.stderr.strip() == "", run.stderr  # no Spark, RayDP or Ray notices
    firsts = {line.split()[0] for line in out.splitlines()}
    assert firsts <= {"Spark", "batch", "page_counts:", "sent"}, out
    assert out.startswith("Spark session up in"), out
    assert re.search(r"^batch \d+: [1-9]\d* clicks", out, re.MULTILINE), out
    assert "  page_counts: " in out
    sent, counted = summary(out)
    assert sent == counted > 0, out
