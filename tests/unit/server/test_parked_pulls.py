"""The broker's table of parked pulls (actors/server/long_polling.py), no Ray."""

from __future__ import annotations

import msgspec

from rayq.actors.protocol import (
    PullItem,
    PullManyRequest,
    PullManyResponse,
    PullRequest,
    PullResponse,
    PullStatus,
    follow_up,
    follow_up_token,
)
from rayq.actors.server.long_polling import GRACE_S, ParkedPulls
from rayq.store.errors import InvalidOffsetError


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_an_append_takes_every_pull_parked_on_its_queue_once() -> None:
    table = ParkedPulls(Clock())
    table.park("a", "req-a", (("t", 0),), hold_s=5)
    table.park("b", "req-b", (("t", 0), ("t", 1)), hold_s=5)
    table.park("c", "req-c", (("u", 0),), hold_s=5)
    assert table.watched(("t", 1)) and not table.watched(("t", 2))
    assert sorted(table.take([("t", 0)])) == [("a", "req-a"), ("b", "req-b")]
    # b was parked on two queues: gone from both
    assert not table.watched(("t", 1)) and table.take([("t", 1)]) == []
    assert table.take([("u", 0), ("u", 0)]) == [("c", "req-c")]
    assert len(table) == 0


def test_a_dropped_pull_is_not_answered_and_parking_a_token_again_replaces_it() -> None:
    table = ParkedPulls(Clock())
    table.park("a", "first", (("t", 0),), hold_s=5)
    table.park("a", "second", (("t", 1),), hold_s=5)
    assert table.take([("t", 0)]) == []
    assert table.take([("t", 1)]) == [("a", "second")]
    table.park("b", "req", (("t", 0),), hold_s=5)
    table.drop("b")
    assert table.take([("t", 0)]) == [] and len(table) == 0


def test_a_pull_past_its_hold_time_is_neither_taken_nor_kept() -> None:
    clock = Clock()
    table = ParkedPulls(clock)
    table.park("old", "req", (("t", 0),), hold_s=1)
    table.park("new", "req", (("t", 1),), hold_s=60)
    clock.now += 1 + GRACE_S + 0.1
    assert table.take([("t", 0)]) == []
    assert table.sweep() == 0  # "old" went with the take
    table.park("old2", "req", (("t", 2),), hold_s=1)
    clock.now += 1 + GRACE_S + 0.1
    assert table.sweep() == 1
    assert not table.watched(("t", 2)) and len(table) == 1


def test_the_follow_up_of_a_pull_is_the_same_pull_at_the_next_offsets() -> None:
    one = PullRequest(group="g", topic="t", queue_id=1, queue_offset=3, client_id="c")
    answer = PullResponse(status=PullStatus.FOUND, next_offset=9, min_offset=0, max_offset=9)
    assert follow_up(one, answer) == msgspec.structs.replace(one, queue_offset=9)
    many = PullManyRequest(group="g", items=[PullItem("t", 0, 1), PullItem("t", 1, 2)])
    nothing = PullResponse(status=PullStatus.NO_NEW_MSG, next_offset=2, min_offset=0, max_offset=2)
    got = follow_up(many, PullManyResponse(results=[answer, nothing]))
    assert [i.queue_offset for i in got.items] == [9, 2] and got.group == "g"
    assert follow_up(many, PullManyResponse(results=[answer, InvalidOffsetError("x")])) is None
    assert follow_up(one, InvalidOffsetError("x")) is None
    assert follow_up_token("ab-3") == "ab-3#1"
    assert follow_up_token(follow_up_token("ab-3")) == "ab-3#2"
