"""An idempotent producer's state: its producer id and sequence numbers per queue.

Each put of ``Producer(group, idempotent=True)`` carries a producer id and the
sequence numbers ``first..last`` of its messages on that queue (dedupe.py on the
broker), counted from 0 per producer id and queue without gaps. Puts to one queue go
one at a time, in sequence order (a later batch landing first would make the broker
take the earlier one for out of order). A batch that failed for good, perhaps stored
and perhaps not, leaves a gap or an unknown: the queue then goes on under a new
producer id (``<client id>#<8 hex>``) from sequence 0.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import msgspec

from rayq.actors.protocol import MessageQueue
from rayq.store import InnerMessage
from rayq.store.properties import sequence_properties


class Sequenced(msgspec.Struct, frozen=True):
    """One batch's place in its queue's sequence."""

    producer_id: str
    first_sequence: int
    msgs: list[InnerMessage]  # stamped with the queue id and the sequence properties


class Idempotence:
    """Producer ids and next sequence numbers per queue, with a lock per queue."""

    def __init__(self, client_id: str) -> None:
        self.client_id = client_id
        self._lock = threading.Lock()
        self._queue_locks: dict[MessageQueue, threading.Lock] = {}
        self._sequences: dict[MessageQueue, tuple[str, int]] = {}  # producer id, next sequence

    @contextmanager
    def sequenced(self, queue: MessageQueue, msgs: list[InnerMessage]) -> Iterator[Sequenced]:
        """Hold ``queue``'s turn and number ``msgs``; if the body raises, the queue
        goes on under a new producer id."""
        with self._lock:
            lock = self._queue_locks.setdefault(queue, threading.Lock())
        with lock:
            pid, first = self._sequences.get(queue, (self.client_id, 0))
            self._sequences[queue] = (pid, first + len(msgs))
            try:
                yield Sequenced(pid, first, _stamp(msgs, queue, pid, first))
            except BaseException:
                self.restart(queue)
                raise

    def restart(self, queue: MessageQueue) -> None:
        """After a failed batch: later batches go under a new producer id."""
        self._sequences[queue] = (f"{self.client_id}#{uuid.uuid4().hex[:8]}", 0)


def _stamp(
    msgs: list[InnerMessage], queue: MessageQueue, pid: str, first: int
) -> list[InnerMessage]:
    extra = sequence_properties(pid, first, first + len(msgs) - 1)
    return [
        msgspec.structs.replace(m, queue_id=queue.queue_id, properties={**m.properties, **extra})
        for m in msgs
    ]
