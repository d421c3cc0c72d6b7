"""PullConsumer against a real one-broker deployment: start offsets, long polling, tags,
commits, seeks, pause/resume and bad input."""

from __future__ import annotations

import threading
import time
import uuid
from collections import defaultdict

import pytest

import rayq
import rayq.cluster
from rayq.actors.protocol import MessageQueue
from rayq.admin.admin import Admin
from rayq.consumer.pull import ConsumeFromWhere, PullConsumer
from rayq.store import InnerMessage, MessageExt, encode_batch
from rayq.transport.context import ClientContext

pytestmark = pytest.mark.integration

BROKER = "broker-a"
NAMESPACE = "rayq-test-pull-consumer"
FIRST = ConsumeFromWhere.FIRST_OFFSET


@pytest.fixture(scope="module")
def admin(cluster: rayq.cluster.Cluster) -> Admin:
    return Admin(namespace=cluster.namespace)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def new_topic(admin: Admin, queues: int) -> str:
    topic = unique("pc")
    admin.create_topic(topic, queues=queues)
    return topic


def put(
    topic: str, queue_id: int, bodies: list[bytes], tags: list[str | None] | None = None
) -> list[int]:
    """Append one batch straight to the broker; returns the queue offsets."""
    tags = tags or [None] * len(bodies)
    msgs = [
        InnerMessage(
            topic=topic, queue_id=queue_id, body=b, tags=t, uniq_key=uuid.uuid4().hex.upper()
        )
        for b, t in zip(bodies, tags, strict=True)
    ]
    batch = encode_batch(msgs, max_body_bytes=4 << 20, max_properties_bytes=32767)
    return ClientContext().broker(BROKER).put(batch).result().queue_offsets


def drain(consumer: PullConsumer, expected: int, *, limit_s: float = 20.0) -> list[MessageExt]:
    """Poll until ``expected`` messages arrived (or the limit passed), then once more to
    show that nothing else comes."""
    got: list[MessageExt] = []
    deadline = time.monotonic() + limit_s
    while len(got) < expected and time.monotonic() < deadline:
        got += consumer.poll(timeout=1.0)
    got += consumer.poll(timeout=0.3)
    return got


def by_queue(msgs: list[MessageExt]) -> dict[int, list[int]]:
    out: dict[int, list[int]] = defaultdict(list)
    for m in msgs:
        out[m.queue_id].append(m.queue_offset)
    return dict(out)


def started(group: str, topic: str, expression: str = "*", **options: object) -> PullConsumer:
    consumer = PullConsumer(group, **options)  # type: ignore[arg-type]
    consumer.subscribe(topic, expression)
    consumer.start()
    return consumer


def test_poll_reads_everything_exactly_once_in_queue_order(admin: Admin) -> None:
    """Several queues and batches, one bigger than a pull: each message once, in order."""
    topic = new_topic(admin, 4)
    for batch in range(3):
        for q in range(4):
            put(topic, q, [f"{q}-{batch}-{i}".encode() for i in range(10)])
    put(topic, 0, [b"bulk"] * 1500)
    with started(unique("g"), topic, consume_from=FIRST) as consumer:
        assert consumer.assignment() == [MessageQueue(topic, BROKER, q) for q in range(4)]
        got = drain(consumer, 1620)
    assert by_queue(got) == {
        0: list(range(1530)),
        1: list(range(30)),
        2: list(range(30)),
        3: list(range(30)),
    }
    ones = [m for m in got if m.queue_id == 1]
    assert [m.body for m in ones] == [f"1-{b}-{i}".encode() for b in range(3) for i in range(10)]
    assert {(m.topic, m.broker_name) for m in got} == {(topic, BROKER)}


def test_last_offset_skips_old_messages_for_a_new_group(admin: Admin) -> None:
    """A new group starting at LAST_OFFSET sees only what is sent after it started."""
    topic = new_topic(admin, 2)
    put(topic, 0, [b"old"] * 5)
    put(topic, 1, [b"old"] * 2)
    with started(unique("g"), topic) as consumer:
        assert consumer.poll(timeout=0.3) == []
        put(topic, 1, [b"new-1", b"new-2"])
        got = drain(consumer, 2)
    assert [(m.queue_id, m.queue_offset, m.body) for m in got] == [
        (1, 2, b"new-1"),
        (1, 3, b"new-2"),
    ]


