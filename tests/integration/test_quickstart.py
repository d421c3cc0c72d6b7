"""The quickstart (``make demo``) runs end to end in its own process and Ray."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
EXAMPLE_LINES = {"rayq", "topics:", "sent", "read", "consumer", "query"}  # first words


def test_quickstart_sends_reads_back_and_leaves_no_lag() -> None:
    """quickstart.py sends sync and async, reads every message back, commits (lag 0)."""
    run = subprocess.run(
        [sys.executable, str(EXAMPLES / "quickstart.py"), "--messages", "200"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    out = run.stdout
    # only what the example prints, and rayq.start's one line saying where its store is
    # and where clients outside Ray connect: no Ray start-up notices, no other log lines
    (started,) = run.stderr.strip().splitlines()
    assert started.startswith("rayq started:") and "rayq://" in started, run.stderr
    assert all(line.split()[0] in EXAMPLE_LINES for line in out.splitlines()), out
    assert "read back 200 messages" in out
    assert "consumer lag after commit: 0" in out
    assert "query by key 'order-7': ['{\"order\": 7}']" in out
