"""The coordinator's rebalance plans, broker queue locks, process queues and listener
results (no Ray)."""

from __future__ import annotations

import pytest

from rayq.actors.protocol import MessageModel, MessageQueue
from rayq.actors.server.allocation import AllocateStrategy
from rayq.actors.server.queue_locks import QueueLocks
from rayq.actors.server.rebalance import MemberSpec, Rebalancer
from rayq.consumer.listener import ConsumeOrderlyStatus, ConsumeStatus, ListenerRunner
from rayq.consumer.process_queue import ProcessQueue
from rayq.store.errors import ConfigError
from rayq.testing import pulled

QUEUES = {
    "t": [MessageQueue("t", "b", q) for q in range(10)],
    "%RETRY%g": [MessageQueue("%RETRY%g", "b", 0)],
}
SPEC = MemberSpec(subscriptions=(("%RETRY%g", "*"), ("t", "*")))


def queues_of(topic: str) -> list[MessageQueue]:
    return QUEUES.get(topic, [])


def sizes(plan_assign: dict[str, list[MessageQueue]], topic: str = "t") -> list[int]:
    return [len([q for q in qs if q.topic == topic]) for _, qs in sorted(plan_assign.items())]


@pytest.mark.parametrize(
    ("strategy", "expected"),
    [
        (AllocateStrategy.AVERAGELY, [[0, 1, 2], [3, 4, 5], [6, 7], [8, 9]]),
        (AllocateStrategy.AVERAGELY_BY_CIRCLE, [[0, 4, 8], [1, 5, 9], [2, 6], [3, 7]]),
    ],
)
def test_ten_queues_over_four_consumers_match_rocketmq(
    strategy: AllocateStrategy, expected: list[list[int]]
) -> None:
    r = Rebalancer()
    spec = MemberSpec(subscriptions=SPEC.subscriptions, strategy=strategy)
    for m in "abcd":
        r.join("g", m, spec)
    plan = r.plan("g", queues_of, now_ms=1)
    assert plan is not None
    got = [[q.queue_id for q in plan.assign[m] if q.topic == "t"] for m in "abcd"]
    assert got == expected
    assert sum(len([q for q in plan.assign[m] if q.topic != "t"]) for m in "abcd") == 1


def test_a_queue_moves_only_after_its_owner_released_it() -> None:
    r = Rebalancer()
    r.join("g", "a", SPEC)
    first = r.plan("g", queues_of, now_ms=10)
    assert first is not None and sizes(first.assign) == [10]
    r.assigned("g", "a", first.assign["a"])
    r.join("g", "b", SPEC)
    second = r.plan("g", queues_of, now_ms=5)
    assert second is not None
    assert second.generation > first.generation  # grows even if the clock went back
    lost = second.revoke["a"]
    assert sorted(q.queue_id for q in lost if q.topic == "t") == [5, 6, 7, 8, 9]
    assert r.holder("g", lost[0], besides="b") == "a"
    r.released("g", "a", lost)
    assert r.holder("g", lost[0], besides="b") is None


def test_a_member_that_leaves_frees_its_queues_and_the_last_one_ends_the_group() -> None:
    r = Rebalancer()
    r.join("g", "a", SPEC)
    r.join("g", "b", SPEC)
    assert r.leave("g", "b")
    assert not r.leave("g", "b")
    plan = r.plan("g", queues_of, now_ms=1)
    assert plan is not None and sizes(plan.assign) == [10]
    assert r.leave("g", "a")
    assert r.groups() == []
    assert r.plan("g", queues_of, now_ms=2) is None


def test_members_subscribing_differently_are_refused() -> None:
    r = Rebalancer()
    r.join("g", "a", SPEC)
    other = MemberSpec(subscriptions=(("u", "*"),))
    with pytest.raises(ConfigError, match="must subscribe alike"):
        r.join("g", "b", other)
    with pytest.raises(ConfigError, match="must subscribe alike"):
        r.join(
            "g", "b", MemberSpec(subscriptions=SPEC.subscriptions, model=MessageModel.BROADCASTING)
        )
    assert r.members("g") == ["a"]


