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
from typing import Any

from rayq.actors.protocol import ConsumeFromWhere
from rayq.actors.protocol.config import ClientConfig
from rayq.actors.protocol.pop import (
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
)
from rayq.store.filters import TagFilter
from rayq.store.message import MessageExt
from rayq.store.names import validate_group, validate_topic
from rayq.store.sql92 import SqlFilter
from rayq.transport.base import Transport
from rayq.transport.context import CALL_TIMEOUT_S, ClientContext

logger = logging.getLogger(__name__)


class ReceivedMessage(MessageExt):
    """A message a ``SimpleConsumer`` received: a ``MessageExt`` with its lease's
    ``receipt_handle`` (what ``ack`` and ``change_invisible_duration`` name; a new one
    after each change) and its ``delivery_count`` (1 the first time)."""

    __slots__ = ("delivery_count", "receipt_handle")

    receipt_handle: str
    delivery_count: int

    def __reduce__(self) -> tuple[Any, ...]:
        # a copy for another process (a Ray task that settles it) keeps handle and count
        rebuild, args = super().__reduce__()[:2]
        return _rebuild_received, (rebuild, args, self.receipt_handle, self.delivery_count)


def _rebuild_received(
    rebuild: Any, args: tuple[Any, ...], receipt_handle: str, delivery_count: int
) -> ReceivedMessage:
    msg: ReceivedMessage = rebuild(*args)
    msg.receipt_handle, msg.delivery_count = receipt_handle, delivery_count
    return msg


_SLOTS = tuple(MessageExt.__slots__)


def _received(msg: MessageExt, handle: str) -> ReceivedMessage:
    out = ReceivedMessage.__new__(ReceivedMessage)
    for name in _SLOTS:
        try:
            value = object.__getattribute__(msg, name)
        except AttributeError:
            continue
        object.__setattr__(out, name, value)
    out.receipt_handle = handle
    out.delivery_count = msg.reconsume_times + 1
    origin = out.properties.get(P.RETRY_TOPIC)
    if origin:  # a redelivery, read from %RETRY%<group>: shown as the topic it was sent to
        out.topic = origin
    return out


def _ms(seconds: object, what: str, least: int) -> int:
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


