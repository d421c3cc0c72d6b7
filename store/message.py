"""Message records and store statuses: the vocabulary shared by every layer.

``Message`` is what a user sends, ``InnerMessage`` what the store appends (the
broker's view: a queue is chosen, tags/keys/unique id are in ``properties``),
``MessageExt`` what a reader gets back. Expected outcomes are enums
(``PutStatus``, ``GetStatus``), not exceptions.
"""

from __future__ import annotations

import enum
import operator
from collections.abc import Callable
from typing import Any, Final

import msgspec

from . import properties as P
from .hosts import decode_host, offset_msg_id

# sys_flag bits (RocketMQ MessageSysFlag).
COMPRESSED_FLAG = 0x1
MULTI_TAGS_FLAG = 0x2
# The transaction type, two bits of sys_flag (RocketMQ MessageSysFlag.TRANSACTION_*):
# a half message is PREPARED, the committed message COMMIT, a rollback's op ROLLBACK.
# PREPARED and ROLLBACK records never reach a consume queue (message_store.py).
TRANSACTION_TYPE_MASK = 0xC
TRANSACTION_NOT_TYPE = 0x0
TRANSACTION_PREPARED_TYPE = 0x4
TRANSACTION_COMMIT_TYPE = 0x8
TRANSACTION_ROLLBACK_TYPE = 0xC


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


# A MessageExt's fields, in the order of its constructor, repr and equality.
_FIELDS: Final[tuple[str, ...]] = (
    "topic",
    "body",
    "tags",
    "keys",
    "properties",
    "msg_id",
    "offset_msg_id",
    "queue_id",
    "queue_offset",
    "commitlog_offset",
    "store_size",
    "born_timestamp",
    "store_timestamp",
    "born_host",
    "store_host",
    "reconsume_times",
    "flag",
    "sys_flag",
    "body_crc",
    "prepared_transaction_offset",
    "broker_name",
)
_field_values: Final = operator.attrgetter(*_FIELDS)
# The six that a decoded MessageExt fills on first use; the others are set on every one.
_DECODED: Final = ("keys", "properties", "msg_id", "offset_msg_id", "born_host", "store_host")
_PLAIN: Final = tuple(name for name in _FIELDS if name not in _DECODED)
_plain_values: Final = operator.attrgetter(*_PLAIN)
_decoded_values: Final = operator.attrgetter(*[f"_{name}" for name in _DECODED])
_new: Final[Callable[[type[MessageExt]], MessageExt]] = object.__new__


def _decoded_field(name: str) -> Any:
    """The property of one of the fields a decoded MessageExt fills on first use."""
    slot = f"_{name}"
    value_of = operator.attrgetter(slot)

    def get(self: MessageExt) -> Any:
        if self._raw is not None:
            self._decode_raw()
        return value_of(self)

    def set_(self: MessageExt, value: Any) -> None:
        if self._raw is not None:
            self._decode_raw()  # the other five must still come from the record
        setattr(self, slot, value)

    return property(get, set_, doc=f"``{name}``, decoded from the record on first use.")


