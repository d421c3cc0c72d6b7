"""The pull consumer: RocketMQ's lite pull consumer (Kafka's ``poll`` loop) over Ray.

The caller owns the loop::

    consumer = rayq.PullConsumer("lg", consume_from=ConsumeFromWhere.FIRST_OFFSET)
    consumer.subscribe("orders", "TagA || TagB")
    consumer.start()
    while running:
        for msg in consumer.poll(timeout=1.0):
            handle(msg)
    consumer.shutdown()                      # commits (auto_commit) and closes

How a poll works: every assigned, unpaused queue has at most one pull in flight,
sent to its broker's PullHold actor with ``suspend_ms`` (so a queue with nothing
new is parked there: long polling, no client-side sleep-and-retry). ``poll`` sends
the missing pulls, waits (``ray.wait``) until the first replies arrive or
``timeout`` passes, and returns every message that arrived, in queue order per
queue; pulls still in flight are kept for the next poll. The broker filters by
tag hash, the client re-checks the exact tag.

Offsets: the consumer keeps each queue's position (next offset to pull) in memory
and ``commit`` writes the positions to the brokers (one call per broker and
topic); with ``auto_commit`` a poll first commits what the previous polls
returned, every ``auto_commit_interval_ms`` (at-least-once, as in Kafka). A queue
with no committed offset starts at its min offset (FIRST_OFFSET), its max offset
(LAST_OFFSET, for every new group: unlike RocketMQ, which reads a new group's
queues from the start while they are young) or the first message stored at or
after ``consume_timestamp_ms`` (TIMESTAMP; default: half an hour ago).

Sharing: the pull consumers of one group that subscribe to a topic split its
queues among themselves. The coordinator computes each member's share (with the
group's ``allocate_strategy``, over the members that asked within
``member_expiry_ms``); every consumer asks for its share on ``subscribe`` and every
``rebalance_interval_ms`` during ``poll``, commits the positions of queues it gives
up, starts the queues it gets at their committed offsets, and tells the topic's
``MessageQueueListener`` (rayq/consumer/shares.py). ``shutdown`` leaves the group at once.
``assign`` takes queues by hand instead. With ``model=MessageModel.BROADCASTING``
every consumer reads every queue and keeps its offsets in a local file
(``rayq.consumer.offset_store.LocalOffsetStore``, as the push consumer does).

Life cycle (``service_state``, RocketMQ's ``ServiceState``): ``start`` once, from
CREATE_JUST to RUNNING (a second ``start`` raises ClientError); ``shutdown`` to
SHUTDOWN_ALREADY. A consumer is not thread-safe: call it from one thread.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterable
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

from rayq.actors.protocol import (
    ClientRequest,
    ConsumeFromWhere,
    GroupShareRequest,
    MessageModel,
    MessageQueue,
    PullRequest,
    PullResponse,
    PullStatus,
    SendBackItem,
    SendBackRequest,
    epoch_after,
)
from rayq.actors.protocol.config import ClientConfig
from rayq.actors.protocol.enums import AllocateStrategy
from rayq.actors.protocol.limits import DEFAULT_MAX_RECONSUME_TIMES
from rayq.consumer.offset_store import offsets_path
from rayq.consumer.pull_offsets import PullOffsets
from rayq.consumer.selector import MessageSelector, check_sql_brokers, filter_type, to_filter
from rayq.consumer.shares import (
    MessageQueueListener,
    QueueListener,
    as_listener,
    check_share_options,
    tell,
)
from rayq.consumer.start_offsets import (
    check_start_options,
    fresh_start_offsets,
    queue_ends,
)
from rayq.metrics import RECORDER
from rayq.service_state import ServiceState
from rayq.store.codec import decode_records
from rayq.store.errors import (
    BrokerUnavailableError,
    ClientError,
    ClosedError,
    ConfigError,
    InvalidOffsetError,
    RayqError,
    TopicNotFoundError,
)
from rayq.store.filters import TagFilter
from rayq.store.message import MessageExt
from rayq.store.names import validate_group, validate_topic
from rayq.store.sql92 import SqlFilter
from rayq.trace.tracer import Tracer, now_ms
from rayq.transport.base import Reply, Transport
from rayq.transport.context import ClientContext, bind

logger = logging.getLogger(__name__)

POLLED = "POLLED"  # the trace status of a message poll returned

OFFSET_MAX = 2**63 - 1  # a queue offset is a signed 64-bit int on the wire and on disk
OFFSET_CALL_TIMEOUT_S = 30.0  # offset queries and commits
PULL_RETRY_DELAY_S = 3.0  # after a failed pull (RocketMQ PULL_TIME_DELAY_MILLS_WHEN_EXCEPTION)
PULL_STALE_GRACE_S = 15.0  # a pull older than its suspend time plus this is sent again


@dataclass
class _QueueState:
    """One assigned queue: its position, what the broker has, the pull in flight."""

    tag_filter: TagFilter | SqlFilter
    offset: int = -1  # next queue offset to pull; -1 until resolved
    committed: int = -1  # the broker's committed offset as far as we know
    paused: bool = False
    inflight: Any = None  # ObjectRef of the PullHold.pull in flight
    sent_at: float = 0.0
    retry_at: float = 0.0  # monotonic time before which no pull is sent
    backlog: bool = False  # the last pull left messages behind: read the broker directly
    read_from: str = ""  # a slave the broker suggested (far behind), "" for the master
    epoch: int = -1  # the broker epoch ``offset`` was read in (PullRequest.epoch)


class PullConsumer:
    """A consumer whose caller pulls with ``poll``; offsets are the group's, on the brokers."""

    def __init__(
        self,
        group: str,
        *,
        consume_from: ConsumeFromWhere = ConsumeFromWhere.LAST_OFFSET,
        consume_timestamp_ms: int | None = None,
        auto_commit: bool = True,
        model: MessageModel = MessageModel.CLUSTERING,
        allocate_strategy: AllocateStrategy = AllocateStrategy.AVERAGELY,
        allocate_queues: list[MessageQueue] | None = None,
        config: ClientConfig | None = None,
        namespace: str | None = None,
        transport: Transport | None = None,
    ) -> None:
        validate_group(group)
        start_ms = check_start_options(consume_from, consume_timestamp_ms, config, namespace)
        if not isinstance(auto_commit, bool):
            raise ConfigError(f"auto_commit must be a bool, got {auto_commit!r}")
        self._allocation = check_share_options(model, allocate_strategy, allocate_queues)
        if model is MessageModel.BROADCASTING:  # its offsets file: ConfigError now, not later
            cfg = config or ClientConfig()
            offsets_path(cfg.offset_store_dir, cfg.instance_name, group)
        self.group = group
        self.model = model
        self._strategy = allocate_strategy
        self._consume_from = consume_from
        self._consume_timestamp_ms = start_ms
        self._auto_commit = auto_commit
        self._ctx = ClientContext(config, namespace, transport)
        self._config = self._ctx.config
        self._offsets = PullOffsets(
            self._ctx, group, broadcasting=model is MessageModel.BROADCASTING
        )
        self.client_id = self._ctx.client_id
        # message trace: each poll's messages, when trace_enable
        self._tracer = Tracer.open(self._config, group, self.client_id, namespace, transport)
        self._subscriptions: dict[str, TagFilter | SqlFilter] = {}
        self._listeners: dict[str, QueueListener | None] = {}
        self._manual = False
        self._queues: dict[MessageQueue, _QueueState] = {}
        self._pending: dict[Any, MessageQueue] = {}  # pull ref -> its queue
        self._service_state = ServiceState.CREATE_JUST
        self._next_auto_commit = 0.0
        self._next_route_check = 0.0

    # ------------------------------------------------------- subscription
    def subscribe(
        self,
        topic: str,
        expression: str | MessageSelector = "*",
        *,
        listener: MessageQueueListener | QueueListener | None = None,
    ) -> None:
        """Consume ``topic`` (this consumer's share of its queues: see the module doc),
        filtered by ``expression``: ``"*"``, ``"TagA || TagB"``, or a
        ``rayq.MessageSelector`` (``by_sql`` filters by properties on the broker).
        ``listener`` (a ``rayq.MessageQueueListener`` or ``fn(topic, all_queues,
        assigned)``) is told each time this consumer's queues of ``topic`` change."""
        self._check_open()
        validate_topic(topic)
        tag_filter = to_filter(expression)
        told = as_listener(listener)
        if self._manual:
            raise ClientError("this consumer uses assign(); subscribe() and assign() don't mix")
        self._ctx.read_queues(topic, refresh=True)  # TopicNotFoundError for unknown topics
        check_sql_brokers(self._ctx, topic, tag_filter)
        share = self._share(topic)
        self._subscriptions[topic] = tag_filter
        self._listeners[topic] = told
        self._set_topic_queues(topic, share, tag_filter)

    def assign(self, mqs: Iterable[MessageQueue]) -> None:
        """Consume exactly these queues (replacing the previous assignment), all tags."""
        self._check_open()
        wanted = _as_list(mqs)
        if self._subscriptions:
            raise ClientError("this consumer uses subscribe(); subscribe() and assign() don't mix")
        for topic in sorted({mq.topic for mq in wanted}):
            known = set(self._ctx.read_queues(topic, refresh=True))
            missing = sorted(mq for mq in wanted if mq.topic == topic and mq not in known)
            if missing:
                raise InvalidOffsetError(
                    f"no readable queue {missing[0]} in topic {topic!r}; it has {sorted(known)}"
                )
        self._manual = bool(wanted)
        if self._auto_commit and self._started:
            self._commit_quietly()
        for mq in [mq for mq in self._queues if mq not in wanted]:
            self._drop(mq)
        added = [mq for mq in wanted if mq not in self._queues]
        for mq in added:
            self._queues[mq] = _QueueState(TagFilter.parse("*"))
        if self._started:
            self._resolve_offsets(added)

    def assignment(self) -> list[MessageQueue]:
        """The queues this consumer reads, sorted."""
        self._check_open()
        return sorted(self._queues)

    # ---------------------------------------------------------- lifecycle
    @property
    def service_state(self) -> ServiceState:
        """CREATE_JUST, RUNNING (started), SHUTDOWN_ALREADY or START_FAILED."""
        return self._service_state

    @property
    def _started(self) -> bool:
        return self._service_state is ServiceState.RUNNING

    @property
    def _closed(self) -> bool:
        return self._service_state is ServiceState.SHUTDOWN_ALREADY

    def start(self) -> None:
        """Find the starting offset of every queue; once only (ClientError after that)."""
        self._check_open()
        state = self._service_state
        if state is not ServiceState.CREATE_JUST:
            raise ClientError(
                f"the pull consumer of group {self.group!r} is {state.value}: start() may be "
                "called once; make a new PullConsumer to start again",
                state=state.value,
            )
        self._service_state = ServiceState.START_FAILED  # unless what follows succeeds
        self._resolve_offsets([mq for mq, s in self._queues.items() if s.offset < 0])
        self._service_state = ServiceState.RUNNING
        now = time.monotonic()
        self._next_auto_commit = now + self._config.auto_commit_interval_ms / 1000
        self._next_route_check = now + self._config.rebalance_interval_ms / 1000

    def shutdown(self) -> None:
        """Commit (with auto_commit), stop the pulls in flight and close; idempotent."""
        if self._closed:
            return
        try:
            if self._auto_commit and self._started:
                self._commit_quietly()
        finally:
            for mq in list(self._queues):
                self._cancel(self._queues[mq])
            self._service_state = ServiceState.SHUTDOWN_ALREADY
            if self._subscriptions and self.model is MessageModel.CLUSTERING:
                with suppress(RayqError):
                    self._ctx.coordinator.leave_shares(ClientRequest(client_id=self.client_id))
            self._close_tracer()

    def _close_tracer(self) -> None:
        if self._tracer is not None:
            self._tracer.close()  # its trace records written first

    def __enter__(self) -> PullConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # --------------------------------------------------------------- poll
    def poll(self, timeout: float = 1.0) -> list[MessageExt]:
        """Messages that arrived within ``timeout`` seconds ([] if none), in queue order
        per queue; the positions of those queues move past them."""
        deadline = self._poll_deadline(timeout)
        self._maybe_auto_commit()
        self._housekeeping()
        messages: list[MessageExt] = []
        while True:
            self._send_pulls()
            for ref in self._wait(deadline):
                messages.extend(self._take(ref))
            if messages or time.monotonic() >= deadline:
                # the next pulls go out now: they travel (or wait at the hold service)
                # while the caller works on these messages and commits them
                self._send_pulls()
                return messages

    def _poll_deadline(self, timeout: object) -> float:
        """When a poll with ``timeout`` ends (after checking the consumer may poll)."""
        self._check_open()
        timeout_s = _check_timeout(timeout)
        if not self._started:
            raise ClientError("the consumer is not started: call start() before poll()")
        return time.monotonic() + timeout_s

    def _housekeeping_due(self) -> bool:
        """A rebalance or a queue's start offset is due (control-plane calls)."""
        rebalance = bool(self._subscriptions) and time.monotonic() >= self._next_route_check
        return rebalance or any(s.offset < 0 for s in self._queues.values())

    def _housekeeping(self) -> None:
        self._maybe_refresh_routes()
        self._resolve_pending()

    def _sent(self, reply: Reply[PullResponse]) -> None:
        """A pull went out (the asyncio consumer watches its reply)."""

    def _send_pulls(self) -> None:
        """One pull in flight per active queue (a stale one is replaced)."""
        now = time.monotonic()
        stale_s = self._config.broker_suspend_max_ms / 1000 + PULL_STALE_GRACE_S
        for mq, s in self._queues.items():
            if s.paused or s.offset < 0 or now < s.retry_at:
                continue
            if s.inflight is not None:
                if now - s.sent_at <= stale_s:
                    continue
                logger.warning("pull of %s got no answer in %.0f s; sending it again", mq, stale_s)
                self._cancel(s)
            req = PullRequest(
                group=self.group,
                topic=mq.topic,
                queue_id=mq.queue_id,
                queue_offset=s.offset,
                max_nums=self._config.poll_max_messages,
                expression=s.tag_filter.expression,
                expression_type=filter_type(s.tag_filter),
                suspend_ms=0 if s.backlog else self._config.broker_suspend_max_ms,
                client_id=self.client_id,
                epoch=s.epoch,
            )
            try:  # behind: one hop to the broker (or the slave it suggested); caught up:
                # wait at the hold service
                if s.backlog:
                    s.inflight = self._ctx.broker(s.read_from or mq.broker_name).pull(req)
                else:
                    s.inflight = self._ctx.hold(mq.broker_name).pull(req)
            except RayqError as exc:
                self._pull_failed(mq, s, exc)
                continue
            s.sent_at = now
            self._pending[s.inflight] = mq
            self._sent(s.inflight)

    def _wait(self, deadline: float) -> list[Any]:
        """Refs of the replies that are ready: the first ones within the deadline."""
        now = time.monotonic()
        active = [s for s in self._queues.values() if not s.paused]
        wake = min([deadline] + [s.retry_at for s in active if s.retry_at > now])
        replies = [s.inflight for s in active if s.inflight is not None]
        if not replies:
            time.sleep(max(wake - now, 0.0))
            return []
        return self._ctx.transport.wait(replies, max(wake - now, 0.0))

    def _take(self, ref: Reply[PullResponse]) -> list[MessageExt]:
        """The messages of one ready reply; moves that queue's position."""
        mq = self._pending.pop(ref, None)
        if mq is None:
            return []
        s = self._queues.get(mq)
        if s is None or s.inflight is not ref:
            return []
        s.inflight = None
        s.backlog = False
        try:
            resp = ref.result()
        except Exception as exc:  # logged; the queue is pulled again after a delay
            self._pull_failed(mq, s, exc)
            return []
        s.backlog = resp.status is PullStatus.FOUND and resp.records_left
        s.read_from = resp.suggest_replica if s.backlog else ""
        if resp.status is PullStatus.OFFSET_ILLEGAL:
            logger.warning(
                "%s: offset %d is outside %d..%d; moving to %d",
                mq,
                s.offset,
                resp.min_offset,
                resp.max_offset,
                resp.next_offset,
            )
        s.offset = resp.next_offset
        s.epoch = epoch_after(s.epoch, resp)
        RECORDER.lag(self.group, mq, resp.max_offset - resp.next_offset)
        if resp.status is not PullStatus.FOUND:
            return []
        msgs = decode_records(resp.buffer, broker_name=mq.broker_name)
        if s.tag_filter.tags is not None:
            msgs = [m for m in msgs if s.tag_filter.matches_tags(m.tags)]
        if self._tracer is not None:
            self._tracer.consumed(msgs, POLLED, now_ms())
        return msgs

    def _pull_failed(self, mq: MessageQueue, s: _QueueState, exc: BaseException) -> None:
        logger.warning(
            "pull of %s failed (%s: %s); trying again in %.0f s",
            mq,
            type(exc).__name__,
            exc,
            PULL_RETRY_DELAY_S,
        )
        if isinstance(exc, BrokerUnavailableError):
            self._ctx.forget(s.read_from or mq.broker_name)
        s.read_from = ""  # the master again
        s.retry_at = time.monotonic() + PULL_RETRY_DELAY_S

    # ---------------------------------------------------------- positions
    def seek(self, mq: MessageQueue, offset: int) -> None:
        """Make the next poll read ``mq`` from ``offset`` (an offset outside the queue
        moves on the next pull where the broker says: its min offset if below it; past
        its end, the group's committed offset if that is inside the queue, else its min
        offset if that is 0, else its end)."""
        self._check_open()
        s = self._state(mq)
        if offset.__class__ is not int or not 0 <= offset <= OFFSET_MAX:
            raise InvalidOffsetError(
                f"offset must be an int in 0..{OFFSET_MAX} (2**63 - 1), got {offset!r}",
                value=repr(offset),
                limit=OFFSET_MAX,
            )
        self._cancel(s)
        s.offset = offset
        s.epoch = -1
        s.retry_at = 0.0

    def seek_to_begin(self, mq: MessageQueue) -> None:
        """Read ``mq`` from its oldest stored message."""
        self._check_open()
        self._state(mq)
        self.seek(mq, self._queue_ends([mq])[mq][0])

    def seek_to_end(self, mq: MessageQueue) -> None:
        """Read only what arrives in ``mq`` from now on."""
        self._check_open()
        self._state(mq)
        self.seek(mq, self._queue_ends([mq])[mq][1])

    def pause(self, mqs: Iterable[MessageQueue]) -> None:
        """Stop returning messages of these queues until ``resume`` (positions are kept)."""
        self._check_open()
        for s in [self._state(mq) for mq in _as_list(mqs)]:
            s.paused = True

    def resume(self, mqs: Iterable[MessageQueue]) -> None:
        """Return messages of these paused queues again."""
        self._check_open()
        for s in [self._state(mq) for mq in _as_list(mqs)]:
            s.paused = False

    def position(self, mq: MessageQueue) -> int:
        """The next offset ``poll`` reads from ``mq`` (-1 before it is known)."""
        self._check_open()
        return self._state(mq).offset

    def committed(self, mq: MessageQueue) -> int:
        """The group's committed offset of ``mq`` on its broker, or this consumer's in its
        local file when broadcasting (-1: none)."""
        self._check_open()
        _check_mq(mq)
        return self._offsets.read([mq]).get(mq, -1)

    # ---------------------------------------------------------- send-back
    def send_back(
        self,
        msgs: list[MessageExt],
        *,
        delay_level: int = 0,
        max_reconsume_times: int = DEFAULT_MAX_RECONSUME_TIMES,
    ) -> list[str]:
        """Hand failed messages back to their brokers (one call per broker): each copy goes
        to ``%RETRY%<group>`` after delay level ``3 + reconsume_times`` (or ``delay_level``
        if positive), or to ``%DLQ%<group>`` past ``max_reconsume_times`` or with a
        negative ``delay_level``. Returns the topic each copy went to, in input order.
        Subscribe to ``%RETRY%<group>`` to consume the retries."""
        calls, by_broker = self._send_back_calls(msgs, delay_level, max_reconsume_times)
        return send_back_topics(by_broker, self._ctx.broker_calls(calls, OFFSET_CALL_TIMEOUT_S))

    def _send_back_calls(
        self, msgs: list[MessageExt], delay_level: int, max_reconsume_times: int
    ) -> tuple[dict[str, Any], dict[str, list[int]]]:
        """The send-back call per broker, and which of ``msgs`` each one carries."""
        self._check_open()
        if not isinstance(msgs, list | tuple) or not all(isinstance(m, MessageExt) for m in msgs):
            raise ClientError("send_back takes a list of the MessageExt that poll() returned")
        for name, value in (
            ("delay_level", delay_level),
            ("max_reconsume_times", max_reconsume_times),
        ):
            if value.__class__ is not int:
                raise ClientError(f"{name} must be an int, got {value!r}")
        by_broker: dict[str, list[int]] = {}
        for i, m in enumerate(msgs):
            by_broker.setdefault(m.broker_name, []).append(i)
        calls = {
            b: bind(
                lambda c, r: c.send_back(r),
                SendBackRequest(
                    group=self.group,
                    max_reconsume_times=max_reconsume_times,
                    client_id=self.client_id,
                    items=[SendBackItem(msgs[i].commitlog_offset, delay_level) for i in idx],
                ),
            )
            for b, idx in by_broker.items()
        }
        return calls, by_broker

    # ------------------------------------------------------------ commits
    def commit(self) -> None:
        """Write the position of every queue to its broker (one call per broker and topic)."""
        self._check_open()
        self._commit()

    def _commit(self) -> None:
        moved = self._moved()
        self._committed(moved, *self._offsets.commit(moved))

    def _moved(self) -> dict[MessageQueue, int]:
        """The positions that moved since they were last committed (and the next
        auto-commit is due an interval from now)."""
        self._next_auto_commit = time.monotonic() + self._config.auto_commit_interval_ms / 1000
        return {
            mq: s.offset
            for mq, s in self._queues.items()
            if s.offset >= 0 and s.offset != s.committed
        }

    def _committed(
        self, moved: dict[MessageQueue, int], done: list[MessageQueue], error: RayqError | None
    ) -> None:
        for mq in done:
            s = self._queues.get(mq)
            if s is not None:
                s.committed = moved[mq]
        if error is not None:
            raise error

    def _commit_quietly(self) -> None:
        try:
            self._commit()
        except RayqError as exc:  # re-delivered after a restart, never lost
            logger.warning("group %s: committing offsets failed: %s", self.group, exc)

    def _maybe_auto_commit(self) -> None:
        if self._auto_commit and time.monotonic() >= self._next_auto_commit:
            self._commit_quietly()

    # ------------------------------------------------------------ helpers
    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(f"the pull consumer of group {self.group!r} is shut down")

    def _state(self, mq: MessageQueue) -> _QueueState:
        _check_mq(mq)
        s = self._queues.get(mq)
        if s is None:
            raise ClientError(f"{mq} is not assigned to this consumer; see assignment()")
        return s

    def _cancel(self, s: _QueueState) -> None:
        if s.inflight is not None:
            self._pending.pop(s.inflight, None)
            s.inflight.cancel()
            s.inflight = None

    def _drop(self, mq: MessageQueue) -> None:
        self._cancel(self._queues.pop(mq))
        RECORDER.drop_lag(self.group, mq)

    def _set_topic_queues(
        self, topic: str, mqs: list[MessageQueue], tf: TagFilter | SqlFilter
    ) -> None:
        """Make the assignment of ``topic`` exactly ``mqs`` with filter ``tf``; tell the
        topic's listener if that changed it."""
        before = {mq for mq in self._queues if mq.topic == topic}
        self._take_topic_queues(topic, mqs, tf)
        if set(mqs) != before:
            tell(self._listeners.get(topic), topic, self._ctx.read_queues(topic), sorted(mqs))

    def _take_topic_queues(
        self, topic: str, mqs: list[MessageQueue], tf: TagFilter | SqlFilter
    ) -> None:
        gone = [mq for mq in self._queues if mq.topic == topic and mq not in mqs]
        if gone and self._started:  # the next owner starts where this one got to
            self._commit_quietly()
        for mq in gone:
            self._drop(mq)
        added = []
        for mq in mqs:
            s = self._queues.get(mq)
            if s is None:
                self._queues[mq] = _QueueState(tf)
                added.append(mq)
            elif s.tag_filter != tf:
                self._cancel(s)
                s.tag_filter = tf
        if self._started:
            self._resolve_offsets(added)

    def _maybe_refresh_routes(self) -> None:
        """Rebalance: take this member's current share of every subscribed topic."""
        if not self._subscriptions or time.monotonic() < self._next_route_check:
            return
        self._next_route_check = time.monotonic() + self._config.rebalance_interval_ms / 1000
        for topic, tf in self._subscriptions.items():
            try:
                self._set_topic_queues(topic, self._share(topic), tf)
            except RayqError as exc:
                logger.warning("group %s: rebalancing %r failed: %s", self.group, topic, exc)

    def _share(self, topic: str) -> list[MessageQueue]:
        """This member's queues of ``topic`` (the coordinator splits them among the group;
        broadcasting: all of them)."""
        if self.model is MessageModel.BROADCASTING:
            return self._ctx.read_queues(topic, refresh=True)
        req = GroupShareRequest(
            group=self.group,
            topic=topic,
            client_id=self.client_id,
            expiry_ms=self._config.member_expiry_ms,
            strategy=self._strategy,
            allocation=[q for q in self._allocation if q.topic == topic],
        )
        share = self._ctx.coordinator.group_share(req).result(OFFSET_CALL_TIMEOUT_S).queues
        if share is None:
            raise TopicNotFoundError(f"topic {topic!r} does not exist on any broker", topic=topic)
        return list(share)

    def _resolve_pending(self) -> None:
        pending = [mq for mq, s in self._queues.items() if s.offset < 0]
        if pending:
            try:
                self._resolve_offsets(pending)
            except RayqError as exc:
                logger.warning("group %s: finding start offsets failed: %s", self.group, exc)

    def _resolve_offsets(self, mqs: list[MessageQueue]) -> None:
        """Start each queue at its committed offset, else where ``consume_from`` says."""
        if not mqs:
            return
        committed = self._offsets.read(mqs)
        for mq, offset in committed.items():
            self._queues[mq].offset = self._queues[mq].committed = offset
        fresh = [mq for mq in mqs if mq not in committed]
        starts = fresh_start_offsets(
            self._ctx, fresh, self._consume_from, self._consume_timestamp_ms
        )
        for mq, offset in starts.items():
            self._queues[mq].offset = offset

    def _queue_ends(self, mqs: list[MessageQueue]) -> dict[MessageQueue, tuple[int, int]]:
        return queue_ends(self._ctx, mqs)


