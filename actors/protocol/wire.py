"""The wire's building blocks: constrained field types, the base of every client
request, and the codecs that validate a request at an actor boundary (``check``,
``check_json``) or carry a Struct as msgpack bytes (``to_wire``/``from_wire``)."""

from __future__ import annotations

import functools
from typing import Annotated, Any, Literal, TypeVar, cast

import msgspec
from msgspec import Meta

from rayq.store.batch import RequestAuth
from rayq.store.errors import InvalidRequestError
from rayq.store.message import MessageExt, message_ext_fields, message_ext_of_fields

QueueId = Annotated[int, Meta(ge=0, le=2**31 - 1)]


QueueOffset = Annotated[int, Meta(ge=0, le=2**63 - 1)]


TimestampMs = Annotated[int, Meta(ge=0, le=2**63 - 1)]


QueueCount = Annotated[int, Meta(ge=1, le=1024)]


Perm = Annotated[int, Meta(ge=0, le=7)]


FilterType = Literal["TAG", "SQL92"]


Text = Annotated[str, Meta(max_length=4096)]


class _Request(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Base of client requests: ``client_id`` names the caller (producer, consumer or
    admin instance), for logs; ``auth`` carries a signed request's credentials (ACL)."""

    client_id: Text = ""
    auth: RequestAuth | None = None  # signed credentials (ACL, actors/server/acl.py)


def _enc_hook(obj: Any) -> Any:
    """Types msgspec does not know: a ``MessageExt`` (a reply's read-back messages) as
    the list of its fields."""
    if type(obj) is MessageExt:
        return message_ext_fields(obj)
    raise NotImplementedError(f"{type(obj).__name__} cannot go on the wire")


def _dec_hook(cls: type, obj: Any) -> Any:
    if cls is MessageExt and type(obj) is list:
        try:
            return message_ext_of_fields(obj)
        except (TypeError, ValueError) as exc:
            raise msgspec.ValidationError(f"not a MessageExt: {exc}") from None
    raise NotImplementedError(f"{cls.__name__} cannot come off the wire")


_encoder = msgspec.msgpack.Encoder(enc_hook=_enc_hook)


@functools.cache
def _decoder(cls: type) -> msgspec.msgpack.Decoder[Any]:
    return msgspec.msgpack.Decoder(cls, dec_hook=_dec_hook)


R = TypeVar("R", bound=msgspec.Struct)


def to_wire(struct: msgspec.Struct) -> bytes:
    """A request or reply as msgpack: what the Ray transport sends instead of the Struct
    (Ray pickles a Struct with cloudpickle, ~0.1 ms a call more than plain bytes)."""
    return _encoder.encode(struct)


def from_wire(data: bytes | R, cls: type[R]) -> R:
    """The ``cls`` a peer sent (as ``to_wire`` bytes or as the Struct itself)."""
    if type(data) is cls:
        return data
    decoded: R = _decoder(cls).decode(cast(bytes, data))
    return decoded


def check(request: object, cls: type[R]) -> R:
    """``request`` (a ``cls``, or its ``to_wire`` bytes) validated as ``cls`` (types,
    unknown fields, ranges), else InvalidRequestError. Structs built in code skip
    msgspec's checks; this is the boundary where a request from any driver is checked
    before anything is done."""
    if type(request) is bytes:  # as the client transport sends it (``to_wire``)
        return _decoded(_decoder(cls), request, cls)
    if type(request) is not cls:
        raise InvalidRequestError(
            f"expected a {cls.__name__}, got {type(request).__name__}", request=cls.__name__
        )
    try:
        decoded: R = _decoder(cls).decode(_encoder.encode(request))
        return decoded
    except (msgspec.ValidationError, msgspec.EncodeError, TypeError, OverflowError) as exc:
        raise InvalidRequestError(
            f"malformed {cls.__name__}: {exc}", request=cls.__name__
        ) from None


@functools.cache
def _json_decoder(cls: type) -> msgspec.json.Decoder[Any]:
    return msgspec.json.Decoder(cls)


def check_json(request: object, cls: type[R]) -> R:
    """``request`` (JSON bytes, as the JVM sends it: rayq/connectors/jvm) validated as ``cls``, else
    InvalidRequestError."""
    if type(request) is not bytes:
        raise InvalidRequestError(
            f"expected a {cls.__name__} as JSON bytes, got {type(request).__name__}",
            request=cls.__name__,
        )
    return _decoded(_json_decoder(cls), request, cls)


def _decoded(decoder: Any, data: bytes, cls: type[R]) -> R:
    """``data`` decoded by ``decoder`` (which validates it as ``cls``), else
    InvalidRequestError."""
    try:
        return decoder.decode(data)  # type: ignore[no-any-return]
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise InvalidRequestError(
            f"malformed {cls.__name__}: {exc}", request=cls.__name__
        ) from None
