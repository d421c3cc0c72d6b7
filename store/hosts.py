"""The 8-byte host field of a record and RocketMQ's offset message id.

Big-endian, as the whole record (codec.py). A host (``born_host``, ``store_host``)::

    offset  size  type    field
    0       4     bytes   IPv4 address (0.0.0.0 for a host that is not IPv4)
    4       4     int32   port

An offset message id is the 8-byte store host followed by the record's
``commitlog_offset`` (int64), as 32 upper-case hex digits.

Here rather than in codec.py because ``MessageExt`` (message.py, which codec.py
imports) decodes its hosts and offset id on first access.
"""

from __future__ import annotations

import functools
import socket
import struct
from typing import Final

HOST: Final[struct.Struct] = struct.Struct(
    ">"
    "4s"  # IPv4 address
    "i"  # port
)
HOST_SIZE: Final[int] = HOST.size  # 8
_COMMITLOG_OFFSET: Final[struct.Struct] = struct.Struct(">q")
OFFSET_MSG_ID_SIZE: Final[int] = HOST_SIZE + _COMMITLOG_OFFSET.size  # 16 bytes, 32 hex digits


@functools.lru_cache(maxsize=4096)
def encode_host(host: str) -> bytes:
    """``"10.0.0.1:10911"`` -> 8 bytes (IPv4 + port); non-IPv4 hosts map to 0.0.0.0."""
    ip, _, port = host.rpartition(":")
    try:
        packed_ip = socket.inet_aton(ip)
    except OSError:
        packed_ip = b"\x00\x00\x00\x00"
    return HOST.pack(packed_ip, int(port) if port.isdigit() else 0)


@functools.lru_cache(maxsize=4096)
def decode_host(raw: bytes) -> str:
    """``ip:port`` of an 8-byte host (cached: a queue's records share a few hosts)."""
    ip, port = HOST.unpack_from(raw)
    return f"{socket.inet_ntoa(ip)}:{port}"


def offset_msg_id(store_host: bytes, commitlog_offset: int) -> str:
    """RocketMQ's offset message id: store host and physical offset as 32 hex digits."""
    return (store_host + _COMMITLOG_OFFSET.pack(commitlog_offset)).hex().upper()


def decode_offset_msg_id(msg_id: str) -> tuple[str, int] | None:
    """``(store_host, commitlog_offset)`` of an offset message id, or None."""
    if len(msg_id) != 2 * OFFSET_MSG_ID_SIZE:
        return None
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError:
        return None
    return decode_host(raw[:HOST_SIZE]), _COMMITLOG_OFFSET.unpack(raw[HOST_SIZE:])[0]
