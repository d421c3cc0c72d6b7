"""The commit-log record: one stored message, encoded and decoded by pure functions.

All integers are big-endian (as RocketMQ's Java ByteBuffers). A record::

    offset  size  type    field
    0       4     int32   total_size        whole record, this field included
    4       4     uint32  magic             MAGIC "RAYQ", BLANK_, QUARANTINE_ or SPAN_MAGIC
    8       4     uint32  crc               CRC-32C of bytes [44, total_size) then [12, 44)
    12      8     int64   queue_offset      \
    20      8     int64   commitlog_offset   | assigned by the store on append:
    28      8     int64   store_timestamp    | one 32-byte block (STORE_BLOCK)
    36      8     bytes   store_host        /  IPv4 (4 bytes) + port (int32), hosts.py
    44      4     int32   queue_id
    48      4     int32   flag              user flag
    52      4     int32   sys_flag          COMPRESSED_FLAG, ...
    56      8     int64   born_timestamp    ms, producer clock
    64      8     bytes   born_host         IPv4 (4 bytes) + port (int32), hosts.py
    72      4     int32   reconsume_times
    76      8     int64   prepared_transaction_offset
    84      4     int32   body_length       N
    88      N     bytes   body
    88+N    1     uint8   topic_length      T
    89+N    T     bytes   topic             ASCII
    89+N+T  2     uint16  properties_length P (at most 32767)
    91+N+T  P     bytes   properties        UTF-8, see properties.py

The CRC covers every byte after it: what the producer wrote ([44, total_size))
followed by the store block ([12, 44)). A producer encodes whole records once
(batch.py) with the store block zeroed and the CRC of its own bytes in the crc
field; the store checks that, fills the store block and finishes the CRC over the
block's 32 bytes (``crc32c(block, producer_crc)``), without re-reading the body.
Recovery also checks that ``commitlog_offset`` equals the record's position.
``total_size == 91 + N + T + P`` always; a reader checks it against the three lengths.

Blank record: a segment that cannot fit the next record plus 8 bytes is closed by
``total_size`` = bytes left in the segment and ``magic`` = BLANK_MAGIC (8 bytes
written, the rest stays zero). A total_size of 0 means "nothing written yet".

Quarantine: recovery rewrites the magic of a record whose CRC fails but whose
framing holds (a valid record follows it) to QUARANTINE_MAGIC; readers skip it.

Damaged span: where recovery cannot frame what it finds (a damaged size or magic,
zeros, a torn record) but a valid record follows further on, it sets the bytes
between aside (resync.py): ``total_size`` = the span's length and ``magic`` =
SPAN_MAGIC (8 bytes written over the span's first 8, which are kept in a copy);
walkers step over it like a quarantined record.
"""

from __future__ import annotations

import enum
import struct
import zlib
from typing import Any, Final

from crc32c import crc32c

from .hosts import HOST_SIZE
from .hosts import decode_host as decode_host  # re-exported
from .hosts import decode_offset_msg_id as decode_offset_msg_id  # re-exported
from .hosts import encode_host as encode_host  # re-exported
from .hosts import offset_msg_id as offset_msg_id  # re-exported
from .message import COMPRESSED_FLAG, MessageExt, lazy_message_ext

HEADER: Final[struct.Struct] = struct.Struct(
    ">"
    "i"  # total_size
    "I"  # magic
    "I"  # crc
    "q"  # queue_offset
    "q"  # commitlog_offset
    "q"  # store_timestamp
    "8s"  # store_host
    "i"  # queue_id
    "i"  # flag
    "i"  # sys_flag
    "q"  # born_timestamp
    "8s"  # born_host
    "i"  # reconsume_times
    "q"  # prepared_transaction_offset
    "i"  # body_length
)
HEADER_SIZE: Final[int] = HEADER.size  # 88
PREFIX: Final[struct.Struct] = struct.Struct(">iI")  # total_size, magic
CRC: Final[struct.Struct] = struct.Struct(">I")
PREFIX_CRC: Final[struct.Struct] = struct.Struct(">iII")  # total_size, magic, crc
TOPIC_LEN: Final[struct.Struct] = struct.Struct(">B")
PROPS_LEN: Final[struct.Struct] = struct.Struct(">H")
INT64: Final[struct.Struct] = struct.Struct(">q")

CRC_OFFSET: Final[int] = 8
STORE_BLOCK_OFFSET: Final[int] = 12  # queue_offset, commitlog_offset, store_timestamp, host
STORE_BLOCK_SIZE: Final[int] = 32
CRC_START: Final[int] = 44  # the CRC covers [CRC_START, total_size), then the store block
QUEUE_OFFSET_OFFSET: Final[int] = 12
COMMITLOG_OFFSET_OFFSET: Final[int] = 20
STORE_TIMESTAMP_OFFSET: Final[int] = 28
QUEUE_ID_OFFSET: Final[int] = 44
BODY_LENGTH_OFFSET: Final[int] = 84
FIXED_SIZE: Final[int] = HEADER_SIZE + TOPIC_LEN.size + PROPS_LEN.size  # 91
BLANK_SIZE_MIN: Final[int] = PREFIX.size  # 8: a blank record must always fit

