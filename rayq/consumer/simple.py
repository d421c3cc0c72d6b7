"""The POP consumer: RocketMQ 5's ``SimpleConsumer`` (Kafka's share groups, Redis's
XREADGROUP and XACK). Messages are leased one by one, not queues::

    consumer = rayq.SimpleConsumer("workers")
    consumer.subscribe("jobs", "*")
    consumer.start()
    while running:
        for msg in consumer.receive(max_messages=32, invisible_duration=30.0):
            handle(msg)
            consumer.ack(msg)      # or change_invisible_duration(msg, 60.0), or nack(msg)
    consumer.shutdown()

Any number of consumers of one group receive from the same queues: each message goes
to one of them and stays invisible to the others for ``invisible_duration`` seconds.
``ack`` settles it; a lease that ends first (a slow or dead worker) brings the message
again, to any consumer of the group, with ``delivery_count`` one higher; past the
group's ``retry_max_times`` it goes to ``%DLQ%<group>``. There is no rebalance and no
queue is owned, so a stuck consumer delays only the messages it holds.

A receive asks each broker of the subscribed topics for news without waiting, then, if
none had any, waits up to ``await_duration`` seconds on one of them in turn (RocketMQ
5's client does the same, a queue at a time). The broker keeps the leases
(actors/server/pop_processor.py): they survive a broker restart and a failover.
Received messages are ``ReceivedMessage``: a ``MessageExt`` with ``receipt_handle`` and
``delivery_count``. A consumer is not thread-safe: call it from one thread (or share
receipt handles, which are plain strings, with ``ack_handle``).
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Generator, Iterable
from typing import Any, TypeVar, cast

from rayq.actors.protocol import ConsumeFromWhere
from rayq.actors.protocol.config import ClientConfig
from rayq.actors.protocol.pop import (
    ACK_MAX_HANDLES,
    INVISIBLE_MAX_MS,
    POP_MAX_MESSAGES,
    POP_WAIT_MAX_MS,
    AckRequest,
    ChangeInvisibilityRequest,
    PopRequest,
    PopResponse,
    decode_handle,
)
from rayq.consumer.selector import MessageSelector, check_sql_brokers, filter_type, to_filter
from rayq.service_state import ServiceState
from rayq.store import properties as P
from rayq.store.codec import decode_records
from rayq.store.errors import (
    BrokerUnavailableError,
    ClientError,
    ClosedError,
    InvalidRequestError,
    RayqError,
)
from rayq.store.filters import TagFilter
from rayq.store.message import MessageExt
from rayq.store.names import RETRY_GROUP_TOPIC_PREFIX, validate_group, validate_topic
from rayq.store.sql92 import SqlFilter
from rayq.trace.tracer import Tracer, now_ms
from rayq.transport.base import Transport
from rayq.transport.context import CALL_TIMEOUT_S, ClientContext

logger = logging.getLogger(__name__)

# Trace statuses of a POP consumer's steps (rayq/trace/records.py)
RECEIVED, ACK, NACK = "RECEIVED", "ACK", "NACK"
CHANGE_INVISIBLE_DURATION = "CHANGE_INVISIBLE_DURATION"


class Received(MessageExt):
    """A message a POP consumer received: a ``MessageExt`` with its lease's
    ``receipt_handle`` (what ``ack`` and ``change_invisible_duration`` name; a new one
    after each change) and its ``delivery_count`` (1 the first time)."""

    __slots__ = ("_consumer", "delivery_count", "receipt_handle")

    receipt_handle: str
    delivery_count: int
    _consumer: Any  # the consumer that received it (None in a copy from another process)

    def __reduce__(self) -> tuple[Any, ...]:
        # a copy for another process (a Ray task that settles it) keeps handle and count
        rebuild, args = super().__reduce__()[:2]
        return _rebuild_received, (rebuild, args, self.receipt_handle, self.delivery_count)

    def _settler(self) -> Any:
        if self._consumer is None:
            raise ClientError(
                "this message was copied from another process: settle it with a consumer of "
                "its group, consumer.ack(msg) or consumer.ack_handle(msg.receipt_handle, topic)"
            )
        return self._consumer


class ReceivedMessage(Received):
    """What ``SimpleConsumer.receive`` returns; ``msg.ack()`` is ``consumer.ack(msg)``."""

    __slots__ = ()

    def ack(self) -> None:
        self._settler().ack(self)

    def nack(self, delay: float = 0.0) -> None:
        self._settler().nack(self, delay)

    def change_invisible_duration(self, duration: float) -> None:
        self._settler().change_invisible_duration(self, duration)


def _rebuild_received(
    rebuild: Any, args: tuple[Any, ...], receipt_handle: str, delivery_count: int
) -> Received:
    msg: Received = rebuild(*args)
    msg.receipt_handle, msg.delivery_count, msg._consumer = receipt_handle, delivery_count, None
    return msg


R = TypeVar("R", bound=Received)


def received_as(
    cls: type[R], buffer: bytes, broker: str, handles: list[str], consumer: object
) -> list[R]:
    """The records of a pop's ``buffer`` as ``cls``, leased under ``handles`` (a
    redelivery from the retry topic shown as the topic the message was sent to)."""
    msgs = cast(list[R], decode_records(buffer, broker_name=broker, cls=cls))
    for msg, handle in zip(msgs, handles, strict=True):
        msg.receipt_handle = handle
        msg.delivery_count = msg.reconsume_times + 1
        msg._consumer = consumer
        if msg.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            msg.topic = msg.properties.get(P.RETRY_TOPIC) or msg.topic
    return msgs


def check_max_messages(max_messages: object) -> None:
    """InvalidRequestError unless ``max_messages`` is an int in 1..POP_MAX_MESSAGES."""
    if (
        isinstance(max_messages, bool)
        or not isinstance(max_messages, int)
        or not 1 <= max_messages <= POP_MAX_MESSAGES
    ):
        raise InvalidRequestError(
            f"max_messages must be an int in 1..{POP_MAX_MESSAGES}, got {max_messages!r}",
            value=repr(max_messages),
            limit=POP_MAX_MESSAGES,
        )


def duration_ms(seconds: object, what: str, least: int) -> int:
    """``seconds`` in ms, checked to be a number in ``least``..``INVISIBLE_MAX_MS`` ms."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or math.isnan(seconds):
        raise InvalidRequestError(f"{what} must be a number of seconds, got {seconds!r}")
    ms = math.ceil(seconds * 1000)
    if not least <= ms <= INVISIBLE_MAX_MS:
        low = "> 0" if least > 0 else ">= 0"
        raise InvalidRequestError(
            f"{what} must be {low} and at most {INVISIBLE_MAX_MS // 3_600_000} hours, "
            f"got {seconds!r} s",
            value=seconds,
            limit=INVISIBLE_MAX_MS / 1000,
        )
    return ms


