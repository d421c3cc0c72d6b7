"""rayq: a RocketMQ-style message broker whose server parts are Ray actors.

General layout (imports only point down):

* ``rayq/``   the user's API: message types, errors, configuration; later the
  producer, consumers, admin, CLI and Spark integration. Knows actors, never
  opens files.
* ``rayq.actors`` (folder ``actors/``): Ray actors, thin shells over plain objects.
* ``rayq.store`` (folder ``store/``): the storage engine (commit log, consume
  queues, key index, recovery, retention); plain Python, imports nothing from Ray.

The vocabulary the store needs (message records, statuses, errors, StoreConfig)
lives in ``rayq.store`` and is re-exported here, so nothing imports upwards.
"""

from rayq.errors import (
    BrokenError,
    BrokerBusyError,
    BrokerError,
    BrokerUnavailableError,
    ClientError,
    ClosedError,
    ConfigError,
    CorruptRecordError,
    DiskFullError,
    InvalidGroupError,
    InvalidMessageError,
    InvalidOffsetError,
    InvalidTopicError,
    MessageTooLargeError,
    PermissionDeniedError,
    RayqError,
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

__all__ = [
    "DEFAULT_STORE_CONFIG",
    "BrokenError",
    "BrokerBusyError",
    "BrokerError",
    "BrokerUnavailableError",
    "ClientError",
    "ClosedError",
    "ConfigError",
    "CorruptRecordError",
    "DiskFullError",
    "FlushDiskType",
    "GetStatus",
    "InvalidGroupError",
    "InvalidMessageError",
    "InvalidOffsetError",
    "InvalidTopicError",
    "Message",
    "MessageExt",
    "MessageStore",
    "MessageTooLargeError",
    "PermissionDeniedError",
    "PutStatus",
    "RayqError",
    "StoreConfig",
    "StoreError",
    "StoreLockedError",
    "TagFilter",
    "TopicNotFoundError",
    "all_error_classes",
]
