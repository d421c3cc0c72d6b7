"""benchmarks/results.py writes JSON lines; benchmarks/plot.py draws them (and anchors)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_record_writes_json_lines_only_when_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    results = load("results")
    monkeypatch.delenv(results.RESULTS_ENV, raising=False)
    results.record("b", "m", 1.0, "msgs/s")  # no file named: nothing written
    path = tmp_path / "out" / "r.jsonl"
    monkeypatch.setenv(results.RESULTS_ENV, str(path))
    results.record("broker_bench", "produce", 123.5, "msgs/s", size=1024, batch=100)
    results.record_latency("broker_bench", "sync_send_latency", [3.0, 1.0, 2.0], size=1024, batch=1)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert rows[0]["value"] == 123.5 and rows[0]["size"] == 1024 and rows[0]["unit"] == "msgs/s"
    assert rows[1]["value"] == 2.0 and rows[1]["samples_ms"] == [3.0, 1.0, 2.0]
    assert rows[1]["p99"] == 3.0


def test_plot_draws_every_chart_with_anchors(tmp_path: Path) -> None:
    plot = load("plot")
    rows = [
        {
            "bench": "broker_bench",
            "metric": "produce",
            "value": 20000,
            "unit": "msgs/s",
            "size": 1024,
            "batch": 100,
            "in_flight": 1,
        },
        {
            "bench": "broker_bench",
            "metric": "produce",
            "value": 30000,
            "unit": "msgs/s",
            "size": 128,
            "batch": 100,
            "in_flight": 1,
        },
        {
            "bench": "push_bench",
            "metric": "consume_pull",
            "value": 70000,
            "unit": "msgs/s",
            "size": 1024,
            "batch": 1024,
        },
        {
            "bench": "broker_bench",
            "metric": "sync_send_latency",
            "value": 1.2,
            "unit": "ms",
            "samples_ms": [1.0, 1.2, 5.0],
        },
        {"bench": "spark_bench", "metric": "session_start", "value": 12.0, "unit": "s"},
        {"bench": "spark_bench", "metric": "write", "value": 22000, "unit": "msgs/s"},
        {
            "bench": "spark_bench",
            "metric": "stream_latency",
            "value": 900,
            "unit": "ms",
            "samples_ms": [800.0, 900.0, 1500.0],
        },
    ]
    anchors = [
        {
            "adapter": "redis_streams",
            "metric": "produce",
            "size": 1024,
            "batch": 100,
            "msgs_per_s": 96000,
        },
        {
            "adapter": "ray_actor_list",
            "metric": "latency",
            "size": 1024,
            "batch": 100,
            "p50_ms": 7.0,
            "p99_ms": 11.9,
            "p999_ms": 15.0,
        },
    ]
    results = tmp_path / "results.jsonl"
    results.write_text("".join(json.dumps(r) + "\n" for r in rows))
    anchor_file = tmp_path / "anchors.jsonl"
    anchor_file.write_text("a log line\n" + "".join(json.dumps(r) + "\n" for r in anchors))
    out = tmp_path / "png"
    drawn = plot.main([str(results), "--anchors", str(anchor_file), "--out", str(out)])
    assert sorted(p.name for p in drawn) == [
        "anchors_latency.png",
        "latency_cdf.png",
        "spark.png",
        "throughput.png",
    ]
    for path in drawn:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_skips_charts_without_figures(tmp_path: Path) -> None:
    plot = load("plot")
    results = tmp_path / "results.jsonl"
    results.write_text(
        json.dumps({"bench": "codec_bench", "metric": "decode", "value": 1.0, "unit": "us/msg"})
        + "\n"
    )
    assert plot.main([str(results), "--out", str(tmp_path / "png")]) == []
