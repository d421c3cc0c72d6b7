"""The Producer: checks messages at the edge, picks queues, sends batches to brokers.

Every path ends in one ``Broker.put`` call carrying one ``EncodedBatch``:

* ``send``, ``send_batch`` and ``send_orderly`` encode in the caller's thread and wait
  for the answer (each attempt up to ``send_timeout_ms``).
* ``send_async`` and ``send_oneway`` queue each message for its target queue; a
  background thread coalesces what is pending for a queue (after ``linger_ms``, up to
  ``ASYNC_BATCH_MAX_MESSAGES`` or ``batch_max_bytes``) into one put, with at most
  ``MAX_INFLIGHT_PUTS`` puts outstanding, and resolves each message's Future.

Queues are picked round robin, skipping brokers that failed or answered slower than
``SLOW_CALL_S`` within ``broker_fault_backoff_ms`` (unless all are avoided). A put that
fails retriably (broker unreachable or timed out, busy, disk full; or a stale route)
is retried up to ``retries`` times on another queue, preferably of another broker.
``send_orderly`` never moves a message: its queue is a stable hash of the sharding
key. Bad input raises a ``ClientError`` before any remote call.

``Producer(group, idempotent=True)``: each put carries this producer's id and the
sequence numbers of its messages on that queue (store/dedupe.py), and a failed put
is retried on the *same* queue with the same sequences, so the broker drops it if
the first attempt did land (also after a broker restart). Puts to one queue go one
at a time, in sequence order; ``send_async``/``send_oneway`` run ``send`` on one
background thread.
"""

from __future__ import annotations

import functools
import itertools
import logging
import os
import socket
import threading
import time
import uuid
import zlib
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Final

import msgspec

from rayq.actors.config import ClientConfig
from rayq.actors.protocol import BatchSendResult, MessageQueue, SendResult
from rayq.actors.server.dedupe import PRODUCER_ID, PRODUCER_SEQ, sequence_properties
from rayq.actors.server.schedule import DELIVER_AT_MAX_AHEAD_MS
from rayq.client import ClientContext
from rayq.ray_transport import unwrap
from rayq.store import DEFAULT_STORE_CONFIG, EncodedBatch, InnerMessage, Message, UniqIdGenerator
from rayq.store import properties as P
from rayq.store.batch import encode_batch
from rayq.store.errors import (
    BrokerUnavailableError,
    ClosedError,
    ConfigError,
    InvalidMessageError,
    InvalidOffsetError,
    MessageTooLargeError,
    PermissionDeniedError,
    RayqError,
    TopicNotFoundError,
)
from rayq.store.message import COMPRESSED_FLAG
from rayq.store.names import validate_group, validate_topic
from rayq.transport import Transport

logger = logging.getLogger(__name__)

MAX_DELAY_LEVEL: Final[int] = 18  # the broker clamps to its own table (message_delay_level)
SLOW_CALL_S: Final[float] = 1.0
ASYNC_BATCH_MAX_MESSAGES: Final[int] = 1000
MAX_INFLIGHT_PUTS: Final[int] = 4
MAX_PENDING_MESSAGES: Final[int] = 100_000  # send_async blocks beyond this
RECORD_OVERHEAD_BYTES: Final[int] = 256  # header, topic, properties: for sizing batches
MAX_PROPERTIES_BYTES: Final[int] = DEFAULT_STORE_CONFIG.max_properties_size_bytes
_INT32: Final = range(-(2**31), 2**31)
_RESERVED: Final[dict[str, str]] = {
    P.TAGS: "set Message.tags", P.KEYS: "set Message.keys",
    P.UNIQ_KEY: "the producer assigns it", P.PRODUCER_GROUP: "the producer sets it",
    P.DELAY: "set Message.delay_level", P.DELIVER_AT_MS: "set Message.deliver_at_ms",
    P.SHARDING_KEY: "use send_orderly(msg, sharding_key=...)",
    PRODUCER_ID: "use Producer(idempotent=True)", PRODUCER_SEQ: "use Producer(idempotent=True)",
}  # fmt: skip


