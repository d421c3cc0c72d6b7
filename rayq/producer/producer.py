"""The Producer: checks messages at the edge, picks queues, sends batches to brokers.

Every path ends in one ``Broker.put`` call carrying one ``EncodedBatch``. The parts,
split as aiokafka splits its producer:

* produce_validation.py: the checks that turn a ``Message`` into an ``InnerMessage``
  (bad input raises a ``ClientError`` before any remote call); produce_batch.py: the
  same for ``send_batch``'s messages, in bulk;
* produce_routes.py: write queues per topic, round robin, fault avoidance;
* produce_accumulator.py: ``send_async``/``send_oneway`` coalescing per queue (after
  ``linger_ms``, up to ``ASYNC_BATCH_MAX_MESSAGES`` or ``batch_max_bytes``);
* produce_sender.py: the one retry policy and the one broker call; sync sends;
* produce_async.py: the thread that sends the accumulator's batches
  (``MAX_INFLIGHT_PUTS`` in flight) through the sender;
* produce_idempotence.py: producer id and sequence numbers of ``idempotent=True``.

``send``, ``send_batch`` and ``send_orderly`` encode in the caller's thread and wait
(each attempt up to ``send_timeout_ms``, ``retries`` more attempts). A failed put
moves to another queue, preferably of another broker, unless it is ordered
(``send_orderly``: the queue is a stable hash of the sharding key) or idempotent:
those are retried on the same queue. ``Producer(group, idempotent=True)``: each put
carries this producer's id and its messages' sequence numbers on that queue
(dedupe.py), so the broker drops a retry whose first attempt did land (also after a
broker restart); puts to one queue go one at a time, and ``send_async``/
``send_oneway`` run ``send`` on one background thread.
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
import zlib
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import msgspec

from rayq.actors.protocol import BatchSendResult, MessageQueue, SendResult
from rayq.actors.protocol.config import ClientConfig
from rayq.producer import validation as V
from rayq.producer.accumulator import Accumulator, Put
from rayq.producer.async_sends import AsyncSends
from rayq.producer.batch import prepare_batch
from rayq.producer.idempotence import Idempotence
from rayq.producer.routes import QueueSelector
from rayq.producer.sender import RetryPolicy, Sender, results
from rayq.store import InnerMessage, Message, UniqIdGenerator
from rayq.store import properties as P
from rayq.store.errors import BrokerUnavailableError, ClosedError
from rayq.store.names import validate_group
from rayq.trace.tracer import Tracer
from rayq.transport.base import Transport
from rayq.transport.context import ClientContext

logger = logging.getLogger(__name__)

_ORDERED = "ordered messages never move to another queue"
_IDEMPOTENT = "idempotent sends never move to another queue"


def _log_oneway_error(fut: Future) -> None:
    if fut.exception() is not None:
        logger.warning("send_oneway failed: %s", fut.exception())


class Producer:
    """Sends messages to brokers: ``Producer("pg").send(Message("orders", b"body"))``.

    ``send_timeout_ms`` (per attempt) and ``retries`` given here win over the fields
    of the same name in ``config``. ``namespace`` defaults to the one of the last
    ``rayq.start``/``rayq.connect``. ``start()`` is optional (the first send starts the
    producer); ``shutdown()`` first sends what ``send_async`` still holds.
    """

    def __init__(
        self,
        group: str,
        *,
        config: ClientConfig | None = None,
        send_timeout_ms: int = 3000,
        retries: int = 2,
        namespace: str | None = None,
        idempotent: bool = False,
        transport: Transport | None = None,
    ) -> None:
        self.group = validate_group(group)
        cfg = self.config = V.producer_config(
            config, send_timeout_ms, retries, namespace, idempotent
        )
        self.namespace = namespace
        self._transport = transport
        self.idempotent = idempotent
        self.client_id = f"{V.born_host()[:-2]}@{os.getpid()}@{uuid.uuid4().hex[:8]}"
        self._ctx: ClientContext | None = None
        self._closed = False
        self._lock = threading.Lock()
        self._ids = UniqIdGenerator()
        self._routes = QueueSelector(
            self._live_context, cfg.route_refresh_interval_ms, cfg.broker_fault_backoff_ms
        )
        policy = RetryPolicy(attempts=cfg.retries + 1, timeout_s=cfg.send_timeout_ms / 1000)
        self._sender = Sender(
            self.group,
            policy,
            self._live_context,
            self._routes,
            max_body_bytes=cfg.max_message_size_bytes,
            max_properties_bytes=V.MAX_PROPERTIES_BYTES,
            batch_max_bytes=cfg.batch_max_bytes,
        )
        accumulator = Accumulator(self.group, cfg.linger_ms, cfg.batch_max_bytes)
        self._async = AsyncSends(self.group, self._sender, accumulator)
        self._idempotence = Idempotence(self.client_id) if idempotent else None
        self._serial: ThreadPoolExecutor | None = None
        # message trace (rayq/trace/): every put the broker answers, when trace_enable
        self._tracer = self._sender.tracer = Tracer.open(
            cfg, self.group, self.client_id, namespace, transport
        )

    def __repr__(self) -> str:
        state = "shut down" if self._closed else "started" if self._ctx else "new"
        return f"Producer(group={self.group!r}, {state})"

    # ---------------------------------------------------------- lifecycle
    def start(self) -> None:
        """Find the deployment (idempotent; the first send does it too)."""
        self._context()

    def shutdown(self) -> None:
        """Send what ``send_async`` still holds; later calls raise."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        cfg = self.config
        self._async.close((cfg.retries + 1) * cfg.send_timeout_ms / 1000 + 5)
        if self._serial is not None:
            self._serial.shutdown(wait=True)
        if self._tracer is not None:
            self._tracer.close()  # its trace records written first

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
                self._ctx = ClientContext(
                    self.config, self.namespace, self._transport, self.client_id
                )
            return self._ctx

    def _live_context(self) -> ClientContext:
        """The context for work already accepted (it may finish during shutdown)."""
        return self._ctx or self._context()

    # -------------------------------------------------------------- sends
    def send(self, msg: Message) -> SendResult:
        """Send one message and wait for the broker's answer."""
        self._check_open()
        inner = self._prepare(msg)
        queue, res = self._send_now([inner], self._routes.pick(inner.topic))
        return results(queue, res)[0]

    def send_batch(self, msgs: Sequence[Message]) -> list[SendResult]:
        """Send messages of one topic to one queue in one call; results in input order."""
        self._check_open()
        inners = prepare_batch(msgs, self.group, self.config, self._ids)
        queue, res = self._send_now(inners, self._routes.pick(inners[0].topic))
        return results(queue, res)

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
        sticky = self._async.acc.sticky
        try:
            queue = sticky.get(inner.topic) or self._routes.pick(inner.topic)
        except BrokerUnavailableError as exc:  # no route now: report it through the Future
            failed: Future[SendResult] = Future()
            failed.set_exception(exc)
            return failed
        if queue.queue_id:
            inner = msgspec.structs.replace(inner, queue_id=queue.queue_id)
        sticky[inner.topic] = queue
        return self._async.submit(inner, queue)

    def send_oneway(self, msg: Message) -> None:
        """Send without waiting for the result (failures are logged)."""
        self.send_async(msg).add_done_callback(_log_oneway_error)

    def send_orderly(self, msg: Message, sharding_key: str) -> SendResult:
        """Send to the queue ``sharding_key`` hashes to; never to another one."""
        self._check_open()
        V.check_sharding_key(sharding_key)
        inner = self._prepare(msg, {P.SHARDING_KEY: sharding_key})
        queues = self._routes.write_queues(inner.topic)
        queue = queues[zlib.crc32(sharding_key.encode()) % len(queues)]
        queue, res = self._send_now([inner], queue, fixed=_ORDERED)
        return results(queue, res)[0]

    # ------------------------------------------------------------ helpers
    def _prepare(self, msg: Message, extra: dict[str, str] | None = None) -> InnerMessage:
        return V.prepare(msg, self.group, self.config, self._ids, extra)

    def _send_now(
        self, msgs: list[InnerMessage], queue: MessageQueue, fixed: str = ""
    ) -> tuple[MessageQueue, BatchSendResult]:
        """One batch through the sender (the queue it landed on, its answer); idempotent
        batches numbered in queue order."""
        if self._idempotence is None:
            put = Put(queue, msgs, fixed=fixed)
            res = self._sender.send(put)
            return put.queue, res
        with self._idempotence.sequenced(queue, msgs) as seq:
            put = Put(
                queue,
                seq.msgs,
                fixed=fixed or _IDEMPOTENT,
                producer_id=seq.producer_id,
                first_sequence=seq.first_sequence,
            )
            return queue, self._sender.send(put)


__all__ = ["Producer"]