class MessageExt:
    """A stored message as read back, with everything the store knows of it.

    ``MessageExt(topic=..., ...)`` takes every field by keyword. The codec builds it
    with :func:`lazy_message_ext` instead, keeping the record's raw properties and hosts:
    the first read or write of ``keys``, ``properties``, ``msg_id``, ``offset_msg_id``,
    ``born_host`` or ``store_host`` decodes those six at once, so a consumer pays for
    them only if it looks. Either way it behaves as a plain record of its 21 fields
    (``_FIELDS``): equal to a MessageExt whose fields are equal, a repr that lists them
    all, pickling and copying that keep them (and a decoded message's raw parts); it is
    mutable and unhashable, as the msgspec Struct it used to be. Not a Struct any more:
    Ray pickles it, and the socket data plane carries it as the list of its fields
    (``message_ext_fields``, through the wire codec's hooks).
    """

    __slots__ = (*_PLAIN, *[f"_{name}" for name in _DECODED], "_raw")

    topic: str
    body: bytes
    tags: str | None
    keys: list[str] = _decoded_field("keys")
    properties: dict[str, str] = _decoded_field("properties")
    msg_id: str = _decoded_field("msg_id")
    offset_msg_id: str = _decoded_field("offset_msg_id")
    queue_id: int
    queue_offset: int
    commitlog_offset: int
    store_size: int
    born_timestamp: int
    store_timestamp: int
    born_host: str = _decoded_field("born_host")
    store_host: str = _decoded_field("store_host")
    reconsume_times: int
    flag: int
    sys_flag: int
    body_crc: int
    prepared_transaction_offset: int
    broker_name: str
    # Until the six fields above are decoded: the record's properties (UTF-8, as
    # stored), store host and born host (8 bytes each, hosts.py) and commitlog_offset.
    _raw: tuple[bytes, bytes, bytes, int] | None

    def __init__(
        self,
        *,
        topic: str,
        body: bytes,
        tags: str | None,
        keys: list[str],
        properties: dict[str, str],
        msg_id: str,
        offset_msg_id: str,
        queue_id: int,
        queue_offset: int,
        commitlog_offset: int,
        store_size: int,
        born_timestamp: int,
        store_timestamp: int,
        born_host: str,
        store_host: str,
        reconsume_times: int,
        flag: int = 0,
        sys_flag: int = 0,
        body_crc: int = 0,
        prepared_transaction_offset: int = 0,
        broker_name: str = "",
    ) -> None:
        self.topic = topic
        self.body = body
        self.tags = tags
        self._keys = keys
        self._properties = properties
        self._msg_id = msg_id
        self._offset_msg_id = offset_msg_id
        self.queue_id = queue_id
        self.queue_offset = queue_offset
        self.commitlog_offset = commitlog_offset
        self.store_size = store_size
        self.born_timestamp = born_timestamp
        self.store_timestamp = store_timestamp
        self._born_host = born_host
        self._store_host = store_host
        self.reconsume_times = reconsume_times
        self.flag = flag
        self.sys_flag = sys_flag
        self.body_crc = body_crc
        self.prepared_transaction_offset = prepared_transaction_offset
        self.broker_name = broker_name
        self._raw = None

    def _decode_raw(self) -> None:
        """Decode the six lazy fields from ``_raw`` (as an eager decode would), then drop it."""
        assert self._raw is not None
        raw_properties, store_host, born_host, commitlog_offset = self._raw
        props = P.decode_properties(raw_properties.decode("utf-8"))
        omid = offset_msg_id(store_host, commitlog_offset)
        self._keys = P.split_keys(props.get(P.KEYS))
        self._properties = props
        self._msg_id = props.get(P.UNIQ_KEY) or omid
        self._offset_msg_id = omid
        self._born_host = decode_host(born_host)
        self._store_host = decode_host(store_host)
        self._raw = None

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return bool(_field_values(self) == _field_values(other))

    __hash__ = None  # type: ignore[assignment]  # mutable, as a non-frozen Struct

    def __repr__(self) -> str:
        fields = zip(_FIELDS, _field_values(self), strict=True)
        return f"{type(self).__name__}({', '.join(f'{n}={v!r}' for n, v in fields)})"

    def __reduce__(self) -> tuple[Any, ...]:
        # A message not decoded yet pickles its raw record parts, and unpickles as cheaply.
        if self._raw is not None:
            return _unpickle, (type(self), _plain_values(self), self._raw)
        return _unpickle, (type(self), _plain_values(self), None, _decoded_values(self))

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
            topic=self.topic,
            queue_id=self.queue_id,
            body=self.body,
            tags=tags,
            keys=keys,
            uniq_key=uniq_key,
            properties=props,
            flag=self.flag,
            sys_flag=self.sys_flag,
            born_timestamp=self.born_timestamp,
            born_host=self.born_host,
            reconsume_times=self.reconsume_times,
            prepared_transaction_offset=self.prepared_transaction_offset,
        )