class SimpleConsumer:
    """A POP consumer: ``receive`` leases messages, ``ack`` settles each (module doc)."""

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
        wait = _ms(await_duration, "await_duration", 0) if await_duration else 0
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
        self._subscriptions: dict[str, TagFilter | SqlFilter] = {}
        self._turns = itertools.count()
        self._service_state = ServiceState.CREATE_JUST

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

    def start(self) -> None:
        """Start receiving; once only (ClientError after that)."""
        self._check_open()
        if self._service_state is not ServiceState.CREATE_JUST:
            raise ClientError(
                f"the simple consumer of group {self.group!r} is "
                f"{self._service_state.value}: start() may be called once"
            )
        self._service_state = ServiceState.RUNNING

    def shutdown(self) -> None:
        """Stop; messages received and not settled come again when their leases end."""
        self._service_state = ServiceState.SHUTDOWN_ALREADY

    def __enter__(self) -> SimpleConsumer:
        if self._service_state is ServiceState.CREATE_JUST:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # -------------------------------------------------------------- receive
    def receive(
        self, max_messages: int = 32, invisible_duration: float = 30.0
    ) -> list[ReceivedMessage]:
        """Up to ``max_messages`` messages, each invisible to the group's other receivers
        for ``invisible_duration`` seconds; waits up to ``await_duration`` for the first
        (an empty list if none came)."""
        self._check_running()
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
        invisible_ms = _ms(invisible_duration, "invisible_duration", 1)
        if not self._subscriptions:
            raise ClientError("subscribe to a topic before receive()")
        targets = self._targets()
        if not targets:
            return []
        turn = next(self._turns)
        order = [targets[(turn + i) % len(targets)] for i in range(len(targets))]
        out: list[ReceivedMessage] = []
        failed: BrokerUnavailableError | None = None
        for topic, broker in order:
            try:
                out += self._pop(topic, broker, max_messages - len(out), invisible_ms, 0)
            except BrokerUnavailableError as exc:
                failed = exc
                logger.warning("receive from broker %s failed: %s", broker, exc)
            if len(out) >= max_messages:
                return out
        if out or not self._wait_ms:
            if not out and failed is not None and len(order) == 1:
                raise failed
            return out
        topic, broker = order[0]
        return self._pop(topic, broker, max_messages, invisible_ms, self._wait_ms)

    def _targets(self) -> list[tuple[str, str]]:
        """(topic, broker) for each subscribed topic and broker holding queues of it."""
        out = []
        for topic in self._subscriptions:
            brokers = sorted({q.broker_name for q in self._ctx.read_queues(topic)})
            out += [(topic, b) for b in brokers]
        return out

    def _pop(
        self, topic: str, broker: str, most: int, invisible_ms: int, wait_ms: int
    ) -> list[ReceivedMessage]:
        f = self._subscriptions[topic]
        req = PopRequest(
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
        got: dict[str, PopResponse] = self._ctx.broker_calls(
            {broker: lambda c: c.pop(req)}, CALL_TIMEOUT_S + wait_ms / 1000
        )
        resp = got[broker]
        if not resp.count:
            return []
        msgs = decode_records(resp.buffer, broker_name=broker)
        received = [_received(m, h) for m, h in zip(msgs, resp.handles, strict=True)]
        if f.tags is None:
            return received
        # the broker filtered by tag hash; a message whose tag only collides is not ours
        kept = [m for m in received if f.matches_tags(m.tags)]
        stray = [m.receipt_handle for m in received if not f.matches_tags(m.tags)]
        if stray:
            self._settle(topic, broker, stray)
        return kept

    # --------------------------------------------------------------- settle
    def ack(self, msg: ReceivedMessage) -> None:
        """Settle ``msg``: it is not delivered again. InvalidReceiptHandleError if it is
        not in flight any more (acknowledged already, or its lease ended)."""
        self._check_open()
        self.ack_handle(_handle_of(msg), msg.topic)

    def ack_handle(self, receipt_handle: str, topic: str) -> None:
        """``ack`` by receipt handle (a str that may travel to another process)."""
        self._check_open()
        broker = decode_handle(receipt_handle).broker
        self._settle(topic, broker, [receipt_handle])

    def _settle(self, topic: str, broker: str, handles: list[str]) -> None:
        req = AckRequest(client_id=self.client_id, group=self.group, topic=topic, handles=handles)
        self._ctx.broker_calls({broker: lambda c: c.ack(req)})

    def change_invisible_duration(self, msg: ReceivedMessage, duration: float) -> None:
        """Make ``msg`` invisible for ``duration`` seconds from now (its lease ends then,
        not before); ``msg.receipt_handle`` is replaced by the lease's new handle."""
        self._check_open()
        msg.receipt_handle = self._change(msg, _ms(duration, "invisible duration", 1), False)

    def nack(self, msg: ReceivedMessage, delay: float = 0.0) -> None:
        """Give ``msg`` up: it is delivered again after ``delay`` seconds (at once with 0),
        counting one more delivery."""
        self._check_open()
        msg.receipt_handle = self._change(msg, _ms(delay, "nack delay", 0), True)

    def _change(self, msg: ReceivedMessage, invisible_ms: int, release: bool) -> str:
        handle = _handle_of(msg)
        broker = decode_handle(handle).broker
        req = ChangeInvisibilityRequest(
            client_id=self.client_id,
            group=self.group,
            topic=msg.topic,
            handles=[handle],
            invisible_ms=invisible_ms,
            release=release,
        )
        got = self._ctx.broker_calls({broker: lambda c: c.change_invisibility(req)})
        return got[broker].handles[0]

    # ---------------------------------------------------------------- checks
    def _check_open(self) -> None:
        if self._service_state is ServiceState.SHUTDOWN_ALREADY:
            raise ClosedError(f"the simple consumer of group {self.group!r} is shut down")

    def _check_running(self) -> None:
        self._check_open()
        if self._service_state is not ServiceState.RUNNING:
            raise ClientError("start() the simple consumer before receive()")


def _handle_of(msg: Any) -> str:
    handle = getattr(msg, "receipt_handle", None)
    if not isinstance(handle, str):
        raise ClientError(
            f"ack and change_invisible_duration take a message receive() returned, got "
            f"{type(msg).__name__}"
        )
    return handle


__all__ = ["ReceivedMessage", "SimpleConsumer"]
