"""Admin against a real one-broker deployment: topics, stats, lookups, consumer progress."""

from __future__ import annotations

import time
import uuid
import zlib

import pytest

import rayq
import rayq.cluster
from rayq.actors.protocol import CommitOffsetsRequest, MessageQueue, PullRequest
from rayq.admin.admin import Admin
from rayq.consumer.pull import ConsumeFromWhere, PullConsumer
from rayq.store import InnerMessage, encode_batch
from rayq.store.message import COMPRESSED_FLAG
from rayq.transport.context import ClientContext

pytestmark = pytest.mark.integration

BROKER = "broker-a"
NAMESPACE = "rayq-test-admin"


@pytest.fixture(scope="module")
def admin(cluster: rayq.cluster.Cluster) -> Admin:
    return Admin(namespace=cluster.namespace)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def put(
    topic: str, queue_id: int, bodies: list[bytes], *, keys: str = "", compressed: bool = False
) -> list[str]:
    """Append one batch straight to the broker; returns the unique message ids."""
    ids = [uuid.uuid4().hex.upper() for _ in bodies]
    msgs = [
        InnerMessage(
            topic=topic,
            queue_id=queue_id,
            keys=keys,
            uniq_key=i,
            body=zlib.compress(b) if compressed else b,
            sys_flag=COMPRESSED_FLAG if compressed else 0,
        )
        for b, i in zip(bodies, ids, strict=True)
    ]
    batch = encode_batch(msgs, max_body_bytes=4 << 20, max_properties_bytes=32767)
    ClientContext().broker(BROKER).put(batch).result()
    return ids


def last_store_ms(admin: Admin, topic: str, queue_id: int) -> int:
    return next(
        s.last_store_timestamp for s in admin.topic_stats(topic) if s.queue.queue_id == queue_id
    )


def test_create_list_stats_update_delete_topic(admin: Admin) -> None:
    """A created topic is listed with empty queues; stats follow appends; delete removes it."""
    topic = unique("adm")
    admin.create_topic(topic, queues=3)
    assert topic in admin.topics()
    stats = admin.topic_stats(topic)
    assert [s.queue for s in stats] == [MessageQueue(topic, BROKER, q) for q in range(3)]
    assert all(s.min_offset == 0 and s.max_offset == 0 for s in stats)

    put(topic, 1, [b"a", b"b", b"c", b"d"])
    stats = admin.topic_stats(topic)
    assert [s.max_offset for s in stats] == [0, 4, 0]
    assert stats[1].last_store_timestamp > 0
    assert stats[0].last_store_timestamp == 0

    admin.update_topic(topic, queues=5)
    assert len(admin.topic_stats(topic)) == 5
    assert admin.topic_stats(topic)[1].max_offset == 4

    admin.delete_topic(topic)
    assert topic not in admin.topics()
    with pytest.raises(rayq.TopicNotFoundError):
        admin.topic_stats(topic)
    with pytest.raises(rayq.TopicNotFoundError):
        admin.delete_topic(topic)


def test_update_topic_permission_makes_it_read_only(admin: Admin) -> None:
    """perm=4 (read only) refuses appends; the queue count is kept."""
    topic = unique("adm-perm")
    admin.create_topic(topic, queues=2)
    admin.update_topic(topic, perm=4)
    with pytest.raises(rayq.PermissionDeniedError):
        put(topic, 0, [b"x"])
    assert len(admin.topic_stats(topic)) == 2
    admin.update_topic(topic, perm=6)
    put(topic, 0, [b"x"])


def test_query_message_by_key_newest_first_and_view_by_id(admin: Admin) -> None:
    """Messages are found by key (newest first, capped by max_num) and by id, bodies plain."""
    topic = unique("adm-q")
    admin.create_topic(topic, queues=2)
    put(topic, 0, [b"other"], keys="k-other")
    (first,) = put(topic, 0, [b"first"], keys="order-1")
    time.sleep(0.01)
    (second,) = put(topic, 1, [b"second" * 2000], keys="order-1 extra", compressed=True)

    found = admin.query_message(topic, "order-1")
    assert [m.msg_id for m in found] == [second, first]
    assert found[0].body == b"second" * 2000
    assert found[0].broker_name == BROKER
    assert [m.msg_id for m in admin.query_message(topic, "order-1", max_num=1)] == [second]
    assert admin.query_message(topic, "order-1", end_ms=found[1].store_timestamp - 1) == []
    assert admin.query_message(topic, "no-such-key") == []

    viewed = admin.view_message(second)
    assert (viewed.body, viewed.queue_id, viewed.topic) == (b"second" * 2000, 1, topic)
    assert admin.view_message(found[1].offset_msg_id).msg_id == first
    with pytest.raises(rayq.InvalidMessageError, match="no message"):
        admin.view_message("0123456789ABCDEF0123456789ABCDEF")


