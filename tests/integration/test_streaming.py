"""Offset planning and the micro-batch engine behind rayq.connectors.spark.stream, without Spark:
plans are recorded before a batch runs, a crashed batch re-runs with identical ranges,
offsets commit (compare-and-set) only after the batch succeeded."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

import rayq
from rayq.actors.protocol import (
    CommitOffsetsRequest,
    CompareAndSetOffsetsRequest,
    QueryOffsetsRequest,
    StreamPlanRequest,
)
from rayq.cluster import Cluster
from rayq.connectors import streaming
from rayq.connectors.ranges import OffsetRange, plan_ranges
from rayq.connectors.streaming import StreamingQuery, share
from rayq.store.errors import (
    BrokenError,
    ConfigError,
    InvalidOffsetError,
    TopicNotFoundError,
)
from rayq.transport.context import ClientContext

pytestmark = pytest.mark.integration
NAMESPACE = "rayq-test-streaming"


class Crash(BaseException):
    """Stands for the driver dying mid-batch."""


@pytest.fixture(scope="module")
def ctx(cluster: Cluster) -> ClientContext:
    admin = rayq.Admin(namespace=NAMESPACE)
    for topic in ("plan", "s1", "s2", "s3", "s4", "s5"):
        admin.create_topic(topic, queues=2)
    return ClientContext(namespace=NAMESPACE)


def produce(topic: str, n: int) -> list[rayq.SendResult]:
    with rayq.Producer(group="pg", namespace=NAMESPACE) as producer:
        return [producer.send(rayq.Message(topic, f"{topic}-{i}".encode())) for i in range(n)]


def query(topic: str, run: Callable, **kw: object) -> StreamingQuery:
    opts = {"starting": "earliest", "max_messages_per_trigger": 6, "namespace": NAMESPACE}
    return StreamingQuery(topic, "etl", run, **{**opts, **kw})  # type: ignore[arg-type]


def commit(ctx: ClientContext, group: str, topic: str, offsets: dict[int, int]) -> None:
    req = CommitOffsetsRequest(group=group, topic=topic, offsets=offsets)
    ctx.broker("broker-a").commit_offsets(req).result(30)


def committed(ctx: ClientContext, topic: str) -> dict[int, int]:
    req = QueryOffsetsRequest(group="etl", topic=topic)
    return ctx.broker("broker-a").query_offsets(req).result(30).offsets


def test_plan_ranges_specs(ctx: ClientContext) -> None:
    sent = produce("plan", 10)
    per_queue = {q: sum(r.queue.queue_id == q for r in sent) for q in (0, 1)}
    ranges = plan_ranges(ctx, "plan")
    assert [(r.queue_id, r.start, r.end) for r in ranges] == [
        (0, 0, per_queue[0]),
        (1, 0, per_queue[1]),
    ]
    pieces = plan_ranges(ctx, "plan", max_messages_per_partition=2)
    assert max(r.count for r in pieces) == 2 and sum(r.count for r in pieces) == 10
    assert sum(r.count for r in plan_ranges(ctx, "plan", "latest")) == 0
    assert plan_ranges(ctx, "plan", {0: 1}, {1: 1})[0] == OffsetRange(
        "broker-a", 0, 1, per_queue[0]
    )
    clamped = plan_ranges(ctx, "plan", {("broker-a", 1): 99})  # to the end: nothing to read
    assert [r.queue_id for r in clamped] == [0]
    future = time.time_ns() // 1_000_000 + 60_000
    assert sum(r.count for r in plan_ranges(ctx, "plan", 0, future)) == 10
    assert sum(r.count for r in plan_ranges(ctx, "plan", future)) == 0
    commit(ctx, "cg", "plan", {0: 2, 1: 3})
    assert sum(r.count for r in plan_ranges(ctx, "plan", "committed:cg")) == 5
    assert sum(r.count for r in plan_ranges(ctx, "plan", "earliest", "committed:cg")) == 5
    for bad in ("newest", -5, {7: 0}, {0: -1}, {"x": 1}, 1.5, "committed:"):
        with pytest.raises(rayq.ClientError):
            plan_ranges(ctx, "plan", bad)
    with pytest.raises(InvalidOffsetError):
        plan_ranges(ctx, "plan", ending="soon")
    with pytest.raises(InvalidOffsetError):
        plan_ranges(ctx, "plan", max_messages_per_partition=0)
    with pytest.raises(TopicNotFoundError):
        plan_ranges(ctx, "no-such-topic")


def test_share() -> None:
    assert share({"a": 1, "b": 10, "c": 10}, 9) == {"a": 1, "b": 4, "c": 4}
    assert share({"a": 0, "b": 3}, 100) == {"a": 0, "b": 3}


def test_batches_commit_after_processing(ctx: ClientContext) -> None:
    produce("s1", 10)
    seen: list[tuple[int, list[OffsetRange]]] = []
    q = query("s1", lambda ranges, batch_id: seen.append((batch_id, ranges)))
    progress = [q.run_once(), q.run_once(), q.run_once()]
    assert [p["num_input_rows"] for p in progress if p] == [6, 4]
    assert progress[2] is None and q.last_progress["lag"] == 0
    assert [b for b, _ in seen] == [0, 1]
    assert progress[0]["lag"] == 4 and set(progress[0]["durations_ms"]) >= {"process", "commit"}
    # Spark's StreamingQueryProgress names, beside rayq's own
    assert [p["batchId"] for p in progress[:2]] == [0, 1]
    assert [p["numInputRows"] for p in progress[:2]] == [6, 4]
    assert set(progress[0]["durationMs"]) == {
        "latestOffset",
        "addBatch",
        "commitOffsets",
        "triggerExecution",
    }
    assert progress[0]["timestamp"].endswith("Z") and progress[0]["processedRowsPerSecond"] > 0
    assert sum(committed(ctx, "s1").values()) == 10


def test_a_crashed_batch_reruns_with_identical_ranges(ctx: ClientContext) -> None:
    produce("s2", 10)
    runs: list[tuple[int, list[OffsetRange]]] = []

    def crash(ranges: list[OffsetRange], batch_id: int) -> None:
        runs.append((batch_id, ranges))
        raise Crash

    q = query("s2", crash)
    with pytest.raises(Crash):
        q.run_once()
    assert committed(ctx, "s2") == {}
    produce("s2", 5)  # more data must not change the re-run batch
    q2 = query("s2", lambda ranges, batch_id: runs.append((batch_id, ranges)))
    assert q2.run_once()["rerun"] is True
    assert runs[1] == runs[0]
    assert sum(committed(ctx, "s2").values()) == 6
    q2.run_once()
    assert runs[2][0] == runs[0][0] + 1 and sum(r.count for r in runs[2][1]) == 6


def test_a_crash_after_the_commit_does_not_rerun(ctx: ClientContext) -> None:
    produce("s3", 4)
    q = query("s3", lambda ranges, batch_id: None)
    plan = q.plan()
    assert plan is not None
    broker = ctx.broker("broker-a")
    ends = {r.queue_id: r.end for r in plan.ranges}
    expected = {r.queue_id: r.committed for r in plan.ranges}
    req = CompareAndSetOffsetsRequest(group="etl", topic="s3", expected=expected, offsets=ends)
    assert broker.compare_and_set_offsets(req).result(30).existed
    # ... and the driver dies before dropping the plan.
    runs: list[int] = []
    q2 = query("s3", lambda ranges, batch_id: runs.append(batch_id))
    assert q2.run_once() is None and runs == []
    req = StreamPlanRequest(group="etl", topic="s3")
    assert q2.ctx.coordinator.stream_plan(req).result(30).batch_id == -1  # none left


def test_offsets_moved_by_someone_else_stop_the_query(ctx: ClientContext) -> None:
    produce("s4", 4)

    def reset(ranges: list[OffsetRange], batch_id: int) -> None:
        commit(ctx, "etl", "s4", {0: 0, 1: 0})

    with pytest.raises(BrokenError, match="changed while batch"):
        query("s4", reset).run_once()


def test_latest_is_pinned_when_the_query_starts(ctx: ClientContext) -> None:
    produce("s4", 3)  # before the query: not read
    got: list[int] = []
    q = StreamingQuery(
        "s4",
        "fresh",
        lambda ranges, batch_id: got.append(sum(r.count for r in ranges)),
        starting="latest",
        namespace=NAMESPACE,
    )
    assert q.run_once() is None
    produce("s4", 5)  # after the first trigger: read, though no batch committed yet
    assert q.run_once()["num_input_rows"] == 5 and got == [5]


def test_the_query_thread_stop_and_progress(ctx: ClientContext) -> None:
    got: list[int] = []
    q = query(
        "s1",
        lambda ranges, batch_id: got.append(sum(r.count for r in ranges)),
        trigger_interval=0.1,
        starting="latest",
    )
    q.start()
    produce("s1", 3)
    deadline = time.monotonic() + 30
    while sum(got) < 3:
        assert time.monotonic() < deadline and q.is_active
        time.sleep(0.05)
    q.stop(30)
    assert not q.is_active and q.await_termination(1) and q.exception() is None
    assert q.recent_progress and q.recent_progress[-1]["num_input_rows"] == got[-1]


def test_the_next_batch_is_planned_while_a_batch_runs(
    ctx: ClientContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Given a batch that runs past the trigger, the queues' ends for the next batch are
    read while it runs; every message is still processed exactly once."""
    running = threading.Event()
    during: list[bool] = []
    real_bounds = streaming.queue_bounds

    def bounds(ctx: ClientContext, topic: str) -> dict:
        if threading.current_thread().name.startswith("rayq-plan-") and not any(during):
            # the planner thread reads ahead; under load it can reach its trigger time
            # before the first batch has begun: let it read once that batch runs (a
            # planner that only read after the batch would wait here in vain: it fails)
            running.wait(30)
        during.append(running.is_set())
        return real_bounds(ctx, topic)

    monkeypatch.setattr(streaming, "queue_bounds", bounds)
    got: list[int] = []

    def slow(ranges: list[OffsetRange], batch_id: int) -> None:
        running.set()
        deadline = time.monotonic() + 30
        while not any(during):  # until the planner has read the ends
            assert time.monotonic() < deadline, "the next batch was not planned during this one"
            time.sleep(0.01)
        running.clear()
        got.append(sum(r.count for r in ranges))

    produce("s5", 10)
    q = query("s5", slow, trigger_interval=0.05).start()
    deadline = time.monotonic() + 30
    while sum(got) < 10:
        assert time.monotonic() < deadline and q.is_active, q.exception()
        time.sleep(0.05)
    q.stop(30)
    assert q.await_termination(1) and got[:2] == [6, 4] and sum(committed(ctx, "s5").values()) == 10


def test_a_failing_process_ends_the_query(ctx: ClientContext) -> None:
    def fail(ranges: list[OffsetRange], batch_id: int) -> None:
        raise ValueError("bad batch")

    produce("s1", 2)
    before = committed(ctx, "s1")
    q = query("s1", fail, trigger_interval=0.05).start()
    with pytest.raises(ValueError, match="bad batch"):
        q.await_termination(30)
    assert isinstance(q.exception(), ValueError)
    assert committed(ctx, "s1") == before  # nothing of the failed batch was committed


def test_bad_arguments(ctx: ClientContext) -> None:
    with pytest.raises(TopicNotFoundError):
        query("nope", lambda r, b: None)
    with pytest.raises(ConfigError):
        query("s1", lambda r, b: None, trigger_interval=-1)
    with pytest.raises(InvalidOffsetError):
        query("s1", lambda r, b: None, max_messages_per_trigger=0)
    with pytest.raises(rayq.InvalidGroupError):
        StreamingQuery("s1", "bad group!", lambda r, b: None, namespace=NAMESPACE)
