"""rayq's exceptions: one tree rooted at ``RayqError``.

The classes are defined at the bottom layer (``rayq.store.errors``, so the storage
engine can raise them without importing anything above it) and re-exported here::

    RayqError
    ├── ClientError                 bad input; fix the call
    │   ├── InvalidTopicError
    │   ├── InvalidGroupError
    │   ├── InvalidMessageError
    │   │   └── MessageTooLargeError
    │   ├── InvalidRequestError         a malformed request reached an actor
    │   ├── InvalidFilterError          a malformed SQL92 filter, or one a broker cannot apply
    │   ├── InvalidReceiptHandleError   a POP receipt handle not in flight (acked, lease ended)
    │   ├── InvalidOffsetError
    │   │   └── DataLossError           messages a reader needed were deleted or cut off
    │   ├── TopicNotFoundError
    │   ├── GroupNotFoundError
    │   ├── PermissionDeniedError
    │   └── ConfigError
    ├── BrokerError                 the server side could not serve
    │   ├── BrokerUnavailableError
    │   │   └── NotMasterError      a write reached a slave; retried at the master
    │   ├── BrokerBusyError
    │   ├── DiskFullError
    │   └── ReplicationError        a slave and its master disagree
    ├── StoreError                  the files on disk
    │   ├── CorruptRecordError
    │   └── StoreLockedError
    ├── ClosedError                 you closed it
    └── BrokenError                 something else broke it
"""

from rayq.store.errors import (
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

__all__ = [
    "BrokenError",
    "BrokerBusyError",
    "BrokerError",
    "BrokerUnavailableError",
    "ClientError",
    "ClosedError",
    "ConfigError",
    "CorruptRecordError",
    "DataLossError",
    "DiskFullError",
    "GroupNotFoundError",
    "InvalidFilterError",
    "InvalidGroupError",
    "InvalidMessageError",
    "InvalidOffsetError",
    "InvalidReceiptHandleError",
    "InvalidRequestError",
    "InvalidTopicError",
    "MessageTooLargeError",
    "NotMasterError",
    "PermissionDeniedError",
    "RayqError",
    "ReplicationError",
    "StoreError",
    "StoreLockedError",
    "TopicNotFoundError",
    "all_error_classes",
]
