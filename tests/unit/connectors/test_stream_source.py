"""rayq.connectors.stream_source (the planning of Spark's readStream source) against the
in-process fake cluster: options, offsets JSON, where batches end (admission control,
new queues), data loss, checkpoint validation, read grants, group commits."""

from __future__ import annotations

import json
from collections.abc import Callable

import msgspec
import pytest

import rayq
from rayq.actors.protocol import ReadGrant
from rayq.actors.protocol.auth import signature
from rayq.connectors import stream_source
from rayq.connectors.stream_source import (
    SourcePlanner,
    dump_offsets,
    load_offsets,
    parse_options,
)
from rayq.store import InnerMessage
from rayq.store.errors import ConfigError, DataLossError, InvalidOffsetError, TopicNotFoundError
from rayq.testing import FakeCluster, FakeTransport


@pytest.fixture
def cluster(make_cluster: Callable[..., FakeCluster]) -> FakeCluster:
    return make_cluster(topics={"orders": 3, "other": 1})


@pytest.fixture(autouse=True)
def readers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Page readers are Ray actors; here, names."""
    monkeypatch.setattr(
        stream_source,
        "page_readers",
        lambda ns, broker, signer=None, refresh=True: [f"{broker}-r0", f"{broker}-r1"],
    )


def planner(cluster: FakeCluster, **options: str) -> SourcePlanner:
    return SourcePlanner(parse_options(options), transport=FakeTransport(cluster))


def send(cluster: FakeCluster, topic: str, per_queue: dict[int, int]) -> None:
    """``n`` messages into each queue, straight into the broker's store."""
    msgs = [
        InnerMessage(topic=topic, queue_id=qid, body=f"{qid}-{i}".encode())
        for qid, n in per_queue.items()
        for i in range(n)
    ]
    assert cluster.server("broker-a").store.put_messages(msgs).ok


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "exactly one"),
        ({"topic": "a", "topicPattern": "a.*"}, "exactly one"),
        ({"topicPattern": "(unclosed"}, "not a regex"),
        ({"topic": "a", "startingOffsets": "{"}, "is not"),
        ({"topic": "a", "startingOffsets": '{"a": {"b": {"x": 1}}}'}, "bad queue id"),
        ({"topic": "a", "startingOffsets": '{"a": {"b": {"0": -3}}}'}, "int >= 0"),
        ({"topic": "a", "startingOffsets": "[1]"}, "JSON object"),
        ({"topic": "a", "maxMessagesPerTrigger": "0"}, "maxMessagesPerTrigger"),
        ({"topic": "a", "maxMessagesPerTrigger": "ten"}, "maxMessagesPerTrigger"),
        ({"topic": "a", "failOnDataLoss": "yes"}, "failOnDataLoss"),
        ({"topic": "a", "accessKey": "k"}, "both accessKey and secretKey"),
        ({"topic": "bad topic!"}, "topic"),
    ],
)
def test_bad_options_raise_rayq_errors_naming_them(options: dict[str, str], message: str) -> None:
    with pytest.raises((ConfigError, InvalidOffsetError, rayq.InvalidTopicError), match=message):
        parse_options(options)


def test_options_are_case_insensitive_and_offsets_json_round_trips() -> None:
    opts = parse_options({"TOPIC": "a,b", "MaxMessagesPerTrigger": "5", "FAILONDATALOSS": "False"})
    assert opts.topics == ("a", "b") and opts.max_per_trigger == 5 and not opts.fail_on_data_loss
    text = '{"b": {"broker-b": {"1": 4}}, "a": {"broker-a": {"10": 2, "2": 7}}}'
    offsets = load_offsets(text)
    assert offsets == {"a": {("broker-a", 10): 2, ("broker-a", 2): 7}, "b": {("broker-b", 1): 4}}
    assert dump_offsets(offsets) == '{"a":{"broker-a":{"2":7,"10":2}},"b":{"broker-b":{"1":4}}}'
    assert load_offsets(dump_offsets(offsets)) == offsets


def test_initial_offsets_from_earliest_latest_and_per_queue_json(cluster: FakeCluster) -> None:
    send(cluster, "orders", {0: 4, 1: 2, 2: 3})
    assert planner(cluster, topic="orders", startingOffsets="earliest").initial() == {
        "orders": {("broker-a", 0): 0, ("broker-a", 1): 0, ("broker-a", 2): 0}
    }
    assert planner(cluster, topic="orders").initial() == {
        "orders": {("broker-a", 0): 4, ("broker-a", 1): 2, ("broker-a", 2): 3}
    }
    named = json.dumps({"orders": {"broker-a": {"0": 1, "1": -2}}})
    assert planner(cluster, topic="orders", startingOffsets=named).initial() == {
        "orders": {("broker-a", 0): 1, ("broker-a", 1): 0, ("broker-a", 2): 3}
    }


