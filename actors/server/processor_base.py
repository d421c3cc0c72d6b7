"""What the broker's processors share: the state ``BrokerServer`` builds, and checks.

Each processor (send_processor.py, pull_processor.py, offset_processor.py,
query_processor.py, transaction_processor.py, replication_processor.py) is a class
of methods over this state; ``BrokerServer`` (broker_server.py) builds the state once
and is all the processors together, so each request is served by exactly one
processor's method. No Ray.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING

from rayq.actors.protocol.config import BrokerConfig, BrokerRole
from rayq.actors.protocol.internal import BrokerInfo
from rayq.actors.protocol.records import SubscriptionGroupConfig, TopicConfig
from rayq.actors.server.acl import AclService
from rayq.actors.server.dedupe import ProducerSequences
from rayq.actors.server.put_rate import PutRate
from rayq.actors.server.queue_locks import QueueLocks
from rayq.actors.server.replication import MasterReplication, SlaveReplication
from rayq.actors.server.schedule import ScheduleService
from rayq.actors.server.table_files import is_readable
from rayq.actors.server.tables import ConfigStore
from rayq.actors.server.transactions import TransactionService
from rayq.store import MessageStore
from rayq.store.epochs import EpochHistory
from rayq.store.errors import InvalidRequestError, PermissionDeniedError
from rayq.store.names import (
    TRANS_CHECK_MAX_TIME_TOPIC,
    check_client_write_topic,
    is_system_topic,
    validate_topic,
)


class ProcessorBase:
    """The broker's shared state (set by ``BrokerServer.__init__``), as the processors
    use it, and the lookups ``BrokerServer`` defines for all of them."""

    config: BrokerConfig
    name: str
    root: Path
    node_id: str
    store: MessageStore
    tables: ConfigStore
    locks: QueueLocks
    _fences: dict[tuple[str, str, int], int]
    writing: threading.Lock
    schedule: ScheduleService
    sequences: ProducerSequences
    transactions: TransactionService
    role: BrokerRole
    epochs: EpochHistory
    master: MasterReplication | None
    slave: SlaveReplication | None
    slave_commits: dict[str, dict[int, int]]
    acl: AclService | None
    replication_error: str
    put_rate: PutRate

    def readable(self, group: str, topic: str) -> tuple[SubscriptionGroupConfig, TopicConfig]:
        """``group``'s config (created if new) and ``topic``'s, if the group may consume
        and the topic may be read; else PermissionDeniedError saying which."""
        config = self.group_config(group, create=True)
        if not config.consume_enable:
            raise PermissionDeniedError(
                f"consumer group {group!r} may not consume (consume_enable is off); "
                "turn it on with Admin.update_group",
                group=group,
            )
        cfg = self.topic_config(topic, create=False)
        if not is_readable(cfg.perm):
            raise PermissionDeniedError(f"topic {topic!r} is not readable (perm={cfg.perm})")
        return config, cfg

    if TYPE_CHECKING:

        def topic_config(self, topic: str, create: bool = False) -> TopicConfig: ...

        def group_config(self, group: str, create: bool = False) -> SubscriptionGroupConfig: ...

        def group_or_defaults(self, group: str) -> SubscriptionGroupConfig: ...

        def ensure_system_topic(self, topic: str, queues: int) -> bool: ...

        def _check_master(self, what: str) -> None: ...

        def info(self) -> BrokerInfo: ...


def check_not_system(topic: str) -> None:
    """Topic admin, routes and pulls: refuse the broker's own topics (store/names.py).
    Retry and dead-letter topics pass: consumers read them and send-back creates them;
    so does TRANS_CHECK_MAX_TIME_TOPIC (discarded transactions, for operators to read);
    ``put`` refuses them for clients with ``check_client_write_topic``."""
    validate_topic(topic)
    if is_system_topic(topic) and topic != TRANS_CHECK_MAX_TIME_TOPIC:
        check_client_write_topic(topic)  # raises PermissionDeniedError saying why


def check_client(client_id: str) -> None:
    if not client_id:
        raise InvalidRequestError("this request needs the caller's client_id (the lock owner)")