@functools.cache
def _born_host() -> str:
    try:
        return f"{socket.gethostbyname(socket.gethostname())}:0"
    except OSError:
        return "127.0.0.1:0"


# ------------------------------------------------------------ validation
def _bad(text: str, **details: Any) -> InvalidMessageError:
    return InvalidMessageError(text, **details)


def _too_large(what: str, size: int, limit: int, setting: str) -> MessageTooLargeError:
    return MessageTooLargeError(f"{what} is {size} bytes; at most {limit} ({setting})",
                                value=size, limit=limit, field=what)  # fmt: skip


def _check_body(body: object, limit: int) -> bytes:
    if not isinstance(body, bytes):
        raise _bad(f"body must be bytes, got {type(body).__name__}; encode text with .encode()")
    if not body:
        raise _bad("body is empty; a message needs at least one byte")
    if len(body) > limit:
        raise _too_large("body", len(body), limit, "max_message_size_bytes")
    return body if body.__class__ is bytes else bytes(body)


def _check_text(what: str, text: str) -> None:
    if "\x01" in text or "\x02" in text:
        raise _bad(f"{what} {text!r} contains \\x01 or \\x02, which property encoding reserves")


def _check_tags(tags: object) -> str | None:
    if tags is None or tags == "":
        return None
    if not isinstance(tags, str):
        raise _bad(f"tags must be a str or None, got {type(tags).__name__}")
    if "||" in tags:
        raise _bad(f"tags {tags!r} must not contain '||' (it separates tags in subscriptions)")
    _check_text("tags", tags)
    return tags


def _join_keys(keys: object) -> str:
    keys = [keys] if isinstance(keys, str) else keys
    if not isinstance(keys, list | tuple):
        raise _bad(f"keys must be a list of str, got {type(keys).__name__}")
    for key in keys:
        if not isinstance(key, str) or not key:
            raise _bad(f"each key must be a non-empty str, got {key!r}")
        if P.KEY_SEPARATOR in key:
            raise _bad(f"key {key!r} contains a space, which separates keys; pass a list")
        _check_text("key", key)
    return P.KEY_SEPARATOR.join(keys)


def _user_properties(props: object) -> dict[str, str]:
    if not isinstance(props, dict):
        raise _bad(f"properties must be a dict[str, str], got {type(props).__name__}")
    P.check_properties(props)
    for name in props:
        if name in _RESERVED:
            raise _bad(f"property name {name!r} is reserved: {_RESERVED[name]}", name=name)
    return dict(props)


def _add_schedule(props: dict[str, str], delay_level: object, deliver_at_ms: object) -> None:
    if delay_level.__class__ is not int or delay_level not in range(MAX_DELAY_LEVEL + 1):
        raise _bad(f"delay_level must be an int in 0..{MAX_DELAY_LEVEL}, got {delay_level!r}")
    if delay_level:
        props[P.DELAY] = str(delay_level)
    if deliver_at_ms is None:
        return
    latest = time.time_ns() // 1_000_000 + DELIVER_AT_MAX_AHEAD_MS
    if deliver_at_ms.__class__ is not int or not 0 <= deliver_at_ms <= latest:  # type: ignore[operator]
        raise _bad(f"deliver_at_ms must be None or epoch ms at most 3 days ahead (<= {latest}), "
                   f"got {deliver_at_ms!r}")  # fmt: skip
    if delay_level:
        raise _bad("set delay_level or deliver_at_ms, not both")
    props[P.DELIVER_AT_MS] = str(deliver_at_ms)


def _check_properties_size(tags: str | None, keys: str, props: dict[str, str]) -> None:
    bound = 64 + len(tags or "") + len(keys)
    if len(props) == 1:  # just PGROUP: a group name has at most 255 characters
        bound += 300
    else:
        bound += 2 * len(props) + sum(map(len, props)) + sum(map(len, props.values()))
    if 4 * bound <= MAX_PROPERTIES_BYTES:  # UTF-8 takes at most 4 bytes per character
        return
    size = len(P.encode_message_properties(tags, keys, "0" * 32, props).encode())
    if size > MAX_PROPERTIES_BYTES:
        raise _too_large("properties", size, MAX_PROPERTIES_BYTES, "tags, keys and properties")


