"""The two typed config objects: ``BrokerConfig`` (server side) and ``ClientConfig``.

Frozen msgspec Structs with RocketMQ's defaults and field names in snake_case.
"""

from __future__ import annotations

import enum
import os
from typing import Annotated, Any

import msgspec
from msgspec import Meta

from rayq.actors.protocol.auth import Credentials
from rayq.actors.protocol.delay_levels import DEFAULT_MESSAGE_DELAY_LEVEL, DelayLevels
from rayq.store import DEFAULT_STORE_CONFIG, FlushDiskType, StoreConfig
from rayq.store.config import check_fields, convert_config
from rayq.store.config_file import config_from_toml
from rayq.store.errors import ConfigError
from rayq.store.names import TRACE_TOPIC, check_trace_topic, validate_instance_name

NAMESPACE = "rayq"
TRANSPORTS = frozenset({"", "direct", "ray"})  # ClientConfig.transport
REPLICA_SEPARATOR = "#"


def replica_name(broker_name: str, broker_id: int) -> str:
    """What a broker replica's actors are named after: the master runs under the broker
    name, a slave under ``<name>#<id>`` (actors/protocol/ ``broker_actor_name``)."""
    return broker_name if broker_id == 0 else f"{broker_name}{REPLICA_SEPARATOR}{broker_id}"


Positive = Annotated[int, Meta(gt=0)]
NonNegative = Annotated[int, Meta(ge=0)]
BootstrapPort = Annotated[int, Meta(ge=0, le=65535)]


class BrokerRole(enum.Enum):
    """A broker replica's role (RocketMQ ``BrokerRole``): broker id 0 is the master."""

    ASYNC_MASTER = "ASYNC_MASTER"  # acknowledges a send without waiting for a slave
    SYNC_MASTER = "SYNC_MASTER"  # acknowledges a send once a slave has its bytes
    SLAVE = "SLAVE"  # copies its master's commit log; serves reads only

    @property
    def is_master(self) -> bool:
        return self is not BrokerRole.SLAVE


MAX_IN_SYNC_REPLICAS = 64


def _check_in_sync(value: int) -> None:
    """ConfigError unless ``min_in_sync_replicas`` is a number of slaves in 1..64."""
    if not 1 <= value <= MAX_IN_SYNC_REPLICAS:
        hint = (
            "a SYNC_MASTER that waits for no slave is an ASYNC_MASTER: set broker_role instead"
            if value == 0
            else "it counts the slaves that must have a send before a SYNC_MASTER acknowledges it"
        )
        raise ConfigError(
            f"BrokerConfig.min_in_sync_replicas={value!r} is invalid: it must be in "
            f"1..{MAX_IN_SYNC_REPLICAS} (the default is 1); {hint}",
            field="min_in_sync_replicas",
            value=repr(value),
        )


class BrokerConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Broker settings (RocketMQ ``BrokerConfig`` and ``MessageStoreConfig``)."""

    broker_name: str = "broker-a"
    broker_id: NonNegative = 0  # 0: the master; a slave has an id > 0
    broker_role: BrokerRole = BrokerRole.ASYNC_MASTER
    # Replication (RocketMQ HAService): a slave more than this behind makes SYNC_MASTER
    # sends SLAVE_NOT_AVAILABLE; chunks of at most ha_transfer_batch_bytes; a slave's
    # fetch waits up to ha_fetch_wait_ms for new bytes; metadata copied every interval.
    ha_slave_fallbehind_max: Positive = 256 * 1024 * 1024
    # SYNC_MASTER: how many slaves must have a send's bytes before it is acknowledged
    # (RocketMQ 5's minInSyncReplicas and Kafka's min.insync.replicas, but counting slaves
    # only: Kafka's min.insync.replicas=3 is 2 here). Fewer slaves connected and within
    # ha_slave_fallbehind_max: SLAVE_NOT_AVAILABLE. With k, a failover that loses the
    # master and up to k-1 slaves keeps every acknowledged send (docs/REPLICATION.md).
    min_in_sync_replicas: int = 1
    ha_transfer_batch_bytes: Positive = 4 * 1024 * 1024
    ha_fetch_wait_ms: Positive = 1_000
    # a slave of an ASYNC_MASTER that got a chunk under 1 MiB waits this long before its
    # next fetch (fewer, larger fetches; the lag grows by about as much)
    ha_fetch_linger_ms: NonNegative = 50
    ha_housekeeping_ms: Positive = 20_000  # a slave silent this long is not connected
    slave_sync_metadata_interval_ms: Positive = 10_000
    # When the master's actor or node is lost, the coordinator promotes the slave that is
    # furthest ahead (actors/failover.py); off: slaves serve reads only (RocketMQ 4).
    auto_failover: bool = True
    # A consumer far behind (past access_message_in_memory_max_ratio of RAM from the end of
    # the log) is told to pull from a slave (the group's which_broker_when_consume_slowly).
    slave_read_enable: bool = False
    # SQL92 subscriptions (MessageSelector.by_sql) are evaluated here, per message, at pull
    enable_property_filter: bool = False
    flush_disk_type: FlushDiskType = FlushDiskType.ASYNC_FLUSH
    auto_create_topic_enable: bool = True
    auto_create_subscription_group: bool = True
    default_topic_queue_nums: Positive = 4
    long_polling_enable: bool = True
    short_polling_time_mills: Positive = 1000
    broker_suspend_max_ms: Positive = 15_000
    heartbeat_interval_ms: Positive = 30_000
    persist_offset_interval_ms: Positive = 5_000
    retention_check_interval_ms: Positive = 10_000
    pull_max_messages: Positive = 1024
    pull_max_bytes: Positive = 4 * 1024 * 1024
    store: StoreConfig = DEFAULT_STORE_CONFIG
    listen_port: Positive = 10911  # part of the store host in offset message ids
    rebalance_lock_max_live_time_ms: Positive = 60_000  # orderly consumption queue locks
    message_delay_level: str = DEFAULT_MESSAGE_DELAY_LEVEL  # delay of level 1, 2, ... (s/m/h/d)
    # Access control (RocketMQ plain ACL, actors/server/acl.py): every client request is
    # checked against the TOML rules in acl_file ("" = <store dir>/config/plain_acl.toml),
    # reloaded when it changes; a signed request more than acl_timestamp_window_ms away
    # from the broker's clock is refused (replay protection).
    acl_enable: bool = False
    acl_file: str = ""
    acl_timestamp_window_ms: Positive = 5 * 60 * 1000
    # Transactions (RocketMQ's names and defaults, in ms): a half message without an end
    # older than transaction_timeout is checked with its producer group every
    # transaction_check_interval, at most transaction_check_max times, then discarded to
    # TRANS_CHECK_MAX_TIME_TOPIC (actors/server/transactions.py).
    transaction_timeout: Positive = 6_000
    transaction_check_interval: Positive = 60_000
    transaction_check_max: Positive = 15
    # The deployment's bootstrap endpoint (RocketMQ's name server port), where clients
    # outside Ray connect with ``rayq.connect("rayq://host:port", key=...)``: served by
    # the coordinator on ``bootstrap_host`` ("": its node's address) and this port (a
    # free one when it is taken; 0: always a free one).
    bootstrap_port: BootstrapPort = 9876
    bootstrap_host: str = ""

    def __post_init__(self) -> None:
        check_fields(self)
        _check_in_sync(self.min_in_sync_replicas)
        DelayLevels.parse(self.message_delay_level)  # ConfigError for a bad table
        if not self.broker_name or REPLICA_SEPARATOR in self.broker_name:
            raise ConfigError(
                f"broker_name {self.broker_name!r} must be non-empty and free of "
                f"{REPLICA_SEPARATOR!r} (it separates a slave's broker id in actor names)",
                value=self.broker_name,
            )
        if (self.broker_id == 0) != self.broker_role.is_master:
            raise ConfigError(
                f"broker {self.broker_name!r}: broker_id {self.broker_id} with role "
                f"{self.broker_role.value}; broker id 0 is the master (ASYNC_MASTER or "
                "SYNC_MASTER) and a SLAVE has an id > 0",
                value=self.broker_id,
            )

    @property
    def replica_name(self) -> str:
        """This replica's name: the broker name for the master, ``<name>#<id>`` for a slave."""
        return replica_name(self.broker_name, self.broker_id)

    def hold_s(self, suspend_ms: int) -> float:
        """How long a pull that found nothing is held: its suspend time, capped by the
        broker's long-polling limit, or the short-polling time when long polling is off."""
        cap = (
            self.broker_suspend_max_ms
            if self.long_polling_enable
            else self.short_polling_time_mills
        )
        return min(suspend_ms, cap) / 1000

    @property
    def delay_levels(self) -> DelayLevels:
        return DelayLevels.parse(self.message_delay_level)

    @property
    def store_config(self) -> StoreConfig:
        """The store settings with this broker's flush type."""
        if self.store.flush_disk_type is self.flush_disk_type:
            return self.store
        return self.store.replace(flush_disk_type=self.flush_disk_type)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> BrokerConfig:
        return convert_config(values, cls, "broker config")

    @classmethod
    def from_toml(cls, path: str | os.PathLike[str]) -> BrokerConfig:
        """The settings of a TOML file (RocketMQ's ``broker.conf``): every field a key,
        the store's in a ``[store]`` table (``examples/broker.toml``). ConfigError naming
        the file and the key for an unknown key or a bad value, and for a file that is
        missing, unreadable or not TOML."""
        return config_from_toml(path, cls)


class ClientConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Producer and consumer settings (RocketMQ ``ClientConfig`` and friends)."""

    namespace: str = NAMESPACE
    send_timeout_ms: Positive = 3_000
    retries: NonNegative = 2
    compress_over_bytes: Positive = 4096
    max_message_size_bytes: Positive = 4 * 1024 * 1024
    batch_max_bytes: Positive = 4 * 1024 * 1024
    linger_ms: NonNegative = 1
    route_refresh_interval_ms: Positive = 30_000
    broker_fault_backoff_ms: Positive = 30_000
    pull_batch_size: Positive = 32
    poll_max_messages: Positive = 1024
    auto_commit_interval_ms: Positive = 5_000
    broker_suspend_max_ms: Positive = 15_000
    rebalance_interval_ms: Positive = 2_000
    member_expiry_ms: Positive = 30_000
    # Push consumers (RocketMQ DefaultMQPushConsumer's fields, in ms where RocketMQ mixes units).
    consume_thread: Positive = 20
    consume_message_batch_max_size: Positive = 1
    pull_threshold_for_queue: Positive = 1_000
    pull_threshold_size_for_queue_mib: Positive = 100
    consume_concurrently_max_span: Positive = 2_000
    consume_timeout_ms: Positive = 15 * 60 * 1000
    suspend_current_queue_time_millis: Positive = 1_000
    pull_time_delay_when_flow_control_ms: Positive = 50
    pull_time_delay_when_exception_ms: Positive = 3_000
    lock_renew_interval_ms: Positive = 20_000
    lock_stale_ms: Positive = 30_000
    member_heartbeat_interval_ms: Positive = 10_000
    offset_store_dir: str = ""  # broadcasting offsets; "" = ~/.rayq_offsets
    instance_name: str = "DEFAULT"
    # ACL: every broker request is signed with these (the secret never shows in reprs)
    credentials: Credentials | None = None
    # A TransactionProducer asks its brokers for the checks of its group this often
    check_request_poll_ms: Positive = 1_000
    # How broker calls travel: "direct" (the brokers' socket data plane), "ray" (actor
    # calls), or "" for the environment variable RAYQ_TRANSPORT, else "direct"
    transport: str = ""
    # Message trace (RocketMQ msgTrace, rayq/trace/): this client records its sends and
    # consumes to trace_topic (Admin.trace reads them); off by default.
    trace_enable: bool = False
    trace_topic: str = TRACE_TOPIC

    def __post_init__(self) -> None:
        check_fields(self)
        validate_instance_name(self.instance_name)
        check_trace_topic(self.trace_topic)
        if self.transport not in TRANSPORTS:
            raise ConfigError(
                f"transport={self.transport!r} is not one of {sorted(TRANSPORTS)}: "
                "'direct' (sockets), 'ray' (actor calls), '' (RAYQ_TRANSPORT or the default)",
                value=self.transport,
            )
        if "\0" in self.offset_store_dir:
            raise ConfigError(
                f"offset_store_dir={self.offset_store_dir!r} contains a NUL character; "
                "give a directory path, or '' for ~/.rayq_offsets",
                value=self.offset_store_dir,
            )
