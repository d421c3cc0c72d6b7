"""Client-side metrics (rayq/metrics.py): producers and consumers over the in-process
fake cluster fill ``rayq.client_metrics()``; the export to Ray hands over only what
is new (checked with a stand-in for Ray's metric objects). No Ray."""

from __future__ import annotations

import time
from typing import Any

import pytest

import rayq
from rayq import metrics as client
from rayq.actors.protocol.config import BrokerConfig, ClientConfig
from rayq.actors.protocol.metrics import LATENCY_BOUNDARIES, SPEC_BY_NAME
from rayq.consumer.listener import ConsumeStatus, ListenerRunner
from rayq.store import StoreConfig
from rayq.testing import FakeCluster, FakeTransport


def _topic(name: str) -> str:
    """A topic name of this test only (the recorder is the process's)."""
    return f"{name}-{time.monotonic_ns()}"


def test_sends_are_timed_per_topic_and_counted_once_per_call(make_cluster) -> None:
    """Given 3 sync sends and one batch of 5, expect 4 latency samples on the topic and
    its error count present at 0."""
    topic = _topic("timed")
    cluster = make_cluster(topics={topic: 2})
    with rayq.Producer("pg", transport=FakeTransport(cluster)) as producer:
        for i in range(3):
            producer.send(rayq.Message(topic, b"%d" % i))
        producer.send_batch([rayq.Message(topic, b"b")] * 5)
    seen = rayq.client_metrics()
    latency = seen.send_latency_seconds[topic]
    assert latency.count == 4 and sum(latency.counts) == 4
    assert latency.boundaries == LATENCY_BOUNDARIES and latency.sum > 0
    assert seen.send_errors[topic] == 0


def test_a_failed_send_is_counted_as_an_error_of_its_topic(make_cluster) -> None:
    """Given a broker that creates no topics, a send to an unknown one fails and counts."""
    topic = _topic("missing")
    cluster = make_cluster(
        config=BrokerConfig(store=StoreConfig.for_tests(), auto_create_topic_enable=False)
    )
    producer = rayq.Producer("pg", transport=FakeTransport(cluster))
    with producer, pytest.raises(rayq.TopicNotFoundError):
        producer.send(rayq.Message(topic, b"x"))
    assert rayq.client_metrics().send_errors[topic] == 1
    assert topic not in rayq.client_metrics().send_latency_seconds


def test_a_pull_consumer_records_the_lag_left_in_each_queue(make_cluster) -> None:
    """Given 6 messages in one queue pulled 2 at a time, expect the lag after the first
    pull to be 4 and, once all are read, 0 for that queue of the group."""
    topic, group = _topic("lagging"), _topic("lag-cg")
    cluster: FakeCluster = make_cluster(topics={topic: 1})
    transport = FakeTransport(cluster)
    with rayq.Producer("pg", transport=transport) as producer:
        producer.send_batch([rayq.Message(topic, b"m")] * 6)
    consumer = rayq.PullConsumer(
        group,
        consume_from=rayq.ConsumeFromWhere.FIRST_OFFSET,
        transport=transport,
        config=ClientConfig(pull_batch_size=2, poll_max_messages=2),
    )
    consumer.subscribe(topic)
    consumer.start()
    try:
        lags: list[int] = []
        got = 0
        deadline = time.monotonic() + 10
        while got < 6 and time.monotonic() < deadline:
            got += len(consumer.poll(timeout=0.5))
            per_queue = rayq.client_metrics().receive_lag_messages.get(group, {})
            lags.extend(per_queue.values())
        assert got == 6
        [queue] = rayq.client_metrics().receive_lag_messages[group]
        assert (queue.topic, queue.queue_id) == (topic, 0)
        assert rayq.client_metrics().receive_lag_messages[group][queue] == 0
        assert max(lags) >= 2  # a pull of 2 out of 6 left some behind
    finally:
        consumer.shutdown()


def test_listener_calls_are_timed_per_group() -> None:
    group = _topic("listening")
    runner = ListenerRunner(lambda msgs: ConsumeStatus.CONSUME_SUCCESS, False, 1, None, group)
    msgs: list[Any] = ["m1", "m2", "m3"]  # the listener never looks at them
    assert runner.run_concurrently(msgs) == []  # one call per message
    assert rayq.client_metrics().listener_seconds[group].count == 3


def test_quantile_is_the_upper_bound_of_the_bucket_that_holds_it() -> None:
    h = client.LatencyHistogram(boundaries=(0.1, 1.0), counts=(2, 1, 1), count=4, sum=7.0)
    assert (h.quantile(0.5), h.quantile(0.75), h.quantile(1.0)) == (0.1, 1.0, float("inf"))
    assert h.mean == 1.75
    empty = client.LatencyHistogram(boundaries=(0.1,), counts=(0, 0), count=0, sum=0.0)
    assert (empty.quantile(0.99), empty.mean) == (0.0, 0.0)
    with pytest.raises(ValueError, match=r"0\.\.1"):
        h.quantile(2)


