"""The POP processor (RocketMQ 5's ``PopMessageProcessor``, ``AckMessageProcessor``,
``ChangeInvisibleTimeProcessor`` and ``PopReviveService``): receive with a lease,
acknowledge per message, change a lease, and revive the leases that ended.

A pop reads the group's queues of a topic (and of its retry topic ``%RETRY%<group>``)
from their cursors with the pull processor's reads, so tag and SQL92 filters apply as
they do for pulls; it starts at another queue each time so that no queue starves. Every
message it returns is leased; a lease that ends unsettled copies the message to the retry
topic with ``reconsume_times`` one higher (at once: the invisible time was the wait), or
to ``%DLQ%<group>`` past the group's ``retry_max_times``, as a send-back does. The
state, its log and its recovery are in pop_state.py.

Orderly POP (one message group in flight per queue) is not offered: POP gives up queue
ownership, which is what orders a queue; ordered consumers use the push or pull consumer.

A part of ``BrokerServer`` (broker_server.py); no Ray.
"""

from __future__ import annotations

import logging
import os
import struct
from typing import TYPE_CHECKING, Final

import msgspec

from rayq.actors.protocol import Done, PullRequest, PullStatus
from rayq.actors.protocol.enums import ConsumeFromWhere
from rayq.actors.protocol.pop import (
    AckRequest,
    ChangeInvisibilityReply,
    ChangeInvisibilityRequest,
    PopRequest,
    PopResponse,
    ReceiptHandle,
    decode_handle,
    encode_handle,
    encode_handles,
)
from rayq.actors.server.pop_state import (
    POP_LOG_TOPIC,
    Lease,
    PopLogEntry,
    PopState,
    QueueKey,
    decode_entries,
    encode_entries,
    group_by_queue,
)
from rayq.actors.server.processor_base import ProcessorBase, check_not_system
from rayq.actors.server.send_back import prepare_send_back
from rayq.actors.server.send_processor import raise_for_put
from rayq.store import codec
from rayq.store import properties as P
from rayq.store.batch import encode_batch
from rayq.store.errors import (
    InvalidReceiptHandleError,
    RayqError,
)
from rayq.store.message import GetStatus, InnerMessage
from rayq.store.names import is_retry_topic, retry_topic

if TYPE_CHECKING:
    from rayq.actors.protocol import PullResponse

logger = logging.getLogger(__name__)

_POSITIONS: Final = struct.Struct(">i8xqq")  # total_size, queue offset, commit-log offset
REVIVE_BATCH: Final[int] = 1024  # leases revived per tick at most
_REPLAY_PAGE: Final[int] = 1024