def test_first_offset_reads_from_the_start(admin: Admin) -> None:
    topic = new_topic(admin, 1)
    put(topic, 0, [b"a", b"b", b"c"])
    with started(unique("g"), topic, consume_from=FIRST) as consumer:
        assert [m.body for m in drain(consumer, 3)] == [b"a", b"b", b"c"]


def test_timestamp_starts_at_the_first_message_stored_at_or_after_it(admin: Admin) -> None:
    topic = new_topic(admin, 1)
    put(topic, 0, [b"before-1", b"before-2"])
    ts = admin.topic_stats(topic)[0].last_store_timestamp + 1
    time.sleep(0.01)
    put(topic, 0, [b"after-1", b"after-2"])
    with started(
        unique("g"), topic, consume_from=ConsumeFromWhere.TIMESTAMP, consume_timestamp_ms=ts
    ) as consumer:
        got = drain(consumer, 2)
    assert [(m.queue_offset, m.body) for m in got] == [(2, b"after-1"), (3, b"after-2")]


def test_empty_poll_returns_and_a_message_sent_meanwhile_is_long_polled(admin: Admin) -> None:
    """An empty topic gives [] once the timeout passes; a message sent while a poll waits
    is returned by that poll or the next."""
    topic = new_topic(admin, 2)
    with started(unique("g"), topic) as consumer:
        assert consumer.poll(timeout=0.5) == []
        assert consumer.poll(timeout=0) == []
        timer = threading.Timer(0.3, put, args=(topic, 1, [b"late"]))
        timer.start()
        try:
            got = consumer.poll(timeout=10.0) or consumer.poll(timeout=10.0)
        finally:
            timer.join()
    assert [(m.queue_id, m.body) for m in got] == [(1, b"late")]


def test_tag_expression_returns_only_those_tags(admin: Admin) -> None:
    topic = new_topic(admin, 2)
    tags: list[str | None] = ["TagA", "TagB", "TagC", None, "TagAB", "TagA"]
    for q in range(2):
        put(topic, q, [f"{q}-{i}".encode() for i in range(6)], tags)
    with started(unique("g"), topic, "TagA || TagB", consume_from=FIRST) as consumer:
        got = drain(consumer, 6)
        assert consumer.position(MessageQueue(topic, BROKER, 0)) == 6
    assert sorted((m.queue_id, m.queue_offset, m.tags) for m in got) == [
        (q, o, t) for q in range(2) for o, t in ((0, "TagA"), (1, "TagB"), (5, "TagA"))
    ]


def test_commit_persists_and_a_new_consumer_of_the_group_resumes(admin: Admin) -> None:
    """Committed offsets survive the consumer; without auto_commit, shutdown commits nothing."""
    topic, group = new_topic(admin, 2), unique("g")
    put(topic, 0, [b"a"] * 4)
    put(topic, 1, [b"b"] * 3)
    mq0 = MessageQueue(topic, BROKER, 0)
    with started(group, topic, consume_from=FIRST, auto_commit=False) as consumer:
        assert len(drain(consumer, 7)) == 7
        assert consumer.committed(mq0) == -1
        consumer.commit()
        assert consumer.committed(mq0) == 4
    put(topic, 0, [b"c"] * 2)
    with started(group, topic, consume_from=FIRST, auto_commit=False) as consumer:
        got = drain(consumer, 2)
        assert [(m.queue_id, m.queue_offset) for m in got] == [(0, 4), (0, 5)]
    with started(group, topic, consume_from=FIRST) as consumer:  # auto_commit on shutdown
        assert [m.queue_offset for m in drain(consumer, 2)] == [4, 5]
    with started(group, topic) as consumer:
        assert consumer.committed(mq0) == 6
        assert consumer.poll(timeout=0.3) == []


def test_seek_seek_to_begin_and_seek_to_end(admin: Admin) -> None:
    topic = new_topic(admin, 1)
    mq = MessageQueue(topic, BROKER, 0)
    put(topic, 0, [str(i).encode() for i in range(10)])
    with started(unique("g"), topic, consume_from=FIRST) as consumer:
        assert len(drain(consumer, 10)) == 10
        consumer.seek(mq, 7)
        assert [m.queue_offset for m in drain(consumer, 3)] == [7, 8, 9]
        consumer.seek_to_begin(mq)
        assert consumer.position(mq) == 0
        assert [m.queue_offset for m in drain(consumer, 10)] == list(range(10))
        consumer.seek(mq, 2)
        consumer.seek_to_end(mq)
        assert consumer.position(mq) == 10
        assert consumer.poll(timeout=0.3) == []
        # past the end of a queue that never lost a message (min offset 0): moved back to
        # its start on the next pull (RocketMQ's getMessage), so it is read again
        consumer.seek(mq, 1000)
        assert [m.queue_offset for m in drain(consumer, 10)] == list(range(10))
        assert consumer.position(mq) == 10