MAGIC: Final[int] = 0x52415951
BLANK_MAGIC: Final[int] = 0x424C4E4B
QUARANTINE_MAGIC: Final[int] = 0x51524E54
SPAN_MAGIC: Final[int] = 0x5350414E  # "SPAN": a damaged span set aside (resync.py)
MAGIC_BYTES: Final[bytes] = MAGIC.to_bytes(4, "big")

QUEUE_ID_MAX: Final[int] = 65535


def record_size(body_length: int, topic_length: int, properties_length: int) -> int:
    return FIXED_SIZE + body_length + topic_length + properties_length


def pack_record_into(
    buf: memoryview,
    pos: int,
    *,
    topic_field: bytes,
    queue_id: int,
    queue_offset: int,
    body: bytes,
    properties: bytes,
    flag: int = 0,
    sys_flag: int = 0,
    born_timestamp: int = 0,
    born_host: bytes = b"\x00" * HOST_SIZE,
    store_timestamp: int = 0,
    store_host: bytes = b"\x00" * HOST_SIZE,
    reconsume_times: int = 0,
    prepared_transaction_offset: int = 0,
    commitlog_offset: int,
) -> int:
    """Write one record at ``buf[pos:]``; ``topic_field`` is length byte + topic. Returns size."""
    body_len = len(body)
    size = FIXED_SIZE - 1 + len(topic_field) + body_len + len(properties)
    HEADER.pack_into(
        buf,
        pos,
        size,
        MAGIC,
        0,
        queue_offset,
        commitlog_offset,
        store_timestamp,
        store_host,
        queue_id,
        flag,
        sys_flag,
        born_timestamp,
        born_host,
        reconsume_times,
        prepared_transaction_offset,
        body_len,
    )
    p = pos + HEADER_SIZE
    buf[p : p + body_len] = body
    p += body_len
    buf[p : p + len(topic_field)] = topic_field
    p += len(topic_field)
    PROPS_LEN.pack_into(buf, p, len(properties))
    buf[p + 2 : pos + size] = properties
    CRC.pack_into(buf, pos + CRC_OFFSET, record_crc(buf, pos, pos + size))
    return size


def record_crc(buf: bytes | bytearray | memoryview, pos: int, end: int) -> int:
    """The CRC a record at ``buf[pos:end]`` must carry (see the module docstring)."""
    producer = crc32c(buf[pos + CRC_START : end])
    return crc32c(buf[pos + STORE_BLOCK_OFFSET : pos + CRC_START], producer)


def topic_field(topic: str) -> bytes:
    raw = topic.encode("ascii")
    return TOPIC_LEN.pack(len(raw)) + raw


def encode_record(*, topic: str, commitlog_offset: int = 0, **fields: object) -> bytes:
    """One record as bytes (tests, golden bytes); same code as the append path."""
    body = fields.get("body", b"")
    props = fields.pop("properties", b"")
    tf = topic_field(topic)
    out = bytearray(FIXED_SIZE + len(tf) + len(body) + len(props))  # type: ignore[arg-type]
    size = pack_record_into(
        memoryview(out),
        0,
        topic_field=tf,
        properties=props,  # type: ignore[arg-type]
        commitlog_offset=commitlog_offset,
        **fields,  # type: ignore[arg-type]
    )
    return bytes(out[:size])


class Check(enum.Enum):
    """What :func:`check_record` found at a position."""

    OK = "OK"
    END = "END"  # total_size 0: nothing written from here on
    BLANK = "BLANK"  # end-of-segment filler
    QUARANTINED = "QUARANTINED"  # an earlier recovery set this record (or span) aside
    BAD_CRC = "BAD_CRC"  # framing holds, content does not
    BAD_FRAMING = "BAD_FRAMING"  # sizes or magic wrong, or cut short


def check_record(
    buf: memoryview, pos: int, limit: int, base: int | None = None
) -> tuple[Check, int]:
    """Validate the record at ``pos`` (not past ``limit``): ``(verdict, total_size)``.

    With ``base`` (the file offset of ``buf[0]``), the record's commitlog_offset
    must also equal its position.
    """
    verdict, size, _ = parse_record(buf, pos, limit, base)
    return verdict, size


# An OK record as ``parse_record`` gives it: the header tuple, the topic, the raw properties.
ParsedRecord = tuple[tuple[Any, ...], str, bytes]


