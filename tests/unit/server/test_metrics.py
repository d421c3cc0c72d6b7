"""Metrics without Ray: the Tally the hot paths fill, how a tally becomes Ray metric
calls, the gauges whose label sets come and go, the declared names, and consumer lag
computed by BrokerServer (actors/metrics.py, store/tally.py)."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rayq.actors import metrics
from rayq.actors.metrics import EXPORTED_FAMILIES, SPECS, GaugeSet, record_tally
from rayq.actors.protocol import CommitOffsetsRequest, CreateTopicRequest
from rayq.actors.protocol.config import BrokerConfig
from rayq.actors.server.broker_server import BrokerServer
from rayq.store import InnerMessage, StoreConfig, UniqIdGenerator
from rayq.store.batch import encode_batch
from rayq.store.tally import Tally

IDS = UniqIdGenerator()
LABELS = {"broker", "topic", "group", "slave", "mode", "queue_id"}


class FakeMetric:
    """Records ``inc``/``observe``/``set`` calls as (method, value, tags)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, float, dict[str, str]]] = []

    def inc(self, value: float, tags: dict[str, str]) -> None:
        self.calls.append(("inc", value, tags))

    def observe(self, value: float, tags: dict[str, str]) -> None:
        self.calls.append(("observe", value, tags))

    def set(self, value: float, tags: dict[str, str]) -> None:
        self.calls.append(("set", value, tags))


@pytest.fixture
def fakes(monkeypatch: pytest.MonkeyPatch) -> dict[str, FakeMetric]:
    made: dict[str, FakeMetric] = {}
    monkeypatch.setattr(metrics, "metric", lambda name: made.setdefault(name, FakeMetric()))
    return made


def test_tally_sums_counts_per_key_and_starts_empty_after_a_drain() -> None:
    tally = Tally()
    tally.count(("orders",), 100, 1000)
    tally.count(("orders",), 1, 10)
    tally.count(("audit",), 2, 20)
    tally.observe(("orders",), 0.5)
    assert tally.drain() == ({("orders",): [101, 1010], ("audit",): [2, 20]}, {("orders",): [0.5]})
    assert tally.drain() == ({}, {})


def test_tally_keeps_at_most_max_samples_per_key_between_drains() -> None:
    tally = Tally(max_samples=3)
    for i in range(10):
        tally.observe((), float(i))
    assert tally.drain()[1] == {(): [0.0, 1.0, 2.0]}


def test_tally_counts_from_several_threads_lose_nothing() -> None:
    tally = Tally()

    def add() -> None:
        for _ in range(2000):
            tally.count(("t",), 1)

    threads = [threading.Thread(target=add) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert tally.drain()[0] == {("t",): [8000]}


def test_record_tally_labels_each_key_and_skips_zero_amounts(fakes) -> None:
    """Given a tally of (topic,) keys, expect one inc per non-zero amount, labelled with
    the fixed broker and the key's topic, and one observe per sample."""
    tally = Tally()
    tally.count(("orders",), 3, 0)
    tally.observe(("orders",), 0.25)
    record_tally(
        tally, {"broker": "b"}, ("rayq_put_messages", "rayq_put_bytes"), "rayq_put_latency_seconds"
    )
    tags = {"broker": "b", "topic": "orders"}
    assert fakes["rayq_put_messages"].calls == [("inc", 3, tags)]
    assert "rayq_put_bytes" not in fakes
    assert fakes["rayq_put_latency_seconds"].calls == [("observe", 0.25, tags)]


def test_gauge_set_zeroes_a_label_set_that_went_away(fakes) -> None:
    lags = GaugeSet("rayq_consumer_lag_messages", {"broker": "b"})
    lags.set_all({("cg", "orders"): 5.0, ("cg", "audit"): 1.0})
    lags.set_all({("cg", "orders"): 2.0})
    calls = fakes["rayq_consumer_lag_messages"].calls[2:]
    assert ("set", 0, {"broker": "b", "group": "cg", "topic": "audit"}) in calls
    assert ("set", 2.0, {"broker": "b", "group": "cg", "topic": "orders"}) in calls
    assert len(calls) == 2


def test_declared_metrics_follow_prometheus_naming() -> None:
    """rayq_ names, units last, no _total in the declared name (Ray's exporter adds
    it, and the ray_ prefix), and only the bounded labels."""
    for spec in SPECS:
        assert spec.name.startswith("rayq_"), spec.name
        assert not spec.name.endswith("_total"), spec.name
        assert set(spec.tags) <= LABELS, spec.name
        if spec.kind == "histogram":
            assert spec.name.endswith("_seconds") and spec.boundaries, spec.name
        if spec.kind == "counter":
            assert spec.exported == f"ray_{spec.name}_total"
    assert len(EXPORTED_FAMILIES) == len(SPECS)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[BrokerServer]:
    srv = BrokerServer(BrokerConfig(store=StoreConfig.for_tests()), str(tmp_path))
    yield srv
    srv.close()


def _send(srv: BrokerServer, topic: str, queue_id: int, n: int) -> None:
    msgs = [
        InnerMessage(topic=topic, queue_id=queue_id, body=b"x", uniq_key=IDS.next_id())
        for _ in range(n)
    ]
    srv.put(encode_batch(msgs, max_body_bytes=1 << 14, max_properties_bytes=4096))


def test_group_lags_sum_max_minus_committed_over_the_committed_queues(server: Any) -> None:
    """Given 5 messages in queue 0 and 3 in queue 1, and group cg at 2 on queue 0 only,
    expect a lag of 3; once cg commits 1 on queue 1 too, 3 + 2."""
    server.create_topic(
        CreateTopicRequest(topic="orders", read_queue_nums=2, write_queue_nums=2, perm=6)
    )
    _send(server, "orders", 0, 5)
    _send(server, "orders", 1, 3)
    server.commit_offsets(CommitOffsetsRequest(group="cg", topic="orders", offsets={0: 2}))
    assert server.group_lags() == {("cg", "orders"): 3}
    server.commit_offsets(CommitOffsetsRequest(group="cg", topic="orders", offsets={1: 1}))
    assert server.group_lags() == {("cg", "orders"): 5}


DASHBOARD = Path(__file__).resolve().parents[3] / "docs" / "grafana" / "rayq-dashboard.json"


def _dashboard_queries() -> list[str]:
    board = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    variables = [v["definition"] for v in board["templating"]["list"] if "definition" in v]
    return exprs + variables


def test_dashboard_queries_name_only_exported_metrics_and_show_them_all() -> None:
    """docs/grafana/rayq-dashboard.json parses; each ray_rayq_* name in its queries is an
    exported family (a histogram's _bucket/_sum/_count under its family); and every
    family is on some panel."""
    queries = _dashboard_queries()
    assert queries
    histograms = {s.exported for s in SPECS if s.kind == "histogram"}
    used = set()
    for query in queries:
        for name in re.findall(r"\bray_rayq_[a-z_]+", query):
            base = re.sub(r"_(bucket|sum|count)$", "", name)
            family = base if base in histograms else name
            assert family in EXPORTED_FAMILIES, (name, query)
            used.add(family)
    assert used == EXPORTED_FAMILIES
