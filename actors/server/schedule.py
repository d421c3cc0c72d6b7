"""Delayed delivery: RocketMQ's ``ScheduleMessageService``, plus exact delivery times.

A message with a ``DELAY`` property (level L > 0) or a ``__DELIVER_AT_MS`` property
is not appended to its topic but parked in ``SCHEDULE_TOPIC_XXXX``, and appended
to its real topic and queue as a new record when it is due. Ordinary records of the
commit log and consume queues hold everything; no file of its own.

On-disk layout::

    consumequeue/SCHEDULE_TOPIC_XXXX/<L-1>/...   level L (1..1022): arrival order;
                                                 due at store_timestamp + delay(L)
    consumequeue/SCHEDULE_TOPIC_XXXX/1023/...    deliver-at messages: arrival order;
                                                 due at their __DELIVER_AT_MS property
    config/delayOffset.json  offset_table {L: next queue offset to deliver of level L}
                             deliver_at {low_offset, last_due_ms, last_offset}

A parked record is the producer's record with topic ``SCHEDULE_TOPIC_XXXX``, the
queue above, and two more properties: ``REAL_TOPIC`` and ``REAL_QID``. ``DELAY``
holds the level after clamping (levels above the table wait as long as the last
one). ``__DELIVER_AT_MS`` is rewritten to ``max(asked, last delivered due time)``,
so that a new deliver-at message always sorts after everything delivered so far
(see below). The delivered record is the parked one with its real topic and queue,
without REAL_TOPIC, REAL_QID, DELAY and __DELIVER_AT_MS, and with its tags, keys,
UNIQ_KEY (so its msg id), body, flags, born time/host and reconsume times; it gets
a new store time, commit-log offset and queue offset.

Levels: a level's queue is in arrival order, and so in due order; each tick delivers
from the level's offset while the head is due and moves the offset past what it
delivered. The head's due time is remembered, so an idle tick reads nothing.

Deliver-at queue: arrival order is not due order. Its (due, queue offset) pairs are
kept in a min-heap in memory (16 bytes each, no bodies), loaded from the queue as
it grows and rebuilt from it on open: every entry at or above ``low_offset`` whose
(due, offset) is above (``last_due_ms``, ``last_offset``) is still to deliver.
That works because entries are delivered in (due, offset) order and a new one never
sorts before the last delivered (its due time is raised to at least that one's and
its offset is larger). Nothing is delivered before its due time; a tick (100 ms, or
sooner when something is due sooner) delivers it.

Progress is at-least-once: level offsets and deliver-at progress live in the
``DelayOffsetTable`` and reach disk when the broker persists its tables (every
``persist_offset_interval_ms``, and on close). A crash re-delivers what was
delivered since the last persist; with ASYNC_FLUSH a machine crash can lose
delivered records not yet flushed, as any message. Records removed by retention
before they were due are skipped with a warning: keep ``file_reserved_hours`` above
the longest delay.

Not thread-safe: the owner serialises ``put``, ``tick`` and ``sync_progress`` with
every other append to the store.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Callable, Sequence
from typing import Final, TypeVar

import msgspec

from rayq.actors.protocol import ScheduleStats
from rayq.actors.protocol.delay_levels import DELIVER_AT_QUEUE_ID, DelayLevels
from rayq.actors.protocol.limits import DELIVER_AT_MAX_AHEAD_MS as DELIVER_AT_MAX_AHEAD_MS
from rayq.actors.server.table_files import SCHEDULE_TOPIC, DeliverAtProgress
from rayq.actors.server.tables import DelayOffsetTable
from rayq.store import properties as P
from rayq.store.batch import BatchRejected, EncodedBatch, check_encoded
from rayq.store.clock import Clock
from rayq.store.codec import decode_record, decode_records
from rayq.store.errors import InvalidMessageError
from rayq.store.message import GetStatus, InnerMessage, MessageExt, PutResult, PutStatus
from rayq.store.message_store import MessageStore

logger = logging.getLogger(__name__)

SCHEDULE_TICK_MS: Final[int] = 100  # longest sleep between ticks (RocketMQ DELAY_FOR_A_WHILE)
MIN_TICK_MS: Final[int] = 5
DELIVER_MAX_PER_TICK: Final[int] = 2048  # per queue, so one tick stays short
CLOCK_SKEW_MS: Final[int] = 60_000  # the broker allows the producer's clock to be this far ahead
READ_BATCH: Final[int] = 32
_GROUP: Final[str] = "SCHEDULE"  # get_messages wants a group; offsets are ours
QueueTouched = dict[tuple[str, int], int]


class ScheduleService:
    """Parks scheduled messages in SCHEDULE_TOPIC_XXXX and delivers them when due.

    ``accept(topic)`` (optional) says whether a real topic still takes messages; a
    due message whose topic was deleted is dropped with a warning.
    """

    def __init__(
        self,
        store: MessageStore,
        offsets: DelayOffsetTable,
        levels: DelayLevels,
        *,
        clock: Clock | None = None,
        accept: Callable[[str], bool] | None = None,
    ) -> None:
        self.store = store
        self.offsets = offsets
        self.levels = levels
        self.clock = clock or store.clock
        self._accept = accept
        self._head_due: dict[int, int] = {}  # level -> due time of its (not yet due) head
        progress = offsets.deliver_at
        self._last = (progress.last_due_ms, progress.last_offset)
        self._scan = progress.low_offset  # next deliver-at offset to load into the heap
        self._heap: list[tuple[int, int]] = []  # (due ms, queue offset), not yet delivered
        parked = store.queue_ids(SCHEDULE_TOPIC)
        beyond = [q + 1 for q in parked if levels.count <= q < DELIVER_AT_QUEUE_ID]
        if beyond:
            logger.warning(
                "delay levels %s have waiting messages but are beyond the table "
                "%r: they wait as long as its last level",
                beyond,
                levels.spec,
            )
        self._levels = list(range(1, levels.count + 1)) + beyond
        self._load_deliver_at()
        logger.info(
            "schedule service: %d delay levels, %d deliver-at messages waiting",
            levels.count,
            len(self._heap),
        )

    # ------------------------------------------------------------ parking
    def put_batch(self, batch: EncodedBatch) -> PutResult:
        """Append a producer batch marked ``scheduled``, its scheduled records parked.

        MESSAGE_ILLEGAL, nothing written, for a batch that fails ``check_encoded`` or is marked
        ``scheduled`` without any record carrying DELAY or __DELIVER_AT_MS."""
        cfg = self.store.config
        try:
            starts, _ = check_encoded(
                batch, cfg.max_message_size_bytes, cfg.max_properties_size_bytes
            )
        except (BatchRejected, InvalidMessageError) as exc:
            return PutResult(status=PutStatus.MESSAGE_ILLEGAL, error=str(exc))
        records = batch.records
        msgs = [decode_record(records, s, decompress=False).to_inner() for s in starts.tolist()]
        if not any(P.DELAY in m.properties or P.DELIVER_AT_MS in m.properties for m in msgs):
            return PutResult(
                status=PutStatus.MESSAGE_ILLEGAL,
                error=f"the batch for {batch.topic}/{batch.queue_id} is marked scheduled but none "
                f"of its {batch.count} records has a {P.DELAY} or {P.DELIVER_AT_MS} property; "
                "encode it with rayq.store.encode_batch, which sets the mark",
            )
        return self.put(msgs)

    def put(self, msgs: Sequence[InnerMessage]) -> PutResult:
        """Append messages (any topics), parking the scheduled ones: all or none."""
        try:
            routed = [self.route(m) for m in msgs]
        except InvalidMessageError as exc:
            return PutResult(status=PutStatus.MESSAGE_ILLEGAL, error=str(exc))
        return self.store.put_messages(routed)

    def route(self, msg: InnerMessage) -> InnerMessage:
        """Where ``msg`` is appended: itself, or its parked copy if it is scheduled."""
        props = msg.properties
        if not props or (P.DELAY not in props and P.DELIVER_AT_MS not in props):
            return msg
        level = _int_property(props, P.DELAY, 0)
        at = _int_property(props, P.DELIVER_AT_MS, None)
        if msg.topic == SCHEDULE_TOPIC:
            raise InvalidMessageError(f"{SCHEDULE_TOPIC} is a system topic; send to a real one")
        parked = dict(props)
        parked[P.REAL_TOPIC] = msg.topic
        parked[P.REAL_QID] = str(msg.queue_id)
        if at is not None:
            if level > 0:
                raise InvalidMessageError(
                    "a message has a delay level or a delivery time, not both", value=level
                )
            latest = self.clock.now_ms() + DELIVER_AT_MAX_AHEAD_MS + CLOCK_SKEW_MS
            if not 0 <= at <= latest:
                raise InvalidMessageError(
                    f"deliver_at_ms={at} must be epoch ms at most 3 days ahead (<= {latest})",
                    value=at,
                    limit=latest,
                )
            parked[P.DELIVER_AT_MS] = str(max(at, self._last[0]))
            queue_id = DELIVER_AT_QUEUE_ID
        elif level > 0:
            level = self.levels.clamp(level)
            parked[P.DELAY] = str(level)
            queue_id = level - 1
        else:
            return msg  # DELAY <= 0: not delayed (RocketMQ)
        return msgspec.structs.replace(
            msg, topic=SCHEDULE_TOPIC, queue_id=queue_id, properties=parked
        )

    # ----------------------------------------------------------- delivery
    def tick(self) -> QueueTouched:
        """Deliver what is due; returns each real queue written with its new max offset."""
        now = self.clock.now_ms()
        touched: QueueTouched = {}
        for level in self._levels:
            self._tick_level(level, now, touched)
        self._tick_deliver_at(now, touched)
        return touched

    def next_wait_ms(self) -> int:
        """How long the owner may sleep before the next tick (at most SCHEDULE_TICK_MS)."""
        dues = list(self._head_due.values())
        if self._heap:
            dues.append(self._heap[0][0])
        if not dues:
            return SCHEDULE_TICK_MS
        return max(MIN_TICK_MS, min(SCHEDULE_TICK_MS, min(dues) - self.clock.now_ms()))

    def _tick_level(self, level: int, now: int, touched: QueueTouched) -> None:
        head = self._head_due.get(level)
        if head is not None and head > now:
            return
        delay = self.levels.delay_ms(level)
        offset = self.offsets.get(level)
        due, after, head = self._due_run(
            level - 1, offset, now, lambda m: m.store_timestamp + delay
        )
        if due and not self._deliver(due, touched):
            return  # disk full: the same messages next tick
        if after != offset:
            self.offsets.set(level, after)
        if head is None:
            self._head_due.pop(level, None)
        else:
            self._head_due[level] = head

    def _due_run(
        self, queue_id: int, offset: int, now: int, due_of: Callable[[MessageExt], int]
    ) -> tuple[list[MessageExt], int, int | None]:
        """The due messages of a queue from ``offset``, the offset after them, and the
        due time of the first message not due yet (None if none is waiting)."""
        out: list[MessageExt] = []
        hi = self.store.max_offset(SCHEDULE_TOPIC, queue_id)
        while offset < hi and len(out) < DELIVER_MAX_PER_TICK:
            got = self.store.get_messages(_GROUP, SCHEDULE_TOPIC, queue_id, offset, READ_BATCH)
            if got.status is GetStatus.FOUND:
                for msg in decode_records(got.buffer, decompress=False):
                    due = due_of(msg)
                    if due > now:
                        return out, msg.queue_offset, due
                    out.append(msg)
                offset = got.next_begin_offset
            elif got.next_begin_offset > offset:  # holes, or records removed by retention
                if got.status is GetStatus.OFFSET_TOO_SMALL:
                    logger.warning(
                        "%s queue %d: offsets %d..%d were removed before delivery",
                        SCHEDULE_TOPIC,
                        queue_id,
                        offset,
                        got.next_begin_offset,
                    )
                offset = got.next_begin_offset
            else:
                break
        return out, offset, None

    def _tick_deliver_at(self, now: int, touched: QueueTouched) -> None:
        self._load_deliver_at()
        heap = self._heap
        popped: list[tuple[int, int]] = []
        while heap and heap[0][0] <= now and len(popped) < DELIVER_MAX_PER_TICK:
            popped.append(heapq.heappop(heap))
        if not popped:
            return
        msgs = []
        for _, queue_offset in popped:
            got = self.store.get_messages(
                _GROUP, SCHEDULE_TOPIC, DELIVER_AT_QUEUE_ID, queue_offset, 1
            )
            found = decode_records(got.buffer, decompress=False) if got.count else []
            if found and found[0].queue_offset == queue_offset:
                msgs.append(found[0])
            else:
                logger.warning(
                    "deliver-at message at %s queue offset %d is gone (%s); skipped",
                    SCHEDULE_TOPIC,
                    queue_offset,
                    got.status.value,
                )
        if not self._deliver(msgs, touched):
            for entry in popped:
                heapq.heappush(heap, entry)
            return
        self._last = popped[-1]  # popped in (due, offset) order: the largest so far

    def _load_deliver_at(self) -> None:
        """Add the deliver-at queue's entries past the scan point to the heap."""
        offset = self._scan
        hi = self.store.max_offset(SCHEDULE_TOPIC, DELIVER_AT_QUEUE_ID)
        while offset < hi:
            got = self.store.get_messages(
                _GROUP, SCHEDULE_TOPIC, DELIVER_AT_QUEUE_ID, offset, READ_BATCH
            )
            if got.status is GetStatus.FOUND:
                for msg in decode_records(got.buffer, decompress=False):
                    key = (_due_at(msg), msg.queue_offset)
                    if key > self._last:
                        heapq.heappush(self._heap, key)
                offset = got.next_begin_offset
            elif got.next_begin_offset > offset:
                offset = got.next_begin_offset
            else:
                break
        self._scan = offset

    def _deliver(self, msgs: list[MessageExt], touched: QueueTouched) -> bool:
        """Append each parked message to its real queue; False if the disk is full."""
        real = [r for r in map(self._restore, msgs) if r is not None]
        if not real:
            return True
        result = self.store.put_messages(real)
        if not result.ok and result.status is not PutStatus.DISK_FULL:
            # One bad record must not block its queue: append one by one, drop what fails.
            for msg in real:
                one = self.store.put_messages([msg])
                if one.status is PutStatus.DISK_FULL:
                    result = one
                    break
                if not one.ok:
                    logger.error(
                        "scheduled message %s for %s dropped: %s",
                        msg.uniq_key,
                        msg.topic,
                        one.error,
                    )
            else:
                result = PutResult(status=PutStatus.PUT_OK)
        if result.status is PutStatus.DISK_FULL:
            logger.warning("scheduled messages wait: %s", result.error)
            return False
        for msg in real:
            key = (msg.topic, msg.queue_id)
            touched[key] = self.store.max_offset(*key)
        return True

    def _restore(self, parked: MessageExt) -> InnerMessage | None:
        """The record to deliver for a parked message (None: it cannot be delivered)."""
        msg = parked.to_inner()
        props = msg.properties
        topic = props.pop(P.REAL_TOPIC, None)
        queue_id = props.pop(P.REAL_QID, None)
        props.pop(P.DELAY, None)
        props.pop(P.DELIVER_AT_MS, None)
        if topic is None or queue_id is None or not queue_id.isdigit():
            logger.error(
                "parked message at %s:%d has no REAL_TOPIC/REAL_QID; dropped",
                SCHEDULE_TOPIC,
                parked.queue_offset,
            )
            return None
        if self._accept is not None and not self._accept(topic):
            logger.warning(
                "scheduled message %s dropped: its topic %r is gone", msg.uniq_key, topic
            )
            return None
        return msgspec.structs.replace(msg, topic=topic, queue_id=int(queue_id))

    # ----------------------------------------------------------- progress
    def sync_progress(self) -> None:
        """Write the deliver-at progress into the offset table (levels are always there)."""
        low = min(offset for _, offset in self._heap) if self._heap else self._scan
        self.offsets.set_deliver_at(
            DeliverAtProgress(
                low_offset=low, last_due_ms=max(self._last[0], 0), last_offset=self._last[1]
            )
        )

    def stats(self) -> ScheduleStats:
        return ScheduleStats(
            levels={
                lv: (self.offsets.get(lv), self.store.max_offset(SCHEDULE_TOPIC, lv - 1))
                for lv in self._levels
            },
            deliver_at_pending=len(self._heap),
            deliver_at_max_offset=self.store.max_offset(SCHEDULE_TOPIC, DELIVER_AT_QUEUE_ID),
        )


_Default = TypeVar("_Default", int, None)


def _int_property(props: dict[str, str], name: str, default: _Default) -> int | _Default:
    text = props.get(name)
    if text is None:
        return default
    try:
        return int(text)
    except ValueError:
        raise InvalidMessageError(
            f"property {name}={text!r} must be an integer", name=name, value=text
        ) from None


def _due_at(parked: MessageExt) -> int:
    """A parked deliver-at message's due time (written by ``route``; 0 if unreadable)."""
    try:
        return int(parked.properties.get(P.DELIVER_AT_MS, "0"))
    except ValueError:
        return 0