def test_consumer_progress_lag_before_and_after_commit(admin: Admin) -> None:
    """Progress lists the group's committed queues; lag drops to 0 once it commits the end."""
    topic, group = unique("adm-lag"), unique("g")
    admin.create_topic(topic, queues=2)
    put(topic, 0, [b"m"] * 3)
    put(topic, 1, [b"m"] * 2)
    assert admin.consumer_progress(group) == []

    with PullConsumer(group, consume_from=ConsumeFromWhere.FIRST_OFFSET) as consumer:
        consumer.subscribe(topic)
        consumer.start()
        consumer.commit()
        progress = admin.consumer_progress(group)
        assert [(p.queue.queue_id, p.committed_offset, p.max_offset, p.lag) for p in progress] == [
            (0, 0, 3, 3),
            (1, 0, 2, 2),
        ]
        got = []
        deadline = time.monotonic() + 20
        while len(got) < 5 and time.monotonic() < deadline:
            got += consumer.poll(timeout=1.0)
        consumer.commit()
    progress = admin.consumer_progress(group)
    assert [(p.committed_offset, p.max_offset, p.lag) for p in progress] == [(3, 3, 0), (2, 2, 0)]


def test_reset_offset_to_timestamp_rewinds_the_group(admin: Admin) -> None:
    """After a reset to a time between two batches, the group reads only the second one."""
    topic, group = unique("adm-reset"), unique("g")
    admin.create_topic(topic, queues=1)
    put(topic, 0, [b"old-1", b"old-2"])
    ts = last_store_ms(admin, topic, 0) + 1
    time.sleep(0.01)
    put(topic, 0, [b"new-1", b"new-2", b"new-3"])

    offsets = admin.reset_offset(group, topic, ts)
    assert offsets == {MessageQueue(topic, BROKER, 0): 2}
    assert [p.committed_offset for p in admin.consumer_progress(group)] == [2]
    assert admin.reset_offset(group, topic, 0) == {MessageQueue(topic, BROKER, 0): 0}
    admin.reset_offset(group, topic, ts)

    with PullConsumer(group) as consumer:
        consumer.subscribe(topic)
        consumer.start()
        got = []
        deadline = time.monotonic() + 20
        while len(got) < 3 and time.monotonic() < deadline:
            got += consumer.poll(timeout=1.0)
    assert [m.body for m in got] == [b"new-1", b"new-2", b"new-3"]


@pytest.mark.parametrize(
    ("bad_call", "error"),
    [
        (lambda a: a.create_topic("bad topic"), rayq.InvalidTopicError),
        (lambda a: a.create_topic("../etc"), rayq.InvalidTopicError),
        (lambda a: a.create_topic("ok-topic", queues=0), rayq.ConfigError),
        (lambda a: a.create_topic("ok-topic", queues=1025), rayq.ConfigError),
        (lambda a: a.create_topic("ok-topic", queues="4"), rayq.ConfigError),
        (lambda a: a.create_topic("ok-topic", perm=9), rayq.ConfigError),
        (lambda a: a.update_topic("no-such-topic", queues=2), rayq.TopicNotFoundError),
        (lambda a: a.topic_stats("no-such-topic"), rayq.TopicNotFoundError),
        (lambda a: a.consumer_progress("bad group!"), rayq.InvalidGroupError),
        (lambda a: a.query_message("no-such-topic", "k"), rayq.TopicNotFoundError),
        (lambda a: a.query_message("t", ""), rayq.InvalidMessageError),
        (lambda a: a.query_message("t", "k", max_num=0), rayq.InvalidOffsetError),
        (lambda a: a.view_message(""), rayq.InvalidMessageError),
        (lambda a: a.reset_offset("g", "t", -1), rayq.InvalidOffsetError),
    ],
)
def test_bad_input_raises_rayq_errors_and_the_cluster_keeps_working(
    admin: Admin, bad_call: object, error: type[rayq.RayqError]
) -> None:
    """Each bad call raises its ClientError; the deployment still answers afterwards."""
    with pytest.raises(error):
        bad_call(admin)  # type: ignore[operator]
    assert isinstance(admin.topics(), list)


