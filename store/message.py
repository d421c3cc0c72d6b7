"""Message records and store statuses: the vocabulary shared by every layer.

``Message`` is what a user sends, ``InnerMessage`` what the store appends (the
broker's view: a queue is chosen, tags/keys/unique id are in ``properties``),
``MessageExt`` what a reader gets back. Expected outcomes are enums
(``PutStatus``, ``GetStatus``), not exceptions.
"""

from __future__ import annotations

import enum

import msgspec

from . import properties as P

# sys_flag bits (RocketMQ MessageSysFlag).
COMPRESSED_FLAG = 0x1
MULTI_TAGS_FLAG = 0x2


class Message(msgspec.Struct):
    """A message to send: ``Message("orders", b"body", tags="TagA", keys=["k1"])``."""

    topic: str
    body: bytes
    tags: str | None = None
    keys: list[str] = []
    properties: dict[str, str] = {}
    flag: int = 0
    delay_level: int = 0
    deliver_at_ms: int | None = None


class InnerMessage(msgspec.Struct, kw_only=True, frozen=True, gc=False):
    """One record as the store appends it (RocketMQ ``MessageExtBrokerInner``).

    ``tags``, ``keys`` (space-separated) and ``uniq_key`` are stored as the TAGS,
    KEYS and UNIQ_KEY properties; ``properties`` holds every other property and
    must not repeat those three.
    """

    topic: str
    queue_id: int
    body: bytes
    tags: str | None = None
    keys: str = ""
    uniq_key: str = ""
    properties: dict[str, str] = {}
    flag: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: str = "127.0.0.1:0"
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0


class MessageExt(msgspec.Struct, kw_only=True):
    """A stored message as read back, with everything the store knows of it."""

    topic: str
    body: bytes
    tags: str | None
    keys: list[str]
    properties: dict[str, str]
    msg_id: str
    offset_msg_id: str
    queue_id: int
    queue_offset: int
    commitlog_offset: int
    store_size: int
    born_timestamp: int
    store_timestamp: int
    born_host: str
    store_host: str
    reconsume_times: int
    flag: int = 0
    sys_flag: int = 0
    body_crc: int = 0
    prepared_transaction_offset: int = 0
    broker_name: str = ""

    def user_properties(self) -> dict[str, str]:
        """Properties without the ones the system manages."""
        system = {P.TAGS, P.KEYS, P.UNIQ_KEY, P.WAIT}
        return {k: v for k, v in self.properties.items() if k not in system}

    def to_inner(self) -> InnerMessage:
        """This message as a record to append again (same topic and queue; a new copy of
        its properties, TAGS/KEYS/UNIQ_KEY in their fields). The body goes as it is: read
        it with ``decompress=False`` to keep a compressed body and its sys_flag together."""
        props = dict(self.properties)
        tags = props.pop(P.TAGS, None)
        keys = props.pop(P.KEYS, "")
        uniq_key = props.pop(P.UNIQ_KEY, "")
        return InnerMessage(
            topic=self.topic, queue_id=self.queue_id, body=self.body, tags=tags, keys=keys,
            uniq_key=uniq_key, properties=props, flag=self.flag, sys_flag=self.sys_flag,
            born_timestamp=self.born_timestamp, born_host=self.born_host,
            reconsume_times=self.reconsume_times,
            prepared_transaction_offset=self.prepared_transaction_offset,
        )  # fmt: skip


class PutStatus(enum.Enum):
    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    DISK_FULL = "DISK_FULL"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"


class GetStatus(enum.Enum):
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


class AppendResult(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Where one message of a batch landed."""

    msg_id: str
    offset_msg_id: str
    queue_offset: int
    commitlog_offset: int
    store_size: int


class PutResult(msgspec.Struct, frozen=True, kw_only=True):
    """Outcome of one batch append: one status for the batch, columns per message."""

    status: PutStatus
    msg_ids: list[str] = []
    queue_offsets: list[int] = []
    commitlog_offsets: list[int] = []
    store_sizes: list[int] = []
    store_timestamp: int = 0
    store_host: str = ""  # 16 hex digits, for offset message ids
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.status is PutStatus.PUT_OK

    @property
    def offset_msg_ids(self) -> list[str]:
        return [f"{self.store_host}{o:016X}" for o in self.commitlog_offsets]

    @property
    def results(self) -> list[AppendResult]:
        """One AppendResult per message (built on demand)."""
        return [
            AppendResult(msg_id=m or omid, offset_msg_id=omid, queue_offset=q,
                         commitlog_offset=c, store_size=z)
            for m, omid, q, c, z in zip(
                self.msg_ids, self.offset_msg_ids, self.queue_offsets,
                self.commitlog_offsets, self.store_sizes, strict=True,
            )
        ]  # fmt: skip


class GetResult(msgspec.Struct, frozen=True, kw_only=True):
    """Outcome of ``get_messages``: raw records back to back in ``buffer``."""

    status: GetStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    buffer: bytes = b""
    count: int = 0
    suggest_pull_from_slave: bool = False
