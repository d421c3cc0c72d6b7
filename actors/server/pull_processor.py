"""The pull processor (RocketMQ ``PullMessageProcessor``): reads of one or many
queues with tag and SQL92 filters, Arrow pages for Spark and Ray Data, page readers.

A part of ``BrokerServer`` (actors/server/broker_server.py), which builds the shared
state (store, tables, services) these methods serve from; no Ray.
"""

from __future__ import annotations

import logging
import struct

import msgspec

from rayq.actors.protocol import (
    PAGE_READERS,
    ArrowPage,
    PageReadersReply,
    PageReadersRequest,
    PullManyRequest,
    PullManyResponse,
    PullRequest,
    PullResponse,
    PullStatus,
    ReadArrowRequest,
    page_reader_actor_name,
)
from rayq.actors.protocol.config import replica_name
from rayq.actors.server import columnar
from rayq.actors.server.processor_base import ProcessorBase
from rayq.actors.server.table_files import (
    SubscriptionGroupConfig,
    check_broadcast,
)
from rayq.store import SYSTEM_CLOCK, TagFilter
from rayq.store.errors import (
    InvalidFilterError,
    InvalidOffsetError,
    RayqError,
)
from rayq.store.message import GetResult, GetStatus
from rayq.store.sql92 import SqlFilter, compile_sql, sql_filter_records

logger = logging.getLogger(__name__)

_TOTAL_SIZE = struct.Struct(">i")  # at a record's start (store/codec.py)

_QUEUE_OFFSET = struct.Struct(">12xq")

# Nothing readable in what the store scanned (tag mismatches; damaged, quarantined or
# removed records) while the offset moved past it: NO_MATCHED_MSG, answered at once and
# never parked, so the consumer pulls again from the moved offset (RocketMQ answers
# these PULL_RETRY_IMMEDIATELY, which its client sees as NO_MATCHED_MSG).
_PULL_STATUS = {
    GetStatus.FOUND: PullStatus.FOUND,
    GetStatus.NO_MATCHED_MESSAGE: PullStatus.NO_MATCHED_MSG,
    GetStatus.OFFSET_FOUND_NULL: PullStatus.NO_MATCHED_MSG,
    GetStatus.MESSAGE_WAS_REMOVING: PullStatus.NO_MATCHED_MSG,
    GetStatus.OFFSET_OVERFLOW_ONE: PullStatus.NO_NEW_MSG,
    GetStatus.NO_MESSAGE_IN_QUEUE: PullStatus.NO_NEW_MSG,
    GetStatus.NO_MATCHED_LOGIC_QUEUE: PullStatus.NO_NEW_MSG,
    GetStatus.OFFSET_TOO_SMALL: PullStatus.OFFSET_ILLEGAL,
    GetStatus.OFFSET_OVERFLOW_BADLY: PullStatus.OFFSET_ILLEGAL,
}

_EMPTY_QUEUE = (GetStatus.NO_MESSAGE_IN_QUEUE, GetStatus.NO_MATCHED_LOGIC_QUEUE)


