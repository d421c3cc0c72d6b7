"""examples/structured_streaming.py (``make demo-streaming``) runs end to end in its own
process, with its own local Ray and RayDP session, as README shows it (shortened)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.integration]
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "structured_streaming.py"


def test_windowed_counts_of_every_click_reach_the_output_topic() -> None:
    """readStream -> a watermarked window count -> writeStream: the last count of each
    window, as the example's consumer reads them from page_counts, add up to the clicks
    it sent."""
    run = subprocess.run(
        [sys.executable, str(EXAMPLE), "--seconds", "4", "--rate", "50"],
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    lines = run.stdout.splitlines()
    assert lines[0].startswith("Spark session up in"), run.stdout
    assert any(line.startswith("  page_counts: ") for line in lines), run.stdout
    found = re.fullmatch(
        r"sent (\d+) clicks; the last counts of (\d+) windows add up to (\d+) \(all counted\)",
        lines[-1],
    )
    assert found, run.stdout
    sent, windows, counted = map(int, found.groups())
    assert sent == counted > 0 and windows >= 1
