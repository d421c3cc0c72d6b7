"""What the benchmarks share: their figures as JSON lines, and progress bars.

``record(bench, metric, value, unit, **params)`` appends one JSON object per figure to
the file named by ``RAYQ_BENCH_RESULTS`` (``make bench`` sets it; unset: nothing is
written), next to the line the benchmark prints::

    {"bench": "broker_bench", "metric": "produce", "value": 21950.3, "unit": "msgs/s",
     "size": 1024, "batch": 100, "in_flight": 1, "ts": "2026-11-24T02:31:07"}

A latency figure also carries its samples (``samples_ms``), so ``plot.py`` can draw
its CDF. ``progress(total, what)`` is a rich progress bar on stderr (transient: it
leaves no trace in the printed figures; nothing when stderr is not a terminal).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

RESULTS_ENV = "RAYQ_BENCH_RESULTS"
_console = Console(stderr=True)


def record(bench: str, metric: str, value: float, unit: str, **params: Any) -> None:
    """Append one figure to ``$RAYQ_BENCH_RESULTS`` (if set)."""
    path = os.environ.get(RESULTS_ENV)
    if not path:
        return
    line = {
        "bench": bench,
        "metric": metric,
        "value": value,
        "unit": unit,
        **params,
        "ts": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


def record_latency(bench: str, metric: str, samples_ms: list[float], **params: Any) -> None:
    """A latency figure: p50 as its value, p99/p999 and the samples beside it."""
    if not samples_ms:
        return
    record(
        bench,
        metric,
        percentile(samples_ms, 50),
        "ms",
        p99=percentile(samples_ms, 99),
        p999=percentile(samples_ms, 99.9),
        samples_ms=[round(s, 3) for s in samples_ms],
        **params,
    )


@contextmanager
def progress(total: int, what: str) -> Iterator[Callable[[int], None]]:
    """A progress bar for ``total`` steps; yields ``advance(n)``."""
    bar = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=_console,
        transient=True,
        disable=not _console.is_terminal,
    )
    with bar:
        task = bar.add_task(what, total=total)
        yield lambda n=1: bar.advance(task, n)
