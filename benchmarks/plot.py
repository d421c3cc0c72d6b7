"""Draw the benchmarks' figures (the JSON lines of results.py) with matplotlib.

Run: ``.venv/bin/python benchmarks/plot.py RESULTS.jsonl [--anchors ANCHORS.jsonl]
[--out DIR]`` (``make bench`` does it). Draws, each only if its figures are there:

* ``throughput.png``: produce and consume msgs/s per message size and batch (rayq's
  broker_bench and push_bench; store_bench's store alone, without Ray); with
  ``--anchors`` (the JSON lines of ``../shared/anchors``, the same run's), every
  adapter's produce and consume figures beside rayq's;
* ``latency_cdf.png``: the CDF of each latency figure that carries samples (sync send,
  send -> poll, send -> push listener, the bare-actor floor);
* ``anchors_latency.png`` (with ``--anchors``): one panel per message size and batch,
  each adapter's p50/p99/p99.9 as points of its CDF, rayq beside the others;
* ``spark.png``: spark_bench's write and read rates and its streaming latency CDF.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

Row = dict[str, Any]


def load(path: Path) -> list[Row]:
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line.startswith("{"):
            rows.append(json.loads(line))
    return rows


def _latest(rows: list[Row], key: Any) -> dict[Any, Row]:
    """The last row for each key (a rerun replaces an earlier figure)."""
    out: dict[Any, Row] = {}
    for row in rows:
        k = key(row)
        if k is not None:
            out[k] = row
    return out


def throughput(rows: list[Row], anchors: list[Row], out: Path) -> Path | None:
    """Grouped bars: one group per (size, batch), one bar per source."""
    series: dict[str, dict[tuple[int, int], float]] = defaultdict(dict)
    for row in rows:
        if row.get("unit") != "msgs/s":
            continue
        size, batch = row.get("size"), row.get("batch")
        if size is None or batch is None:
            continue
        name = {
            ("broker_bench", "produce"): "rayq produce",
            ("broker_bench", "consume_drain"): "rayq consume",
            ("push_bench", "consume_pull"): "rayq consume",
            ("store_bench", "append"): "store append (no Ray)",
            ("store_bench", "read"): "store read (no Ray)",
        }.get((row["bench"], row["metric"]))
        if name is None or row.get("in_flight", 1) != 1:
            continue
        series[name][(size, batch)] = row["value"]
    for row in anchors:
        if row.get("metric") in ("produce", "consume") and row.get("msgs_per_s"):
            name = f"{row['adapter']} {row['metric']} (anchors)"
            series[name][(row["size"], row["batch"])] = row["msgs_per_s"]
    if not series:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(13, 5))
    for ax, kind in zip(axes, ("produce", "consume"), strict=True):
        names = sorted(
            n
            for n in series
            if kind in n
            or (kind == "produce" and "append" in n)
            or (kind == "consume" and "read" in n)
        )
        groups = sorted({k for n in names for k in series[n]})
        if not names or not groups:
            ax.set_visible(False)
            continue
        width = 0.8 / len(names)
        for i, name in enumerate(names):
            xs = [g + i * width for g in range(len(groups))]
            ax.bar(xs, [series[name].get(k, 0) for k in groups], width, label=name)
        ax.set_xticks([g + 0.4 - width / 2 for g in range(len(groups))])
        ax.set_xticklabels([f"{_size(s)}, batch {b}" for s, b in groups], rotation=20)
        ax.set_ylabel("msgs/s")
        ax.set_yscale("log")
        ax.set_title(f"{kind} throughput per message size and batch")
        ax.legend(fontsize=8)
    fig.tight_layout()
    path = out / "throughput.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def latency_cdf(rows: list[Row], out: Path) -> Path | None:
    """rayq's own latency figures with samples, as CDFs on one chart."""
    curves = _latest([r for r in rows if r.get("samples_ms")], lambda r: (r["bench"], r["metric"]))
    if not curves:
        return None
    fig, ax = plt.subplots(figsize=(9, 5.5))
    for (b, metric), row in sorted(curves.items()):
        _cdf(ax, row["samples_ms"], f"{b} {metric} (p50 {row['value']:.1f} ms)")
    _latency_axes(ax, "latency CDF (rayq's benchmarks)")
    return _save(fig, out / "latency_cdf.png")


