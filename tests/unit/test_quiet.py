"""rayq.quiet: children's start-up notices are dropped, everything else passes."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from rayq.quiet import quiet_children

CHILD = r"""
import sys
print("Setting default log level to \"WARN\".")
print("ERROR StatusConsoleListener Reconfiguration failed: No configuration found for 'x'")
print("a real line on stdout")
sys.stderr.write("26/11/24 02:23:18 WARN Utils: Your hostname, vm resolves to a loopback\n")
sys.stderr.write("[2026 I 1 2] gcs_client.cc:96: GcsClient has no Cluster ID set, and won't\n")
sys.stderr.write("26/11/24 ERROR SparkContext: a real error\n")
sys.stderr.write("no newline at the end")
"""


def test_notices_are_dropped_and_the_rest_kept(capfd: pytest.CaptureFixture[str]) -> None:
    with quiet_children():
        child = subprocess.Popen([sys.executable, "-c", CHILD])
    print("the parent's own line")  # after the block: straight to stdout
    child.wait(timeout=60)
    out = err = ""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # the copying threads finish at the child's exit
        got = capfd.readouterr()
        out, err = out + got.out, err + got.err
        if "a real line" in out and "no newline at the end" in err:
            break
        time.sleep(0.05)
    assert "a real line on stdout" in out and "the parent's own line" in out
    assert "a real error" in err and "no newline at the end" in err
    for notice in (
        "Setting default log level",
        "StatusConsoleListener",
        "Your hostname",
        "GcsClient has no Cluster ID",
    ):
        assert notice not in out + err
