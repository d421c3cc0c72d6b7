"""The ConsumerPool's scaling decisions (rayq/consumer/pool_policy.py), without Ray."""

from __future__ import annotations

import pytest

from rayq.consumer.pool_policy import ScalePolicy, WorkerView, decide
from rayq.store.errors import ConfigError

POLICY = ScalePolicy(min_workers=1, max_workers=6, concurrency=2, backlog_per_slot=5, idle_s=10)


def busy(name: str, in_flight: int = 2, age: float = 1.0) -> WorkerView:
    return WorkerView(name, True, in_flight, age, 0.0)


def test_a_growing_backlog_adds_workers_up_to_what_it_needs_and_the_bounds() -> None:
    # 1 worker holds 2 slots x 5 = 10; 35 waiting asks for 4 workers
    d = decide(POLICY, [busy("a")], backlog=35, last_backlog=20)
    assert d.add == 3 and not d.stop and "backlog" in d.why
    # never past max_workers, at most max_step a round
    big = decide(POLICY, [busy("a")], backlog=10_000, last_backlog=0)
    assert big.add == 4
    full = decide(POLICY, [busy(n) for n in "abcdef"], backlog=10_000, last_backlog=0)
    assert full.add == 0


def test_a_shrinking_backlog_within_reach_adds_nobody() -> None:
    assert decide(POLICY, [busy("a")], backlog=8, last_backlog=9).add == 0
    assert decide(POLICY, [busy("a")], backlog=30, last_backlog=40).add == 0  # draining


def test_slow_handlers_ask_for_more_workers_while_work_waits() -> None:
    slow = busy("a", age=POLICY.max_in_flight_age_s + 1)
    d = decide(POLICY, [slow], backlog=3, last_backlog=3)
    assert d.add == 1 and "in-flight age" in d.why
    assert decide(POLICY, [slow], backlog=0, last_backlog=3).add == 0  # nothing waits


def test_idle_workers_go_one_a_round_down_to_min_workers() -> None:
    idle = [WorkerView("a", True, 0, 0.0, 30.0), WorkerView("b", True, 0, 0.0, 50.0)]
    d = decide(POLICY, idle, backlog=0, last_backlog=0)
    assert d.stop == ["b"] and d.add == 0
    assert decide(POLICY, idle[:1], backlog=0, last_backlog=0).stop == []  # min_workers
    recent = [WorkerView("a", True, 0, 0.0, 30.0), WorkerView("b", True, 0, 0.0, 5.0)]
    assert decide(POLICY, recent[1:] * 2, backlog=0, last_backlog=0).stop == []
    assert decide(POLICY, idle, backlog=1, last_backlog=0).stop == []  # work waits


def test_dead_workers_are_replaced_and_min_workers_kept() -> None:
    d = decide(POLICY, [busy("a"), WorkerView("b", False)], backlog=0, last_backlog=0)
    assert d.add == 1 and "dead" in d.why
    assert decide(ScalePolicy(min_workers=3, max_workers=4), [], 0, None).add == 3


@pytest.mark.parametrize(
    "fields",
    [
        {"min_workers": 5, "max_workers": 2},
        {"max_workers": 0},
        {"concurrency": 0},
        {"interval_s": 0},
        {"idle_s": -1},
        {"min_workers": 1.5},
    ],
)
def test_bad_policies_are_refused(fields: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        ScalePolicy(**fields)  # type: ignore[arg-type]
