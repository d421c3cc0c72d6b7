"""actors/malloc.py: a broker's process keeps freed page-sized buffers mapped.

Each case runs in a fresh interpreter (malloc settings are process-wide), allocates a
20 MiB buffer and frees it, and reads glibc's ``mallinfo2``: bytes in mmapped chunks
(``hblkhd``) while it lives, and free bytes kept in the heap (``fordblks``) after."""

from __future__ import annotations

import ctypes.util
import json
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
    reason="mallopt thresholds are glibc's",
)

PROBE = """
import ctypes, ctypes.util, json, sys
from rayq.actors.malloc import keep_freed_memory
class Info(ctypes.Structure):
    _fields_ = [(f, ctypes.c_size_t) for f in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
        "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.mallinfo2.restype = Info
tuned = keep_freed_memory() if sys.argv[1] == "tuned" else None
before = libc.mallinfo2()
buffer = b"x" * (20 << 20)
living = libc.mallinfo2()
del buffer
after = libc.mallinfo2()
print(json.dumps({"tuned": tuned, "mmapped": living.hblkhd - before.hblkhd,
                  "kept": after.fordblks - before.fordblks}))
"""


def probe(mode: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)


def test_page_sized_buffers_come_from_the_heap_and_stay_there() -> None:
    tuned = probe("tuned")
    assert tuned["tuned"] is True
    assert tuned["mmapped"] < 1 << 20  # not a mapping of its own
    # freed, still mapped for the next page (free bytes from before may have served part)
    assert tuned["kept"] >= 16 << 20


def test_untuned_process_maps_and_unmaps_them() -> None:
    """The default the broker changes (so the test above tells the two apart)."""
    plain = probe("plain")
    assert plain["mmapped"] >= 20 << 20
    assert plain["kept"] < 4 << 20


def test_no_mallopt_is_not_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from rayq.actors import malloc

    monkeypatch.setattr(ctypes.util, "find_library", lambda name: "no-such-libc.so")
    assert malloc.keep_freed_memory() is False