class _Metric:
    def __init__(self, calls: list[tuple[str, str, Any, dict[str, str]]], name: str) -> None:
        self.calls, self.name = calls, name

    def inc(self, value: float, tags: dict[str, str]) -> None:
        self.calls.append((self.name, "inc", value, tags))

    def observe(self, value: float, tags: dict[str, str]) -> None:
        self.calls.append((self.name, "observe", value, tags))

    def set(self, value: float, tags: dict[str, str]) -> None:
        self.calls.append((self.name, "set", value, tags))


@pytest.fixture
def ray_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, Any, dict[str, str]]]:
    """What a Recorder's export hands to Ray's metric objects, recorded in order."""
    calls: list[tuple[str, str, Any, dict[str, str]]] = []
    monkeypatch.setattr(client, "metric", lambda name: _Metric(calls, name))
    monkeypatch.setattr(client, "zero_counter", lambda n, t: calls.append((n, "zero", 0, t)))
    return calls


def test_an_export_hands_over_only_what_is_new(ray_calls, monkeypatch) -> None:
    """Samples go once, error counts as deltas after a 0, a lag only when it changed."""
    recorder = client.Recorder()
    monkeypatch.setattr(recorder, "_exporting", lambda: True)  # as in a Ray process
    queue = rayq.MessageQueue(topic="t", broker_name="broker-a", queue_id=3)
    recorder.sent("t", 0.002)
    recorder.sent("t", 0.004)
    recorder.lag("g", queue, 7)
    recorder.listened("g", 0.5)
    recorder.export()
    assert sorted(ray_calls, key=str) == sorted(
        [
            (client.SEND_LATENCY, "observe", 0.002, {"topic": "t"}),
            (client.SEND_LATENCY, "observe", 0.004, {"topic": "t"}),
            (client.SEND_ERRORS, "zero", 0, {"topic": "t"}),
            (client.LISTENER_TIME, "observe", 0.5, {"group": "g"}),
            (
                client.RECEIVE_LAG,
                "set",
                7,
                {"group": "g", "topic": "t", "broker": "broker-a", "queue_id": "3"},
            ),
        ],
        key=str,
    )
    ray_calls.clear()
    recorder.send_failed("t")
    recorder.send_failed("t")
    recorder.lag("g", queue, 7)
    recorder.export()
    assert ray_calls == [(client.SEND_ERRORS, "inc", 2, {"topic": "t"})]
    assert recorder.snapshot().send_latency_seconds["t"].count == 2  # totals are kept
    ray_calls.clear()
    recorder.drop_lag("g", queue)  # revoked: its gauge goes to 0 once, then is left alone
    recorder.export()
    recorder.export()
    lag_tags = {"group": "g", "topic": "t", "broker": "broker-a", "queue_id": "3"}
    assert ray_calls == [(client.RECEIVE_LAG, "set", 0, lag_tags)]
    assert "g" not in recorder.snapshot().receive_lag_messages


def test_every_client_metric_is_declared_with_the_labels_it_is_recorded_with() -> None:
    """The names recorded are declared in actors/metrics.py, as rayq_client_*."""
    tags = {
        client.SEND_LATENCY: ("topic",),
        client.SEND_ERRORS: ("topic",),
        client.RECEIVE_LAG: ("group", "topic", "broker", "queue_id"),
        client.LISTENER_TIME: ("group",),
    }
    for name, labels in tags.items():
        assert name.startswith("rayq_client_") and SPEC_BY_NAME[name].tags == labels


def test_without_ray_nothing_is_exported(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process where Ray is not initialized keeps no samples for Ray and no thread."""
    import sys

    monkeypatch.delitem(sys.modules, "ray", raising=False)
    recorder = client.Recorder()
    recorder.sent("t", 0.001)
    assert recorder._exporter is None
    assert recorder._sends["t"].pending == []


def test_between_two_ray_sessions_the_samples_kept_for_ray_are_dropped(
    ray_calls, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After ray.shutdown the exporter drops what it kept for Ray and its metric objects;
    the next session starts every series again (the in-process totals stay)."""
    recorder = client.Recorder()
    monkeypatch.setattr(recorder, "_exporting", lambda: True)
    recorder.sent("t", 0.001)
    recorder.send_failed("t")
    recorder.export()
    client._made["stale"] = object()
    recorder.sent("t", 0.002)
    recorder._between_sessions()
    assert recorder._sends["t"].pending == [] and "stale" not in client._made
    ray_calls.clear()
    recorder.export()
    assert ray_calls == [
        (client.SEND_ERRORS, "zero", 0, {"topic": "t"}),
        (client.SEND_ERRORS, "inc", 1, {"topic": "t"}),
    ]
    assert recorder.snapshot().send_latency_seconds["t"].count == 2