def _int_at_least(name: str, value: Any, minimum: int) -> int:
    if value.__class__ is not int or value < minimum:
        raise ConfigError(f"{name} must be an int >= {minimum}, got {value!r}")
    return value


# -------------------------------------------------------------- results
def _results(queue: MessageQueue, res: BatchSendResult) -> list[SendResult]:
    st = res.status
    return [SendResult(status=st, msg_id=m, queue=queue, queue_offset=o, offset_msg_id=om)
            for m, om, o in zip(res.msg_ids, res.offset_msg_ids, res.queue_offsets,
                                strict=True)]  # fmt: skip


def _final_error(topic: str, attempts: int, err: BaseException) -> BaseException:
    """What a send raises once its retries are spent."""
    if isinstance(err, BrokerUnavailableError) or not isinstance(err, RayqError):
        return BrokerUnavailableError(
            f"could not send to topic {topic!r} after {attempts} attempt(s): {err}",
            topic=topic, attempts=attempts)  # fmt: skip
    return err


def _log_oneway_error(fut: Future) -> None:
    if fut.exception() is not None:
        logger.warning("send_oneway failed: %s", fut.exception())


class _FaultTable:
    """Brokers to avoid until a deadline (RocketMQ's latency fault tolerance)."""

    def __init__(self, backoff_ms: int) -> None:
        self._backoff_s = backoff_ms / 1000
        self._until: dict[str, float] = {}

    def ok(self, broker: str) -> bool:
        until = self._until.get(broker)
        return until is None or until <= time.monotonic()

    def record(self, broker: str, latency_s: float) -> None:
        if latency_s > SLOW_CALL_S:
            logger.info("broker %s answered in %.1f s: avoiding it for a while", broker, latency_s)
            self.fail(broker)

    def fail(self, broker: str) -> None:
        self._until[broker] = time.monotonic() + self._backoff_s


class _Put:
    """One coalesced batch on its way to a broker (moved to another queue on retry)."""

    __slots__ = ("attempt", "avoid", "deadline", "futures", "msgs", "outcome", "queue", "ref",
                 "started")  # fmt: skip

    def __init__(self, queue: MessageQueue, msgs: list[InnerMessage], futures: list[Future],
                 deadline: float) -> None:  # fmt: skip
        self.queue, self.msgs, self.futures, self.deadline = queue, msgs, futures, deadline
        self.attempt, self.started = 0, 0.0
        self.avoid: set[str] = set()
        self.outcome: Future | None = None
        self.ref: Any = None


