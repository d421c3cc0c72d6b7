"""ranges.pack: how a Spark read deals offset ranges to tasks."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from rayq.connectors.ranges import MIN_MESSAGES_PER_TASK, OffsetRange, pack


def r(queue_id: int, start: int, end: int) -> OffsetRange:
    return OffsetRange("b", queue_id, start, end)


def test_one_task_per_slot_when_the_cap_allows() -> None:
    tasks = pack([r(q, 0, 75_000) for q in range(4)], max_per_task=262_144, slots=2)
    assert [sum(x.count for x in t) for t in tasks] == [150_000, 150_000]
    # consecutive pieces: the first task has queues 0 and 1, the second 2 and 3
    assert tasks[0] == [r(0, 0, 75_000), r(1, 0, 75_000)]
    assert tasks[1] == [r(2, 0, 75_000), r(3, 0, 75_000)]


def test_the_cap_makes_more_tasks_of_equal_size() -> None:
    tasks = pack([r(0, 100, 400)], max_per_task=40, slots=2)
    assert len(tasks) == 8  # ceil(300 / 40)
    sizes = [sum(x.count for x in t) for t in tasks]
    assert max(sizes) <= 40 and max(sizes) - min(sizes) <= 1
    assert tasks[0][0].start == 100 and tasks[-1][-1].end == 400


def test_a_small_read_is_one_task() -> None:
    assert len(pack([r(q, 0, 500) for q in range(4)], max_per_task=262_144, slots=8)) == 1
    assert len(pack([r(0, 0, 2 * MIN_MESSAGES_PER_TASK)], 262_144, slots=8)) == 2


def test_empty_ranges_make_no_task() -> None:
    assert pack([r(0, 5, 5), r(1, 7, 7)], 100, 2) == []
    assert pack([], 100, 2) == []
    assert all(x.count for t in pack([r(0, 0, 10), r(1, 3, 3), r(2, 0, 10)], 5, 2) for x in t)


@given(
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 20_000)), max_size=12),
    st.integers(1, 50_000),
    st.integers(1, 64),
)
def test_every_message_once_in_order_and_no_task_over_the_cap(
    spans: list[tuple[int, int]], cap: int, slots: int
) -> None:
    ranges = [r(q, start, start + n) for q, (start, n) in enumerate(spans)]
    tasks = pack(ranges, cap, slots)
    flat = [(x.queue_id, o) for t in tasks for x in t for o in range(x.start, x.end)]
    assert flat == [(x.queue_id, o) for x in ranges for o in range(x.start, x.end)]
    assert all(t and sum(x.count for x in t) <= cap for t in tasks)
    total = sum(n for _, n in spans)
    if total:
        assert len(tasks) == -(-total // min(cap, max(MIN_MESSAGES_PER_TASK, -(-total // slots))))
