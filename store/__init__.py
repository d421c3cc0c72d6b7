"""rayq's storage engine: commit log, consume queues, key index, recovery, retention.

Plain Python (mmap, struct, numpy, msgspec); imports nothing from Ray. The broker
actor holds one ``MessageStore``. On-disk formats are documented at the top of
each module (codec.py, segment.py, consume_queue.py, index_file.py, checkpoint.py,
json_file.py) and summarised in docs/STORAGE.md.
"""

from .batch import EncodedBatch, encode_batch
from .clock import SYSTEM_CLOCK, Clock, FakeClock, SystemClock
from .codec import decode_record, decode_records
from .config import DEFAULT_STORE_CONFIG, FlushDiskType, StoreConfig
from .errors import *  # noqa: F403
from .errors import RayqError
from .filters import TagFilter, java_string_hash
from .flush import DiskFlusher
from .message import (
    AppendResult,
    GetResult,
    GetStatus,
    InnerMessage,
    Message,
    MessageExt,
    PutResult,
    PutStatus,
)
from .message_store import MessageStore
from .msg_id import UniqIdGenerator
from .recovery import RecoveryReport
from .retention import RetentionReport

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