def lazy_message_ext(
    topic: str,
    body: bytes,
    raw_properties: bytes,
    queue_id: int,
    queue_offset: int,
    commitlog_offset: int,
    store_size: int,
    born_timestamp: int,
    store_timestamp: int,
    raw_born_host: bytes,
    raw_store_host: bytes,
    reconsume_times: int,
    flag: int,
    sys_flag: int,
    body_crc: int,
    prepared_transaction_offset: int,
    broker_name: str,
    cls: type[MessageExt] | None = None,
) -> MessageExt:
    """The MessageExt of a decoded record, its costly fields left raw (see MessageExt).
    ``tags`` is found now: every consumer's exact tag check reads it. ``cls``: a
    subclass of MessageExt to make instead (a POP consumer's received message)."""
    m = _new(cls or MessageExt)
    m.topic = topic
    m.body = body
    m.tags = P.find_tags(raw_properties)
    m.queue_id = queue_id
    m.queue_offset = queue_offset
    m.commitlog_offset = commitlog_offset
    m.store_size = store_size
    m.born_timestamp = born_timestamp
    m.store_timestamp = store_timestamp
    m.reconsume_times = reconsume_times
    m.flag = flag
    m.sys_flag = sys_flag
    m.body_crc = body_crc
    m.prepared_transaction_offset = prepared_transaction_offset
    m.broker_name = broker_name
    m._raw = (raw_properties, raw_store_host, raw_born_host, commitlog_offset)
    return m


def message_ext_fields(m: MessageExt) -> list[Any]:
    """``m``'s 21 fields in constructor order: how the socket data plane carries a
    MessageExt in msgpack (actors/protocol/wire.py)."""
    return list(_field_values(m))


def message_ext_of_fields(values: list[Any]) -> MessageExt:
    """``message_ext_fields``'s list back as a MessageExt (keys as a list, as built)."""
    if len(values) != len(_FIELDS):
        raise ValueError(f"a MessageExt has {len(_FIELDS)} fields, got {len(values)}")
    return MessageExt(**dict(zip(_FIELDS, values, strict=True)))


def _unpickle(
    cls: type[MessageExt],
    plain: tuple[Any, ...],
    raw: tuple[bytes, bytes, bytes, int] | None,
    decoded: tuple[Any, ...] = (),
) -> MessageExt:
    """The inverse of ``MessageExt.__reduce__``: slots in ``_PLAIN`` and ``_DECODED`` order."""
    m = _new(cls)
    (
        m.topic,
        m.body,
        m.tags,
        m.queue_id,
        m.queue_offset,
        m.commitlog_offset,
        m.store_size,
        m.born_timestamp,
        m.store_timestamp,
        m.reconsume_times,
        m.flag,
        m.sys_flag,
        m.body_crc,
        m.prepared_transaction_offset,
        m.broker_name,
    ) = plain
    if raw is None:
        m._keys, m._properties, m._msg_id, m._offset_msg_id, m._born_host, m._store_host = decoded
    m._raw = raw
    return m


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
            AppendResult(
                msg_id=m or omid,
                offset_msg_id=omid,
                queue_offset=q,
                commitlog_offset=c,
                store_size=z,
            )
            for m, omid, q, c, z in zip(
                self.msg_ids,
                self.offset_msg_ids,
                self.queue_offsets,
                self.commitlog_offsets,
                self.store_sizes,
                strict=True,
            )
        ]


class GetResult(msgspec.Struct, frozen=True, kw_only=True):
    """Outcome of ``get_messages``: raw records back to back in ``buffer``."""

    status: GetStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    buffer: bytes = b""
    count: int = 0
    suggest_pull_from_slave: bool = False