class PullProcessor(ProcessorBase):
    """Reads (one queue, many queues, Arrow pages) over the broker's state."""

    # --------------------------------------------------------------- pull
    def pull(self, req: PullRequest, max_bytes: int | None = None) -> PullResponse:
        """Non-blocking pull of up to ``req.max_nums`` messages (PullHold adds waiting),
        at most ``pull_max_bytes`` of records, or ``max_bytes`` if less (then only whole
        records that fit, but at least one)."""
        group, cfg = self.readable(req.group, req.topic)
        if not 0 <= req.queue_id < cfg.read_queue_nums:
            raise InvalidOffsetError(f"queue {req.queue_id} of topic {req.topic!r} does not exist")
        tag_filter, sql = self._filters(req)
        diverged = self._diverged(req)
        if diverged is not None:
            return diverged
        want = min(max(req.max_nums, 1), self.config.pull_max_messages)
        parts: list[bytes] = []
        count = size = 0
        offset = req.queue_offset
        budget = (
            self.config.pull_max_bytes
            if max_bytes is None
            else min(max_bytes, self.config.pull_max_bytes)
        )
        got = self.store.get_messages(req.group, req.topic, req.queue_id, offset, want, tag_filter)
        first = got
        scan_limit = req.queue_offset + self.config.store.max_filter_scan_entries
        while got.status is GetStatus.FOUND or got.status is GetStatus.NO_MATCHED_MESSAGE:
            buffer, n, offset = got.buffer, got.count, got.next_begin_offset
            if sql is not None and n:
                buffer, n, offset = sql_filter_records(buffer, sql, got.next_begin_offset)
                got = msgspec.structs.replace(got, count=n, buffer=buffer)
                if not n and offset < got.max_offset and offset < scan_limit:
                    got = self.store.get_messages(
                        req.group, req.topic, req.queue_id, offset, want - count, tag_filter
                    )
                    continue
            if n and size + len(buffer) > budget and max_bytes is not None:
                buffer, n, offset = _fit(buffer, budget - size, offset, at_least_one=not count)
            parts.append(buffer)
            count += n
            size += len(buffer)
            if n < got.count:  # the budget is full
                break
            if count >= want or size >= budget or offset >= got.max_offset:
                break
            got = self.store.get_messages(
                req.group, req.topic, req.queue_id, offset, want - count, tag_filter
            )
        suggest = self._suggest_replica(group, first.suggest_pull_from_slave)
        status = PullStatus.FOUND if count else _PULL_STATUS[first.status]
        if not count and sql is not None and first.status is GetStatus.FOUND:
            first = msgspec.structs.replace(first, status=GetStatus.NO_MATCHED_MESSAGE)
            status = PullStatus.NO_MATCHED_MSG  # every record scanned failed the SQL92 filter
        next_offset = (
            offset
            if count or first.status is GetStatus.NO_MATCHED_MESSAGE
            else (first.next_begin_offset)
        )
        if status is PullStatus.NO_MATCHED_MSG and next_offset <= req.queue_offset:
            status = PullStatus.NO_NEW_MSG  # nothing scanned (a missing file): wait for news
        if not count:
            status, next_offset = self._corrected(first, req, status, next_offset)
        return PullResponse(
            status=status,
            next_offset=next_offset,
            min_offset=first.min_offset,
            max_offset=max(first.max_offset, got.max_offset),
            buffer=b"".join(parts),
            count=count,
            suggest_replica=suggest,
            epoch=self.epochs.current,
        )

    def _diverged(self, req: PullRequest) -> PullResponse | None:
        """Kafka's KIP-320 check of a position read in an older epoch (``req.epoch``): if
        it lies past where that epoch ended in this broker's log, the records the consumer
        read there were cut by a failover (sent to a master that died before its slave had
        them) and the offsets from that point hold other records now. The answer moves
        the consumer back to that point, so it reads those records rather than skip them
        (its offset inside the log) or start the queue over (past its end)."""
        if req.epoch < 0 or req.epoch >= self.epochs.current:
            return None
        end = self.epochs.end_of(req.epoch)
        if end is None:
            return None
        at = self.store.queue_offset_at(req.topic, req.queue_id, end)
        if req.queue_offset <= at:
            return None
        logger.warning(
            "broker %s: %s/%d offset %d of group %s was read in epoch %d, which ended at "
            "offset %d here: the records past it were cut by a failover; moving it back",
            self.name,
            req.topic,
            req.queue_id,
            req.queue_offset,
            req.group,
            req.epoch,
            at,
        )
        return PullResponse(
            status=PullStatus.OFFSET_ILLEGAL,
            next_offset=at,
            min_offset=self.store.min_offset(req.topic, req.queue_id),
            max_offset=self.store.max_offset(req.topic, req.queue_id),
            epoch=self.epochs.current,
        )

    def _corrected(
        self, got: GetResult, req: PullRequest, status: PullStatus, next_offset: int
    ) -> tuple[PullStatus, int]:
        """RocketMQ's PullMessageProcessor: a queue with nothing in it (or none at all)
        moves a pull at an offset other than 0 to 0 (OFFSET_ILLEGAL; at 0 it waits for
        news). A slave may lag its master, so it corrects no offset (RocketMQ's default,
        ``offsetCheckInSlave=false``): a pull at an offset of a queue it has nothing of
        yet, or past its end, waits there for replication to bring it; moving it to the
        slave's end would move the consumer's offset back and redeliver all between.

        Past the end on a master, where the store would start a queue that never lost a
        message over (its min offset is 0): if the group's committed offset lies inside
        the queue, the pull moves there instead. The consumer read records a crash then
        lost (a torn or unflushed tail: the broker restarted with a shorter log), and
        starting over would deliver again everything the group had settled."""
        queue_offset = req.queue_offset
        if (
            self.slave is None
            and got.status is GetStatus.OFFSET_OVERFLOW_BADLY
            and got.min_offset == 0
            and req.group
        ):
            committed = self.tables.consumer_offsets.query(req.group, req.topic, req.queue_id)
            if 0 < committed <= got.max_offset:
                return PullStatus.OFFSET_ILLEGAL, committed
        if self.slave is not None and (
            (got.status in _EMPTY_QUEUE and queue_offset != 0)
            or got.status is GetStatus.OFFSET_OVERFLOW_BADLY
        ):
            return PullStatus.NO_NEW_MSG, queue_offset
        if got.status in _EMPTY_QUEUE and queue_offset != 0:
            return PullStatus.OFFSET_ILLEGAL, 0
        return status, next_offset

    def _filters(self, req: PullRequest) -> tuple[TagFilter | None, SqlFilter | None]:
        """The pull's tag filter, or its compiled SQL92 filter (compiled once per text)."""
        if req.expression_type != "SQL92":
            return TagFilter.parse(req.expression), None
        if not self.config.enable_property_filter:
            raise InvalidFilterError(
                f"broker {self.name} does not evaluate SQL92 filters: turn on "
                "BrokerConfig.enable_property_filter, or subscribe by tag",
                broker=self.name,
            )
        return None, compile_sql(req.expression)

    def _suggest_replica(self, group: SubscriptionGroupConfig, far_behind: bool) -> str:
        """RocketMQ's suggestWhichBrokerId: with ``slave_read_enable``, a pull far behind
        is pointed at the group's ``which_broker_when_consume_slowly`` slave (or another
        connected one); a slave keeps such a pull and sends one that caught up back."""
        if not self.config.slave_read_enable or not far_behind:
            return ""
        if self.slave is not None:
            return self.config.replica_name
        assert self.master is not None
        connected = [r.broker_id for r in self.master.status(SYSTEM_CLOCK.now_ms()) if r.connected]
        if not connected:
            return ""
        wanted = group.which_broker_when_consume_slowly
        return replica_name(self.name, wanted if wanted in connected else connected[0])

    def pull_many(self, req: PullManyRequest, max_bytes: int | None = None) -> PullManyResponse:
        """``pull`` for each queue of ``req``; a queue's error is its answer, not the call's.
        ``max_bytes``: of records in all (the queues in order, each at least one record).
        A broadcasting consumer's pull is refused (PermissionDeniedError) if its group has
        ``consume_broadcast_enable`` off."""
        if req.broadcasting:
            check_broadcast(self.group_config(req.group, create=True), self.name)
        out: list[PullResponse | RayqError] = []
        left = max_bytes
        for item in req.items:
            try:
                resp = self.pull(req.request(item), None if left is None else max(left, 1))
                out.append(resp)
                if left is not None:
                    left -= len(resp.buffer)
            except RayqError as exc:
                out.append(exc)
        return PullManyResponse(results=out)

    def read_arrow(self, req: ReadArrowRequest) -> ArrowPage:
        """Offsets ``[start, end)`` as one record batch of decoded columns (columnar.py),
        one page of about ``max_bytes``; and the offset the next page starts at."""
        topic, queue_id = req.topic, req.queue_id
        cfg = self.topic_config(topic, create=False)
        if not 0 <= queue_id < cfg.read_queue_nums:
            raise InvalidOffsetError(f"queue {queue_id} of topic {topic!r} does not exist")
        batch, nxt = columnar.read_columns(
            self.store, topic, queue_id, req.start, req.end, req.max_bytes, self.name, req.columns
        )
        return ArrowPage(batch=batch, next_offset=nxt)

    def page_readers(self, req: PageReadersRequest) -> PageReadersReply:
        """The names of this replica's page readers (the actor starts them first)."""
        return PageReadersReply(
            names=[page_reader_actor_name(self.config.replica_name, i) for i in range(PAGE_READERS)]
        )


def _fit(buffer: bytes, room: int, next_offset: int, at_least_one: bool) -> tuple[bytes, int, int]:
    """The whole records at the head of ``buffer`` that fit in ``room`` bytes (one more
    if ``at_least_one`` and none fits), how many, and the queue offset of the first
    record left out (``next_offset`` if none is). Records carry their queue offset, so
    this holds with tag filtering too."""
    end = count = 0
    while end < len(buffer):
        (total,) = _TOTAL_SIZE.unpack_from(buffer, end)
        if end + total > room and (count or not at_least_one):
            (queue_offset,) = _QUEUE_OFFSET.unpack_from(buffer, end)
            return buffer[:end], count, queue_offset
        end += total
        count += 1
    return buffer, count, next_offset
