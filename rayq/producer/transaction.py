"""The transactional producer: half message, local transaction, end (RocketMQ's design).

``TransactionProducer(group, listener).send_in_transaction(msg, arg)``:

1. sends ``msg`` as a **half message** (``Broker.put_half``): stored, in no queue, so
   no consumer sees it; idempotent across the send's own retries (producer id and
   sequence numbers, as ``Producer(idempotent=True)``);
2. runs ``listener.execute_local_transaction(msg, arg)`` (an exception counts as
   UNKNOWN and is logged; a half not stored as safe as asked counts as ROLLBACK and the
   listener is not called);
3. ends the transaction (``Broker.end_transaction``): COMMIT appends the message to its
   queue, ROLLBACK drops it, UNKNOWN sends nothing and leaves it to the broker's check.
   As RocketMQ's ``endTransactionOneway``, the end is not waited for: a failed end is
   logged, not raised, and the broker checks the transaction back. ``shutdown()``
   waits for the ends still on their way.

Check-back: from ``start()`` (or the first send) until ``shutdown()``, a thread asks
every broker for the checks queued for this producer group every
``ClientConfig.check_request_poll_ms``, calls ``listener.check_local_transaction(msg)``
for each and ends the transaction with its answer. Any live producer of the group
answers: a transaction whose producer died is checked through another one.

A TransactionProducer is a ``Producer``: plain sends work on it as well.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from typing import Any, Protocol, runtime_checkable

import msgspec

from rayq.actors.protocol import (
    ClientRequest,
    EndTransactionRequest,
    HalfSendRequest,
    MessageQueue,
    SendResult,
    SendStatus,
    TransactionCheck,
    TransactionChecksRequest,
    TransactionStatus,
)
from rayq.actors.protocol.config import ClientConfig
from rayq.producer import validation as V
from rayq.producer.accumulator import Put
from rayq.producer.idempotence import Idempotence
from rayq.producer.producer import Producer
from rayq.producer.sender import PutCall, Sender, results
from rayq.store import Message, MessageExt
from rayq.store import properties as P
from rayq.store.codec import decode_offset_msg_id
from rayq.store.errors import ConfigError, InvalidMessageError, RayqError
from rayq.transport.base import Reply, Transport

logger = logging.getLogger(__name__)

CHECKS_PER_POLL = 32
_HALF = "transactional sends are idempotent: they never move to another queue"


@runtime_checkable
class TransactionListener(Protocol):
    """What a ``TransactionProducer`` calls: both return a ``TransactionStatus``."""

    def execute_local_transaction(self, msg: Message, arg: Any) -> TransactionStatus:
        """Run the local transaction ``msg`` belongs to (right after its half is stored)."""
        ...

    def check_local_transaction(self, msg: MessageExt) -> TransactionStatus:
        """The state of the local transaction of ``msg`` (a half the broker has not seen
        ended; ``msg.msg_id`` is the transaction id ``send_in_transaction`` returned)."""
        ...


class _HalfSender(Sender):
    """The produce path's sender, whose one broker call is ``put_half``."""

    def __init__(self, group: str, *args: Any, **kwargs: Any) -> None:
        super().__init__(group, *args, **kwargs)
        self.group = group

    def _start_put(self, broker_name: str, batch: Any) -> PutCall:
        req = HalfSendRequest(group=self.group, batch=batch)
        return PutCall(self._directory().broker(broker_name).put_half(req))