class _AsyncSender:
    """The thread behind ``send_async``: coalesce per queue, keep a few puts in flight.

    Callers append to ``_pending`` under the lock; Ray's completion callbacks append
    to ``_done``; the thread (``_run``) takes both under the lock and does the rest
    outside it: launch puts, resolve futures, move failed puts to another queue.
    """

    def __init__(self, producer: Producer) -> None:
        self._p = producer
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)  # the sender thread waits here
        self._space = threading.Condition(self._lock)  # callers wait here when full
        self._pending: dict[MessageQueue, tuple[list[InnerMessage], list[Future]]] = {}
        self._since: dict[MessageQueue, float] = {}
        self._count = 0
        self._retry: list[_Put] = []
        self._inflight: set[_Put] = set()
        self._done: list[_Put] = []
        self._closing = False
        self._thread: threading.Thread | None = None
        # Sticky queue per topic (Kafka's sticky partitioner): send_async fills one queue's
        # batch until it is launched, then moves on round robin; many small sends then
        # make few large puts instead of one put per message.
        self.sticky: dict[str, MessageQueue] = {}

    def submit(self, msg: InnerMessage, queue: MessageQueue) -> Future:
        fut: Future = Future()
        with self._lock:
            while self._count >= MAX_PENDING_MESSAGES and not self._closing:
                self._space.wait(0.1)
            if self._closing:
                raise ClosedError(f"producer {self._p.group!r} is shut down")
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name=f"rayq-producer-{self._p.group}")  # fmt: skip
                self._thread.start()
            slot = self._pending.get(queue)
            if slot is None:
                self._pending[queue] = ([msg], [fut])
                self._since[queue] = time.monotonic()
                self._wake.notify()
            else:
                slot[0].append(msg)
                slot[1].append(fut)
                if len(slot[0]) == ASYNC_BATCH_MAX_MESSAGES:
                    self._wake.notify()
            self._count += 1
        return fut

    def close(self, timeout_s: float) -> None:
        """Send what is pending, wait for the answers, stop the thread."""
        with self._lock:
            self._closing = True
            self._wake.notify()
            self._space.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)
            if thread.is_alive():
                logger.warning("producer %s: pending sends still running after %.0f s",
                               self._p.group, timeout_s)  # fmt: skip

    # ------------------------------------------------------ sender thread
    def _run(self) -> None:
        while True:
            with self._lock:
                work = self._collect()
                while work is None:
                    if self._closing and not (self._pending or self._inflight or self._retry):
                        return
                    self._wake.wait(self._wait_s())
                    work = self._collect()
            done, expired, ready = work
            for put in done:
                self._guard(put, self._complete)
            for put in expired:
                self._guard(put, self._expired)
            for put in ready:
                self._guard(put, self._launch)

    def _collect(self) -> tuple[list[_Put], list[_Put], list[_Put]] | None:
        """(answered puts, timed-out puts, puts to launch now), or None; lock held."""
        now = time.monotonic()
        done, self._done = self._done, []
        self._inflight.difference_update(done)
        expired = [p for p in self._inflight if p.deadline <= now]
        self._inflight.difference_update(expired)
        ready: list[_Put] = []
        while self._retry and len(self._inflight) + len(ready) < MAX_INFLIGHT_PUTS:
            ready.append(self._retry.pop(0))
        linger_s = self._p.config.linger_ms / 1000
        for queue in list(self._pending):
            if len(self._inflight) + len(ready) >= MAX_INFLIGHT_PUTS:
                break
            full = len(self._pending[queue][0]) >= ASYNC_BATCH_MAX_MESSAGES
            if full or self._closing or now >= self._since[queue] + linger_s:
                ready.append(self._take(queue, now))
        self._inflight.update(ready)
        if ready:
            self._space.notify_all()
        return (done, expired, ready) if done or expired or ready else None

    def _take(self, queue: MessageQueue, now: float) -> _Put:
        if self.sticky.get(queue.topic) == queue:
            del self.sticky[queue.topic]
        msgs, futures = self._pending.pop(queue)
        del self._since[queue]
        limit, size, n = self._p.config.batch_max_bytes, 0, 0
        for m in msgs[:ASYNC_BATCH_MAX_MESSAGES]:
            size += len(m.body) + RECORD_OVERHEAD_BYTES
            if n and size > limit:
                break
            n += 1
        if n < len(msgs):  # the rest goes to the back of the line
            self._pending[queue] = (msgs[n:], futures[n:])
            self._since[queue] = now
        self._count -= n
        return _Put(queue, msgs[:n], futures[:n], now + self._p.config.send_timeout_ms / 1000)

    def _wait_s(self) -> float | None:
        times = [p.deadline for p in self._inflight]
        if self._since and len(self._inflight) < MAX_INFLIGHT_PUTS:
            times.append(min(self._since.values()) + self._p.config.linger_ms / 1000)
        return max(0.0, min(times) - time.monotonic()) if times else None

    def _guard(self, put: _Put, step: Any) -> None:
        try:
            step(put)
        except Exception as exc:  # one bad batch must not stop the thread
            logger.exception("producer %s: a batch for %s failed", self._p.group, put.queue)
            self._fail(put, exc)

    def _launch(self, put: _Put) -> None:
        try:
            batch = self._p._encode(put.msgs)
            ref = self._p._live_context().broker(put.queue.broker_name).put(batch)
        except RayqError as exc:
            self._failed(put, exc)
            return
        put.ref, put.started = ref, time.monotonic()
        put.deadline = put.started + self._p.config.send_timeout_ms / 1000
        ref.add_done_callback(functools.partial(self._on_done, put, ref))

    def _on_done(self, put: _Put, ref: Any, outcome: Any) -> None:
        """Runs in a Ray thread: hand the answer over to the sender thread."""
        with self._lock:
            if put.ref is ref and put in self._inflight:
                put.outcome = outcome
                self._done.append(put)
                self._wake.notify()

    def _complete(self, put: _Put) -> None:
        assert put.outcome is not None
        try:
            res = put.outcome.result(0)
        except Exception as exc:
            self._failed(put, exc)
            return
        self._p._faults.record(put.queue.broker_name, time.monotonic() - put.started)
        for fut, result in zip(put.futures, _results(put.queue, res), strict=True):
            if fut.set_running_or_notify_cancel():
                fut.set_result(result)

    def _expired(self, put: _Put) -> None:
        self._failed(put, BrokerUnavailableError(
            f"broker {put.queue.broker_name} did not answer within "
            f"send_timeout_ms={self._p.config.send_timeout_ms}"))  # fmt: skip

    def _failed(self, put: _Put, exc: BaseException) -> None:
        err = unwrap(exc)
        topic, attempts = put.queue.topic, put.attempt + 1
        retriable = self._p._may_retry(err, put.queue, put.avoid)
        if not retriable or put.attempt >= self._p.config.retries:
            self._fail(put, _final_error(topic, attempts, err) if retriable else err)
            return
        try:
            queue = self._p._pick(topic, put.avoid)
        except RayqError as pick_err:
            self._fail(put, _final_error(topic, attempts, pick_err))
            return
        put.queue, put.attempt, put.ref = queue, attempts, None
        put.msgs = [msgspec.structs.replace(m, queue_id=queue.queue_id) for m in put.msgs]
        with self._lock:
            self._inflight.discard(put)
            self._retry.append(put)

    def _fail(self, put: _Put, err: BaseException) -> None:
        with self._lock:
            self._inflight.discard(put)
        for fut in put.futures:
            if not fut.done() and fut.set_running_or_notify_cancel():
                fut.set_exception(err)


