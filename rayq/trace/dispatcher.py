"""The trace dispatcher: one background thread per process that writes trace records
(RocketMQ's ``AsyncTraceDispatcher``).

Traced clients hand records to ``submit``, which never blocks and never raises: the
buffer holds at most ``capacity`` records, and a record that finds it full is dropped
and counted (``stats().dropped``). The thread wakes when the buffer was empty or has
``batch_records`` records, lingers ``linger_ms`` so that more come, then writes
everything buffered: packed into trace messages (records.py) and sent with one
``send_batch`` per ``batch_messages`` of them. A failed write is logged and its
records counted in ``stats().failed``; tracing never fails the traced call.

The trace topic is created explicitly (``Admin.create_topic`` on every broker)
before the first write, when the coordinator does not know it: so tracing works with
the brokers' ``auto_create_topic_enable=False`` too. If it cannot be created (ACL), the
records are dropped as failed and creation is tried again ``RETRY_TOPIC_S`` later.

One dispatcher per deployment, trace topic and credentials in a process
(``acquire``/``release``: reference counted). A client's shutdown calls ``flush``,
which waits until what was submitted before it has been written.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Final, Protocol

import msgspec

from rayq.actors.protocol.config import ClientConfig
from rayq.store import Message
from rayq.store.errors import RayqError, TopicNotFoundError
from rayq.trace.records import TRACE_TAG, ConsumeTrace, SendTrace, TraceRecord, pack_messages
from rayq.transport.base import Transport

logger = logging.getLogger(__name__)

TRACE_PRODUCER_GROUP: Final[str] = "_RAYQ_TRACE_PRODUCER"
TRACE_TOPIC_QUEUES: Final[int] = 4
CAPACITY_RECORDS: Final[int] = 20_000  # records buffered at most; more are dropped
BATCH_RECORDS: Final[int] = 512  # the thread wakes at once when this many wait
BATCH_MESSAGES: Final[int] = 64  # trace messages per send_batch
LINGER_MS: Final[int] = 20
FLUSH_TIMEOUT_S: Final[float] = 10.0
RETRY_TOPIC_S: Final[float] = 5.0


class Pending(Protocol):
    """A record whose building is left to the dispatcher's thread (a send's, whose
    messages and answer are immutable)."""

    def record(self) -> TraceRecord: ...


class TraceSink(Protocol):
    """Where trace messages go: the dispatcher's producer and admin, or a test's."""

    def ensure_topic(self, topic: str) -> None: ...

    def send_batch(self, msgs: list[Message]) -> object: ...

    def close(self) -> None: ...


class TraceStats(msgspec.Struct, frozen=True, kw_only=True):
    submitted: int  # records handed to submit
    written: int  # records in trace messages the broker stored
    dropped: int  # records that found the buffer full
    failed: int  # records whose write failed


class TraceDispatcher:
    """Writes trace records to ``topic`` through ``sink`` on its own thread."""

    def __init__(
        self,
        sink: TraceSink,
        topic: str,
        *,
        capacity: int = CAPACITY_RECORDS,
        batch_records: int = BATCH_RECORDS,
        batch_messages: int = BATCH_MESSAGES,
        linger_ms: int | None = None,
        name: str = "rayq-trace",
    ) -> None:
        self.sink, self.topic = sink, topic
        self.capacity, self.batch_records = capacity, batch_records
        self.batch_messages = batch_messages
        self.linger_s = (LINGER_MS if linger_ms is None else linger_ms) / 1000
        self._buffer: deque[TraceRecord | Pending] = deque()
        self._wake = threading.Event()
        self._done = threading.Condition()
        self._written = self._dropped = self._failed = 0
        self._taken = 0  # records the thread took from the buffer (under _done)
        self._finished = 0  # of those, the ones written or failed (under _done)
        self._topic_ready = False
        self._topic_retry_at = 0.0
        self._closing = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    # ------------------------------------------------------------ callers
    def submit(self, item: TraceRecord | Pending) -> bool:
        """Buffer one record (False: the buffer was full or the dispatcher is closed,
        and it was dropped). Never blocks."""
        buffer = self._buffer
        if len(buffer) >= self.capacity or self._closing:
            with self._done:
                self._dropped += 1
            return False
        buffer.append(item)
        n = len(buffer)
        if n == 1 or n >= self.batch_records:
            self._wake.set()
        return True

    def flush(self, timeout_s: float = FLUSH_TIMEOUT_S) -> bool:
        """Wait until every record buffered now has been written (or failed); False if
        that took longer than ``timeout_s``."""
        with self._done:
            target = self._taken + len(self._buffer)
        self._wake.set()
        deadline = time.monotonic() + timeout_s
        with self._done:
            while self._finished < target:
                left = deadline - time.monotonic()
                if left <= 0 or not self._thread.is_alive():
                    return False
                self._done.wait(left)
        return True

    def close(self, timeout_s: float = FLUSH_TIMEOUT_S) -> None:
        """Write what is buffered, stop the thread, close the sink."""
        self.flush(timeout_s)
        self._closing = True
        self._wake.set()
        self._thread.join(timeout_s)
        try:
            self.sink.close()
        except RayqError as exc:
            logger.warning("closing the trace dispatcher's producer failed: %s", exc)

    def stats(self) -> TraceStats:
        with self._done:
            return TraceStats(
                submitted=self._taken + len(self._buffer) + self._dropped,
                written=self._written,
                dropped=self._dropped,
                failed=self._failed,
            )

    # ------------------------------------------------------------- thread
    def _run(self) -> None:
        while not self._closing:
            self._wake.wait()
            self._wake.clear()
            if self._closing:
                break
            if len(self._buffer) < self.batch_records:
                time.sleep(self.linger_s)  # let a batch gather
            self.tick()
        self.tick()  # what came in during close

    def tick(self) -> int:
        """Write everything buffered now (one unit of the thread's work); how many
        records it took."""
        taken = self._take()
        if not taken:
            return 0
        records = [
            item if isinstance(item, SendTrace | ConsumeTrace) else item.record() for item in taken
        ]
        written = 0  # records (or parts of one) in trace messages the broker stored
        try:
            for chunk in self._messages(records) if self._topic_usable() else []:
                try:
                    self.sink.send_batch([m for m, _ in chunk])
                    written += sum(n for _, n in chunk)
                except RayqError as exc:
                    logger.warning("writing %d trace messages failed: %s", len(chunk), exc)
        except Exception:  # a bug must not stop the thread
            logger.exception("writing trace records failed")
        written = min(written, len(records))  # a record cut in two counts once
        failed = len(records) - written
        with self._done:
            self._written += written
            self._failed += failed
            self._finished += len(taken)
            self._done.notify_all()
        return len(taken)

    def _take(self) -> list[TraceRecord | Pending]:
        buffer, taken = self._buffer, []
        with self._done:
            while buffer:
                taken.append(buffer.popleft())
            self._taken += len(taken)
        return taken

    def _messages(self, records: Sequence[TraceRecord]) -> list[list[tuple[Message, int]]]:
        """The trace messages of ``records`` (each with how many records it holds), in
        chunks of ``batch_messages``."""
        msgs = [
            (Message(self.topic, body, tags=TRACE_TAG, keys=keys), n)
            for body, keys, n in pack_messages(records)
        ]
        n = self.batch_messages
        return [msgs[i : i + n] for i in range(0, len(msgs), n)]

    def _topic_usable(self) -> bool:
        """Whether the trace topic exists (created now if it did not); after a failure,
        not asked again for ``RETRY_TOPIC_S``."""
        if self._topic_ready:
            return True
        if time.monotonic() < self._topic_retry_at:
            return False
        try:
            self.sink.ensure_topic(self.topic)
        except RayqError as exc:
            self._topic_retry_at = time.monotonic() + RETRY_TOPIC_S
            logger.warning(
                "trace records dropped: the trace topic %r does not exist and could not be "
                "created (tried again in %.0f s): %s",
                self.topic,
                RETRY_TOPIC_S,
                exc,
            )
            return False
        self._topic_ready = True
        return True


# ------------------------------------------------------------ the process's dispatchers
class ProducerSink:
    """The real sink: a Producer (tracing off) and an Admin of the traced client's
    deployment."""

    def __init__(
        self, config: ClientConfig, namespace: str | None, transport: Transport | None
    ) -> None:
        from rayq.producer.producer import Producer

        self._args = (config, namespace, transport)
        # a producer finds its deployment on its first send (on the dispatcher's thread)
        self._producer = Producer(
            TRACE_PRODUCER_GROUP, config=config, namespace=namespace, transport=transport
        )

    def ensure_topic(self, topic: str) -> None:
        from rayq.admin.admin import Admin

        config, namespace, transport = self._args
        admin = Admin(namespace=namespace, config=config, transport=transport)
        try:
            admin.route(topic)
        except TopicNotFoundError:
            logger.info("creating the trace topic %r", topic)
            admin.create_topic(topic, queues=TRACE_TOPIC_QUEUES)

    def send_batch(self, msgs: list[Message]) -> object:
        return self._producer.send_batch(msgs)

    def close(self) -> None:
        self._producer.shutdown()


_registry: dict[Any, list[Any]] = {}  # key -> [dispatcher, references]
_registry_lock = threading.Lock()


def _key(
    config: ClientConfig, namespace: str | None, transport: Transport | None
) -> tuple[Any, ...]:
    return (config.trace_topic, namespace, id(transport), config.credentials, config.transport)


def acquire(
    config: ClientConfig,
    namespace: str | None,
    transport: Transport | None,
    make_sink: Callable[[ClientConfig, str | None, Transport | None], TraceSink] = ProducerSink,
) -> TraceDispatcher:
    """The process's dispatcher for the deployment and trace topic of a traced client
    (made on first use); give it back with ``release``."""
    key = _key(config, namespace, transport)
    with _registry_lock:
        entry = _registry.get(key)
        if entry is None:
            # the trace producer traces nothing, and sends its bodies as they are:
            # compressing them cost more CPU than their bytes cost the broker
            plain = msgspec.structs.replace(
                config, trace_enable=False, compress_over_bytes=config.max_message_size_bytes
            )
            sink = make_sink(plain, namespace, transport)
            entry = _registry[key] = [TraceDispatcher(sink, config.trace_topic), 0]
        entry[1] += 1
        return entry[0]


def release(dispatcher: TraceDispatcher, timeout_s: float = FLUSH_TIMEOUT_S) -> None:
    """A traced client is done with ``dispatcher``: flush what it submitted; the last
    one closes it."""
    with _registry_lock:
        key = next((k for k, e in _registry.items() if e[0] is dispatcher), None)
        last = key is not None and _registry[key][1] == 1
        if key is not None:
            _registry[key][1] -= 1
            if last:
                del _registry[key]
    if last:
        dispatcher.close(timeout_s)
    elif not dispatcher.flush(timeout_s):
        logger.warning("trace records still unwritten after %.0f s", timeout_s)
