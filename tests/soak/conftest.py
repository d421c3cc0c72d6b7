"""Puts ``tests/`` on ``sys.path`` so the soak modules import as the package ``soak``
(pytest's importlib mode does not let test modules import their neighbours)."""

from __future__ import annotations

import sys
from pathlib import Path

TESTS = str(Path(__file__).resolve().parents[1])
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)