def anchors_latency(anchors: list[Row], out: Path) -> Path | None:
    """The anchors' latency run: one panel per (size, batch), each adapter's p50, p99 and
    p99.9 at 1,000 msgs/s as points of its CDF (rayq next to the others, same run)."""
    points = _latest(
        [r for r in anchors if r.get("metric") == "latency" and r.get("p50_ms")],
        lambda r: (r["size"], r["batch"], r["adapter"]),
    )
    cases = sorted({(s, b) for s, b, _ in points})
    if not cases:
        return None
    cols = 2 if len(cases) > 1 else 1
    rows_n = -(-len(cases) // cols)
    fig, axes = plt.subplots(rows_n, cols, figsize=(6.5 * cols, 4.2 * rows_n), squeeze=False)
    adapters = sorted({a for _, _, a in points})
    colors = {a: f"C{i}" for i, a in enumerate(adapters)}
    for ax, (size, batch) in zip(axes.flat, cases, strict=False):
        for adapter in adapters:
            row = points.get((size, batch, adapter))
            if row is None:
                continue
            xs = [row["p50_ms"], row["p99_ms"], row["p999_ms"]]
            rate = row.get("rate_achieved")
            label = adapter + (f" ({rate:,.0f} msgs/s)" if rate else "")
            ax.plot(xs, [0.5, 0.99, 0.999], "o-", color=colors[adapter], label=label)
        _latency_axes(ax, f"{_size(size)}, batch {batch}: p50 / p99 / p99.9")
    for ax in list(axes.flat)[len(cases) :]:
        ax.set_visible(False)
    fig.suptitle("send -> receive latency at 1,000 msgs/s, side by side (../shared/anchors)")
    return _save(fig, out / "anchors_latency.png")


def _cdf(ax: Any, samples_ms: list[float], label: str) -> None:
    samples = sorted(samples_ms)
    n = len(samples)
    ax.step(samples, [(i + 1) / n for i in range(n)], where="post", label=label)


def _latency_axes(ax: Any, title: str) -> None:
    ax.set_xscale("log")
    ax.set_xlabel("latency (ms)")
    ax.set_ylabel("fraction of messages")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def spark(rows: list[Row], out: Path) -> Path | None:
    figures = _latest([r for r in rows if r.get("bench") == "spark_bench"], lambda r: r["metric"])
    if not figures:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    rates = [(m, r["value"]) for m, r in figures.items() if r["unit"] == "msgs/s"]
    ax = axes[0]
    if rates:
        ax.bar([m for m, _ in rates], [v for _, v in rates])
        ax.set_ylabel("msgs/s")
    start = figures.get("session_start")
    title = "Spark write and read"
    if start is not None:
        title += f" (session start {start['value']:.1f} s)"
    ax.set_title(title)
    stream = figures.get("stream_latency")
    ax = axes[1]
    if stream is not None and stream.get("samples_ms"):
        samples = sorted(s / 1000 for s in stream["samples_ms"])
        n = len(samples)
        ax.step(samples, [(i + 1) / n for i in range(n)], where="post")
        ax.set_xlabel("send -> sink (s)")
        ax.set_ylabel("fraction of messages")
        ax.set_title("streaming latency CDF, 1 s trigger")
        ax.grid(True, alpha=0.3)
    else:
        ax.set_visible(False)
    fig.tight_layout()
    path = out / "spark.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _size(size: int) -> str:
    return f"{size // 1024} KiB" if size >= 1024 and size % 1024 == 0 else f"{size} B"


def main(argv: list[str] | None = None) -> list[Path]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path, nargs="+", help="JSON lines of results.py")
    parser.add_argument("--anchors", type=Path, help="the anchors' JSON lines (same run)")
    parser.add_argument("--out", type=Path, default=Path("docs/bench"))
    args = parser.parse_args(argv)
    rows = [row for path in args.results for row in load(path)]
    anchors = load(args.anchors) if args.anchors else []
    args.out.mkdir(parents=True, exist_ok=True)
    own = [r for r in rows if r["bench"] != "spark_bench"]
    drawn = [
        p
        for p in (
            throughput(rows, anchors, args.out),
            latency_cdf(own, args.out),
            anchors_latency(anchors, args.out),
            spark(rows, args.out),
        )
        if p is not None
    ]
    for path in drawn:
        print(f"wrote {path}")
    return drawn


if __name__ == "__main__":
    main()