def test_broadcasting_gives_everyone_everything_and_config_what_each_asked() -> None:
    r = Rebalancer()
    spec = MemberSpec(subscriptions=(("t", "*"),), model=MessageModel.BROADCASTING)
    r.join("g", "a", spec)
    r.join("g", "b", spec)
    plan = r.plan("g", queues_of, now_ms=1)
    assert plan is not None and sizes(plan.assign) == [10, 10]
    mine = (QUEUES["t"][0], QUEUES["t"][3])
    c = Rebalancer()
    c.join(
        "g",
        "a",
        MemberSpec(subscriptions=(("t", "*"),), strategy=AllocateStrategy.CONFIG, allocation=mine),
    )
    taken = MemberSpec(
        subscriptions=(("t", "*"),), strategy=AllocateStrategy.CONFIG, allocation=mine[:1]
    )
    with pytest.raises(ConfigError, match="already has"):
        c.join("g", "b", taken)
    plan = c.plan("g", queues_of, now_ms=1)
    assert plan is not None and plan.assign["a"] == list(mine)


def test_queue_locks_are_leases() -> None:
    locks = QueueLocks(lease_ms=100)
    assert locks.lock("g", "a", [("t", 0), ("t", 1)], now_ms=0) == [("t", 0), ("t", 1)]
    assert locks.lock("g", "b", [("t", 0)], now_ms=50) == []
    assert locks.lock("g2", "b", [("t", 0)], now_ms=50) == [("t", 0)]  # other group
    assert locks.lock("g", "a", [("t", 0)], now_ms=90) == [("t", 0)]  # renewed
    assert locks.lock("g", "b", [("t", 0)], now_ms=150) == []
    assert locks.lock("g", "b", [("t", 1)], now_ms=150) == [("t", 1)]  # expired
    assert locks.unlock("g", "a", [("t", 0), ("t", 1)]) == 1
    assert locks.holder("g", "t", 0, now_ms=150) is None
    assert locks.holder("g", "t", 1, now_ms=150) == "b"


def test_process_queue_commits_up_to_the_smallest_offset_in_flight() -> None:
    pq = ProcessQueue()
    pq.next_pull = 5
    assert pq.commit_offset() == 5
    pq.put([pulled(5), pulled(6), pulled(7)], next_pull=8)
    assert (pq.count, pq.span, pq.commit_offset()) == (3, 2, 5)
    pq.remove([6, 7])
    assert pq.commit_offset() == 5
    pq.remove([5])
    assert (pq.count, pq.bytes, pq.commit_offset()) == (0, 0, 8)


def test_process_queue_orderly_take_commit_and_rollback() -> None:
    pq = ProcessQueue()
    pq.put([pulled(o) for o in range(4)], next_pull=4)
    batch = pq.take(2)
    assert [m.queue_offset for m in batch] == [0, 1]
    assert pq.take(2) == []  # one batch at a time
    pq.rollback_taken()
    assert [m.queue_offset for m in pq.take(3)] == [0, 1, 2]
    assert pq.commit_taken() == 3
    assert [m.queue_offset for m in pq.take(3)] == [3]
    assert pq.commit_taken() == 4


def test_listener_results_exceptions_and_ack_index() -> None:
    msgs = [pulled(o) for o in range(4)]
    ok = ListenerRunner(lambda ms: ConsumeStatus.CONSUME_SUCCESS, False, 2)
    assert ok.run_concurrently(msgs) == []
    later = ListenerRunner(lambda ms: ConsumeStatus.RECONSUME_LATER, False, 2)
    assert later.run_concurrently(msgs) == msgs
    acked = ListenerRunner(lambda ms: (ConsumeStatus.CONSUME_SUCCESS, 0), False, 2)
    assert [m.queue_offset for m in acked.run_concurrently(msgs)] == [1, 3]

    def boom(ms: list) -> None:
        raise RuntimeError("listener bug")

    assert ListenerRunner(boom, False, 1).run_concurrently(msgs) == msgs
    assert ListenerRunner(lambda ms: None, False, 4).run_concurrently(msgs) == msgs
    assert ListenerRunner(lambda ms: ConsumeOrderlyStatus.SUCCESS, True, 4).run_orderly(msgs)
    assert not ListenerRunner(boom, True, 4).run_orderly(msgs)
    suspend = ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
    assert not ListenerRunner(lambda ms: suspend, True, 4).run_orderly(msgs)
