"""Offsets and locks (RocketMQ ``ConsumerManageProcessor`` and the queue-lock
requests): committed offsets (also inside pulls), compare-and-set, reset, lookup by
time, queue bounds, and the queue locks of orderly consumers.

A part of ``BrokerServer`` (actors/server/broker_server.py), which builds the shared
state (store, tables, services) these methods serve from; no Ray.
"""

from __future__ import annotations

from typing import Any

from rayq.actors.protocol import (
    CommitOffsetsReply,
    CommitOffsetsRequest,
    CompareAndSetOffsetsRequest,
    Done,
    LockQueuesReply,
    LockQueuesRequest,
    MaxOffsetRequest,
    OffsetByTimeRequest,
    OffsetReply,
    OffsetsReply,
    PullManyRequest,
    QueryOffsetsRequest,
    QueueCommit,
    QueueRef,
    ResetOffsetsRequest,
)
from rayq.actors.server.processor_base import ProcessorBase, check_client
from rayq.actors.server.table_files import offset_key
from rayq.store import SYSTEM_CLOCK
from rayq.store.errors import InvalidOffsetError
from rayq.store.names import (
    validate_group,
    validate_topic,
)


class OffsetProcessor(ProcessorBase):
    """Consumer offsets and queue locks over the broker's state."""

    def max_offset(self, req: MaxOffsetRequest) -> OffsetReply:
        self.topic_config(req.topic, create=False)
        return OffsetReply(offset=self.store.max_offset(req.topic, req.queue_id))

    # ------------------------------------------------------------ offsets
    def commit_offsets(self, req: CommitOffsetsRequest) -> CommitOffsetsReply:
        """Commit next-offsets per queue (with the ranges past them consumed already);
        the queue ids refused as stale.

        A push consumer commits with its assignment's ``generation``: once a queue saw a
        commit of generation g, commits of older generations are refused, so a consumer
        that lost the queue in a rebalance cannot move the group's offset (in memory: a
        broker restart forgets the fences)."""
        return self._commit(req.group, req.topic, dict(req.offsets), req.generation, req.acked)

    def commit_pulled(self, req: PullManyRequest) -> None:
        """The commits a push consumer's pull carries (``PullManyRequest.commits``), made
        when the pull arrives (never again when a parked pull is read)."""
        by_topic: dict[str, list[QueueCommit]] = {}
        for c in req.commits:
            by_topic.setdefault(c.topic, []).append(c)
        for topic, commits in by_topic.items():
            offsets = {c.queue_id: c.queue_offset for c in commits}
            acked = {c.queue_id: c.acked for c in commits if c.acked}
            self._commit(req.group, topic, offsets, req.generation, acked)

    def _commit(
        self,
        group: str,
        topic: str,
        offsets: dict[int, int],
        generation: int,
        acked: dict[int, Any],
    ) -> CommitOffsetsReply:
        self.group_config(group, create=True)
        validate_topic(topic)
        alone = sorted(set(acked) - set(offsets))
        if alone:
            raise InvalidOffsetError(
                f"acked ranges for queue(s) {alone} of topic {topic!r} come without their "
                "offsets; commit each queue's offset with its ranges",
                value=repr(alone),
            )
        stale: list[int] = []
        if generation >= 0:
            fresh = {}
            for qid, offset in offsets.items():
                key = (group, topic, qid)
                if generation < self._fences.get(key, -1):
                    stale.append(qid)
                else:
                    self._fences[key] = generation
                    fresh[qid] = offset
            offsets = fresh
        acked = {q: r for q, r in acked.items() if q in offsets}
        self.tables.consumer_offsets.commit_many(group, topic, offsets, acked)
        if self.slave is not None and offsets:
            self.slave_commits.setdefault(offset_key(topic, group), {}).update(offsets)
        return CommitOffsetsReply(stale=stale)

    def lock_queues(self, req: LockQueuesRequest) -> LockQueuesReply:
        """Orderly consumption: lock (or renew) queues for the caller; the ones it holds."""
        validate_group(req.group)
        check_client(req.client_id)
        queues = [(q.topic, q.queue_id) for q in req.queues]
        held = self.locks.lock(req.group, req.client_id, queues, SYSTEM_CLOCK.now_ms())
        return LockQueuesReply(locked=[QueueRef(t, q) for t, q in held])

    def unlock_queues(self, req: LockQueuesRequest) -> LockQueuesReply:
        validate_group(req.group)
        check_client(req.client_id)
        n = self.locks.unlock(req.group, req.client_id, [(q.topic, q.queue_id) for q in req.queues])
        return LockQueuesReply(released=n)

    def query_offsets(self, req: QueryOffsetsRequest) -> OffsetsReply:
        validate_group(req.group)
        validate_topic(req.topic)
        table = self.tables.consumer_offsets
        return OffsetsReply(
            offsets=table.query_all(req.group, req.topic), acked=table.acked(req.group, req.topic)
        )

    def offset_by_time(self, req: OffsetByTimeRequest) -> OffsetReply:
        self.topic_config(req.topic, create=False)
        return OffsetReply(
            offset=self.store.offset_by_time(req.topic, req.queue_id, req.timestamp_ms)
        )

    def reset_offsets(self, req: ResetOffsetsRequest) -> OffsetsReply:
        group, topic = req.group, req.topic
        validate_group(group)
        cfg = self.topic_config(topic, create=False)
        offsets = {
            q: self.store.offset_by_time(topic, q, req.timestamp_ms)
            for q in range(cfg.read_queue_nums)
        }
        self.tables.consumer_offsets.commit_many(group, topic, offsets)
        return OffsetsReply(offsets=offsets)

    def compare_and_set_offsets(self, req: CompareAndSetOffsetsRequest) -> Done:
        """Commit ``offsets`` only if every queue's committed offset is ``expected`` (-1:
        none yet); all or nothing (``existed`` False: refused). A streaming batch commits
        this way."""
        group, topic = req.group, req.topic
        validate_group(group)
        validate_topic(topic)
        table = self.tables.consumer_offsets
        if any(table.query(group, topic, q) != e for q, e in req.expected.items()):
            return Done(existed=False)
        table.commit_many(group, topic, dict(req.offsets))
        return Done(existed=True)