class TransactionProducer(Producer):
    """Sends messages in local transactions:
    ``TransactionProducer("txg", listener).send_in_transaction(msg, arg)``."""

    def __init__(
        self,
        group: str,
        listener: TransactionListener,
        *,
        config: ClientConfig | None = None,
        send_timeout_ms: int = 3000,
        retries: int = 2,
        namespace: str | None = None,
        transport: Transport | None = None,
    ) -> None:
        if not isinstance(listener, TransactionListener):
            raise ConfigError(
                f"listener {listener!r} must have execute_local_transaction(msg, arg) and "
                "check_local_transaction(msg) methods, each returning a "
                "rayq.TransactionStatus"
            )
        super().__init__(
            group,
            config=config,
            send_timeout_ms=send_timeout_ms,
            retries=retries,
            namespace=namespace,
            transport=transport,
        )
        self.listener = listener
        self._halves = _HalfSender(
            group,
            self._sender.policy,
            self._live_context,
            self._routes,
            max_body_bytes=self.config.max_message_size_bytes,
            max_properties_bytes=V.MAX_PROPERTIES_BYTES,
            batch_max_bytes=self.config.batch_max_bytes,
        )
        self._halves.tracer = self._tracer  # the half message's put is traced as a send
        self._half_ids = Idempotence(self.client_id)
        self._stop = threading.Event()
        self._checker: threading.Thread | None = None
        self._ending: set[Reply[Any]] = set()  # ends sent, not answered yet
        self._ending_lock = threading.Lock()

    def __repr__(self) -> str:
        state = "shut down" if self._closed else "started" if self._ctx else "new"
        return f"TransactionProducer(group={self.group!r}, {state})"

    # ---------------------------------------------------------- lifecycle
    def start(self) -> None:
        """Find the deployment and start answering the broker's checks (idempotent)."""
        super().start()
        with self._lock:
            if self._checker is None and not self._closed:
                self._checker = threading.Thread(
                    target=self._check_loop, name=f"rayq-txcheck-{self.group}", daemon=True
                )
                self._checker.start()

    def shutdown(self) -> None:
        """Stop answering checks (another producer of the group takes them over)."""
        self._stop.set()
        checker = self._checker
        if checker is not None and checker is not threading.current_thread():
            checker.join(timeout=self.config.send_timeout_ms / 1000 + 5)
        with self._ending_lock:
            ending = list(self._ending)
        for reply in ending:  # each logs its own failure
            with contextlib.suppress(RayqError):
                reply.result(self.config.send_timeout_ms / 1000)
        super().shutdown()

    # -------------------------------------------------------------- sends
    def send_in_transaction(self, msg: Message, arg: Any = None) -> SendResult:
        """Send ``msg`` as a half message, run the local transaction, end it; the result
        carries the listener's ``local_state`` and the ``transaction_id``."""
        self._check_open()
        if isinstance(msg, Message) and (msg.delay_level or msg.deliver_at_ms is not None):
            raise InvalidMessageError(
                "a transactional message cannot be delayed: send it without delay_level "
                "or deliver_at_ms"
            )
        inner = self._prepare(msg, {P.TRANSACTION_PREPARED: "true"})
        self.start()
        queue = self._routes.pick(inner.topic)
        with self._half_ids.sequenced(queue, [inner]) as seq:
            put = Put(
                queue,
                seq.msgs,
                fixed=_HALF,
                producer_id=seq.producer_id,
                first_sequence=seq.first_sequence,
            )
            res = self._halves.send(put)
        half = results(queue, res)[0]
        decoded = decode_offset_msg_id(half.offset_msg_id)
        key = decoded[1] if decoded is not None else -1
        if half.status is not SendStatus.SEND_OK:
            logger.warning(
                "half message %s stored with status %s: rolled back", half.msg_id, half.status.value
            )
            state = TransactionStatus.ROLLBACK
        else:
            state = self._ask(self.listener.execute_local_transaction, msg, arg)
        self._end(queue, key, half.msg_id, state, from_check=False, wait=False)
        if self._tracer is not None:  # the end: a send event whose status is the state
            self._tracer.ended(inner, half.msg_id, queue, state.value)
        return msgspec.structs.replace(
            half, local_state=state, transaction_id=half.msg_id, transaction_offset=key
        )

    def _ask(self, fn: Any, *args: Any) -> TransactionStatus:
        """The listener's answer; an exception or a wrong type counts as UNKNOWN."""
        try:
            state = fn(*args)
        except Exception:
            logger.exception("transaction listener %s failed: UNKNOWN", fn.__name__)
            return TransactionStatus.UNKNOWN
        if not isinstance(state, TransactionStatus):
            logger.error(
                "transaction listener %s returned %r, not a rayq.TransactionStatus: UNKNOWN",
                fn.__name__,
                state,
            )
            return TransactionStatus.UNKNOWN
        return state

    def _end(
        self,
        queue: MessageQueue,
        key: int,
        msg_id: str,
        state: TransactionStatus,
        from_check: bool,
        wait: bool = True,
    ) -> None:
        """Commit or roll back (nothing for UNKNOWN), waiting for the answer or not; a
        failure is logged, not raised."""
        if state is TransactionStatus.UNKNOWN or key < 0:
            return
        req = EndTransactionRequest(
            group=self.group,
            topic=queue.topic,
            transaction_offset=key,
            msg_id=msg_id,
            commit=state is TransactionStatus.COMMIT,
            from_check=from_check,
            client_id=self.client_id,
        )
        ctx = self._live_context()

        def failed(exc: BaseException) -> None:
            logger.warning(
                "ending transaction %s (%s) on %s failed: %s; the broker checks it back",
                msg_id,
                state.value,
                queue.broker_name,
                exc,
            )

        try:
            reply = ctx.broker(queue.broker_name).end_transaction(req)
            if wait:
                reply.result(ctx.timeout_s)
                return
        except RayqError as exc:
            failed(exc)
            return
        with self._ending_lock:
            self._ending.add(reply)
        reply.add_done_callback(lambda r: self._ended(r, failed))

    def _ended(self, reply: Reply[Any], failed: Any) -> None:
        with self._ending_lock:
            self._ending.discard(reply)
        try:
            reply.result(0)
        except RayqError as exc:
            failed(exc)

    # -------------------------------------------------------- check-back
    def _check_loop(self) -> None:
        poll_s = self.config.check_request_poll_ms / 1000
        while not self._stop.wait(poll_s):
            try:
                self.check_now()
            except RayqError as exc:  # no deployment or a broker away: next poll
                logger.debug("transaction checks of %s: %s", self.group, exc)
            except Exception:
                logger.exception("transaction checks of %s failed", self.group)

    def check_now(self) -> int:
        """Answer the checks every broker has for this group now; returns how many."""
        ctx = self._live_context()
        brokers = ctx.coordinator.brokers(ClientRequest(client_id=self.client_id))
        answered = 0
        for name in brokers.result(ctx.timeout_s).names:
            req = TransactionChecksRequest(
                group=self.group, max_num=CHECKS_PER_POLL, client_id=self.client_id
            )
            try:
                checks = ctx.broker(name).transaction_checks(req).result(ctx.timeout_s).checks
            except RayqError as exc:
                logger.debug("transaction checks from %s: %s", name, exc)
                continue
            for check in checks:
                self._answer(name, check)
                answered += 1
        return answered

    def _answer(self, broker_name: str, check: TransactionCheck) -> None:
        msg = check.message
        state = self._ask(self.listener.check_local_transaction, msg)
        logger.info("transaction %s checked on %s: %s", msg.msg_id, broker_name, state.value)
        queue = MessageQueue(msg.topic, broker_name, msg.queue_id)
        self._end(queue, check.transaction_offset, msg.msg_id, state, from_check=True)


__all__ = ["TransactionListener", "TransactionProducer"]