def send_back_topics(by_broker: dict[str, list[int]], got: dict[str, Any]) -> list[str]:
    """The topic each sent-back message went to, in the order they were given."""
    topics = [""] * sum(len(idx) for idx in by_broker.values())
    for b, idx in by_broker.items():
        for i, topic in zip(idx, got[b].topics, strict=True):
            topics[i] = topic
    return topics


# --------------------------------------------------------------- validation
def _check_timeout(timeout: object) -> float:
    if (
        not isinstance(timeout, int | float)
        or isinstance(timeout, bool)
        or not math.isfinite(timeout)
        or timeout < 0
    ):
        raise ConfigError(
            f"timeout must be a number of seconds >= 0, got {timeout!r}",
            value=repr(timeout),
            limit=0,
        )
    return float(timeout)


def _check_mq(mq: object) -> None:
    if not isinstance(mq, MessageQueue):
        raise ClientError(f"expected a rayq MessageQueue, got {type(mq).__name__}")
    validate_topic(mq.topic)


def _as_list(mqs: object) -> list[MessageQueue]:
    """One ``MessageQueue`` or an iterable of them, as a list; ClientError for anything else."""
    if isinstance(mqs, MessageQueue):
        return [mqs]
    if mqs is None or isinstance(mqs, str | bytes) or not isinstance(mqs, Iterable):
        raise ClientError(
            f"expected a list of rayq.MessageQueue, got {type(mqs).__name__} {mqs!r}",
            value=repr(mqs),
        )
    wanted = list(mqs)
    for mq in wanted:
        _check_mq(mq)
    return wanted


__all__ = ["ConsumeFromWhere", "PullConsumer", "check_start_options"]
