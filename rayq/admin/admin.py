"""Administration: topics, statistics, consumer progress, message lookup, offset resets.

``Admin`` is RocketMQ's ``MQAdminExt`` over Ray: topic changes go to every live
broker (each re-registers with the coordinator before it answers, so routes are
current when the call returns); reads go to the brokers that serve the topic,
all at once, and are merged here. Every argument is checked before any remote
call, and every failure is a rayq error (``rayq.transport.context.call``).

    admin = rayq.Admin()
    admin.create_topic("orders", queues=4)
    admin.topic_stats("orders")        # [QueueStats(queue=..., min_offset=..., ...)]
    admin.consumer_progress("cg")      # [QueueProgress(queue=..., lag=...)]
    admin.create_group("cg", retry_max_times=3); admin.update_group("cg", consume_enable=False)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import msgspec

from rayq.actors.protocol import (
    BrokerEntry,
    BrokerStatus,
    BrokerStatusRequest,
    ClientRequest,
    CompareAndSetOffsetsRequest,
    CreateTopicRequest,
    DeleteGroupRequest,
    GetMessageRequest,
    GroupRequest,
    ListGroupsRequest,
    MemberRequest,
    MessageQueue,
    OffsetByTimeRequest,
    QueryMessageRequest,
    QueryOffsetsRequest,
    QueueProgress,
    QueueStats,
    ReplicationRequest,
    ReplicationStats,
    ResendDeadLetterRequest,
    ResetOffsetsRequest,
    RoutesRequest,
    ScheduleStats,
    ScheduleStatsRequest,
    SendResult,
    SendStatus,
    TopicRequest,
    TopicRoute,
    UpdateGroupRequest,
    ViewMessageRequest,
)
from rayq.actors.protocol.config import ClientConfig, replica_name
from rayq.actors.protocol.records import PERM_ALL, PERM_READ, PERM_WRITE, SubscriptionGroupConfig
from rayq.admin.dead_letters import read_dead_letters
from rayq.admin.health import ActorHealth, HealthLimits, coordinator_health, replica_health
from rayq.admin.offset_reset import OffsetChange, check_reset, pick, target
from rayq.store.clock import SYSTEM_CLOCK
from rayq.store.errors import (
    BrokerUnavailableError,
    ConfigError,
    GroupNotFoundError,
    InvalidMessageError,
    InvalidOffsetError,
    InvalidRequestError,
    RayqError,
    TopicNotFoundError,
)
from rayq.store.message import MessageExt
from rayq.store.names import check_trace_topic, dlq_topic, validate_group, validate_topic
from rayq.trace.lookup import trace_of
from rayq.trace.records import TraceEvent
from rayq.transport.base import BrokerClient, Reply, Transport
from rayq.transport.context import ClientContext, bind

K = TypeVar("K")
T = TypeVar("T")
# Admin calls may scan indexes or persist tables: allow more than a send.
ADMIN_CALL_TIMEOUT_S = 30.0
# A status call (health, cluster list) slower than this counts as no answer.
STATUS_CALL_TIMEOUT_S = 15.0
QUEUES_MAX = 1024
QUERY_MAX_NUM = 64 * 1024
# Readable and writeable; the default of RocketMQ's TopicConfig and mqadmin updateTopic.
DEFAULT_PERM = PERM_READ | PERM_WRITE
RETRY_MAX_TIMES_MAX = 1024
_GROUP_FIELDS = frozenset(
    {
        "consume_enable",
        "consume_broadcast_enable",
        "retry_max_times",
        "retry_queue_nums",
        "consume_message_orderly",
    }
)
RETRY_QUEUE_NUMS_MAX = 1024


class Admin:
    """Manage topics and consumer groups of the rayq deployment in ``namespace``."""

    def __init__(
        self,
        *,
        namespace: str | None = None,
        config: ClientConfig | None = None,
        transport: Transport | None = None,
    ) -> None:
        if config is not None and not isinstance(config, ClientConfig):
            raise ConfigError(f"config must be a rayq ClientConfig, got {type(config).__name__}")
        if namespace is not None and (not isinstance(namespace, str) or not namespace):
            raise ConfigError(f"namespace must be a non-empty str, got {namespace!r}")
        self._ctx = ClientContext(config, namespace, transport)
        self.client_id = self._ctx.client_id

    # ------------------------------------------------------------- topics
    def create_topic(self, topic: str, queues: int = 4, perm: int = DEFAULT_PERM) -> None:
        """Create (or overwrite) ``topic`` with ``queues`` read and write queues on every
        live broker."""
        validate_topic(topic)
        _check_queues(queues)
        _check_perm(perm)
        req = CreateTopicRequest(
            topic=topic,
            read_queue_nums=queues,
            write_queue_nums=queues,
            perm=perm,
            client_id=self.client_id,
        )
        self._gather({b: lambda c: c.create_topic(req) for b in self._live_brokers()})
        self._ctx.route(topic, refresh=True)

    def update_topic(self, topic: str, queues: int | None = None, perm: int | None = None) -> None:
        """Change the queue count and/or permission of ``topic`` where it exists; what is
        not given stays as it is."""
        validate_topic(topic)
        if queues is not None:
            _check_queues(queues)
        if perm is not None:
            _check_perm(perm)
        route = self._route(topic)
        reqs = {
            d.broker_name: CreateTopicRequest(
                topic=topic,
                read_queue_nums=d.read_queue_nums if queues is None else queues,
                write_queue_nums=d.write_queue_nums if queues is None else queues,
                perm=d.perm if perm is None else perm,
                client_id=self.client_id,
            )
            for d in route.queues
        }
        self._gather({b: bind(lambda c, r: c.create_topic(r), r) for b, r in reqs.items()})
        self._ctx.route(topic, refresh=True)

    def delete_topic(self, topic: str) -> None:
        """Delete ``topic`` (its queues and committed offsets) from every live broker;
        raises TopicNotFoundError if no broker had it."""
        validate_topic(topic)
        req = TopicRequest(topic=topic, client_id=self.client_id)
        existed = self._gather({b: lambda c: c.delete_topic(req) for b in self._live_brokers()})
        self._ctx.route(topic, refresh=True)
        if not any(d.existed for d in existed.values()):
            raise TopicNotFoundError(f"topic {topic!r} does not exist on any broker", topic=topic)

    def topics(self) -> list[str]:
        """Every topic some live broker serves, sorted."""
        req = ClientRequest(client_id=self.client_id)
        return self._ctx.coordinator.topics(req).result(ADMIN_CALL_TIMEOUT_S).names

    def topic_stats(self, topic: str) -> list[QueueStats]:
        """Min/max offset and last store time of each queue of ``topic`` on every broker."""
        validate_topic(topic)
        route = self._route(topic)
        req = TopicRequest(topic=topic, client_id=self.client_id)
        stats = self._gather({d.broker_name: lambda c: c.topic_stats(req) for d in route.queues})
        return sorted(
            (s for per_broker in stats.values() for s in per_broker.queues), key=lambda s: s.queue
        )

    def route(self, topic: str) -> TopicRoute:
        """Which brokers serve ``topic``, with their queue counts and permissions."""
        validate_topic(topic)
        return self._route(topic)

    def routes(self) -> dict[str, TopicRoute]:
        """The route of every topic some live broker serves."""
        return self._routes()

    # ------------------------------------------------------------- groups
    def create_group(
        self,
        group: str,
        *,
        consume_enable: bool = True,
        consume_broadcast_enable: bool = True,
        retry_max_times: int = 16,
        consume_message_orderly: bool = False,
        retry_queue_nums: int = 1,
    ) -> SubscriptionGroupConfig:
        """Create (or overwrite) subscription group ``group`` on every live broker."""
        validate_group(group)
        cfg = SubscriptionGroupConfig(group_name=group)
        return self._put_group(
            cfg,
            consume_enable=consume_enable,
            consume_broadcast_enable=consume_broadcast_enable,
            retry_max_times=retry_max_times,
            consume_message_orderly=consume_message_orderly,
            retry_queue_nums=retry_queue_nums,
        )

    def update_group(self, group: str, **changes: Any) -> SubscriptionGroupConfig:
        """Change fields of an existing group's config (e.g. ``consume_enable=False`` stops
        its consumers' pulls); what is not given stays as it is."""
        return self._put_group(self.group_config(group), **changes)

    def delete_group(self, group: str, *, clean_offsets: bool = False) -> None:
        """Delete ``group``'s config (and with ``clean_offsets`` its committed offsets) from
        every live broker; raises GroupNotFoundError if no broker had it."""
        validate_group(group)
        req = DeleteGroupRequest(group=group, clean_offsets=clean_offsets, client_id=self.client_id)
        existed = self._gather({b: lambda c: c.delete_group(req) for b in self._live_brokers()})
        if not any(d.existed for d in existed.values()):
            raise GroupNotFoundError(
                f"consumer group {group!r} does not exist on any broker", group=group
            )

    def groups(self) -> list[str]:
        """Every subscription group some live broker knows, sorted."""
        req = ListGroupsRequest(client_id=self.client_id)
        per_broker = self._gather({b: lambda c: c.groups(req) for b in self._live_brokers()})
        return sorted({g for names in per_broker.values() for g in names.groups})

    def group_config(self, group: str) -> SubscriptionGroupConfig:
        """The config of ``group`` (from the first broker that has it)."""
        validate_group(group)
        req = GroupRequest(group=group, client_id=self.client_id)
        for broker in self._live_brokers():
            try:
                return self._ctx.broker(broker).get_group(req).result(ADMIN_CALL_TIMEOUT_S).config
            except GroupNotFoundError:
                continue
        raise GroupNotFoundError(
            f"consumer group {group!r} does not exist on any broker", group=group
        )

    def _put_group(self, cfg: SubscriptionGroupConfig, **changes: Any) -> SubscriptionGroupConfig:
        unknown = sorted(set(changes) - _GROUP_FIELDS)
        if unknown:
            raise ConfigError(
                f"unknown subscription group settings {unknown}; known: {sorted(_GROUP_FIELDS)}"
            )
        for name, value in changes.items():
            if name == "retry_max_times":
                if value.__class__ is not int or not 0 <= value <= RETRY_MAX_TIMES_MAX:
                    raise ConfigError(
                        f"retry_max_times must be an int in "
                        f"0..{RETRY_MAX_TIMES_MAX}, got {value!r}",
                        value=repr(value),
                        limit=RETRY_MAX_TIMES_MAX,
                    )
            elif name == "retry_queue_nums":
                if value.__class__ is not int or not 0 <= value <= RETRY_QUEUE_NUMS_MAX:
                    raise ConfigError(
                        f"retry_queue_nums must be an int in "
                        f"0..{RETRY_QUEUE_NUMS_MAX} (0: failed messages are "
                        f"dropped), got {value!r}",
                        value=repr(value),
                        limit=RETRY_QUEUE_NUMS_MAX,
                    )
            elif not isinstance(value, bool):
                raise ConfigError(f"{name} must be a bool, got {value!r}", value=repr(value))
        cfg = msgspec.structs.replace(cfg, **changes)
        req = UpdateGroupRequest(config=cfg, client_id=self.client_id)
        self._gather({b: lambda c: c.update_group(req) for b in self._live_brokers()})
        return cfg

    def consumer_progress(self, group: str) -> list[QueueProgress]:
        """Committed offset, max offset and lag of every queue ``group`` has committed on."""
        validate_group(group)
        pairs = [(d.broker_name, t) for t, route in self._routes().items() for d in route.queues]
        offsets = self._gather(
            {
                p: bind(
                    lambda c, t: c.query_offsets(
                        QueryOffsetsRequest(group=group, topic=t, client_id=self.client_id)
                    ),
                    p[1],
                )
                for p in pairs
            }
        )
        committed = {p: o.offsets for p, o in offsets.items() if o.offsets}
        stats = self._gather(
            {
                p: bind(
                    lambda c, t: c.topic_stats(TopicRequest(topic=t, client_id=self.client_id)),
                    p[1],
                )
                for p in committed
            }
        )
        out = []
        for pair, per_queue in committed.items():
            max_offsets = {s.queue.queue_id: s.max_offset for s in stats[pair].queues}
            for qid, offset in sorted(per_queue.items()):
                hi = max_offsets.get(qid, 0)
                out.append(
                    QueueProgress(
                        queue=MessageQueue(pair[1], pair[0], qid),
                        committed_offset=offset,
                        max_offset=hi,
                        lag=max(hi - offset, 0),
                    )
                )
        return sorted(out, key=lambda p: p.queue)

    def reset_offset(self, group: str, topic: str, timestamp_ms: int) -> dict[MessageQueue, int]:
        """Set ``group``'s committed offsets on ``topic`` to the first message stored at or
        after ``timestamp_ms`` (the end of a queue if none). Returns the new offsets.

        Running consumers of the group keep their in-memory positions and commit them
        again: stop them first (RocketMQ's ``resetOffsetByTimestamp`` has the same caveat
        for consumers it cannot reach)."""
        validate_group(group)
        validate_topic(topic)
        _check_int("timestamp_ms", timestamp_ms, 0, 2**63 - 1)
        route = self._route(topic)
        req = ResetOffsetsRequest(
            group=group, topic=topic, timestamp_ms=timestamp_ms, client_id=self.client_id
        )
        reset = self._gather({d.broker_name: lambda c: c.reset_offsets(req) for d in route.queues})
        return {
            MessageQueue(topic, b, q): o
            for b, per_queue in sorted(reset.items())
            for q, o in sorted(per_queue.offsets.items())
        }

    def offsets_at(self, topic: str, timestamp_ms: int) -> dict[MessageQueue, int]:
        """What ``reset_offset(group, topic, timestamp_ms)`` would set, changing nothing:
        per read queue, the first offset stored at or after ``timestamp_ms``."""
        validate_topic(topic)
        _check_int("timestamp_ms", timestamp_ms, 0, 2**63 - 1)
        queues = self._route(topic).read_queues()
        found = self._gather(
            {
                (q.broker_name, q.queue_id): bind(
                    lambda c, q: c.offset_by_time(
                        OffsetByTimeRequest(
                            topic=topic,
                            queue_id=q.queue_id,
                            timestamp_ms=timestamp_ms,
                            client_id=self.client_id,
                        )
                    ),
                    q,
                )
                for q in queues
            }
        )
        return {MessageQueue(topic, b, q): r.offset for (b, q), r in sorted(found.items())}

    def reset_offsets(
        self,
        group: str,
        topic: str,
        to: str,
        value: int | None = None,
        *,
        broker: str | None = None,
        queue_id: int | None = None,
        execute: bool = False,
    ) -> list[OffsetChange]:
        """Kafka's ``--reset-offsets``: move ``group``'s committed offsets on ``topic``
        ``to`` "earliest", "latest", "offset" (``value``), "shift" (by +/- ``value``) or
        "time" (``value`` ms since the epoch), on every read queue, a broker's
        (``broker``) or one (``broker``, ``queue_id``); targets are clamped to each
        queue's bounds (rayq/admin/offset_reset.py). Returns each queue's change. Without
        ``execute=True`` nothing changes (a dry run).

        GroupNotFoundError for a group no broker knows (no config, nothing committed on
        ``topic``), TopicNotFoundError, InvalidOffsetError for a queue the topic does not
        have or a bad ``to``/``value``. The change is made per broker only if the group's
        offsets there are still what the plan read (InvalidRequestError otherwise, that
        broker unchanged): stop the group's consumers first, they commit their own
        positions again."""
        validate_group(group)
        validate_topic(topic)
        check_reset(to, value)
        if not isinstance(execute, bool):
            raise InvalidOffsetError(f"execute must be a bool, got {execute!r}")
        queues = pick(self._route(topic).read_queues(), topic, broker, queue_id)
        brokers = sorted({q.broker_name for q in queues})
        committed = self._gather(
            {
                b: lambda c: c.query_offsets(
                    QueryOffsetsRequest(group=group, topic=topic, client_id=self.client_id)
                )
                for b in brokers
            }
        )
        if not any(o.offsets for o in committed.values()) and group not in self.groups():
            raise GroupNotFoundError(
                f"consumer group {group!r} does not exist: no broker has its config and it "
                f"has committed nothing on {topic!r}",
                group=group,
            )
        bounds = self._gather(
            {
                b: lambda c: c.queue_bounds(TopicRequest(topic=topic, client_id=self.client_id))
                for b in brokers
            }
        )
        at_time = self.offsets_at(topic, value) if to == "time" and value is not None else {}
        plan = []
        for q in queues:
            current = committed[q.broker_name].offsets.get(q.queue_id, -1)
            lo_hi = bounds[q.broker_name].bounds.get(q.queue_id, (0, 0))
            goal = target(to, value, current, lo_hi, at_time.get(q, lo_hi[1]))
            plan.append(OffsetChange(q, current, goal))
        if execute:
            self._apply_reset(group, topic, plan)
        return plan

    def _apply_reset(self, group: str, topic: str, plan: list[OffsetChange]) -> None:
        per_broker: dict[str, list[OffsetChange]] = {}
        for change in plan:
            per_broker.setdefault(change.queue.broker_name, []).append(change)
        done = self._gather(
            {
                b: bind(
                    lambda c, cs: c.compare_and_set_offsets(
                        CompareAndSetOffsetsRequest(
                            group=group,
                            topic=topic,
                            expected={x.queue.queue_id: x.current for x in cs},
                            offsets={x.queue.queue_id: x.target for x in cs},
                            client_id=self.client_id,
                        )
                    ),
                    changes,
                )
                for b, changes in per_broker.items()
            }
        )
        moved = sorted(b for b, d in done.items() if not d.existed)
        if moved:
            raise InvalidRequestError(
                f"the committed offsets of group {group!r} on {topic!r} changed on "
                f"{moved} while resetting (a consumer of the group is running?): those "
                "brokers were left as they were; stop the group's consumers and run the "
                "reset again",
                group=group,
            )

    # -------------------------------------------------------- dead letters
    def dead_letters(self, group: str, max_num: int = 100) -> list[MessageExt]:
        """The dead letters of ``group`` (its ``%DLQ%<group>`` topic), oldest first, at
        most ``max_num``; [] when it has none. GroupNotFoundError for an unknown group."""
        validate_group(group)
        _check_int("max_num", max_num, 1, QUERY_MAX_NUM)
        route = self._ctx.route(dlq_topic(group), refresh=True)
        if route is None:
            if group not in self.groups():
                raise GroupNotFoundError(
                    f"consumer group {group!r} does not exist on any broker", group=group
                )
            return []
        return read_dead_letters(self._ctx, group, route.read_queues(), max_num)

    def resend_dead_letter(self, group: str, msg_id: str) -> SendResult:
        """Send the dead letter ``msg_id`` of ``group`` to the group's retry topic, so that
        group (and no other) consumes it again, its reconsume count at 0. The dead letter
        stays in the DLQ. InvalidRequestError when ``msg_id`` is no dead letter of
        ``group``."""
        validate_group(group)
        if not isinstance(msg_id, str) or not msg_id:
            raise InvalidMessageError(f"msg_id must be a non-empty str, got {msg_id!r}")
        dlq = dlq_topic(group)
        found = (
            self.query_message(dlq, msg_id, max_num=1)
            if self._ctx.route(dlq, refresh=True) is not None
            else []
        )
        if not found:
            raise InvalidRequestError(
                f"message {msg_id!r} is not a dead letter of group {group!r} (nothing with "
                f"that id in {dlq!r}; list them with Admin.dead_letters or `rayq dlq list`)",
                group=group,
            )
        letter = found[0]
        req = ResendDeadLetterRequest(
            group=group, commitlog_offset=letter.commitlog_offset, client_id=self.client_id
        )
        sent = self._gather({letter.broker_name: lambda c: c.resend_dead_letter(req)})
        reply = sent[letter.broker_name]
        return SendResult(
            status=SendStatus.SEND_OK,
            msg_id=reply.msg_id,
            queue=MessageQueue(reply.topic, letter.broker_name, reply.queue_id),
            queue_offset=reply.queue_offset,
        )

    # ----------------------------------------------------------- messages
    def query_message(
        self, topic: str, key: str, max_num: int = 32, begin_ms: int = 0, end_ms: int | None = None
    ) -> list[MessageExt]:
        """Messages of ``topic`` whose key (or unique id) is ``key``, stored between
        ``begin_ms`` and ``end_ms`` (default: now), newest first, at most ``max_num``."""
        validate_topic(topic)
        if not isinstance(key, str) or not key:
            raise InvalidMessageError(f"key must be a non-empty str, got {key!r}")
        _check_int("max_num", max_num, 1, QUERY_MAX_NUM)
        _check_int("begin_ms", begin_ms, 0, 2**63 - 1)
        if end_ms is not None:
            _check_int("end_ms", end_ms, begin_ms, 2**63 - 1)
        route = self._route(topic)
        req = QueryMessageRequest(
            topic=topic,
            key=key,
            max_num=max_num,
            begin_ms=begin_ms,
            end_ms=end_ms,
            client_id=self.client_id,
        )
        found = self._gather({d.broker_name: lambda c: c.query_message(req) for d in route.queues})
        merged = [m for reply in found.values() for m in reply.messages]
        merged.sort(
            key=lambda m: (m.store_timestamp, m.broker_name, m.commitlog_offset), reverse=True
        )
        return merged[:max_num]

    def view_message(self, msg_id: str) -> MessageExt:
        """The message with this id (unique id or offset message id), from any broker."""
        if not isinstance(msg_id, str) or not msg_id:
            raise InvalidMessageError(f"msg_id must be a non-empty str, got {msg_id!r}")
        req = ViewMessageRequest(msg_id=msg_id, client_id=self.client_id)
        found = self._gather({b: lambda c: c.view_message(req) for b in self._live_brokers()})
        for broker in sorted(found):
            if found[broker].messages:
                return found[broker].messages[0]
        raise InvalidMessageError(
            f"no message with id {msg_id!r} on any broker (wrong id, or removed by retention)",
            msg_id=msg_id,
        )

    def trace(self, msg_id: str, *, trace_topic: str | None = None) -> list[TraceEvent]:
        """The timeline of the message ``msg_id``, oldest first: its send, store and
        consumes as traced clients recorded them (``ClientConfig(trace_enable=True)``)
        in ``trace_topic`` (default: this Admin's ``ClientConfig.trace_topic``). [] for a
        stored message no traced client touched; InvalidMessageError for an id with
        neither a message nor a trace."""
        topic = self._ctx.config.trace_topic if trace_topic is None else trace_topic
        return trace_of(self, msg_id, check_trace_topic(topic))

    def get_message(
        self, topic: str, queue_id: int, queue_offset: int, broker_name: str | None = None
    ) -> MessageExt:
        """The message at ``queue_offset`` of queue ``queue_id`` of ``topic`` (on
        ``broker_name``; may be left out when one broker serves the topic)."""
        validate_topic(topic)
        _check_int("queue_id", queue_id, 0, 2**31 - 1)
        _check_int("queue_offset", queue_offset, 0, 2**63 - 1)
        brokers = sorted({d.broker_name for d in self._route(topic).queues})
        if broker_name is None:
            if len(brokers) != 1:
                raise InvalidMessageError(
                    f"topic {topic!r} is on brokers {brokers}: name the broker", topic=topic
                )
            broker_name = brokers[0]
        elif broker_name not in brokers:
            raise TopicNotFoundError(
                f"topic {topic!r} is not on broker {broker_name!r} (it is on {brokers})",
                topic=topic,
            )
        req = GetMessageRequest(
            topic=topic, queue_id=queue_id, queue_offset=queue_offset, client_id=self.client_id
        )
        found = self._gather({broker_name: lambda c: c.get_message(req)})[broker_name].messages
        if not found:
            raise InvalidOffsetError(
                f"no message at offset {queue_offset} of queue {queue_id} of {topic!r} on "
                f"{broker_name} (past the end, or removed by retention)",
                value=str(queue_offset),
            )
        return found[0]

    # ------------------------------------------------------------ cluster
    def group_connections(self, group: str) -> dict[str, list[MessageQueue]]:
        """The live push consumers of ``group`` (client ids) and the queues each owns."""
        validate_group(group)
        req = MemberRequest(group=group, client_id=self.client_id)
        return self._ctx.coordinator.group_members(req).result(ADMIN_CALL_TIMEOUT_S).members

    def broker_table(self) -> list[BrokerEntry]:
        """Every broker replica the coordinator knows (masters, slaves, lost masters), with
        role, node and last heartbeat."""
        req = ClientRequest(client_id=self.client_id)
        return self._ctx.coordinator.broker_table(req).result(ADMIN_CALL_TIMEOUT_S).brokers

    def broker_status(self, replica: str) -> BrokerStatus:
        """One broker replica's state now (``<name>`` for a master, ``<name>#<id>`` for a
        slave): info, disk, flush position, its flusher and hold service, settings."""
        if not isinstance(replica, str) or not replica:
            raise ConfigError(f"replica must be a broker name, got {replica!r}")
        req = BrokerStatusRequest(client_id=self.client_id)
        return self._ctx.broker(replica).broker_status(req).result(STATUS_CALL_TIMEOUT_S)

    def statuses(self, replicas: list[str]) -> dict[str, BrokerStatus | str]:
        """``broker_status`` of each replica at once; a replica that did not answer maps to
        why (a str), rather than raising."""
        req = BrokerStatusRequest(client_id=self.client_id)
        pending: dict[str, Any] = {}
        out: dict[str, BrokerStatus | str] = {}
        for name in replicas:
            try:
                pending[name] = self._ctx.broker(name).broker_status(req)
            except RayqError as exc:
                out[name] = str(exc)
        for name, reply in pending.items():
            try:
                out[name] = reply.result(STATUS_CALL_TIMEOUT_S)
            except RayqError as exc:
                self._ctx.forget(name)
                out[name] = str(exc)
        return {n: out[n] for n in replicas}

    def health(self, limits: HealthLimits | None = None) -> list[ActorHealth]:
        """Each actor's health (rayq/admin/health.py): the coordinator, and per broker replica the
        broker, its flusher and its hold service, each check OK, WARN or FAIL and why."""
        if limits is not None and not isinstance(limits, HealthLimits):
            raise ConfigError(f"limits must be a HealthLimits, got {type(limits).__name__}")
        limits = limits or HealthLimits()
        try:
            entries = self.broker_table()
        except RayqError as exc:
            return [coordinator_health(f"the coordinator did not answer: {exc}")]
        names = [replica_name(e.broker_name, e.broker_id) for e in entries]
        live = [n for n, e in zip(names, entries, strict=True) if not e.lost]
        statuses = self.statuses(live)
        now = SYSTEM_CLOCK.now_ms()
        out = [coordinator_health()]
        for name, entry in zip(names, entries, strict=True):
            status = statuses.get(name, "lost")
            out += replica_health(entry, status, now, limits)
        return out

    # ------------------------------------------------------------ helpers
    def _live_brokers(self) -> list[str]:
        brokers = self._ctx.brokers()
        if not brokers:
            raise BrokerUnavailableError("no live broker is registered with the coordinator")
        return brokers

    def _route(self, topic: str) -> TopicRoute:
        route = self._ctx.route(topic, refresh=True)
        if route is None:
            raise TopicNotFoundError(f"topic {topic!r} does not exist on any broker", topic=topic)
        return route

    def _routes(self) -> dict[str, TopicRoute]:
        topics = self.topics()
        req = RoutesRequest(topics=topics, client_id=self.client_id)
        routes = self._ctx.coordinator.routes(req).result(ADMIN_CALL_TIMEOUT_S).routes
        return {t: r for t, r in routes.items() if r is not None}

    def delay_progress(self) -> dict[str, ScheduleStats]:
        """Delayed delivery on every live broker: per delay level (next offset to deliver,
        max offset) of its queue, and the deliver-at backlog."""
        req = ScheduleStatsRequest(client_id=self.client_id)
        return self._gather({b: lambda c: c.schedule_stats(req) for b in self._live_brokers()})

    def replication(self) -> list[ReplicationStats]:
        """Every live broker's replication: role, epoch, written offset, and for a master
        each slave's acknowledged offset and lag in bytes and in milliseconds."""
        req = ReplicationRequest(client_id=self.client_id)
        found = self._gather({b: lambda c: c.replication(req) for b in self._live_brokers()})
        return [found[b] for b in sorted(found)]

    def _gather(self, calls: Mapping[K, Callable[[BrokerClient], Reply[T]]]) -> dict[K, T]:
        """Ask several brokers at once (keys: a broker name or (broker, ...))."""
        return self._ctx.broker_calls(calls, ADMIN_CALL_TIMEOUT_S)


def _check_int(name: str, value: object, lo: int, hi: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise InvalidOffsetError(
            f"{name} must be an int in {lo}..{hi}, got {value!r}", value=repr(value), limit=hi
        )


def _check_queues(queues: object) -> None:
    if not isinstance(queues, int) or isinstance(queues, bool) or not 1 <= queues <= QUEUES_MAX:
        raise ConfigError(
            f"queues must be an int in 1..{QUEUES_MAX}, got {queues!r}",
            value=repr(queues),
            limit=QUEUES_MAX,
        )


def _check_perm(perm: object) -> None:
    if not isinstance(perm, int) or isinstance(perm, bool) or not 0 <= perm <= PERM_ALL:
        raise ConfigError(
            f"perm must be an int in 0..{PERM_ALL} (4 read | 2 write | 1 inherit), got {perm!r}",
            value=repr(perm),
            limit=PERM_ALL,
        )


__all__ = ["Admin"]