def parse_record(
    buf: memoryview, pos: int, limit: int, base: int | None = None, check_crc: bool = True
) -> tuple[Check, int, ParsedRecord | None]:
    """Like :func:`check_record`, also returning, for an OK record, the header tuple,
    topic and raw property bytes: what recovery needs to dispatch it. ``check_crc=False``
    skips the CRC and position checks (for ranges already validated)."""
    if pos + BLANK_SIZE_MIN > limit:
        return Check.END, 0, None
    total_size, magic = PREFIX.unpack_from(buf, pos)
    if total_size == 0 and magic == 0:
        return Check.END, 0, None
    if magic == BLANK_MAGIC:
        return (Check.BLANK if total_size == limit - pos else Check.BAD_FRAMING), total_size, None
    if magic == SPAN_MAGIC:
        fits = BLANK_SIZE_MIN <= total_size <= limit - pos
        return (Check.QUARANTINED if fits else Check.BAD_FRAMING), total_size, None
    if magic not in (MAGIC, QUARANTINE_MAGIC) or not FIXED_SIZE <= total_size <= limit - pos:
        return Check.BAD_FRAMING, total_size, None
    header = HEADER.unpack_from(buf, pos)
    end = pos + total_size
    tpos = pos + HEADER_SIZE + header[-1]
    if header[-1] < 0 or tpos + 3 > end:
        return Check.BAD_FRAMING, total_size, None
    ppos = tpos + 1 + buf[tpos]
    if ppos + 2 > end or ppos + 2 + PROPS_LEN.unpack_from(buf, ppos)[0] != end:
        return Check.BAD_FRAMING, total_size, None
    if magic == QUARANTINE_MAGIC:
        return Check.QUARANTINED, total_size, None
    if check_crc and header[2] != record_crc(buf, pos, end):
        return Check.BAD_CRC, total_size, None
    if check_crc and base is not None and header[4] != base + pos:
        return Check.BAD_CRC, total_size, None  # a valid record, but not written here
    raw_topic = bytes(buf[tpos + 1 : ppos])
    topic = _topics.get(raw_topic) or _topics.setdefault(raw_topic, raw_topic.decode("ascii"))
    return Check.OK, total_size, (header, topic, bytes(buf[ppos + 2 : end]))


_topics: dict[bytes, str] = {}


def decode_record(
    buf: bytes | memoryview, pos: int = 0, *, decompress: bool = True, broker_name: str = ""
) -> MessageExt:
    """Decode the record at ``pos`` into a MessageExt (framing is trusted here)."""
    total_size, _magic = PREFIX.unpack_from(buf, pos)
    record = bytes(memoryview(buf)[pos : pos + total_size])
    return decode_records(record, decompress=decompress, broker_name=broker_name)[0]


def decode_records(
    buffer: bytes,
    *,
    broker_name: str = "",
    decompress: bool = True,
    cls: type[MessageExt] | None = None,
) -> list[MessageExt]:
    """Decode records laid back to back (a GetResult buffer); framing is trusted.

    The consumer's hot loop, per record: one header unpack, the body copied (inflated
    if COMPRESSED_FLAG is set and ``decompress``), the topic from a cache, and a
    MessageExt that keeps its properties and hosts raw until first used
    (``lazy_message_ext``): a consumer that reads only the header fields, topic,
    tags and body never decodes them. ``cls``: a subclass of MessageExt to make instead."""
    data = bytes(buffer) if not isinstance(buffer, bytes) else buffer
    out: list[MessageExt] = []
    append = out.append
    unpack = HEADER.unpack_from
    topics = _topics
    pos = 0
    end = len(data)
    while pos < end:
        (
            total_size,
            _magic,
            crc,
            queue_offset,
            commitlog_offset,
            store_ts,
            store_host,
            queue_id,
            flag,
            sys_flag,
            born_ts,
            born_host,
            reconsume_times,
            prepared,
            body_len,
        ) = unpack(data, pos)
        start = pos + HEADER_SIZE
        tpos = start + body_len
        body = data[start:tpos]
        if decompress and sys_flag & COMPRESSED_FLAG:
            body = zlib.decompress(body)
        ppos = tpos + 1 + data[tpos]
        raw_topic = data[tpos + 1 : ppos]
        topic = topics.get(raw_topic) or topics.setdefault(raw_topic, raw_topic.decode("ascii"))
        record_end = pos + total_size
        append(
            lazy_message_ext(
                topic,
                body,
                data[ppos + PROPS_LEN.size : record_end],
                queue_id,
                queue_offset,
                commitlog_offset,
                total_size,
                born_ts,
                store_ts,
                born_host,
                store_host,
                reconsume_times,
                flag,
                sys_flag,
                crc,
                prepared,
                broker_name,
                cls,
            )
        )
        pos = record_end
    return out