def test_check_refuses_unknown_topics_and_queues_of_other_topics(cluster: FakeCluster) -> None:
    with pytest.raises(TopicNotFoundError):
        planner(cluster, topic="nosuch").check()
    with pytest.raises(InvalidOffsetError, match="broker-a/5"):
        named = '{"orders": {"broker-a": {"5": 0}}}'
        planner(cluster, topic="orders", startingOffsets=named).check()
    with pytest.raises(InvalidOffsetError, match="'other', which this source does not read"):
        planner(
            cluster, topic="orders", startingOffsets='{"other": {"broker-a": {"0": 0}}}'
        ).check()
    assert planner(cluster, topicPattern="o.*").check() == ["orders", "other"]


def test_latest_caps_batches_fairly_and_starts_new_queues_at_their_earliest(
    cluster: FakeCluster,
) -> None:
    send(cluster, "orders", {0: 10, 1: 1, 2: 4})
    p = planner(cluster, topic="orders")
    start = {"orders": {("broker-a", 0): 0, ("broker-a", 1): 0}}  # queue 2: new to it
    end = p.latest(start, 9)
    took = {k: end["orders"][k] - start["orders"].get(k, 0) for k in end["orders"]}
    assert sum(took.values()) == 9 and took[("broker-a", 1)] == 1  # the small queue whole
    assert p.latest(start, 0)["orders"] == {
        ("broker-a", 0): 10,
        ("broker-a", 1): 1,
        ("broker-a", 2): 4,
    }


def test_plan_deals_ranges_to_tasks_with_page_readers(cluster: FakeCluster) -> None:
    send(cluster, "orders", {0: 3, 1: 2})
    p = planner(cluster, topic="orders")
    start = {"orders": {("broker-a", 0): 1, ("broker-a", 1): 0, ("broker-a", 2): 0}}
    plan = p.plan(start, p.latest(start, 0))
    assert plan["namespace"] == p.ctx.namespace
    ranges = [r for task in plan["tasks"] for r in task]
    assert sorted((r[1], r[2], r[3], r[4]) for r in ranges) == [
        ("orders", 0, 1, 3),
        ("orders", 1, 0, 2),
    ]
    assert {r[0] for r in ranges} <= {"broker-a-r0", "broker-a-r1"} and {r[5] for r in ranges} == {
        ""
    }


def test_data_loss_fails_or_is_skipped(
    cluster: FakeCluster, caplog: pytest.LogCaptureFixture
) -> None:
    """A start below what the queue keeps, a queue that is gone, a start past its end."""
    send(cluster, "orders", {0: 5})
    lost_below = ({"orders": {("broker-a", 0): 0}}, {"orders": {("broker-a", 0): 5}})
    gone = ({"orders": {("broker-a", 7): 0}}, {"orders": {("broker-a", 7): 3}})
    strict = planner(cluster, topic="orders")
    lenient = planner(cluster, topic="orders", failOnDataLoss="false")
    for monkey_lo, (start, end) in ((2, lost_below), (0, gone)):
        bounds = {
            "orders": {
                ("broker-a", 0): (monkey_lo, 5),
                ("broker-a", 1): (0, 0),
                ("broker-a", 2): (0, 0),
            }
        }
        for p in (strict, lenient):
            p.bounds = lambda topics, b=bounds: b  # type: ignore[method-assign]
        with pytest.raises(DataLossError, match="failOnDataLoss"):
            strict.plan(start, end)
        plan = lenient.plan(start, end)
        got = [(r[2], r[3], r[4]) for task in plan["tasks"] for r in task]
        assert got == ([(0, 2, 5)] if monkey_lo else [])
    assert "failOnDataLoss=false" in caplog.text
    past_end = {"orders": {("broker-a", 0): 9}}
    with pytest.raises(DataLossError, match="ends at 5"):
        strict.latest(past_end, 0)
    assert lenient.latest(past_end, 0)["orders"][("broker-a", 0)] == 5  # read again from 0


