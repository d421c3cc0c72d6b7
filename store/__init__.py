"""rayq's storage engine: commit log, consume queues, key index, recovery, retention.

Plain Python (mmap, struct, numpy, msgspec); imports nothing from Ray. The broker
actor holds one ``MessageStore``. On-disk formats are documented at the top of
each module (codec.py, segment.py, consume_queue.py, index_file.py, checkpoint.py,
json_file.py) and summarised in docs/STORAGE.md.
"""

from rayq.store.batch import EncodedBatch, encode_batch
from rayq.store.clock import SYSTEM_CLOCK, Clock, FakeClock, SystemClock
from rayq.store.codec import decode_record, decode_records
from rayq.store.config import DEFAULT_STORE_CONFIG, FlushDiskType, StoreConfig
from rayq.store.errors import *  # noqa: F403
from rayq.store.errors import RayqError
from rayq.store.filters import TagFilter, java_string_hash
from rayq.store.flush import DiskFlusher
from rayq.store.message import (
    AppendResult,
    GetResult,
    GetStatus,
    InnerMessage,
    Message,
    MessageExt,
    PutResult,
    PutStatus,
)
from rayq.store.message_store import MessageStore
from rayq.store.msg_id import UniqIdGenerator
from rayq.store.recovery import RecoveryReport
from rayq.store.retention import RetentionReport

__all__ = [
    "DEFAULT_STORE_CONFIG",
    "SYSTEM_CLOCK",
    "AppendResult",
    "Clock",
    "DiskFlusher",
    "EncodedBatch",
    "FakeClock",
    "FlushDiskType",
    "GetResult",
    "GetStatus",
    "InnerMessage",
    "Message",
    "MessageExt",
    "MessageStore",
    "PutResult",
    "PutStatus",
    "RayqError",
    "RecoveryReport",
    "RetentionReport",
    "StoreConfig",
    "SystemClock",
    "TagFilter",
    "UniqIdGenerator",
    "decode_record",
    "decode_records",
    "encode_batch",
    "java_string_hash",
]
