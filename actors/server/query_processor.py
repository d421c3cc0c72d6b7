"""Queries and admin (RocketMQ ``QueryMessageProcessor`` and ``AdminBrokerProcessor``):
topics and groups, stats and status, messages by key or id, delayed delivery.

A part of ``BrokerServer`` (actors/server/broker_server.py), which builds the shared
state (store, tables, services) these methods serve from; no Ray.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from rayq.actors.protocol import (
    BrokerStatus,
    BrokerStatusRequest,
    CreateTopicRequest,
    DeleteGroupRequest,
    Done,
    GetMessageRequest,
    GroupConfigReply,
    GroupRequest,
    GroupsReply,
    ListGroupsRequest,
    MessageQueue,
    MessagesReply,
    QueryMessageRequest,
    QueueBoundsReply,
    QueueStats,
    ScheduleStats,
    ScheduleStatsRequest,
    TopicRequest,
    TopicStatsReply,
    UpdateGroupRequest,
    ViewMessageRequest,
)
from rayq.actors.server.processor_base import ProcessorBase, check_not_system
from rayq.actors.server.send_back import GROUP_TOPIC_QUEUE_NUMS
from rayq.actors.server.table_files import (
    SubscriptionGroupConfig,
    TopicConfig,
)
from rayq.store import SYSTEM_CLOCK
from rayq.store.codec import decode_records
from rayq.store.errors import InvalidOffsetError
from rayq.store.message import GetStatus
from rayq.store.names import (
    retry_topic,
    validate_group,
    validate_topic,
)


class QueryProcessor(ProcessorBase):
    """Topic and group admin, stats, status and message queries."""

    if TYPE_CHECKING:

        def drop_pop_state(self, group: str, topic: str) -> None: ...  # PopProcessor's

    def create_topic(self, req: CreateTopicRequest) -> Done:
        """Create or overwrite a topic (admin)."""
        existed = req.topic in self.tables.topics
        self._create_topic(req.topic, req.read_queue_nums, req.write_queue_nums, req.perm)
        return Done(existed=existed)

    def _create_topic(
        self, topic: str, read_queues: int, write_queues: int, perm: int
    ) -> TopicConfig:
        check_not_system(topic)
        for name, n in (("read_queues", read_queues), ("write_queues", write_queues)):
            if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= 1024:
                raise InvalidOffsetError(f"{name} must be an int in 1..1024, got {n!r}")
        cfg = TopicConfig(
            topic_name=topic, read_queue_nums=read_queues, write_queue_nums=write_queues, perm=perm
        )
        self.tables.topics.put(cfg)
        self.tables.topics.persist()
        return cfg

    def delete_topic(self, req: TopicRequest) -> Done:
        topic = req.topic
        check_not_system(topic)
        existed = self.tables.topics.delete(topic)
        self.tables.topics.persist()
        with self.writing:
            self.store.delete_topic(topic)
        self.tables.consumer_offsets.remove_topic(topic)
        self.drop_pop_state("", topic)
        return Done(existed=existed)

    # -------------------------------------------------------------- admin
    def topic_stats(self, req: TopicRequest) -> TopicStatsReply:
        topic = req.topic
        cfg = self.topic_config(topic, create=False)
        out = []
        for q in range(max(cfg.read_queue_nums, cfg.write_queue_nums)):
            hi = self.store.max_offset(topic, q)
            last = self.store.store_time_of(topic, q, hi - 1) if hi else None
            out.append(
                QueueStats(
                    queue=MessageQueue(topic, self.name, q),
                    min_offset=self.store.min_offset(topic, q),
                    max_offset=hi,
                    last_store_timestamp=last or 0,
                )
            )
        return TopicStatsReply(queues=out)

    def queue_bounds(self, req: TopicRequest) -> QueueBoundsReply:
        """(min offset, max offset) of each read queue of the topic."""
        topic = req.topic
        cfg = self.topic_config(topic, create=False)
        return QueueBoundsReply(
            bounds={
                q: (self.store.min_offset(topic, q), self.store.max_offset(topic, q))
                for q in range(cfg.read_queue_nums)
            }
        )

    def get_group(self, req: GroupRequest) -> GroupConfigReply:
        """The config of an existing group (GroupNotFoundError if there is none)."""
        return GroupConfigReply(config=self.group_config(req.group))

    def update_group(self, req: UpdateGroupRequest) -> GroupConfigReply:
        """Create or replace a subscription group's config."""
        return GroupConfigReply(config=self._put_group(req.config))

    def _put_group(self, cfg: SubscriptionGroupConfig) -> SubscriptionGroupConfig:
        validate_group(cfg.group_name)
        self.tables.subscription_groups.put(cfg)
        self.tables.subscription_groups.persist()
        return cfg

    def delete_group(self, req: DeleteGroupRequest) -> Done:
        """Remove a group's config (and with ``clean_offsets`` its committed offsets)."""
        group, clean_offsets = req.group, req.clean_offsets
        validate_group(group)
        existed = self.tables.subscription_groups.delete(group)
        self.tables.subscription_groups.persist()
        if clean_offsets:
            existed = bool(self.tables.consumer_offsets.remove_group(group)) or existed
            self.tables.consumer_offsets.persist()
            self.drop_pop_state(group, "")
        return Done(existed=existed)

    def groups(self, req: ListGroupsRequest) -> GroupsReply:
        return GroupsReply(groups=self.tables.subscription_groups.groups())

    def query_message(self, req: QueryMessageRequest) -> MessagesReply:
        validate_topic(req.topic)
        found = self.store.query_message(req.topic, req.key, req.max_num, req.begin_ms, req.end_ms)
        return MessagesReply(messages=found)

    def view_message(self, req: ViewMessageRequest) -> MessagesReply:
        """The message with this id ([] if none)."""
        found = self.store.view_message(req.msg_id)
        return MessagesReply(messages=[found] if found is not None else [])

    def get_message(self, req: GetMessageRequest) -> MessagesReply:
        """The message at ``queue_offset`` of a queue ([] if none is there: past the end,
        removed by retention, or damaged)."""
        cfg = self.topic_config(req.topic, create=False)
        if not 0 <= req.queue_id < max(cfg.read_queue_nums, cfg.write_queue_nums):
            raise InvalidOffsetError(
                f"queue {req.queue_id} of topic {req.topic!r} does not exist (it has "
                f"{cfg.read_queue_nums} queues)",
                value=str(req.queue_id),
            )
        got = self.store.get_messages("", req.topic, req.queue_id, req.queue_offset, 1)
        if got.status is not GetStatus.FOUND or not got.count:
            return MessagesReply(messages=[])
        found = decode_records(got.buffer, broker_name=self.name)
        return MessagesReply(messages=[m for m in found if m.queue_offset == req.queue_offset])

    def broker_status(self, req: BrokerStatusRequest) -> BrokerStatus:
        """This replica's info with a fresh disk measurement, its limits and settings (the
        actor adds what its flusher and hold service answer)."""
        now = SYSTEM_CLOCK.now_ms()
        self.store.disk.measure(now)
        store = self.config.store_config
        return BrokerStatus(
            info=self.info(),
            replication_error=self.replication_error,
            disk_clean_ratio=store.disk_max_used_space_ratio,
            disk_full_ratio=store.disk_warning_ratio,
            heartbeat_interval_ms=self.config.heartbeat_interval_ms,
            config=msgspec.to_builtins(self.config),
        )

    def schedule_tick(self) -> dict[tuple[str, int], int]:
        """Deliver due delayed messages: {(topic, queue): new max offset} of what was written.
        A slave delivers nothing: its master does, and the slave copies the result."""
        if self.slave is not None:
            return {}
        with self.writing:
            return self.schedule.tick()

    def schedule_stats(self, req: ScheduleStatsRequest) -> ScheduleStats:
        """Delay-level progress (next offset, max offset) and the deliver-at backlog."""
        return self.schedule.stats()

    def ensure_retry_topic(self, req: GroupRequest) -> Done:
        """Create ``%RETRY%<group>`` unless it exists (a push consumer does at start)."""
        group = self.group_or_defaults(req.group)
        queues = max(group.retry_queue_nums, GROUP_TOPIC_QUEUE_NUMS)
        created = self.ensure_system_topic(retry_topic(req.group), queues)
        return Done(existed=not created)