class PopProcessor(ProcessorBase):
    """POP receive, ack and lease changes over the broker's state and ``pop_state``."""

    pop_state: PopState
    _pop_turns: dict[str, int]

    if TYPE_CHECKING:

        def pull(self, req: PullRequest, max_bytes: int | None = None) -> PullResponse: ...

    # ------------------------------------------------------------------ pop
    def pop(self, req: PopRequest) -> PopResponse:
        """Lease up to ``req.max_nums`` messages of ``req.topic`` (and of the group's
        retry topic) to the caller; nothing found is an empty answer (the endpoint waits)."""
        self._check_master("takes no POP receives (POP reads and writes the master)")
        check_not_system(req.topic)
        _, cfg = self.readable(req.group, req.topic)
        queues = [(req.topic, q) for q in range(cfg.read_queue_nums)]
        retry = self.tables.topics.get(retry_topic(req.group))
        if retry is not None:
            queues += [(retry.topic_name, q) for q in range(retry.read_queue_nums)]
        turn = self._pop_turns.get(req.group, 0)
        self._pop_turns[req.group] = turn + 1
        parts: list[bytes] = []
        handles: list[str] = []
        entries: list[PopLogEntry] = []
        acked: list[PopLogEntry] = []
        ack_error = ""
        now = self.store.clock.now_ms()
        deadline = now + req.invisible_ms
        lease = _new_lease()  # this receive's, for its handles
        room = self.config.pull_max_bytes  # a receive answers at most what a pull does
        with self.pop_state.lock:
            if req.acks:  # deferred acks first: what they settle may be taken again
                try:
                    acked = self._acks(req.group, req.acks)
                except InvalidReceiptHandleError as exc:
                    ack_error = exc.message
            for i in range(len(queues)):
                left = req.max_nums - len(handles)
                if left <= 0 or room <= 0:
                    break
                topic, queue_id = queues[(turn + i) % len(queues)]
                got = self._take(req, topic, queue_id, left, deadline, lease, room)
                if got is not None:
                    room -= len(got[0])
                    parts.append(got[0])
                    handles += got[1]
                    entries.append(got[2])
            if entries or acked:
                self._log(acked + entries)  # one record for the whole call, before the answer
            for entry in acked:
                self._commit_floor(entry.key)
        return PopResponse(
            buffer=b"".join(parts), count=len(handles), handles=handles, ack_error=ack_error
        )

    def _take(
        self,
        req: PopRequest,
        topic: str,
        queue_id: int,
        most: int,
        deadline: int,
        lease: int,
        room: int,
    ) -> tuple[bytes, list[str], PopLogEntry] | None:
        """Read one queue from its cursor: the records, their handles and the entry that
        leases them (for the caller to log)."""
        key = (req.group, topic, queue_id)
        cursor = self._cursor(key, req.consume_from)
        read = PullRequest(
            group=req.group,
            topic=topic,
            queue_id=queue_id,
            queue_offset=cursor,
            max_nums=most,
            expression=req.expression,
            expression_type=req.expression_type,
            suspend_ms=0,
        )
        resp = self.pull(read, room)
        if resp.status is not PullStatus.FOUND:
            if resp.next_offset != cursor and resp.status is not PullStatus.NO_NEW_MSG:
                self.pop_state.cursors[key] = resp.next_offset  # filtered, or moved in range
                self._commit_floor(key)
            return None
        positions = list(_positions(resp.buffer))
        leases = [lease] * len(positions)
        entry = PopLogEntry(
            kind="take",
            group=req.group,
            topic=topic,
            queue_id=queue_id,
            offsets=[p[0] for p in positions],
            leases=leases,
            commitlog=[p[1] for p in positions],
            deadline_ms=deadline,
            cursor=resp.next_offset,
        )
        handles = encode_handles(
            req.group, self.name, topic, queue_id, entry.offsets, lease, deadline
        )
        return resp.buffer, handles, entry

    def _cursor(self, key: QueueKey, consume_from: ConsumeFromWhere) -> int:
        """The queue's cursor: kept, else the group's committed offset, else its start."""
        cursor = self.pop_state.cursors.get(key)
        if cursor is not None:
            return cursor
        group, topic, queue_id = key
        committed = self.tables.consumer_offsets.query(group, topic, queue_id)
        if committed >= 0:
            cursor = committed
        elif consume_from is ConsumeFromWhere.LAST_OFFSET and not is_retry_topic(topic):
            cursor = self.store.max_offset(topic, queue_id)
        else:
            cursor = self.store.min_offset(topic, queue_id)
        self.pop_state.cursors[key] = cursor
        self._commit_floor(key)
        return cursor

    # ------------------------------------------------------------ settle
    def ack(self, req: AckRequest) -> Done:
        """Settle the messages of ``req.handles``: all, or none with the reason."""
        self._check_master("takes no POP acks")
        with self.pop_state.lock:
            acked = self._acks(req.group, req.handles)
            self._log(acked)
            for entry in acked:
                self._commit_floor(entry.key)
        return Done()

    def _acks(self, group: str, handles: list[str]) -> list[PopLogEntry]:
        """The log entries that settle ``handles`` (all held by ``group``), per queue."""
        return [
            PopLogEntry("ack", *key, offsets=[o for o, _ in items])
            for key, items in group_by_queue(self._held(group, handles))
        ]

    def change_invisibility(self, req: ChangeInvisibilityRequest) -> ChangeInvisibilityReply:
        """End the leases of ``req.handles`` ``invisible_ms`` from now, with new handles
        (the old ones stop working); with ``release`` and 0, end them now (a nack)."""
        self._check_master("takes no POP lease changes")
        if req.invisible_ms <= 0 and not req.release:
            raise InvalidReceiptHandleError(
                "an invisible duration must be > 0 (to end a lease now, nack the message)",
                value=req.invisible_ms,
            )
        now = self.store.clock.now_ms()
        deadline = now + req.invisible_ms
        with self.pop_state.lock:
            held = self._held(req.group, req.handles)
            lease = _new_lease()
            moved = [
                PopLogEntry(
                    "lease",
                    *key,
                    offsets=[o for o, _ in items],
                    leases=[lease] * len(items),
                    deadline_ms=deadline,
                )
                for key, items in group_by_queue(held)
            ]
            self._log(moved)
        handles = [
            encode_handle(ReceiptHandle(key[0], self.name, key[1], key[2], o, lease, deadline))
            for key, o, _ in held
        ]
        return ChangeInvisibilityReply(handles=handles)

    def _held(self, group: str, texts: list[str]) -> list[tuple[QueueKey, int, Lease]]:
        """The leases ``texts`` name, all live and of ``group``; else the first reason."""
        now = self.store.clock.now_ms()
        out: list[tuple[QueueKey, int, Lease]] = []
        seen: set[tuple[QueueKey, int]] = set()
        for text in texts:
            handle = decode_handle(text)
            if handle.group != group:
                raise InvalidReceiptHandleError(
                    f"a receipt handle of group {handle.group!r} was given to group "
                    f"{group!r}: settle a message with the group that received it",
                    group=group,
                )
            if handle.broker != self.name:
                raise InvalidReceiptHandleError(
                    f"a receipt handle of broker {handle.broker!r} reached broker {self.name!r}"
                )
            key = (group, handle.topic, handle.queue_id)
            lease = self.pop_state.lease_of(key, handle.queue_offset)
            if lease is None or lease.lease != handle.lease:
                raise InvalidReceiptHandleError(
                    f"message {handle.topic}/{handle.queue_id}@{handle.queue_offset} is not in "
                    f"flight for group {group!r} under this receipt handle: it was acknowledged, "
                    "its lease was changed (use the newest handle), or its lease ended and it "
                    "is delivered again"
                )
            if lease.deadline_ms <= now:
                raise InvalidReceiptHandleError(
                    f"the lease of message {handle.topic}/{handle.queue_id}@"
                    f"{handle.queue_offset} ended {now - lease.deadline_ms} ms ago: it is "
                    "delivered again; settle that delivery instead"
                )
            if (key, handle.queue_offset) in seen:
                raise InvalidReceiptHandleError("the same receipt handle was given twice")
            seen.add((key, handle.queue_offset))
            out.append((key, handle.queue_offset, lease))
        return out

    # ------------------------------------------------------------ revive
    def pop_revive_tick(self) -> list[tuple[str, int]]:
        """Copy the messages whose leases ended to their retry (or dead-letter) topic and
        settle them; returns the queues appended to (their parked pulls to wake)."""
        if self.master is None:
            return []
        woken: set[tuple[str, int]] = set()
        with self.pop_state.lock:
            for key, items in group_by_queue(
                self.pop_state.due(self.store.clock.now_ms(), REVIVE_BATCH)
            ):
                woken.update(self._revive(key, items))
        return sorted(woken)

    def _revive(self, key: QueueKey, items: list[tuple[int, Lease]]) -> set[tuple[str, int]]:
        group = key[0]
        config = self.group_or_defaults(group)
        queues = max(config.retry_queue_nums, 1)
        woken: set[tuple[str, int]] = set()
        try:
            copies = prepare_send_back(
                self.store,
                group,
                [(lease.commitlog_offset, 0) for _, lease in items],
                config.retry_max_times,
                queues,
            )
        except RayqError as exc:  # e.g. the records were removed by retention
            logger.warning(
                "broker %s: POP leases of %s ended, not redelivered: %s", self.name, key, exc
            )
            copies = []
        if copies:
            copies = [_now(m) for m in copies]
            for topic in {m.topic for m in copies}:
                n = config.retry_queue_nums if topic == retry_topic(group) else 1
                self.ensure_system_topic(topic, max(n, 1))
            with self.writing:
                result = self.store.put_messages(copies)
            if not result.ok:
                logger.error(
                    "broker %s: reviving POP leases of %s failed: %s", self.name, key, result.error
                )
                return woken
            woken.update((m.topic, m.queue_id) for m in copies)
        self._log([PopLogEntry("revive", *key, offsets=[o for o, _ in items])])
        self._commit_floor(key)
        return woken

    # -------------------------------------------------------------- log
    def _log(self, entries: list[PopLogEntry]) -> None:
        """Append ``entries`` to the pop log as one record, then apply them (nothing
        applies if the append fails)."""
        record = InnerMessage(topic=POP_LOG_TOPIC, queue_id=0, body=encode_entries(entries))
        config = self.store.config
        batch = encode_batch(
            [record],
            max_body_bytes=config.max_message_size_bytes,
            max_properties_bytes=config.max_properties_size_bytes,
        )
        with self.writing:
            result = self.store.put_encoded(batch, own=True)
        raise_for_put(result)
        for entry in entries:
            self.pop_state.apply(entry)

    def _settled(self, take: PopLogEntry) -> bool:
        """Whether the group's committed offset is past all the messages ``take`` leased."""
        offsets = self.tables.consumer_offsets
        committed = offsets.query(take.group, take.topic, take.queue_id)
        return committed > max(take.offsets, default=-1)

    def drop_pop_state(self, group: str, topic: str) -> None:
        """Forget (in the log, then in memory) the leases and cursors of a deleted topic
        (``group`` "") or group (``topic`` ""): nothing of theirs is redelivered, and a
        topic or group made again under the name starts afresh."""
        if self.master is None:
            return
        with self.pop_state.lock:
            if self.pop_state.holds(group, topic):
                self._log([PopLogEntry("drop", group, topic, 0, offsets=[])])

    def _commit_floor(self, key: QueueKey) -> None:
        floor = self.pop_state.floor(key)
        if floor >= 0:
            self.tables.consumer_offsets.commit(key[0], key[1], key[2], floor)

    def replay_pop_log(self) -> int:
        """Rebuild the in-flight state from the pop log (a master's start); entries read."""
        offset, n = self.store.min_offset(POP_LOG_TOPIC, 0), 0
        end = self.store.max_offset(POP_LOG_TOPIC, 0)  # the broker's own topic: no config
        while offset < end:
            got = self.store.get_messages("", POP_LOG_TOPIC, 0, offset, _REPLAY_PAGE)
            if got.status is not GetStatus.FOUND or got.next_begin_offset <= offset:
                if got.next_begin_offset <= offset:
                    break
                offset = got.next_begin_offset
                continue
            for msg in codec.decode_records(got.buffer):
                try:
                    entries = decode_entries(msg.body)
                except msgspec.DecodeError:
                    logger.warning(
                        "broker %s: a POP log record it cannot read was skipped", self.name
                    )
                    continue
                for entry in entries:
                    if entry.kind == "take" and self._settled(entry):
                        continue  # settled before the committed offset was written
                    self.pop_state.apply(entry)
                    n += 1
            offset = got.next_begin_offset
        logger.info(
            "broker %s: POP state replayed from %d log entries: %d messages in flight",
            self.name,
            n,
            self.pop_state.in_flight(),
        )
        return n


def _new_lease() -> int:
    """A random lease id (63 bits): a receipt handle names its lease by it."""
    return int.from_bytes(os.urandom(8), "big") >> 1


def _positions(buffer: bytes) -> list[tuple[int, int]]:
    """Each record's (queue offset, commit-log offset), in order."""
    out = []
    at, end = 0, len(buffer)
    while at < end:
        size, queue_offset, commitlog_offset = _POSITIONS.unpack_from(buffer, at)
        out.append((queue_offset, commitlog_offset))
        at += size
    return out


def _now(msg: InnerMessage) -> InnerMessage:
    """A revived copy goes to the retry topic at once: the lease was its delay."""
    if P.DELAY not in msg.properties:
        return msg
    props = dict(msg.properties)
    del props[P.DELAY]
    return msgspec.structs.replace(msg, properties=props)


__all__ = ["PopProcessor"]
