"""``ProcessQueue`` (rayq/process_queue.py): what flow control and commits read from it.

The commit offset and orderly take/commit/rollback are in test_rebalance.py; here:
the counts, bytes and span that the push consumer's flow control compares with
``pull_threshold_for_queue``, ``pull_threshold_size_for_queue_mib`` and
``consume_concurrently_max_span``.
"""

from __future__ import annotations

from rayq.process_queue import ProcessQueue
from rayq.store.message import MessageExt


def msg(offset: int, body: bytes = b"x") -> MessageExt:
    return MessageExt(topic="t", body=body, tags=None, keys=[], properties={}, msg_id="",
                      offset_msg_id="", queue_id=0, queue_offset=offset, commitlog_offset=0,
                      store_size=0, born_timestamp=0, store_timestamp=0, born_host="",
                      store_host="", reconsume_times=0)  # fmt: skip


def test_a_message_pulled_twice_is_held_and_counted_once() -> None:
    pq = ProcessQueue()
    pq.put([msg(0, b"abc"), msg(1, b"de")], next_pull=2)
    pq.put([msg(1, b"de"), msg(2, b"f")], next_pull=3)
    assert (pq.count, pq.bytes, pq.next_pull) == (3, 6, 3)


def test_bytes_and_count_fall_as_messages_are_done() -> None:
    pq = ProcessQueue()
    pq.put([msg(o, b"12345") for o in range(4)], next_pull=4)
    pq.remove([1, 3, 99])  # an offset not held is ignored
    assert (pq.count, pq.bytes) == (2, 10)


def test_span_is_held_from_the_oldest_message_in_flight() -> None:
    """A slow message at the bottom keeps the span (and the commit offset) where it is,
    however far the others get: that is what consume_concurrently_max_span limits."""
    pq = ProcessQueue()
    pq.put([msg(o) for o in range(10, 20)], next_pull=20)
    pq.remove(range(11, 20))
    pq.put([msg(o) for o in range(20, 30)], next_pull=30)
    assert (pq.span, pq.commit_offset()) == (19, 10)
    pq.remove([10])
    assert (pq.span, pq.commit_offset()) == (9, 20)
    assert ProcessQueue().span == 0


def test_expired_lists_messages_consumed_for_too_long() -> None:
    pq = ProcessQueue()
    pq.put([msg(0), msg(1)], next_pull=2)
    pq.mark_started([msg(0)])
    assert [m.queue_offset for m in pq.expired(-1.0)] == [0]
    assert pq.expired(60.0) == []
    pq.remove([0])
    assert pq.expired(-1.0) == []


def test_drop_marks_the_queue_and_wakes_waiters() -> None:
    pq = ProcessQueue()
    pq.changed.clear()
    pq.drop()
    assert pq.dropped and pq.changed.is_set()