class Producer:
    """Sends messages to brokers: ``Producer("pg").send(Message("orders", b"body"))``.

    ``send_timeout_ms`` (per attempt) and ``retries`` given here win over the fields
    of the same name in ``config``. ``namespace`` defaults to the one of the last
    ``rayq.start``/``rayq.connect``. ``start()`` is optional (the first send starts the
    producer); ``shutdown()`` first sends what ``send_async`` still holds.
    """

    def __init__(self, group: str, *, config: ClientConfig | None = None,
                 send_timeout_ms: int = 3000, retries: int = 2,
                 namespace: str | None = None, idempotent: bool = False,
                 transport: Transport | None = None) -> None:  # fmt: skip
        self.group = validate_group(group)
        if not isinstance(idempotent, bool):
            raise ConfigError(f"idempotent must be a bool, got {idempotent!r}")
        if config is not None and not isinstance(config, ClientConfig):
            raise ConfigError(f"config must be a rayq.ClientConfig, got {type(config).__name__}")
        if namespace is not None and not isinstance(namespace, str):
            raise ConfigError(f"namespace must be a str or None, got {namespace!r}")
        self.config = msgspec.structs.replace(
            config or ClientConfig(),
            send_timeout_ms=_int_at_least("send_timeout_ms", send_timeout_ms, 1),
            retries=_int_at_least("retries", retries, 0),
        )
        self.namespace = namespace
        self._transport = transport
        self.client_id = f"{_born_host()[:-2]}@{os.getpid()}@{uuid.uuid4().hex[:8]}"
        self._ctx: ClientContext | None = None
        self._closed = False
        self._lock = threading.Lock()
        self._ids = UniqIdGenerator()
        self._rr = itertools.count()
        self._faults = _FaultTable(self.config.broker_fault_backoff_ms)
        self._queues: dict[str, tuple[list[MessageQueue], float]] = {}
        self._sender = _AsyncSender(self)
        self.idempotent = idempotent
        self._sequences: dict[MessageQueue, tuple[str, int]] = {}  # producer id, next sequence
        self._queue_locks: dict[MessageQueue, threading.Lock] = {}
        self._serial: ThreadPoolExecutor | None = None

    def __repr__(self) -> str:
        state = "shut down" if self._closed else "started" if self._ctx else "new"
        return f"Producer(group={self.group!r}, {state})"

    # ---------------------------------------------------------- lifecycle
    def start(self) -> None:
        """Find the deployment (idempotent)."""
        self._context()

    def shutdown(self) -> None:
        """Send what ``send_async`` still holds; later calls raise."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        cfg = self.config
        self._sender.close((cfg.retries + 1) * cfg.send_timeout_ms / 1000 + 5)
        if self._serial is not None:
            self._serial.shutdown(wait=True)

    def __enter__(self) -> Producer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(
                f"producer {self.group!r} is shut down; create a new Producer to send again"
            )

    def _context(self) -> ClientContext:
        ctx = self._ctx
        if ctx is not None and not self._closed:
            return ctx
        with self._lock:
            self._check_open()
            if self._ctx is None:
                ctx = ClientContext(self.config, self.namespace, self._transport)
                ctx.client_id = self.client_id
                self._ctx = ctx
            return self._ctx

    def _live_context(self) -> ClientContext:
        """The context for work already accepted (it may finish during shutdown)."""
        return self._ctx or self._context()

    # -------------------------------------------------------------- sends
    def send(self, msg: Message) -> SendResult:
        """Send one message and wait for the broker's answer."""
        self._check_open()
        inner = self._prepare(msg)
        queue, res = self._put_sync([inner], self._pick(inner.topic))
        return _results(queue, res)[0]

    def send_batch(self, msgs: Sequence[Message]) -> list[SendResult]:
        """Send messages of one topic to one queue in one call; results in input order."""
        self._check_open()
        if not isinstance(msgs, list | tuple) or not msgs:
            raise _bad("send_batch takes a non-empty list of rayq.Message")
        inners = [self._prepare(m) for m in msgs]
        topics = sorted({m.topic for m in inners})
        if len(topics) > 1:
            raise _bad(f"a batch goes to one topic, got {topics}; send one batch per topic")
        size = sum(len(m.body) for m in inners)
        if size > self.config.batch_max_bytes:
            raise _too_large("batch", size, self.config.batch_max_bytes, "batch_max_bytes")
        queue, res = self._put_sync(inners, self._pick(topics[0]))
        return _results(queue, res)

    def send_async(self, msg: Message) -> Future[SendResult]:
        """Queue one message; the Future resolves to its SendResult or its error."""
        self._check_open()
        inner = self._prepare(msg)
        self._live_context()  # no deployment at all: raise here, not through the Future
        if self.idempotent:
            with self._lock:
                if self._serial is None:
                    self._serial = ThreadPoolExecutor(1, f"rayq-producer-{self.group}")
            return self._serial.submit(self.send, msg)
        try:
            queue = self._sender.sticky.get(inner.topic) or self._pick(inner.topic)
        except BrokerUnavailableError as exc:  # no route now: report it through the Future
            failed: Future[SendResult] = Future()
            failed.set_exception(exc)
            return failed
        if queue.queue_id:
            inner = msgspec.structs.replace(inner, queue_id=queue.queue_id)
        self._sender.sticky[inner.topic] = queue
        return self._sender.submit(inner, queue)

    def send_oneway(self, msg: Message) -> None:
        """Send without waiting for the result (failures are logged)."""
        self.send_async(msg).add_done_callback(_log_oneway_error)

    def send_orderly(self, msg: Message, sharding_key: str) -> SendResult:
        """Send to the queue ``sharding_key`` hashes to; never to another one."""
        self._check_open()
        if not isinstance(sharding_key, str) or not sharding_key:
            raise _bad(f"sharding_key must be a non-empty str, got {sharding_key!r}")
        _check_text("sharding_key", sharding_key)
        inner = self._prepare(msg, {P.SHARDING_KEY: sharding_key})
        queues = self._write_queues(inner.topic)
        queue = queues[zlib.crc32(sharding_key.encode()) % len(queues)]
        queue, res = self._put_sync([inner], queue, orderly=True)
        return _results(queue, res)[0]

    # ------------------------------------------------------------ helpers
    def _prepare(self, msg: Message, extra: dict[str, str] | None = None) -> InnerMessage:
        """Check a message and turn it into a record for queue 0 (raises ClientErrors)."""
        if not isinstance(msg, Message):
            raise _bad(f"expected a rayq.Message, got {type(msg).__name__}: "
                       "build one with rayq.Message(topic, body)")  # fmt: skip
        topic = validate_topic(msg.topic)
        body = _check_body(msg.body, self.config.max_message_size_bytes)
        tags, keys = _check_tags(msg.tags), _join_keys(msg.keys)
        props = _user_properties(msg.properties) if msg.properties else {}
        if msg.flag.__class__ is not int or msg.flag not in _INT32:
            raise _bad(f"flag must be a 32-bit int, got {msg.flag!r}")
        _add_schedule(props, msg.delay_level, msg.deliver_at_ms)
        props[P.PRODUCER_GROUP] = self.group
        props.update(extra or ())
        _check_properties_size(tags, keys, props)
        sys_flag = 0
        if len(body) > self.config.compress_over_bytes:
            packed = zlib.compress(body, 5)
            if len(packed) < len(body):  # an incompressible body travels as it is
                body, sys_flag = packed, COMPRESSED_FLAG
        return InnerMessage(topic=topic, queue_id=0, body=body, tags=tags, keys=keys,
                            uniq_key=self._ids.next_id(), properties=props, flag=msg.flag,
                            sys_flag=sys_flag, born_timestamp=time.time_ns() // 1_000_000,
                            born_host=_born_host())  # fmt: skip

    def _encode(self, msgs: list[InnerMessage]) -> EncodedBatch:
        return encode_batch(msgs, max_body_bytes=self.config.max_message_size_bytes,
                            max_properties_bytes=MAX_PROPERTIES_BYTES)  # fmt: skip

    def _write_queues(self, topic: str) -> list[MessageQueue]:
        """The topic's write queues, sorted; cached for ``route_refresh_interval_ms``."""
        cached = self._queues.get(topic)
        if cached is not None and cached[1] > time.monotonic():
            return cached[0]
        ctx = self._live_context()
        queues = sorted(ctx.write_queues(topic, refresh=True))
        if not queues:
            if ctx.route(topic) is not None:
                raise PermissionDeniedError(f"topic {topic!r} has no writeable queue")
            raise BrokerUnavailableError(f"no live broker can take topic {topic!r}", topic=topic)
        expiry = time.monotonic() + self.config.route_refresh_interval_ms / 1000
        self._queues[topic] = (queues, expiry)
        return queues

    def _pick(self, topic: str, avoid: set[str] | frozenset[str] = frozenset()) -> MessageQueue:
        """Round robin, skipping brokers in ``avoid`` and recently faulty ones if possible."""
        queues = self._write_queues(topic)
        n, start = len(queues), next(self._rr)
        fallback = None
        for i in range(n):
            queue = queues[(start + i) % n]
            if queue.broker_name in avoid:
                continue
            if self._faults.ok(queue.broker_name):
                return queue
            fallback = fallback or queue
        return fallback or queues[start % n]

    def _may_retry(self, err: BaseException, queue: MessageQueue, avoid: set[str]) -> bool:
        """Whether a failed put may go to another queue; updates routes and the fault table."""
        if isinstance(err, TopicNotFoundError | InvalidOffsetError):
            self._queues.pop(queue.topic, None)  # routes are stale: fetch them next time
            return isinstance(err, InvalidOffsetError)
        if not (isinstance(err, RayqError) and err.retriable):
            return False
        logger.info("send to %s failed, trying another queue: %s", queue, err)
        avoid.add(queue.broker_name)
        self._faults.fail(queue.broker_name)
        self._queues.pop(queue.topic, None)
        if self._ctx is not None:
            self._ctx.forget(queue.broker_name)
        return True

    def _put_sync(self, msgs: list[InnerMessage], queue: MessageQueue, *,
                  orderly: bool = False) -> tuple[MessageQueue, BatchSendResult]:  # fmt: skip
        """One put per attempt; retriable failures move to another queue unless orderly."""
        if self.idempotent:
            return queue, self._put_idempotent(msgs, queue)
        topic, err = queue.topic, None
        avoid: set[str] = set()
        attempts = 1 if orderly else self.config.retries + 1
        for attempt in range(attempts):
            try:
                queue = self._pick(topic, avoid) if attempt else queue
                if msgs[0].queue_id != queue.queue_id:
                    msgs = [msgspec.structs.replace(m, queue_id=queue.queue_id) for m in msgs]
                batch = self._encode(msgs)
                if len(msgs) > 1 and len(batch.records) > self.config.batch_max_bytes:
                    raise _too_large("batch", len(batch.records), self.config.batch_max_bytes,
                                     "batch_max_bytes")  # fmt: skip
                started = time.monotonic()
                handle = self._live_context().broker(queue.broker_name)
                res = handle.put(batch).result(self.config.send_timeout_ms / 1000)
            except RayqError as exc:
                if not self._may_retry(exc, queue, avoid):
                    raise
                err = exc
                continue
            self._faults.record(queue.broker_name, time.monotonic() - started)
            return queue, res
        if orderly and isinstance(err, BrokerUnavailableError):
            raise BrokerUnavailableError(
                f"ordered send to {queue} failed; ordered messages never move to another "
                f"queue: {err}", topic=topic, queue_id=queue.queue_id)  # fmt: skip
        raise _final_error(topic, attempts, err) from None  # type: ignore[arg-type]

    def _put_idempotent(self, msgs: list[InnerMessage], queue: MessageQueue) -> BatchSendResult:
        """One batch with fresh sequence numbers, retried on the same queue as is."""
        with self._lock:
            lock = self._queue_locks.setdefault(queue, threading.Lock())
        with lock:  # in sequence order: a later batch landing first would hide this one
            pid, first = self._sequences.get(queue, (self.client_id, 0))
            self._sequences[queue] = (pid, first + len(msgs))
            extra = sequence_properties(pid, first, first + len(msgs) - 1)
            msgs = [msgspec.structs.replace(m, queue_id=queue.queue_id, properties={**m.properties,
                                            **extra}) for m in msgs]  # fmt: skip
            batch = msgspec.structs.replace(self._encode(msgs), producer_id=pid,
                                            first_sequence=first)  # fmt: skip
            if len(msgs) > 1 and len(batch.records) > self.config.batch_max_bytes:
                raise _too_large("batch", len(batch.records), self.config.batch_max_bytes,
                                 "batch_max_bytes")  # fmt: skip
            err: RayqError | None = None
            for attempt in range(self.config.retries + 1):
                try:
                    handle = self._live_context().broker(queue.broker_name)
                    return handle.put(batch).result(self.config.send_timeout_ms / 1000)
                except RayqError as exc:
                    if not exc.retriable:  # not stored: go on under a new id (no gap)
                        self._sequences[queue] = (f"{self.client_id}#{uuid.uuid4().hex[:8]}", 0)
                        raise
                    err = exc
                    logger.info("idempotent put to %s failed (%s); retrying it there", queue, exc)
                    if self._ctx is not None:
                        self._ctx.forget(queue.broker_name)
                    time.sleep(min(0.2 * 2**attempt, 2.0))
            # Perhaps stored, perhaps not: later batches go under a new producer id.
            self._sequences[queue] = (f"{self.client_id}#{uuid.uuid4().hex[:8]}", 0)
            raise BrokerUnavailableError(
                f"idempotent send to {queue} failed after {self.config.retries + 1} attempt(s) "
                f"on that queue (idempotent sends never move to another queue): {err}",
                topic=queue.topic, queue_id=queue.queue_id,
            )  # fmt: skip


__all__ = ["Producer"]
