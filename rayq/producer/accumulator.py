"""``send_async`` coalescing: messages wait per queue until their batch is ready.

A message appended for a queue waits until the queue's batch is full
(``ASYNC_BATCH_MAX_MESSAGES``), its first message has waited ``linger_ms``, or the
producer is closing. ``drain`` then cuts the batch at ``batch_max_bytes`` (the rest
waits at the head of the line) and hands it over as a ``Put``; the sender
(produce_sender.py) sends it and, after a retriable failure, gives it back with
``reenqueue`` (it goes out before new batches). At most ``MAX_PENDING_MESSAGES`` wait:
``append`` blocks beyond that (back-pressure).

A sticky queue per topic (Kafka's sticky partitioner): ``send_async`` fills one
queue's batch until it is drained, then moves on round robin, so many small sends
make few large puts. Nothing here talks to a broker.

Locking: one lock. Callers append under it; the sender thread waits on ``wake`` and
calls ``drain``/``next_ready_s`` with the lock held (``with accumulator.lock``).
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from typing import Any, Final

from rayq.actors.protocol import MessageQueue
from rayq.store import EncodedBatch, InnerMessage
from rayq.store.errors import ClosedError

ASYNC_BATCH_MAX_MESSAGES: Final[int] = 1000
MAX_PENDING_MESSAGES: Final[int] = 100_000  # send_async blocks beyond this
RECORD_OVERHEAD_BYTES: Final[int] = 256  # header, topic, properties: for sizing batches


class Put:
    """One batch on its way to a broker, over all its attempts.

    ``msgs`` are encoded for ``queue`` when sent (again after a move to another queue);
    a batch encoded by its caller comes as ``batch`` with ``msgs`` None. ``movable``:
    a retry may pick another queue (not for ordered or idempotent batches, whose
    ``fixed`` says why). ``futures`` are the async senders' (empty for sync sends).
    """

    __slots__ = (
        "attempt",
        "avoid",
        "batch",
        "born",
        "call",
        "deadline",
        "first_sequence",
        "fixed",
        "futures",
        "movable",
        "msgs",
        "not_before",
        "producer_id",
        "queue",
        "started",
    )

    def __init__(
        self,
        queue: MessageQueue,
        msgs: list[InnerMessage] | None = None,
        *,
        batch: EncodedBatch | None = None,
        futures: list[Future] | None = None,
        fixed: str = "",
        producer_id: str = "",
        first_sequence: int = 0,
    ) -> None:
        self.queue, self.msgs, self.batch = queue, msgs, batch
        self.futures: list[Future] = futures if futures is not None else []
        self.fixed, self.movable = fixed, not fixed
        self.producer_id, self.first_sequence = producer_id, first_sequence
        self.attempt, self.started, self.deadline, self.not_before = 0, 0.0, 0.0, 0.0
        self.born = 0.0  # when its first attempt started (client send latency)
        self.avoid: set[str] = set()
        self.call: Any = None  # the PutCall in flight (produce_sender.py)

    @property
    def topic(self) -> str:
        return self.queue.topic


class Accumulator:
    """Pending messages per queue, batches given back for a retry, back-pressure."""

    def __init__(self, group: str, linger_ms: int, batch_max_bytes: int) -> None:
        self.group = group
        self._linger_s = linger_ms / 1000
        self._batch_max_bytes = batch_max_bytes
        self.lock = threading.Lock()
        self.wake = threading.Condition(self.lock)  # the sender thread waits here
        self._space = threading.Condition(self.lock)  # callers wait here when full
        self._pending: dict[MessageQueue, tuple[list[InnerMessage], list[Future]]] = {}
        self._since: dict[MessageQueue, float] = {}
        self._count = 0
        self._retry: list[Put] = []
        self.closing = False
        self.sticky: dict[str, MessageQueue] = {}

    # ------------------------------------------------------------ callers
    def append(self, msg: InnerMessage, queue: MessageQueue) -> Future:
        """Queue ``msg`` for ``queue``; its Future resolves when the sender is done."""
        fut: Future = Future()
        with self.lock:
            while self._count >= MAX_PENDING_MESSAGES and not self.closing:
                self._space.wait(0.1)
            if self.closing:
                raise ClosedError(f"producer {self.group!r} is shut down")
            slot = self._pending.get(queue)
            if slot is None:
                self._pending[queue] = ([msg], [fut])
                self._since[queue] = time.monotonic()
                self.wake.notify()
            else:
                slot[0].append(msg)
                slot[1].append(fut)
                if len(slot[0]) == ASYNC_BATCH_MAX_MESSAGES:
                    self.wake.notify()
            self._count += 1
        return fut

    def close(self) -> None:
        """Send what is pending without lingering; later appends raise ClosedError."""
        with self.lock:
            self.closing = True
            self.wake.notify()
            self._space.notify_all()

    # ------------------------------------------ the sender (lock held)
    def reenqueue(self, put: Put) -> None:
        """A batch to send again (after ``put.not_before``), before new ones."""
        self._retry.append(put)
        self.wake.notify()

    def idle(self) -> bool:
        return not (self._pending or self._retry)

    def drain(self, now: float, slots: int) -> list[Put]:
        """Up to ``slots`` batches ready to go now: retries first, then full or lingered."""
        ready: list[Put] = []
        for put in list(self._retry):
            if len(ready) < slots and put.not_before <= now:
                self._retry.remove(put)
                ready.append(put)
        for queue in list(self._pending):
            if len(ready) >= slots:
                break
            full = len(self._pending[queue][0]) >= ASYNC_BATCH_MAX_MESSAGES
            if full or self.closing or now >= self._since[queue] + self._linger_s:
                ready.append(self._take(queue, now))
        if ready:
            self._space.notify_all()
        return ready

    def next_ready_s(self) -> float | None:
        """When ``drain`` will have something without a new append (monotonic seconds)."""
        times = [p.not_before for p in self._retry]
        if self._since:
            times.append(min(self._since.values()) + self._linger_s)
        return min(times) if times else None

    def _take(self, queue: MessageQueue, now: float) -> Put:
        if self.sticky.get(queue.topic) == queue:
            del self.sticky[queue.topic]
        msgs, futures = self._pending.pop(queue)
        del self._since[queue]
        size, n = 0, 0
        for m in msgs[:ASYNC_BATCH_MAX_MESSAGES]:
            size += len(m.body) + RECORD_OVERHEAD_BYTES
            if n and size > self._batch_max_bytes:
                break
            n += 1
        if n < len(msgs):  # the rest goes to the back of the line
            self._pending[queue] = (msgs[n:], futures[n:])
            self._since[queue] = now
        self._count -= n
        return Put(queue, msgs[:n], futures=futures[:n])
