"""Queue allocation strategies (pure functions, no Ray)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rayq.actors.server.allocation import (
    allocate_averagely,
    allocate_averagely_by_circle,
    allocate_by_config,
    allocate_consistent_hash,
)
from rayq.store.errors import ConfigError

QUEUES = list(range(10))
CONSUMERS = ["a", "b", "c", "d"]


def test_averagely_matches_rocketmq_for_10_queues_and_4_consumers() -> None:
    """10 queues over 4 consumers: contiguous blocks of 3, 3, 2, 2."""
    assert allocate_averagely(QUEUES, CONSUMERS) == {
        "a": [0, 1, 2],
        "b": [3, 4, 5],
        "c": [6, 7],
        "d": [8, 9],
    }


def test_by_circle_deals_queues_in_turn() -> None:
    """10 queues over 4 consumers: dealt round robin, sizes 3, 3, 2, 2."""
    assert allocate_averagely_by_circle(QUEUES, CONSUMERS) == {
        "a": [0, 4, 8],
        "b": [1, 5, 9],
        "c": [2, 6],
        "d": [3, 7],
    }


def test_more_consumers_than_queues_leaves_some_idle() -> None:
    """Consumers beyond the number of queues get nothing."""
    got = allocate_averagely([0, 1], ["a", "b", "c"])
    assert got == {"a": [0], "b": [1], "c": []}


def test_input_order_does_not_matter() -> None:
    """Every party computes the same allocation from the same membership."""
    assert allocate_averagely(QUEUES[::-1], CONSUMERS[::-1]) == allocate_averagely(
        QUEUES, CONSUMERS
    )


@given(
    st.integers(0, 64),
    st.lists(st.text("abcdef", min_size=1, max_size=4), unique=True, min_size=1, max_size=12),
)
def test_every_strategy_gives_each_queue_exactly_one_owner(n: int, consumers: list[str]) -> None:
    """A partition: no queue lost, none owned twice, only group members own queues."""
    queues = list(range(n))
    for fn in (allocate_averagely, allocate_averagely_by_circle, allocate_consistent_hash):
        got = fn(queues, consumers)
        assert set(got) == set(consumers)
        assert sorted(q for qs in got.values() for q in qs) == queues


def test_consistent_hash_moves_only_some_queues_when_a_consumer_joins() -> None:
    """Adding a fifth consumer leaves most queues where they were."""
    queues = list(range(64))
    before = allocate_consistent_hash(queues, CONSUMERS)
    after = allocate_consistent_hash(queues, [*CONSUMERS, "e"])
    owner_before = {q: c for c, qs in before.items() for q in qs}
    owner_after = {q: c for c, qs in after.items() for q in qs}
    moved = [q for q in queues if owner_before[q] != owner_after[q]]
    assert all(owner_after[q] == "e" for q in moved)
    assert len(moved) < len(queues) // 2


def test_by_config_rejects_unknown_and_doubly_owned_queues() -> None:
    """An explicit allocation is checked against the topic's queues."""
    assert allocate_by_config(QUEUES, ["a", "b"], {"a": [0, 1], "b": [2]}) == {
        "a": [0, 1],
        "b": [2],
    }
    with pytest.raises(ConfigError, match="does not exist"):
        allocate_by_config(QUEUES, ["a"], {"a": [99]})
    with pytest.raises(ConfigError, match="gives queue 1 to a and b"):
        allocate_by_config(QUEUES, ["a", "b"], {"a": [1], "b": [1]})
