"""rayq: a RocketMQ-style message broker whose server parts are Ray actors.

General layout (imports only point down: ``rayq`` -> ``rayq.actors`` -> ``rayq.store``):

* ``rayq/`` the user's side, in packages that name its parts: ``producer/``
  (Producer, TransactionProducer), ``consumer/`` (PushConsumer, PullConsumer, SimpleConsumer and
  their engines), ``admin/``, ``transport/`` (the seam to the server: typed clients,
  Ray actor calls), ``connectors/`` (Spark, the JVM source and sink, Ray Data),
  ``cli/``, ``trace/`` (message trace: records, their writer, ``Admin.trace``),
  ``testing/`` (an in-process cluster over the real server objects), ``metrics``
  (client-side metrics, in-process and through Ray).
  ``rayq.cluster`` starts or attaches to a deployment. Reaches the server only
  through ``rayq.actors.protocol`` and a transport; never opens store files.
* ``rayq.actors`` (folder ``actors/``): the server side. ``protocol/`` is the wire
  contract and the registry of operations (imports only the store); ``server/``
  holds the Ray-free services; the modules beside them are thin Ray actor shells.
* ``rayq.store`` (folder ``store/``): the storage engine (commit log, consume
  queues, key index, recovery, retention); plain Python, imports nothing from Ray.

The vocabulary the store needs (message records, statuses, errors, StoreConfig)
lives in ``rayq.store`` and is re-exported here, so nothing imports upwards.
"""

from rayq.actors.protocol.records import SubscriptionGroupConfig
from rayq.errors import (
    BrokenError,
    BrokerBusyError,
    BrokerError,
    BrokerUnavailableError,
    ClientError,
    ClosedError,
    ConfigError,
    CorruptRecordError,
    DataLossError,
    DiskFullError,
    GroupNotFoundError,
    InvalidFilterError,
    InvalidGroupError,
    InvalidMessageError,
    InvalidOffsetError,
    InvalidReceiptHandleError,
    InvalidRequestError,
    InvalidTopicError,
    MessageTooLargeError,
    NotMasterError,
    PermissionDeniedError,
    RayqError,
    ReplicationError,
    StoreError,
    StoreLockedError,
    TopicNotFoundError,
    all_error_classes,
)
from rayq.store import (
    DEFAULT_STORE_CONFIG,
    FlushDiskType,
    GetStatus,
    Message,
    MessageExt,
    MessageStore,
    PutStatus,
    StoreConfig,
    TagFilter,
)

__version__ = "0.1.0"

# Names backed by Ray, imported on first use so that ``import rayq.store`` (and the
# storage engine's tests) never import Ray.
_LAZY = {
    "Admin": "rayq.admin",
    "AllocateStrategy": "rayq.actors.protocol.enums",
    "ConsumeOrderlyStatus": "rayq.consumer.push",
    "ConsumeStatus": "rayq.consumer.push",
    "MessageModel": "rayq.actors.protocol.enums",
    "MessageQueueListener": "rayq.consumer.shares",
    "MessageSelector": "rayq.consumer.selector",
    "PushConsumer": "rayq.consumer.push",
    "BrokerConfig": "rayq.actors.protocol.config",
    "BrokerRole": "rayq.actors.protocol.config",
    "ClientConfig": "rayq.actors.protocol.config",
    "Credentials": "rayq.actors.protocol.auth",
    "Cluster": "rayq.cluster",
    "ConsumeFromWhere": "rayq.actors.protocol.enums",
    "MessageQueue": "rayq.actors.protocol.enums",
    "Producer": "rayq.producer",
    "PullConsumer": "rayq.consumer.pull",
    "ReceivedMessage": "rayq.consumer.simple",
    "ConsumerPool": "rayq.consumer.pool",
    "PoolStatus": "rayq.consumer.pool",
    "SimpleConsumer": "rayq.consumer.simple",
    "PullStatus": "rayq.actors.protocol.enums",
    "QueueProgress": "rayq.actors.protocol.broker",
    "OffsetChange": "rayq.admin.offset_reset",
    "QueueStats": "rayq.actors.protocol.broker",
    "SendResult": "rayq.actors.protocol.broker",
    "SendStatus": "rayq.actors.protocol.enums",
    "TraceEvent": "rayq.trace",
    "TransactionListener": "rayq.producer.transaction",
    "TransactionProducer": "rayq.producer.transaction",
    "TransactionStatus": "rayq.actors.protocol.enums",
    "ServiceState": "rayq.service_state",
    "connect": "rayq.bootstrap",
    "discover": "rayq.bootstrap",
    "start": "rayq.cluster",
    "ClientMetrics": "rayq.metrics",
    "LatencyHistogram": "rayq.metrics",
    "client_metrics": "rayq.metrics",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'rayq' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "DEFAULT_STORE_CONFIG",
    "Admin",
    "AllocateStrategy",
    "BrokenError",
    "BrokerBusyError",
    "BrokerConfig",
    "BrokerError",
    "BrokerRole",
    "BrokerUnavailableError",
    "ClientConfig",
    "ClientError",
    "ClientMetrics",
    "ClosedError",
    "Cluster",
    "ConfigError",
    "ConsumeFromWhere",
    "ConsumeOrderlyStatus",
    "ConsumeStatus",
    "ConsumerPool",
    "CorruptRecordError",
    "Credentials",
    "DataLossError",
    "DiskFullError",
    "FlushDiskType",
    "GetStatus",
    "GroupNotFoundError",
    "InvalidFilterError",
    "InvalidGroupError",
    "InvalidMessageError",
    "InvalidOffsetError",
    "InvalidReceiptHandleError",
    "InvalidRequestError",
    "InvalidTopicError",
    "LatencyHistogram",
    "Message",
    "MessageExt",
    "MessageModel",
    "MessageQueue",
    "MessageQueueListener",
    "MessageSelector",
    "MessageStore",
    "MessageTooLargeError",
    "NotMasterError",
    "OffsetChange",
    "PermissionDeniedError",
    "PoolStatus",
    "Producer",
    "PullConsumer",
    "PullStatus",
    "PushConsumer",
    "PutStatus",
    "QueueProgress",
    "QueueStats",
    "RayqError",
    "ReceivedMessage",
    "ReplicationError",
    "SendResult",
    "SendStatus",
    "ServiceState",
    "SimpleConsumer",
    "StoreConfig",
    "StoreError",
    "StoreLockedError",
    "SubscriptionGroupConfig",
    "TagFilter",
    "TopicNotFoundError",
    "TraceEvent",
    "TransactionListener",
    "TransactionProducer",
    "TransactionStatus",
    "all_error_classes",
    "client_metrics",
    "connect",
    "discover",
    "start",
]
