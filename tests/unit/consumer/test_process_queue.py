"""``ProcessQueue`` (rayq/consumer/process_queue.py): what flow control and commits read from it.

The commit offset and orderly take/commit/rollback are in server/test_rebalance.py; here:
the counts, bytes and span that the push consumer's flow control compares with
``pull_threshold_for_queue``, ``pull_threshold_size_for_queue_mib`` and
``consume_concurrently_max_span``.
"""

from __future__ import annotations

from rayq.consumer.process_queue import ProcessQueue
from rayq.testing import pulled


def test_a_message_pulled_twice_is_held_and_counted_once() -> None:
    pq = ProcessQueue()
    pq.put([pulled(0, b"abc"), pulled(1, b"de")], next_pull=2)
    pq.put([pulled(1, b"de"), pulled(2, b"f")], next_pull=3)
    assert (pq.count, pq.bytes, pq.next_pull) == (3, 6, 3)


def test_bytes_and_count_fall_as_messages_are_done() -> None:
    pq = ProcessQueue()
    pq.put([pulled(o, b"12345") for o in range(4)], next_pull=4)
    pq.remove([1, 3, 99])  # an offset not held is ignored
    assert (pq.count, pq.bytes) == (2, 10)


def test_span_is_held_from_the_oldest_message_in_flight() -> None:
    """A slow message at the bottom keeps the span (and the commit offset) where it is,
    however far the others get: that is what consume_concurrently_max_span limits."""
    pq = ProcessQueue()
    pq.put([pulled(o) for o in range(10, 20)], next_pull=20)
    pq.remove(range(11, 20))
    pq.put([pulled(o) for o in range(20, 30)], next_pull=30)
    assert (pq.span, pq.commit_offset()) == (19, 10)
    pq.remove([10])
    assert (pq.span, pq.commit_offset()) == (9, 20)
    assert ProcessQueue().span == 0


def test_expired_lists_messages_consumed_for_too_long() -> None:
    pq = ProcessQueue()
    pq.put([pulled(0), pulled(1), pulled(2)], next_pull=3)
    batch = pq.mark_started([pq.msgs[0], pq.msgs[1]])
    assert [m.queue_offset for m in pq.expired(-1.0)] == [0, 1]
    assert pq.expired(60.0) == []
    pq.remove([0])  # sent back by the consume-timeout scan: not listed again
    assert [m.queue_offset for m in pq.expired(-1.0)] == [1]
    pq.mark_finished(batch)
    assert pq.expired(-1.0) == []


def test_room_is_what_the_thresholds_leave_counting_an_answer_not_yet_put() -> None:
    """Flow control: how many more messages a pull may bring. The count and bytes
    thresholds count the records of an answer that came but is not decoded yet; bytes
    are estimated from the last pull's message size; the span limit keeps the next
    pull's last offset within max_span of the oldest message held."""
    pq = ProcessQueue()
    pq.next_pull = 0
    assert pq.room(100, 10_000) == 100  # nothing known about sizes yet
    pq.put([pulled(o, b"x" * 10) for o in range(30)], next_pull=30)
    assert pq.room(100, 10_000) == 70
    assert pq.room(100, 500) == 20  # (500 - 300 bytes held) // 10 bytes a message
    pq.arriving(records=50, size_bytes=100)
    assert pq.room(100, 10_000) == 20
    assert pq.room(100, 400) == 0  # 300 + 100 bytes: at the threshold
    pq.put([pulled(o, b"x" * 10) for o in range(30, 80)], next_pull=80)
    assert (pq.incoming, pq.room(100, 10_000)) == (0, 20)
    pq.remove(range(1, 80))
    assert pq.room(100, 10_000, max_span=100) == 21  # offset 0 held: up to offset 100
    pq.remove([0])
    assert pq.room(100, 10_000, max_span=100) == 100


def test_drop_marks_the_queue_and_wakes_waiters() -> None:
    pq = ProcessQueue()
    pq.changed.clear()
    pq.drop()
    assert pq.dropped and pq.changed.is_set()
