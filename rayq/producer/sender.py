"""Sends batches (``Put``s) to brokers: the one retry policy and the one broker call.

Every produce path ends here: ``send`` (sync, idempotent, ordered), ``send_awaited``
(rayq.aio's producer), ``pipeline``
(Arrow writes: several puts in flight to one queue) and the ``send_async`` thread
(produce_async.py), which calls ``launch`` and ``after_failure`` itself.

Retry policy (``after_failure``, the only one): a failure is retried when the error
is ``retriable`` (broker unreachable or timed out, busy, disk full) or, for a batch
that may move, when the queue no longer exists (``InvalidOffsetError``: stale route).
A movable batch (not ordered, not idempotent) goes to another queue at once,
preferably of another broker; an ordered or idempotent batch is sent again to the
same queue after a backoff (``backoff_s`` doubling up to ``backoff_max_s``), and the
batches in flight behind it are sent again after it, in order. At most ``attempts``
attempts in all. A retriable failure also marks the broker in the fault table and
drops its cached handle and routes; ``TopicNotFoundError`` drops the topic's routes
and is not retried.

The broker call: ``Sender._start_put(broker_name, batch)`` is the only code of the
produce path that reaches a broker (one ``Broker.put``); it returns a ``PutCall`` at
once (pipelining), whose ``result(timeout_s)`` waits and ``add_done_callback`` is
for the async thread. It goes through the client transport (rayq/transport/base.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Protocol

import msgspec

from rayq.actors.protocol import BatchSendResult, MessageQueue, SendResult
from rayq.metrics import RECORDER
from rayq.producer.accumulator import Put
from rayq.producer.routes import QueueSelector
from rayq.producer.validation import too_large
from rayq.store import EncodedBatch
from rayq.store.batch import encode_batch
from rayq.store.errors import (
    BrokerUnavailableError,
    InvalidOffsetError,
    RayqError,
    TopicNotFoundError,
)
from rayq.trace.tracer import Tracer
from rayq.transport.base import BrokerClient, Reply

logger = logging.getLogger(__name__)


class RetryPolicy(msgspec.Struct, frozen=True, kw_only=True):
    attempts: int  # in all, the first included
    timeout_s: float  # per attempt
    backoff_s: float = 0.2  # before the first same-queue retry; doubles each time
    backoff_max_s: float = 2.0


class BrokerDirectory(Protocol):
    """Broker clients by name (a ClientContext, or arrow_io's named lookup)."""

    def broker(self, broker_name: str) -> BrokerClient: ...

    def forget(self, broker_name: str) -> None: ...


def results(queue: MessageQueue, res: BatchSendResult) -> list[SendResult]:
    st = res.status
    return [
        SendResult(status=st, msg_id=m, queue=queue, queue_offset=o, offset_msg_id=om)
        for m, om, o in zip(res.msg_ids, res.offset_msg_ids, res.queue_offsets, strict=True)
    ]


# --------------------------------------------------------------- broker calls
class PutCall:
    """One ``Broker.put`` on its way (a transport ``Reply``): ``result`` waits for it,
    raising rayq errors."""

    __slots__ = ("_reply",)

    def __init__(self, reply: Reply[BatchSendResult]) -> None:
        self._reply = reply

    def result(self, timeout_s: float | None) -> BatchSendResult:
        return self._reply.result(timeout_s)

    def add_done_callback(self, fn: Callable[[], None]) -> None:
        """``fn()`` once the answer is in (on another thread)."""
        self._reply.add_done_callback(lambda _: fn())

    async def wait(self, timeout_s: float) -> BatchSendResult:
        """``result`` for asyncio: awaits the transport's reply (no thread waits)."""
        try:
            return await asyncio.wait_for(self._reply.wait(), timeout_s)
        except TimeoutError:
            self._reply.cancel()
            raise BrokerUnavailableError(f"a put got no answer in {timeout_s} s") from None


class _FailedCall:
    """A put that could not start (no handle, bad batch): fails when waited on."""

    __slots__ = ("_error",)

    def __init__(self, error: RayqError) -> None:
        self._error = error

    def result(self, timeout_s: float | None) -> BatchSendResult:
        raise self._error

    async def wait(self, timeout_s: float) -> BatchSendResult:
        raise self._error

    def add_done_callback(self, fn: Callable[[], None]) -> None:
        fn()


class Sender:
    """Sends ``Put``s under one ``RetryPolicy``; ``selector`` None: no batch may move."""

    def __init__(
        self,
        name: str,
        policy: RetryPolicy,
        directory: Callable[[], BrokerDirectory],
        selector: QueueSelector | None = None,
        *,
        max_body_bytes: int = 0,
        max_properties_bytes: int = 0,
        batch_max_bytes: int = 0,
    ) -> None:
        self.name, self.policy, self._directory, self.selector = name, policy, directory, selector
        self._limits = (max_body_bytes, max_properties_bytes, batch_max_bytes)
        self.tracer: Tracer | None = None  # message trace: told of every answered put

    def _start_put(self, broker_name: str, batch: EncodedBatch) -> PutCall:
        """THE broker call of the produce path: one ``Broker.put``, not waited for."""
        return PutCall(self._directory().broker(broker_name).put(batch))

    # ------------------------------------------------------------ encode
    def _encoded(self, put: Put) -> EncodedBatch:
        """The put's batch for its current queue (encoded again after a move)."""
        queue_id = put.queue.queue_id
        if put.batch is not None and put.batch.queue_id == queue_id:
            return put.batch
        assert put.msgs is not None, "a put without messages cannot move"
        msgs = put.msgs
        if msgs[0].queue_id != queue_id:
            msgs = put.msgs = [msgspec.structs.replace(m, queue_id=queue_id) for m in msgs]
        body_limit, props_limit, batch_limit = self._limits
        batch = encode_batch(msgs, max_body_bytes=body_limit, max_properties_bytes=props_limit)
        if put.producer_id:
            batch = msgspec.structs.replace(
                batch, producer_id=put.producer_id, first_sequence=put.first_sequence
            )
        # send_batch's records must fit (the accumulator cuts async batches itself)
        if len(msgs) > 1 and not put.futures and len(batch.records) > batch_limit:
            raise too_large("batch", len(batch.records), batch_limit, "batch_max_bytes")
        put.batch = batch
        return batch

    def launch(self, put: Put) -> None:
        """Start one attempt of ``put`` (its failure to start shows when waited on)."""
        try:
            batch = self._encoded(put)
            put.started = time.monotonic()
            if not put.born:
                put.born = put.started
            put.call = self._start_put(put.queue.broker_name, batch)
        except RayqError as exc:
            put.call = _FailedCall(exc)
        put.deadline = put.started + self.policy.timeout_s

    def succeeded(self, put: Put, res: BatchSendResult) -> None:
        """``put`` was answered with ``res``: note the broker's latency, trace it."""
        now = time.monotonic()
        if self.selector is not None:
            self.selector.faults.record(put.queue.broker_name, now - put.started)
        RECORDER.sent(put.topic, now - (put.born or put.started))
        if self.tracer is not None and put.msgs is not None:
            self.tracer.sent(put.msgs, put.queue, res)

    # ---------------------------------------------------- the retry policy
    def after_failure(self, put: Put, err: BaseException) -> BaseException | None:
        """None if ``put`` goes again (re-targeted, ``not_before`` set), else what to raise."""
        queue = put.queue
        stale = isinstance(err, TopicNotFoundError | InvalidOffsetError)
        if stale and self.selector is not None:
            self.selector.forget(queue.topic)  # routes are stale: fetch them next time
        if stale:
            retriable = put.movable and isinstance(err, InvalidOffsetError)
        else:
            retriable = isinstance(err, RayqError) and err.retriable
            if retriable:
                self._note_fault(queue)
        if not retriable:
            RECORDER.send_failed(queue.topic)
            return err
        put.attempt += 1
        if put.attempt >= self.policy.attempts:
            RECORDER.send_failed(queue.topic)
            return self._final_error(put, err)
        if not put.movable:
            logger.info("put to %s failed (%s); retrying it there", queue, err)
            backoff = self.policy.backoff_s * 2 ** (put.attempt - 1)
            put.not_before = time.monotonic() + min(backoff, self.policy.backoff_max_s)
            return None
        if not stale:  # a stale route is no fault of the broker's
            put.avoid.add(queue.broker_name)
        assert self.selector is not None
        try:
            put.queue = self.selector.pick(queue.topic, put.avoid)
        except RayqError as pick_err:  # no route now: try the same queue once more
            if not pick_err.retriable:
                RECORDER.send_failed(queue.topic)
                return pick_err
            logger.info("send to %s failed (%s), no other queue now: %s", queue, err, pick_err)
            return None
        logger.info("send to %s failed, trying %s: %s", queue, put.queue, err)
        return None

    def _note_fault(self, queue: MessageQueue) -> None:
        if self.selector is not None:
            self.selector.faults.fail(queue.broker_name)
            self.selector.forget(queue.topic)
        with contextlib.suppress(RayqError):  # no deployment: nothing to forget
            self._directory().forget(queue.broker_name)

    def _final_error(self, put: Put, err: BaseException) -> BaseException:
        """What a send raises once its attempts are spent."""
        attempts = put.attempt
        if put.fixed:
            return BrokerUnavailableError(
                f"could not send to {put.queue} after {attempts} attempt(s) on that queue "
                f"({put.fixed}): {err}",
                topic=put.topic,
                queue_id=put.queue.queue_id,
            )
        if isinstance(err, BrokerUnavailableError) or not isinstance(err, RayqError):
            return BrokerUnavailableError(
                f"could not send to topic {put.topic!r} after {attempts} attempt(s): {err}",
                topic=put.topic,
                attempts=attempts,
            )
        return err

    # ------------------------------------------------------------- sync
    def send(self, put: Put) -> BatchSendResult:
        """Send one batch and wait for it, retrying per the policy."""
        for _, res in self.pipeline((put,), 1):
            return res
        raise AssertionError("unreachable")

    async def send_awaited(self, put: Put) -> BatchSendResult:
        """``send`` for asyncio (rayq.aio): the same attempts, retry policy and broker
        call, with the answers and the backoffs awaited."""
        while True:
            self.launch(put)
            try:
                res = await put.call.wait(self.policy.timeout_s)
            except RayqError as exc:
                final = self.after_failure(put, exc)
                if final is not None:
                    raise final from None
                await asyncio.sleep(max(0.0, put.not_before - time.monotonic()))
                continue
            self.succeeded(put, res)
            return res

    def pipeline(self, puts: Iterable[Put], depth: int) -> Iterator[tuple[Put, BatchSendResult]]:
        """Send ``puts`` in order with up to ``depth`` in flight; yields each with its
        answer, in order. After a same-queue retry the puts behind it go again too."""
        inflight: deque[Put] = deque()
        source = iter(puts)
        while True:
            while len(inflight) < depth and (put := next(source, None)) is not None:
                self.launch(put)
                inflight.append(put)
            if not inflight:
                return
            put = inflight[0]
            try:
                res = put.call.result(self.policy.timeout_s)
            except RayqError as exc:
                final = self.after_failure(put, exc)
                if final is not None:
                    raise final from None
                time.sleep(max(0.0, put.not_before - time.monotonic()))
                for again in inflight if not put.movable else (put,):
                    self.launch(again)
                continue
            inflight.popleft()
            self.succeeded(put, res)
            yield put, res
