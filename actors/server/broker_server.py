"""The broker's state over its store, without Ray; its processors serve the requests.

``BrokerServer`` builds what a broker serves from (the store, the config tables, the
locks, schedule, transaction and replication services, the ACL) and is the union of
its processors, as RocketMQ splits its broker: send_processor.py (puts, half
messages, Arrow puts, send-backs), pull_processor.py (pulls, Arrow pages, page
readers), offset_processor.py (offsets and queue locks), query_processor.py (topics,
groups, stats, status, message queries, delayed delivery), transaction_processor.py
and replication_processor.py. Each public method of a processor takes one request
Struct, already checked at the boundary and authorized by the endpoint
(endpoint.py), and returns one reply Struct. What stays here (topic and group
lookups, flush targets, persistence, retention, close) is for the shells only.

Every append (sends, delayed deliveries, send-backs) holds ``writing``: the actor
runs concurrency groups on threads of their own, so one writer at a time.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from pathlib import Path
from typing import Any

from rayq.actors.protocol import (
    ArrowPutRequest,
    BrokerInfo,
    FlushTargets,
    QueueData,
)
from rayq.actors.protocol.config import BrokerConfig
from rayq.actors.server.acl import ACL_FILE_NAME, AclService
from rayq.actors.server.dedupe import open_sequences
from rayq.actors.server.offset_processor import OffsetProcessor
from rayq.actors.server.pop_processor import PopProcessor
from rayq.actors.server.pop_state import PopState
from rayq.actors.server.processor_base import check_not_system
from rayq.actors.server.pull_processor import PullProcessor
from rayq.actors.server.put_rate import PutRate
from rayq.actors.server.query_processor import QueryProcessor
from rayq.actors.server.queue_locks import QueueLocks
from rayq.actors.server.replication import (
    MasterReplication,
    SlaveReplication,
)
from rayq.actors.server.replication_processor import ReplicationProcessor
from rayq.actors.server.schedule import ScheduleService
from rayq.actors.server.send_processor import SendProcessor
from rayq.actors.server.table_files import (
    CONFIG_DIR_NAME,
    PERM_ALL,
    PERM_READ,
    PERM_WRITE,
    SubscriptionGroupConfig,
    TopicConfig,
)
from rayq.actors.server.tables import ConfigStore
from rayq.actors.server.transaction_processor import TransactionProcessor
from rayq.actors.server.transactions import TransactionService
from rayq.store import SYSTEM_CLOCK, MessageStore
from rayq.store.epochs import EpochHistory
from rayq.store.errors import (
    GroupNotFoundError,
    PermissionDeniedError,
    TopicNotFoundError,
)
from rayq.store.names import validate_group
from rayq.store.properties import producer_epoch


def acl_service(config: BrokerConfig, store_dir: Path) -> AclService | None:
    """A broker's ACL (None when off): the rules of ``acl_file``, or of
    ``<store dir>/config/plain_acl.toml``; its page readers check with the same."""
    if not config.acl_enable:
        return None
    acl_file = config.acl_file or str(store_dir / CONFIG_DIR_NAME / ACL_FILE_NAME)
    return AclService(acl_file, config.acl_timestamp_window_ms)


logger = logging.getLogger(__name__)


def local_host(port: int = 10911) -> str:
    try:
        ip = socket.gethostbyname(socket.gethostname())
    except OSError:
        ip = "127.0.0.1"
    return f"{ip}:{port}"


class BrokerServer(
    SendProcessor,
    PullProcessor,
    PopProcessor,
    OffsetProcessor,
    QueryProcessor,
    TransactionProcessor,
    ReplicationProcessor,
):
    """A broker's state over its store, served by its processors (one class each, in
    modules of their own); the endpoint (endpoint.py) checks and authorizes first."""

    def __init__(self, config: BrokerConfig, store_dir: str, node_id: str = "") -> None:
        self.config = config
        self.name = config.broker_name
        self.root = Path(store_dir)
        self.node_id = node_id
        self.instance = os.urandom(8).hex()  # BrokerInfo.instance
        self.store = MessageStore(
            self.root,
            config.store_config,
            store_host=local_host(config.listen_port),
            broker_name=self.name,
        )
        self.tables = ConfigStore(self.root)
        self.locks = QueueLocks(config.rebalance_lock_max_live_time_ms)
        self._fences: dict[tuple[str, str, int], int] = {}  # (group, topic, queue) -> generation
        self.writing = threading.Lock()  # one appender at a time (see the module doc)
        self.schedule = ScheduleService(
            self.store,
            self.tables.delay_offsets,
            config.delay_levels,
            accept=self.tables.topics.__contains__,
        )
        self.sequences = open_sequences(
            self.tables.config_dir, self.store.commitlog, SYSTEM_CLOCK.now_ms()
        )
        self.transactions = TransactionService(
            self.store,
            self.tables.config_dir,
            timeout_ms=config.transaction_timeout,
            check_interval_ms=config.transaction_check_interval,
            check_max=config.transaction_check_max,
        )
        self.transactions.recover()
        self.role = config.broker_role
        self.epochs = EpochHistory(self.tables.config_dir)
        self.master: MasterReplication | None = None
        self.slave: SlaveReplication | None = None
        if self.role.is_master:
            self.master = MasterReplication(
                self.store, self.epochs, config, lambda: self.tables.topics.data_version
            )
        else:
            self.slave = SlaveReplication(self.store, self.epochs, config)
            self.slave.transactions = self.transactions
        # consumer offsets committed here while a slave: they go to the master at the next
        # metadata sync ("topic@group" -> queue -> offset)
        self.slave_commits: dict[str, dict[int, int]] = {}
        self.acl = acl_service(config, self.root)
        self.replication_error = ""  # a slave: why it is not replicating now
        self.put_rate = PutRate()
        self.pop_state = PopState()  # POP leases (pop_state.py), rebuilt from its log
        self._pop_turns: dict[str, int] = {}
        if self.master is not None:
            self.replay_pop_log()
        logger.info(
            "broker %s serving store %s (recovery: %s)", self.name, self.root, self.store.recovery
        )

    # ------------------------------------------------------------- topics

    def authorize(self, method: str, request: Any, peer: str | None = None) -> None:
        """ACL (actors/server/acl.py): nothing if ACL is off or ``request`` may call the
        client method ``method``; else PermissionDeniedError. Called at the boundary (the
        broker actor, the fake cluster) once per client request, after ``check``.
        ``peer``: the caller's address as the transport observed it (None under Ray actor
        calls, which show none); only it is matched against the whitelist."""
        if self.acl is not None:
            self.acl.check(method, request, peer)

    def authorize_arrow_put(self, put: ArrowPutRequest) -> None:
        """ACL for a ``put_arrow`` (Spark's JVM tasks, which do not sign): its ``grant``
        must cover its topic, queue and producer (the producer or one of its epochs) and
        be signed by an account with PUB on the topic (``write_grant``). Nothing if ACL
        is off; else PermissionDeniedError."""
        if self.acl is None:
            return
        grant = put.grant
        if grant is None:
            raise PermissionDeniedError(
                "put_arrow: ACL is on and the request carries no write grant (Spark's rayq "
                "sink signs one on the driver with the options accessKey and secretKey)",
                method="put_arrow",
            )
        family, _ = producer_epoch(put.producer_id)
        covered = grant.producer_id in (put.producer_id, family)
        if not covered or (grant.topic, grant.queue_id) != (put.topic, put.queue_id):
            raise PermissionDeniedError(
                f"put_arrow: the grant covers producer {grant.producer_id!r} on "
                f"{grant.topic}/{grant.queue_id}, not producer {put.producer_id!r} on "
                f"{put.topic}/{put.queue_id}",
                method="put_arrow",
            )
        self.acl.check("write_grant", grant)

    def topic_config(self, topic: str, create: bool = False) -> TopicConfig:
        check_not_system(topic)
        cfg = self.tables.topics.get(topic)
        if cfg is not None:
            return cfg
        if not create or not self.config.auto_create_topic_enable:
            raise TopicNotFoundError(
                f"topic {topic!r} does not exist on broker {self.name}; create it with "
                "Admin.create_topic or enable auto_create_topic_enable",
                topic=topic,
            )
        n = self.config.default_topic_queue_nums
        return self._create_topic(topic, n, n, PERM_ALL)

    def info(self) -> BrokerInfo:
        queues = {
            t.topic_name: QueueData(
                broker_name=self.name,
                read_queue_nums=t.read_queue_nums,
                write_queue_nums=t.write_queue_nums,
                perm=t.perm,
                property_filter=self.config.enable_property_filter,
            )
            for t in (self.tables.topics.get(n) for n in self.tables.topics.topics())
            if t
        }
        now = SYSTEM_CLOCK.now_ms()
        return BrokerInfo(
            broker_name=self.name,
            node_id=self.node_id,
            store_dir=str(self.root),
            topics=queues,
            data_version=self.tables.topics.data_version,
            broker_id=self.config.broker_id,
            role=self.role.value,
            epoch=self.epochs.current,
            written_offset=self.store.written_offset,
            replicas=self.master.status(now) if self.master else [],
            auto_failover=self.config.auto_failover,
            disk_ratio=self.store.disk.ratio,
            put_tps=self.put_rate.per_second(now),
            acked_offset=self.acked_offset,
            instance=self.instance,
        )

    # ------------------------------------------------------------- groups
    def group_config(self, group: str, create: bool = False) -> SubscriptionGroupConfig:
        """The subscription group's config; auto-created (defaults) on a group's first pull
        or commit when ``auto_create_subscription_group`` is on, as RocketMQ does."""
        validate_group(group)
        cfg = self.tables.subscription_groups.get(group)
        if cfg is not None:
            return cfg
        if not create or not self.config.auto_create_subscription_group:
            raise GroupNotFoundError(
                f"consumer group {group!r} does not exist on broker {self.name}; create it "
                "with Admin.create_group or enable auto_create_subscription_group",
                group=group,
            )
        return self._put_group(SubscriptionGroupConfig(group_name=group))

    def group_or_defaults(self, group: str) -> SubscriptionGroupConfig:
        """The group's config, or RocketMQ's defaults for a group not created (yet)."""
        validate_group(group)
        found = self.tables.subscription_groups.get(group)
        return found if found is not None else SubscriptionGroupConfig(group_name=group)

    def ensure_system_topic(self, topic: str, queues: int) -> bool:
        """Create a retry or dead-letter topic (read and write) unless it exists; True if new.
        Created even when auto_create_topic_enable is off, as RocketMQ does."""
        if topic in self.tables.topics:
            return False
        self._create_topic(topic, queues, queues, PERM_READ | PERM_WRITE)
        return True

    # ------------------------------------------------------ housekeeping
    def flush_targets(self) -> FlushTargets:
        """Commit-log bytes written, and the offset below which queues and index are."""
        return FlushTargets(
            written=self.store.written_offset, dispatched=self.store.dispatched_offset
        )

    def persist(self) -> None:
        if self.slave is None:  # a slave's delay offsets are its master's (metadata sync)
            with self.writing:
                self.schedule.sync_progress()
        self.tables.persist_all()
        self.sequences.persist(self.store.written_offset, SYSTEM_CLOCK.now_ms())
        with self.writing:
            self.transactions.persist(self._transactions_cover())

    def _transactions_cover(self) -> int:
        """How far the transaction table has seen the log: all of it on a master; on a
        slave, the records dispatched so far (they are applied as they are)."""
        return self.store.written_offset if self.slave is None else self.store.replica_dispatched

    def group_lags(self) -> dict[tuple[str, str], int]:
        """Consumer lag per (group, topic): max offset minus committed offset, summed over
        the queues the group committed on (RocketMQ exporter's ``rocketmq_group_diff``)."""
        lags: dict[tuple[str, str], int] = {}
        for group, topic, queues in self.tables.consumer_offsets.entries():
            if topic in self.tables.topics:
                lags[(group, topic)] = sum(
                    max(self.store.max_offset(topic, q) - committed, 0)
                    for q, committed in queues.items()
                )
        return lags

    def retention_tick(self) -> None:
        self.store.retention_tick()

    def close(self) -> None:
        if self.slave is None:
            with self.writing:
                self.schedule.sync_progress()
        self.tables.close()
        self.sequences.persist(self.store.written_offset, SYSTEM_CLOCK.now_ms())
        self.transactions.persist(self._transactions_cover())
        self.store.close()
