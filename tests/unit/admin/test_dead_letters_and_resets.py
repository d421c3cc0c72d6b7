"""Admin's dead letters (list, resend) and offset resets, against the fake transport."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import rayq
from rayq.store.names import dlq_topic, retry_topic
from rayq.testing import FakeCluster, FakeTransport, fill_topic, poll_until


@pytest.fixture()
def cluster(tmp_path: Path) -> Iterator[FakeCluster]:
    with FakeCluster(tmp_path) as c:
        yield c


@pytest.fixture()
def admin(cluster: FakeCluster) -> rayq.Admin:
    return rayq.Admin(transport=FakeTransport(cluster))


def consumer(cluster: FakeCluster, group: str, *topics: str) -> rayq.PullConsumer:
    c = rayq.PullConsumer(
        group,
        consume_from=rayq.ConsumeFromWhere.FIRST_OFFSET,
        auto_commit=False,
        transport=FakeTransport(cluster),
    )
    for t in topics:
        c.subscribe(t)
    c.start()
    return c


def kill(cluster: FakeCluster, group: str, topic: str, n: int) -> list[rayq.MessageExt]:
    """``n`` messages of ``topic`` consumed by ``group`` and sent to its DLQ."""
    c = consumer(cluster, group, topic)
    try:
        got = poll_until(c, n)[:n]
        assert c.send_back(got, delay_level=-1) == [dlq_topic(group)] * n
        return got
    finally:
        c.shutdown()


def test_dead_letters_are_listed_oldest_first_and_resent_to_the_groups_retry_topic(
    cluster: FakeCluster, admin: rayq.Admin
) -> None:
    admin.create_topic("orders", queues=2)
    fill_topic(cluster, "orders", 6, body=b"o", batch=1)
    dead = kill(cluster, "g", "orders", 6)
    letters = admin.dead_letters("g")
    assert sorted(m.msg_id for m in letters) == sorted(m.msg_id for m in dead)
    assert [m.store_timestamp for m in letters] == sorted(m.store_timestamp for m in letters)
    assert all(m.topic == dlq_topic("g") for m in letters)
    assert len(admin.dead_letters("g", max_num=4)) == 4

    sent = admin.resend_dead_letter("g", letters[0].msg_id)
    assert sent.status is rayq.SendStatus.SEND_OK
    assert sent.queue.topic == retry_topic("g")
    assert sent.msg_id == letters[0].msg_id  # the message keeps its id
    again = consumer(cluster, "g", retry_topic("g"))
    try:
        (back,) = poll_until(again, 1)
    finally:
        again.shutdown()
    assert back.body == letters[0].body and back.reconsume_times == 0
    assert len(admin.dead_letters("g")) == 6  # the dead letter stays in the DLQ


def test_resend_of_what_is_no_dead_letter_is_refused_and_writes_nothing(
    cluster: FakeCluster, admin: rayq.Admin
) -> None:
    admin.create_topic("orders", queues=1)
    fill_topic(cluster, "orders", 2, batch=1)
    dead = kill(cluster, "g", "orders", 1)
    live = admin.get_message("orders", 0, 1)  # consumed by nobody: no dead letter
    for group, msg_id in [("g", live.msg_id), ("g", "nosuchid"), ("other", dead[0].msg_id)]:
        with pytest.raises(rayq.InvalidRequestError, match="not a dead letter"):
            admin.resend_dead_letter(group, msg_id)
    with pytest.raises(rayq.InvalidMessageError):
        admin.resend_dead_letter("g", "")
    assert retry_topic("g") not in admin.topics()


def test_dead_letters_of_an_unknown_group_is_an_error(admin: rayq.Admin) -> None:
    admin.create_topic("orders", queues=1)
    with pytest.raises(rayq.GroupNotFoundError):
        admin.dead_letters("nosuch")
    admin.create_group("quiet")
    assert admin.dead_letters("quiet") == []


def committed_now(admin: rayq.Admin, group: str) -> dict[int, int]:
    return {p.queue.queue_id: p.committed_offset for p in admin.consumer_progress(group)}


def test_reset_offsets_plans_every_target_and_changes_only_on_execute(
    cluster: FakeCluster, admin: rayq.Admin
) -> None:
    admin.create_topic("orders", queues=2)
    fill_topic(cluster, "orders", 20, batch=1)  # 10 per queue
    c = consumer(cluster, "g", "orders")
    try:
        poll_until(c, 20)
        c.commit()
    finally:
        c.shutdown()
    assert committed_now(admin, "g") == {0: 10, 1: 10}

    def targets(to: str, value: int | None = None, **kw: object) -> dict[int, int]:
        plan = admin.reset_offsets("g", "orders", to, value, **kw)  # type: ignore[arg-type]
        assert all(ch.current == 10 for ch in plan)
        return {ch.queue.queue_id: ch.target for ch in plan}

    assert targets("earliest") == {0: 0, 1: 0}
    assert targets("latest") == {0: 10, 1: 10}
    assert targets("offset", 4) == {0: 4, 1: 4}
    assert targets("offset", 99) == {0: 10, 1: 10}  # clamped to the end
    assert targets("shift", -3) == {0: 7, 1: 7}
    assert targets("shift", -30) == {0: 0, 1: 0}  # clamped to the start
    assert targets("time", 0) == {0: 0, 1: 0}
    assert targets("earliest", queue_id=1) == {1: 0}
    assert committed_now(admin, "g") == {0: 10, 1: 10}  # dry runs changed nothing

    plan = admin.reset_offsets("g", "orders", "shift", -4, queue_id=0, execute=True)
    assert [(ch.queue.queue_id, ch.current, ch.target) for ch in plan] == [(0, 10, 6)]
    assert committed_now(admin, "g") == {0: 6, 1: 10}


@pytest.mark.parametrize(
    ("args", "kw", "error", "match"),
    [
        (("nosuch", "orders", "earliest"), {}, rayq.GroupNotFoundError, "does not exist"),
        (("g", "nosuch", "earliest"), {}, rayq.TopicNotFoundError, "nosuch"),
        (("g", "orders", "earliest"), {"queue_id": 7}, rayq.InvalidOffsetError, "no queue 7"),
        (("g", "orders", "earliest"), {"broker": "b-x"}, rayq.InvalidOffsetError, "b-x"),
        (("g", "orders", "sideways"), {}, rayq.InvalidOffsetError, "to must be one of"),
        (("g", "orders", "offset"), {}, rayq.InvalidOffsetError, "needs an int"),
        (("g", "orders", "offset", "5"), {}, rayq.InvalidOffsetError, "needs an int"),
        (("g", "orders", "latest", 3), {}, rayq.InvalidOffsetError, "takes no value"),
        (("g", "orders", "time", -1), {}, rayq.InvalidOffsetError, "0.."),
    ],
)
def test_bad_offset_resets_are_refused_and_change_nothing(
    cluster: FakeCluster,
    admin: rayq.Admin,
    args: tuple[object, ...],
    kw: dict[str, object],
    error: type[Exception],
    match: str,
) -> None:
    admin.create_topic("orders", queues=2)
    fill_topic(cluster, "orders", 4, batch=1)
    c = consumer(cluster, "g", "orders")
    try:
        poll_until(c, 4)
        c.commit()
    finally:
        c.shutdown()
    before = committed_now(admin, "g")
    with pytest.raises(error, match=match):
        admin.reset_offsets(*args, execute=True, **kw)  # type: ignore[arg-type]
    assert committed_now(admin, "g") == before
