"""The Spark examples run end to end, each in its own process with its own local Ray and
RayDP session, as ``make demo-spark`` runs them (shortened by their flags)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.integration]
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
# Spark's own warning when a micro-batch takes longer than the trigger interval (the
# first batch of a stateful query does, on 2 busy cores); log4j writes it to stdout.
FALLING_BEHIND = re.compile(
    r"\S+ \S+ WARN ProcessingTimeExecutor .*Current batch is falling behind"
)
# Until writeStream.format("rayq") is merged, Spark refuses it at start().
NO_STREAMING_SINK = "Data source rayq does not support streamed writing"


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


def check_streaming_run(run: subprocess.CompletedProcess[str], sink: str) -> None:
    """structured_streaming.py ran, printed only its own lines (and Spark's warnings
    that a batch fell behind its trigger), and counted every click it sent."""
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stderr.strip() == "", run.stderr
    lines = [line for line in run.stdout.splitlines() if not FALLING_BEHIND.match(line)]
    out = "\n".join(lines)
    assert {line.split()[0] for line in lines} <= {"Spark", "batch", "page_counts:", "sent"}, out
    assert re.match(rf"Spark session up in [\d.]+ s; sink: {sink}$", lines[0]), out
    assert re.search(r"^batch \d+: [1-9]\d* clicks read$", out, re.MULTILINE), out
    windows = re.findall(r"^  page_counts: (\d\d:\d\d:\d\d) ", out, re.MULTILINE)
    assert windows and all(int(w[-2:]) % 5 == 0 for w in windows), out  # 5-second windows
    sent, counted = summary(out)
    assert sent == counted > 0, out


def test_structured_streaming_counts_windows_written_from_foreach_batch() -> None:
    """structured_streaming.py --sink foreach-batch: readStream.format("rayq") with a
    watermark and windowed counts, written by rqspark.write from foreachBatch; the
    PullConsumer's last counts add up to the clicks sent."""
    run = run_example(
        "structured_streaming.py", "--sink", "foreach-batch", "--seconds", "4", "--rate", "50"
    )
    check_streaming_run(run, "foreach-batch")


def test_structured_streaming_counts_windows_written_by_the_rayq_sink() -> None:
    """structured_streaming.py as ``make demo-streaming`` runs it: the counts written with
    writeStream.format("rayq"). Expected to fail (xfail) while the sink is not merged:
    then Spark refuses the query at start(), and only that failure is accepted."""
    run = run_example("structured_streaming.py", "--seconds", "4", "--rate", "50")
    if run.returncode != 0 and NO_STREAMING_SINK in run.stderr:
        pytest.xfail('writeStream.format("rayq") is not merged yet')
    check_streaming_run(run, "rayq")