def test_pause_holds_a_queue_back_until_resume(admin: Admin) -> None:
    topic = new_topic(admin, 2)
    mq0, mq1 = MessageQueue(topic, BROKER, 0), MessageQueue(topic, BROKER, 1)
    put(topic, 0, [b"zero"] * 3)
    put(topic, 1, [b"one"] * 2)
    with started(unique("g"), topic, consume_from=FIRST) as consumer:
        consumer.pause([mq0])
        assert {m.queue_id for m in drain(consumer, 2)} == {1}
        consumer.resume([mq0])
        assert [(m.queue_id, m.queue_offset) for m in drain(consumer, 3)] == [
            (0, 0),
            (0, 1),
            (0, 2),
        ]
        consumer.pause([mq0, mq1])
        put(topic, 1, [b"later"])
        assert consumer.poll(timeout=0.3) == []
        consumer.resume([mq1])
        assert [m.body for m in drain(consumer, 1)] == [b"later"]


def test_assign_reads_only_the_given_queues(admin: Admin) -> None:
    topic = new_topic(admin, 3)
    for q in range(3):
        put(topic, q, [b"m"] * 2)
    mq2 = MessageQueue(topic, BROKER, 2)
    with PullConsumer(unique("g"), consume_from=FIRST) as consumer:
        consumer.assign([mq2])
        consumer.start()
        assert consumer.assignment() == [mq2]
        assert by_queue(drain(consumer, 2)) == {2: [0, 1]}
        with pytest.raises(rayq.ClientError, match="don't mix"):
            consumer.subscribe(topic)


@pytest.mark.parametrize(
    ("bad_call", "error"),
    [
        (lambda c, t: PullConsumer("bad group!"), rayq.InvalidGroupError),
        (lambda c, t: PullConsumer(""), rayq.InvalidGroupError),
        (lambda c, t: PullConsumer("g", consume_from="FIRST"), rayq.ConfigError),
        (lambda c, t: PullConsumer("g", consume_timestamp_ms=-5), rayq.ConfigError),
        (lambda c, t: PullConsumer("g", config={}), rayq.ConfigError),
        (lambda c, t: c.subscribe("bad/topic"), rayq.InvalidTopicError),
        (lambda c, t: c.subscribe(t, "||"), rayq.InvalidMessageError),
        (lambda c, t: c.subscribe(t, 42), rayq.InvalidMessageError),
        (lambda c, t: c.subscribe("no-such-topic-here"), rayq.TopicNotFoundError),
        (lambda c, t: c.poll(timeout=-1), rayq.ConfigError),
        (lambda c, t: c.poll(timeout=float("nan")), rayq.ConfigError),
        (lambda c, t: c.seek(MessageQueue(t, BROKER, 0), -1), rayq.InvalidOffsetError),
        (lambda c, t: c.seek(MessageQueue(t, BROKER, 9), 0), rayq.ClientError),
        (lambda c, t: c.pause(["not a queue"]), rayq.ClientError),
        (lambda c, t: c.assign([MessageQueue(t, BROKER, 0)]), rayq.ClientError),
    ],
)
def test_bad_input_raises_rayq_errors_and_the_cluster_keeps_working(
    admin: Admin, bad_call: object, error: type[rayq.RayqError]
) -> None:
    topic = new_topic(admin, 1)
    with started(unique("g"), topic, consume_from=FIRST) as consumer:
        with pytest.raises(error):
            bad_call(consumer, topic)  # type: ignore[operator]
        put(topic, 0, [b"still-fine"])
        assert [m.body for m in drain(consumer, 1)] == [b"still-fine"]