def test_admin_options_are_checked(cluster: rayq.cluster.Cluster) -> None:
    """A wrong config type or an empty namespace is a ConfigError; an unknown namespace
    means no deployment there."""
    with pytest.raises(rayq.ConfigError):
        Admin(config={"namespace": "x"})  # type: ignore[arg-type]
    with pytest.raises(rayq.ConfigError):
        Admin(namespace="")
    with pytest.raises(rayq.BrokerUnavailableError):
        Admin(namespace="no-rayq-here")


def test_consumer_progress_covers_every_topic_of_the_group(admin: Admin) -> None:
    """consumer_progress covers every topic the group committed on, sorted by queue."""
    group = unique("g")
    topics = sorted(unique("adm-multi") for _ in range(3))
    for topic in topics:
        admin.create_topic(topic, queues=1)
        put(topic, 0, [b"m"] * 2)
    with PullConsumer(group, consume_from=ConsumeFromWhere.FIRST_OFFSET) as consumer:
        consumer.assign([MessageQueue(t, BROKER, 0) for t in topics])
        consumer.start()
        consumer.commit()
    progress = admin.consumer_progress(group)
    assert [(p.queue.topic, p.lag) for p in progress] == [(t, 2) for t in topics]


def pull_once(group: str, topic: str) -> object:
    req = PullRequest(group=group, topic=topic, queue_id=0, queue_offset=0, suspend_ms=0)
    return ClientContext().broker(BROKER).pull(req).result()


def test_subscription_group_create_update_delete(admin: Admin) -> None:
    """A group's config is created, read, changed (consume_enable=False stops its pulls
    with PermissionDeniedError), and deleted with its offsets."""
    topic, group = unique("adm-grp"), unique("g")
    admin.create_topic(topic, queues=1)
    put(topic, 0, [b"m"] * 2)
    cfg = admin.create_group(group, retry_max_times=3)
    assert group in admin.groups()
    assert admin.group_config(group) == cfg
    assert (cfg.retry_max_times, cfg.consume_enable) == (3, True)
    assert pull_once(group, topic).count == 2

    changed = admin.update_group(group, consume_enable=False)
    assert (changed.retry_max_times, changed.consume_enable) == (3, False)
    assert admin.group_config(group).consume_enable is False
    with pytest.raises(rayq.PermissionDeniedError, match="consume_enable"):
        pull_once(group, topic)
    admin.update_group(group, consume_enable=True)
    assert pull_once(group, topic).count == 2

    ClientContext().broker(BROKER).commit_offsets(
        CommitOffsetsRequest(group=group, topic=topic, offsets={0: 2})
    ).result(30)
    assert [p.committed_offset for p in admin.consumer_progress(group)] == [2]
    admin.delete_group(group, clean_offsets=True)
    assert group not in admin.groups()
    assert admin.consumer_progress(group) == []
    with pytest.raises(rayq.GroupNotFoundError):
        admin.group_config(group)
    with pytest.raises(rayq.GroupNotFoundError):
        admin.delete_group(group)


def test_a_group_is_auto_created_on_its_first_pull(admin: Admin) -> None:
    topic, group = unique("adm-auto"), unique("g")
    admin.create_topic(topic, queues=1)
    assert group not in admin.groups()
    pull_once(group, topic)
    assert group in admin.groups()
    assert admin.group_config(group).retry_max_times == 16


@pytest.mark.parametrize(
    ("bad_call", "error"),
    [
        (lambda a: a.create_group("bad group!"), rayq.InvalidGroupError),
        (lambda a: a.create_group("g-ok", retry_max_times=-1), rayq.ConfigError),
        (lambda a: a.create_group("g-ok", consume_enable="yes"), rayq.ConfigError),
        (lambda a: a.update_group("no-such-group", consume_enable=False), rayq.GroupNotFoundError),
        (lambda a: a.delete_group("no-such-group"), rayq.GroupNotFoundError),
    ],
)
def test_bad_group_input_raises_rayq_errors(
    admin: Admin, bad_call: object, error: type[rayq.RayqError]
) -> None:
    with pytest.raises(error):
        bad_call(admin)  # type: ignore[operator]
    assert "g-ok" not in admin.groups()


def test_update_group_rejects_unknown_settings(admin: Admin) -> None:
    group = unique("g")
    admin.create_group(group)
    with pytest.raises(rayq.ConfigError, match="unknown subscription group settings"):
        admin.update_group(group, consume_enabled=False)
    assert admin.group_config(group).consume_enable is True