def test_validate_refuses_a_checkpoint_naming_queues_the_topic_lost(cluster: FakeCluster) -> None:
    p = planner(cluster, topic="orders")
    p.validate({"orders": {("broker-a", 2): 0}})
    with pytest.raises(InvalidOffsetError, match="new checkpointLocation"):
        p.validate({"orders": {("broker-a", 3): 0}})


def test_grants_are_signed_with_the_options_credentials(cluster: FakeCluster) -> None:
    send(cluster, "orders", {0: 2})
    p = planner(cluster, topic="orders", accessKey="reader", secretKey="reader-secret")
    start = {"orders": {("broker-a", 0): 0}}
    ranges = [r for task in p.plan(start, {"orders": {("broker-a", 0): 2}})["tasks"] for r in task]
    grant = msgspec.json.decode(ranges[0][5], type=ReadGrant)
    assert (grant.topic, grant.queue_id, grant.start, grant.end) == ("orders", 0, 0, 2)
    assert grant.auth is not None and grant.auth.access_key == "reader"
    assert grant.auth.signature == signature("reader-secret", "read_grant", grant)
    assert "reader-secret" not in ranges[0][5]


def test_the_group_gets_the_offsets_of_finished_batches(cluster: FakeCluster) -> None:
    send(cluster, "orders", {0: 3})
    p = planner(cluster, topic="orders", group="etl")
    end = {"orders": {("broker-a", 0): 2, ("broker-a", 1): 0, ("broker-a", 2): 0}}
    p.latest(end, 0)  # the batch that ended at ``end`` is done
    admin = rayq.Admin(transport=FakeTransport(cluster))
    lag = {p.queue.queue_id: p.lag for p in admin.consumer_progress("etl")}
    assert lag == {0: 1, 1: 0, 2: 0}


def test_a_batch_read_goes_from_starting_to_ending_offsets(cluster: FakeCluster) -> None:
    send(cluster, "orders", {0: 6, 1: 2})

    def ranges(**options: str) -> list[tuple[int, int, int]]:
        plan = planner(cluster, topic="orders", **options).batch()
        return sorted((r[2], r[3], r[4]) for task in plan["tasks"] for r in task)

    assert ranges() == [(0, 0, 6), (1, 0, 2)]  # earliest to latest
    ending = '{"orders": {"broker-a": {"0": 4, "1": -1}}}'
    assert ranges(startingOffsets='{"orders": {"broker-a": {"0": 1}}}', endingOffsets=ending) == [
        (0, 1, 4)
    ]  # queue 1 starts at its latest when startingOffsets leaves it out


def test_tasks_depend_on_the_batch_and_the_options_only(cluster: FakeCluster) -> None:
    """A batch planned again (a restart, another session) gets the same tasks: one per
    queue's range unless minPartitions asks for more, never the session's cores."""
    send(cluster, "orders", {0: 9000, 1: 9000, 2: 100})
    start = {"orders": {("broker-a", q): 0 for q in range(3)}}
    end = {"orders": {("broker-a", 0): 9000, ("broker-a", 1): 9000, ("broker-a", 2): 100}}

    def tasks(**options: str) -> list[list[tuple[int, int, int]]]:
        plan = planner(cluster, topic="orders", **options).plan(start, end)
        return [[(r[2], r[3], r[4]) for r in task] for task in plan["tasks"]]

    assert tasks() == tasks()
    assert len(tasks()) == 3
    assert len(tasks(minPartitions="4")) == 4  # (a task reads 4,096 messages at least)
    with pytest.raises(ConfigError, match="minPartitions"):
        parse_options({"topic": "orders", "minPartitions": "0"})


def test_page_readers_are_asked_afresh_only_when_the_cached_replica_fails(
    cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[bool] = []

    def readers(ns: str, broker: str, signer: object = None, refresh: bool = True) -> list[str]:
        asked.append(refresh)
        if not refresh and len(asked) > 1:
            raise rayq.BrokerUnavailableError("the master is gone")
        return [f"{broker}-r{len(asked)}"]

    monkeypatch.setattr(stream_source, "page_readers", readers)
    send(cluster, "orders", {0: 2})
    p = planner(cluster, topic="orders")
    start, end = {"orders": {("broker-a", 0): 0}}, {"orders": {("broker-a", 0): 2}}
    assert p.plan(start, end)["tasks"][0][0][0] == "broker-a-r1"
    assert p.plan(start, end)["tasks"][0][0][0] == "broker-a-r3"
    assert asked == [False, False, True]