def test_wrong_types_and_out_of_range_offsets_are_refused_before_anything_changes(
    admin: Admin,
) -> None:
    """seek past 2**63 - 1, a non-str expression and a non-list of queues are ClientErrors
    naming what was expected; the position is unchanged and polling keeps working."""
    topic = new_topic(admin, 1)
    mq = MessageQueue(topic, BROKER, 0)
    put(topic, 0, [b"a"])
    with started(unique("g"), topic, consume_from=FIRST) as consumer:
        assert [m.body for m in drain(consumer, 1)] == [b"a"]
        for offset in (2**63, 2**64, 1.5, None):
            with pytest.raises(rayq.InvalidOffsetError, match=r"0\.\.9223372036854775807"):
                consumer.seek(mq, offset)  # type: ignore[arg-type]
        assert consumer.position(mq) == 1
        for expression, type_name in ((1, "int"), (b"*", "bytes"), (["*"], "list")):
            with pytest.raises(rayq.InvalidMessageError, match=f"must be a str.*got {type_name}"):
                consumer.subscribe(topic, expression)  # type: ignore[arg-type]
        for call_with in (consumer.assign, consumer.pause, consumer.resume):
            for bad in (None, 5, "queue"):
                with pytest.raises(rayq.ClientError, match=r"list of rayq\.MessageQueue"):
                    call_with(bad)  # type: ignore[arg-type]
        # the largest legal offset: past the end of a queue whose min offset is 0, so
        # moved back to its start (RocketMQ's getMessage) and read again
        consumer.seek(mq, 2**63 - 1)
        assert [m.body for m in drain(consumer, 1)] == [b"a"]
        assert consumer.position(mq) == 1
        put(topic, 0, [b"b"])
        assert [m.body for m in drain(consumer, 1)] == [b"b"]


def test_poll_before_start_and_unknown_queue_assignment_are_refused(admin: Admin) -> None:
    topic = new_topic(admin, 1)
    consumer = PullConsumer(unique("g"))
    with pytest.raises(rayq.ClientError, match="start"):
        consumer.poll()
    with pytest.raises(rayq.InvalidOffsetError):
        consumer.assign([MessageQueue(topic, BROKER, 5)])
    with pytest.raises(rayq.TopicNotFoundError):
        consumer.assign([MessageQueue("no-such-topic-here", BROKER, 0)])
    consumer.shutdown()


def test_calls_after_shutdown_raise_closed_error(admin: Admin) -> None:
    topic = new_topic(admin, 1)
    mq = MessageQueue(topic, BROKER, 0)
    consumer = started(unique("g"), topic)
    consumer.shutdown()
    consumer.shutdown()  # idempotent
    for closed_call in (
        lambda: consumer.poll(),
        consumer.commit,
        consumer.start,
        lambda: consumer.subscribe(topic),
        lambda: consumer.seek(mq, 0),
        lambda: consumer.committed(mq),
        lambda: consumer.pause([mq]),
    ):
        with pytest.raises(rayq.ClosedError):
            closed_call()


def test_auto_commit_commits_what_earlier_polls_returned(admin: Admin) -> None:
    """With a short auto-commit interval, a poll commits the positions of the polls before."""
    topic, group = new_topic(admin, 1), unique("g")
    mq = MessageQueue(topic, BROKER, 0)
    put(topic, 0, [b"m"] * 3)
    config = rayq.ClientConfig(auto_commit_interval_ms=1)
    with started(group, topic, consume_from=FIRST, config=config) as consumer:
        assert len(drain(consumer, 3)) == 3
        time.sleep(0.01)
        consumer.poll(timeout=0)
        assert consumer.committed(mq) == 3


def test_subscription_follows_a_topic_that_gains_queues(admin: Admin) -> None:
    """After update_topic adds a queue, the subscribed consumer reads it too."""
    topic = new_topic(admin, 1)
    config = rayq.ClientConfig(route_refresh_interval_ms=1)
    with started(unique("g"), topic, consume_from=FIRST, config=config) as consumer:
        assert consumer.poll(timeout=0.2) == []
        admin.update_topic(topic, queues=2)
        put(topic, 1, [b"in-new-queue"])
        got = drain(consumer, 1)
        assert consumer.assignment() == [MessageQueue(topic, BROKER, q) for q in range(2)]
    assert [(m.queue_id, m.body) for m in got] == [(1, b"in-new-queue")]


def test_a_deleted_topic_is_logged_not_raised_by_poll(
    admin: Admin, caplog: pytest.LogCaptureFixture
) -> None:
    """Pull failures (here: the topic went away) are logged and retried; poll returns []."""
    topic = new_topic(admin, 1)
    with started(unique("g"), topic) as consumer:
        admin.delete_topic(topic)
        with caplog.at_level("WARNING", logger="rayq.consumer.pull"):
            deadline = time.monotonic() + 20  # the failed pull's answer may take a while
            while "TopicNotFoundError" not in caplog.text and time.monotonic() < deadline:
                assert consumer.poll(timeout=0.5) == []
    assert "TopicNotFoundError" in caplog.text