# A call a receive makes: (topic, broker, request); answered with the broker's reply.
PopCall = tuple[str, str, PopRequest]
ReceivePlan = Generator[PopCall, PopResponse, list[Received]]


class PopConsumerCore:
    """What the sync and asyncio POP consumers share: options, subscriptions, checks, the
    receive plan (which calls to make, in order, and what their answers give) and the
    requests to settle. The shells only make the calls (``SimpleConsumer`` waiting on
    them, ``rayq.aio.SimpleConsumer`` awaiting them)."""

    received_class: type[Received] = Received

    def __init__(
        self,
        group: str,
        *,
        await_duration: float = 5.0,
        consume_from: ConsumeFromWhere = ConsumeFromWhere.FIRST_OFFSET,
        config: ClientConfig | None = None,
        namespace: str | None = None,
        transport: Transport | None = None,
    ) -> None:
        validate_group(group)
        wait = duration_ms(await_duration, "await_duration", 0) if await_duration else 0
        if wait > POP_WAIT_MAX_MS:
            raise InvalidRequestError(
                f"await_duration must be at most {POP_WAIT_MAX_MS // 1000} s, got {await_duration}"
            )
        if not isinstance(consume_from, ConsumeFromWhere) or (
            consume_from is ConsumeFromWhere.TIMESTAMP
        ):
            raise ClientError(
                "a SimpleConsumer starts a new group at FIRST_OFFSET or LAST_OFFSET, got "
                f"{consume_from!r}"
            )
        self.group = group
        self._wait_ms = wait
        self._consume_from = consume_from
        self._ctx = ClientContext(config, namespace, transport)
        self.client_id = self._ctx.client_id
        # message trace: receives and settlements, when trace_enable
        self._tracer = Tracer.open(self._ctx.config, group, self.client_id, namespace, transport)
        self._subscriptions: dict[str, TagFilter | SqlFilter] = {}
        self._turns = itertools.count()
        self._service_state = ServiceState.CREATE_JUST
        # messages of the last receive whose tags only collide with ours: (topic,
        # broker, handles), acked by the shell once the receive is over
        self._strays: list[tuple[str, str, list[str]]] = []
        # deferred acks (``ack_many(msgs, defer=True)``): broker -> (topic, handle), sent
        # with the next receive from that broker, or by ``flush_acks``
        self._deferred: dict[str, list[tuple[str, str]]] = {}

    # -------------------------------------------------------- subscription
    def subscribe(self, topic: str, expression: str | MessageSelector = "*") -> None:
        """Receive from ``topic``, filtered by ``expression`` (``"*"``, ``"TagA ||
        TagB"``, or a ``rayq.MessageSelector``; SQL92 is evaluated on the broker)."""
        self._check_open()
        validate_topic(topic)
        tag_filter = to_filter(expression)
        self._ctx.read_queues(topic, refresh=True)  # TopicNotFoundError for unknown topics
        check_sql_brokers(self._ctx, topic, tag_filter)
        self._subscriptions[topic] = tag_filter

    def unsubscribe(self, topic: str) -> None:
        self._check_open()
        self._subscriptions.pop(topic, None)

    def subscriptions(self) -> dict[str, str]:
        """Each subscribed topic's expression."""
        return {t: f.expression for t, f in self._subscriptions.items()}

    # ------------------------------------------------------------ lifecycle
    @property
    def service_state(self) -> ServiceState:
        return self._service_state

    def _start(self) -> None:
        self._check_open()
        if self._service_state is not ServiceState.CREATE_JUST:
            raise ClientError(
                f"the simple consumer of group {self.group!r} is "
                f"{self._service_state.value}: start() may be called once"
            )
        self._service_state = ServiceState.RUNNING

    def _shutdown(self) -> None:
        self._service_state = ServiceState.SHUTDOWN_ALREADY
        if self._tracer is not None:
            self._tracer.close()  # its trace records written first

    def _traced(self, msgs: Iterable[Received], status: str, began_ms: int) -> None:
        """Trace a step (``status``) of ``msgs`` that began at ``began_ms``."""
        if self._tracer is not None:
            self._tracer.consumed(list(msgs), status, began_ms, now_ms() - began_ms)

    # ------------------------------------------------------- receive plan
    def _receive_plan(self, max_messages: int, invisible_duration: float) -> ReceivePlan:
        """The calls of one receive: each broker of each subscribed topic without
        waiting, in turn from another one each time, until ``max_messages`` came; if
        none had any, a wait of up to ``await_duration`` on the first. A call that
        failed is thrown in as its BrokerUnavailableError (logged, the next is asked)."""
        self._check_running()
        check_max_messages(max_messages)
        invisible_ms = duration_ms(invisible_duration, "invisible_duration", 1)
        self._strays = []
        if not self._subscriptions:
            raise ClientError("subscribe to a topic before receive()")
        targets = self._targets()
        if not targets:
            return []
        turn = next(self._turns)
        order = [targets[(turn + i) % len(targets)] for i in range(len(targets))]
        out: list[Received] = []
        failed: BrokerUnavailableError | None = None
        for topic, broker in order:
            req = self._request(topic, broker, max_messages - len(out), invisible_ms, 0)
            try:
                resp = yield topic, broker, req
            except BrokerUnavailableError as exc:
                failed = exc
                logger.warning("receive from broker %s failed: %s", broker, exc)
                self._acks_lost(broker, req, exc)
                continue
            out += self._taken(topic, broker, req, resp)
            if len(out) >= max_messages:
                return out
        if out or not self._wait_ms:
            if not out and failed is not None and len(order) == 1:
                raise failed
            return out
        topic, broker = order[0]
        req = self._request(topic, broker, max_messages, invisible_ms, self._wait_ms)
        try:
            resp = yield topic, broker, req
        except BrokerUnavailableError as exc:
            self._acks_lost(broker, req, exc)
            raise
        return self._taken(topic, broker, req, resp)

    def _targets(self) -> list[tuple[str, str]]:
        """(topic, broker) for each subscribed topic and broker holding queues of it."""
        out = []
        for topic in self._subscriptions:
            brokers = sorted({q.broker_name for q in self._ctx.read_queues(topic)})
            out += [(topic, b) for b in brokers]
        return out

    def _request(
        self, topic: str, broker: str, most: int, invisible_ms: int, wait_ms: int
    ) -> PopRequest:
        """A receive from ``broker``, carrying the acks deferred for it (at most
        ``ACK_MAX_HANDLES``; the rest wait for the next one)."""
        f = self._subscriptions[topic]
        pending = self._deferred.get(broker, [])
        acks = [h for _, h in pending[:ACK_MAX_HANDLES]]
        if pending:
            del pending[:ACK_MAX_HANDLES]
        return PopRequest(
            acks=acks,
            client_id=self.client_id,
            group=self.group,
            topic=topic,
            max_nums=most,
            invisible_ms=invisible_ms,
            expression=f.expression,
            expression_type=filter_type(f),
            wait_ms=wait_ms,
            consume_from=self._consume_from,
        )

    def _acks_lost(self, broker: str, req: PopRequest, exc: BaseException) -> None:
        if req.acks:
            logger.warning(
                "%d deferred ack(s) riding on a receive from broker %s may be lost (%s): "
                "those messages come again when their leases end",
                len(req.acks),
                broker,
                exc,
            )

    def _taken(self, topic: str, broker: str, req: PopRequest, resp: PopResponse) -> list[Received]:
        """The messages of a pop's answer. A message whose tag only collides with the
        subscription's (the broker filters by tag hash) is not ours: kept in ``_strays``
        for the shell to ack once the receive is over."""
        if req.acks and resp.ack_error:
            logger.warning(
                "broker %s refused %d deferred ack(s) (none of them was applied): %s",
                broker,
                len(req.acks),
                resp.ack_error,
            )
        if not resp.count:
            return []
        got = received_as(self.received_class, resp.buffer, broker, resp.handles, self)
        f = self._subscriptions[topic]
        if f.tags is not None:
            stray = [m.receipt_handle for m in got if not f.matches_tags(m.tags)]
            if stray:
                self._strays.append((topic, broker, stray))
            got = [m for m in got if f.matches_tags(m.tags)]
        self._traced(got, RECEIVED, now_ms())
        return got

    # ------------------------------------------------------------- settle
    def _ack_request(self, topic: str, handles: list[str]) -> tuple[str, AckRequest]:
        broker = decode_handle(handles[0]).broker
        req = AckRequest(client_id=self.client_id, group=self.group, topic=topic, handles=handles)
        return broker, req

    def _ack_many_requests(self, msgs: Iterable[Received]) -> dict[tuple[str, str], AckRequest]:
        """One ack request per (broker, topic) for ``msgs``, in chunks of at most
        ``ACK_MAX_HANDLES``; keyed by (broker, chunk's first handle)."""
        groups: dict[tuple[str, str], list[str]] = {}
        for m in msgs:  # a received message's broker_name is its handle's broker
            groups.setdefault((m.broker_name, m.topic), []).append(handle_of(m))
        return self._chunked(groups)

    def _chunked(self, groups: dict[tuple[str, str], list[str]]) -> dict[Any, AckRequest]:
        out = {}
        for (broker, topic), handles in groups.items():
            for at in range(0, len(handles), ACK_MAX_HANDLES):
                chunk = handles[at : at + ACK_MAX_HANDLES]
                out[(broker, chunk[0])] = self._ack_request(topic, chunk)[1]
        return out

    def _defer(self, msgs: Iterable[Received]) -> list[str]:
        """Keep the acks of ``msgs`` for the next receive from their brokers; returns
        the brokers that have ``ACK_MAX_HANDLES`` waiting (to flush now)."""
        full = []
        for m in msgs:
            pending = self._deferred.setdefault(m.broker_name, [])
            pending.append((m.topic, handle_of(m)))
            if len(pending) == ACK_MAX_HANDLES:
                full.append(m.broker_name)
        return full

    def _flush_requests(self, brokers: Iterable[str] | None = None) -> dict[Any, AckRequest]:
        """Ack requests for the deferred acks of ``brokers`` (all by default), taken
        out of the deferred list."""
        groups: dict[tuple[str, str], list[str]] = {}
        for broker in list(self._deferred if brokers is None else brokers):
            for topic, handle in self._deferred.pop(broker, []):
                groups.setdefault((broker, topic), []).append(handle)
        return self._chunked(groups)

    def _change_request(
        self, msg: Received, invisible_ms: int, release: bool
    ) -> tuple[str, ChangeInvisibilityRequest]:
        handle = handle_of(msg)
        req = ChangeInvisibilityRequest(
            client_id=self.client_id,
            group=self.group,
            topic=msg.topic,
            handles=[handle],
            invisible_ms=invisible_ms,
            release=release,
        )
        return decode_handle(handle).broker, req

    # ------------------------------------------------------------- checks
    def _check_open(self) -> None:
        if self._service_state is ServiceState.SHUTDOWN_ALREADY:
            raise ClosedError(f"the simple consumer of group {self.group!r} is shut down")

    def _check_running(self) -> None:
        self._check_open()
        if self._service_state is not ServiceState.RUNNING:
            raise ClientError("start() the simple consumer before receive()")


