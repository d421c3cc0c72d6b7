"""The store tour (``make demo``) runs from start to end."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_store_tour_runs_and_recovers(tmp_path: Path) -> None:
    """store_tour.py writes, reads, crashes, recovers and finds a message by key."""
    out = subprocess.run(
        [
            sys.executable,
            str(EXAMPLES / "store_tour.py"),
            "--dir",
            str(tmp_path / "s"),
            "--messages",
            "5000",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    assert "abnormal=True, re-validated 500 records" in out
    assert "query by key 'order-4242'" in out and '"order": 4242' in out
    assert "reopen re-validates 0 records" in out
