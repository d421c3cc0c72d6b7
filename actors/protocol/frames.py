"""The socket data plane's frames: how the client protocol travels over TCP or a Unix
socket between a client and a broker's process (actors/server/wire_server.py,
rayq/transport/direct.py), beside the Ray actor calls that carry control.

Every frame is a 4-byte big-endian length, then that many bytes of msgpack::

    server -> client  Challenge(version, nonce)              once, on connect
    client -> server  Proof(mac)                              BLAKE2b(key, nonce), keyed
    server -> client  Welcome(max_frame_bytes)               or the connection is closed
    client -> server  Call(id, op, body)                     many in flight, any order
    server -> client  Answer(id, ok, body)                   in the order they finish

``op`` names a client operation of the registry; ``body`` is its request as ``to_wire``
bytes (a put's ``EncodedBatch`` with its records: the bytes they already are), checked
by the same ``BrokerEndpoint`` as a Ray call. Calls between a replica's own server
actors (a parked pull from its hold service, the broker's answer to it, a slave's
replication fetches) name ``server:<operation>`` and carry a ``server_key.ServerArgs`` body: the
operation's arguments and, for a ``Caller.SERVER`` operation, its ``ServerProof``,
checked by the callee as over Ray. ``ok`` false: ``body`` is an ``ErrorInfo``
that the client raises as the same ``RayqError`` subclass. The key is the broker's
data-plane key: random, made when the broker starts, handed out only by the actor call
``data_endpoint`` (so only a member of the Ray cluster can connect), and never sent
over the socket.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from typing import Any, Final

import msgspec

from rayq.actors.protocol.hold import PullManyResponse, PullResponse
from rayq.actors.protocol.wire import R, from_wire, to_wire
from rayq.store import errors as E

VERSION: Final[int] = 1
HEADER: Final = struct.Struct(">I")
NONCE_BYTES: Final[int] = 32
KEY_BYTES: Final[int] = 32
HANDSHAKE_MAX_BYTES: Final[int] = 4096  # a frame before the handshake is done


class DataEndpointRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Where a replica's socket data plane listens (``data_endpoint``)."""

    client_id: str = ""


class DataEndpoint(msgspec.Struct, frozen=True, kw_only=True):
    """A replica's data-plane addresses and key: TCP on its node's address, and a Unix
    socket for clients on the same node (``node_id``)."""

    host: str
    port: int
    unix_path: str
    node_id: str
    key: bytes
    max_frame_bytes: int


class Challenge(msgspec.Struct, frozen=True, array_like=True):
    version: int
    nonce: bytes


class Proof(msgspec.Struct, frozen=True, array_like=True):
    mac: bytes


class Welcome(msgspec.Struct, frozen=True, array_like=True):
    max_frame_bytes: int


class Call(msgspec.Struct, frozen=True, array_like=True):
    id: int
    op: str
    body: bytes


class Answer(msgspec.Struct, frozen=True, array_like=True):
    id: int
    ok: bool
    body: bytes


class ErrorInfo(msgspec.Struct, frozen=True, array_like=True):
    """A ``RayqError`` as data: its class name (in rayq.store.errors), message, details."""

    kind: str
    message: str
    details: dict[str, Any] = {}


def prove(key: bytes, nonce: bytes) -> bytes:
    """The client's answer to a challenge: the nonce MACed with the key."""
    return hashlib.blake2b(b"rayq-data-plane/1" + nonce, key=key, digest_size=32).digest()


def proven(key: bytes, nonce: bytes, proof: bytes) -> bool:
    return hmac.compare_digest(prove(key, nonce), proof)


_encoder = msgspec.msgpack.Encoder()
_error_decoder = msgspec.msgpack.Decoder(ErrorInfo)


def frame(struct_: msgspec.Struct) -> bytes:
    """``struct_`` as one frame: its length, then its msgpack."""
    body = _encoder.encode(struct_)
    return HEADER.pack(len(body)) + body


def error_info(exc: E.RayqError) -> ErrorInfo:
    """A rayq error as data; details that msgpack cannot carry as they are go as their
    ``repr``."""
    details = {}
    for k, v in exc.details.items():
        try:
            _encoder.encode(v)
            details[k] = v
        except (TypeError, msgspec.EncodeError):
            details[k] = repr(v)
    return ErrorInfo(type(exc).__name__, exc.message, details)


def encode_error(exc: E.RayqError) -> bytes:
    """A rayq error as an ``ErrorInfo`` body."""
    return _encoder.encode(error_info(exc))


def decode_error(body: bytes) -> E.RayqError:
    """The rayq error an ``ErrorInfo`` body names (its class when rayq has it, else
    ``BrokerError``), rebuilt with its message and details."""
    try:
        info = _error_decoder.decode(body)
    except msgspec.DecodeError as exc:
        return E.BrokerError(f"a broker answered an error that cannot be read: {exc}")
    return error_of(info)


class PullManyWire(msgspec.Struct, frozen=True, array_like=True):
    """A ``PullManyResponse`` as it travels: per item its response, or None and its
    error under the item's index."""

    responses: list[PullResponse | None]
    errors: dict[int, ErrorInfo] = {}


def encode_reply(result: Any) -> bytes:
    """An operation's answer as a frame body (a ``PullManyResponse``'s errors as data)."""
    if type(result) is bytes:
        return result
    if type(result) is PullManyResponse:
        responses: list[PullResponse | None] = []
        errors: dict[int, ErrorInfo] = {}
        for i, r in enumerate(result.results):
            if type(r) is PullResponse:
                responses.append(r)
            else:
                responses.append(None)
                errors[i] = error_info(
                    r if isinstance(r, E.RayqError) else E.BrokerError(f"{type(r).__name__}: {r}")
                )
        return _encoder.encode(PullManyWire(responses, errors))
    return to_wire(result)


def decode_reply(body: bytes, cls: type[R]) -> R:
    """``encode_reply``'s body back as ``cls``."""
    if cls is PullManyResponse:
        wire = _pull_many_decoder.decode(body)
        results: list[Any] = [
            r if r is not None else error_of(wire.errors.get(i, ErrorInfo("BrokerError", "")))
            for i, r in enumerate(wire.responses)
        ]
        return PullManyResponse(results=results)  # type: ignore[return-value]
    return from_wire(body, cls)


_pull_many_decoder = msgspec.msgpack.Decoder(PullManyWire)


def error_of(info: ErrorInfo) -> E.RayqError:
    cls = getattr(E, info.kind, None)
    if not (isinstance(cls, type) and issubclass(cls, E.RayqError)):
        cls = E.BrokerError
    try:
        return cls(info.message, **info.details)
    except TypeError:  # details its class does not take
        return cls(info.message)


__all__ = [
    "HEADER",
    "Answer",
    "Call",
    "Challenge",
    "DataEndpoint",
    "DataEndpointRequest",
    "ErrorInfo",
    "Proof",
    "PullManyWire",
    "Welcome",
    "decode_error",
    "decode_reply",
    "encode_error",
    "encode_reply",
    "error_info",
    "error_of",
    "frame",
    "prove",
    "proven",
]