class SimpleConsumer(PopConsumerCore):
    """A POP consumer: ``receive`` leases messages, ``ack`` settles each (module doc)."""

    received_class = ReceivedMessage

    def start(self) -> None:
        """Start receiving; once only (ClientError after that)."""
        self._start()

    def shutdown(self) -> None:
        """Stop (sending the deferred acks first); messages received and not settled
        come again when their leases end."""
        if self._service_state is ServiceState.RUNNING and self._deferred:
            try:
                self.flush_acks()
            except RayqError as exc:  # those messages come again: at least once
                logger.warning("deferred acks not sent at shutdown: %s", exc)
        self._shutdown()

    def __enter__(self) -> SimpleConsumer:
        if self._service_state is ServiceState.CREATE_JUST:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def receive(
        self, max_messages: int = 32, invisible_duration: float = 30.0
    ) -> list[ReceivedMessage]:
        """Up to ``max_messages`` messages, each invisible to the group's other receivers
        for ``invisible_duration`` seconds; waits up to ``await_duration`` for the first
        (an empty list if none came)."""
        plan = self._receive_plan(max_messages, invisible_duration)
        try:
            topic, broker, req = next(plan)
            while True:
                try:
                    got = self._ctx.broker_calls(
                        {broker: lambda c, r=req: c.pop(r)},  # type: ignore[misc]
                        CALL_TIMEOUT_S + req.wait_ms / 1000,
                    )
                except BrokerUnavailableError as exc:
                    topic, broker, req = plan.throw(exc)
                    continue
                topic, broker, req = plan.send(got[broker])
        except StopIteration as done:
            received: list[ReceivedMessage] = done.value
        for topic, _, handles in self._strays:
            self.ack_handles(handles, topic)
        return received

    def ack(self, msg: Received) -> None:
        """Settle ``msg``: it is not delivered again. InvalidReceiptHandleError if it is
        not in flight any more (acknowledged already, or its lease ended)."""
        self._check_open()
        began_ms = now_ms()
        self.ack_handles([handle_of(msg)], msg.topic)
        self._traced([msg], ACK, began_ms)

    def ack_handle(self, receipt_handle: str, topic: str) -> None:
        """``ack`` by receipt handle (a str that may travel to another process)."""
        self.ack_handles([receipt_handle], topic)

    def ack_handles(self, receipt_handles: list[str], topic: str) -> None:
        """Settle several messages of one broker at once: all, or none with the reason."""
        self._check_open()
        broker, req = self._ack_request(topic, receipt_handles)
        self._ctx.broker_calls({broker: lambda c: c.ack(req)})

    def ack_many(self, msgs: Iterable[Received], *, defer: bool = False) -> None:
        """Settle many messages with one call per broker (each still acked on its own:
        per broker, all or none with the reason). With ``defer``, no call now: the
        acks ride on the next receive from each message's broker (Kafka share groups'
        acknowledgements on the next poll), or go with ``flush_acks`` or ``shutdown``.
        A deferred ack the broker refuses is logged, not raised; if it is lost with a
        failed receive, its message comes again when its lease ends."""
        self._check_open()
        msgs, began_ms = list(msgs), now_ms()
        if defer:
            full = self._defer(msgs)
            if full:
                self._send_acks(self._flush_requests(full))
            self._traced(msgs, ACK, began_ms)
            return
        self._send_acks(self._ack_many_requests(msgs))
        self._traced(msgs, ACK, began_ms)

    def flush_acks(self) -> None:
        """Send the deferred acks now (one call per broker and topic)."""
        self._check_open()
        self._send_acks(self._flush_requests())

    def _send_acks(self, requests: dict[Any, AckRequest]) -> None:
        if requests:
            self._ctx.broker_calls({k: lambda c, r=r: c.ack(r) for k, r in requests.items()})  # type: ignore[misc]

    def change_invisible_duration(self, msg: Received, duration: float) -> None:
        """Make ``msg`` invisible for ``duration`` seconds from now (its lease ends then,
        not before); ``msg.receipt_handle`` is replaced by the lease's new handle."""
        self._check_open()
        self._change(msg, duration_ms(duration, "invisible duration", 1), False)

    def nack(self, msg: Received, delay: float = 0.0) -> None:
        """Give ``msg`` up: it is delivered again after ``delay`` seconds (at once with 0),
        counting one more delivery."""
        self._check_open()
        self._change(msg, duration_ms(delay, "nack delay", 0), True)

    def _change(self, msg: Received, invisible_ms: int, release: bool) -> None:
        broker, req = self._change_request(msg, invisible_ms, release)
        began_ms = now_ms()
        got = self._ctx.broker_calls({broker: lambda c: c.change_invisibility(req)})
        msg.receipt_handle = got[broker].handles[0]
        self._traced([msg], NACK if release else CHANGE_INVISIBLE_DURATION, began_ms)


def handle_of(msg: object) -> str:
    handle = getattr(msg, "receipt_handle", None)
    if not isinstance(handle, str):
        raise ClientError(
            f"ack and change_invisible_duration take a message receive() returned, got "
            f"{type(msg).__name__}"
        )
    return handle


__all__ = [
    "PopConsumerCore",
    "Received",
    "ReceivedMessage",
    "SimpleConsumer",
    "check_max_messages",
    "duration_ms",
    "handle_of",
    "received_as",
]
