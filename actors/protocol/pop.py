"""POP consumption (RocketMQ 5's ``SimpleConsumer``): receive with a lease, ack per message.

A ``PopRequest`` takes up to ``max_nums`` messages of a topic (any of its queues, and
the group's retry topic) and makes each invisible to the group's other receivers for
``invisible_ms``. Each comes with a receipt handle: ``ack`` settles it,
``change_invisibility`` moves its lease's end (or releases it at once), and a lease that
ends unsettled sends the message to ``%RETRY%<group>`` for another delivery (the
broker's side: actors/server/pop_state.py and pop_processor.py).

A receipt handle is the text ``1.<lease>.<deadline_ms>.<queue_id>.<queue_offset>.<group>.
<topic>.<broker>`` (one line; ``1`` is the format's version): a ``ReceiptHandle``'s
fields, dot-separated. Topic and group names hold no dot; the broker's name comes last
and may. Made and read with ``str`` operations only (a receive makes one per message
and an ack reads them all: base64 over msgpack cost 3 and 6 µs a handle). Clients treat
it as opaque; the broker checks it against its in-flight table, so a handle that was
forged, belongs to another group or names a lease that ended is refused.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Final

import msgspec
from msgspec import Meta

from rayq.actors.protocol.enums import ConsumeFromWhere
from rayq.actors.protocol.wire import FilterType, QueueId, QueueOffset, Text, _Request
from rayq.store.errors import InvalidReceiptHandleError

POP_MAX_MESSAGES: Final[int] = 1024  # a receive takes at most this many messages
INVISIBLE_MAX_MS: Final[int] = 12 * 3600 * 1000  # RocketMQ 5's longest invisible time
POP_WAIT_MAX_MS: Final[int] = 60_000  # a receive waits for news at most this long
ACK_MAX_HANDLES: Final[int] = 4096

InvisibleMs = Annotated[int, Meta(ge=1, le=INVISIBLE_MAX_MS)]


class PopRequest(_Request, frozen=True, kw_only=True):
    """Take up to ``max_nums`` messages of ``topic`` that match the filter, leased for
    ``invisible_ms``; wait up to ``wait_ms`` for one if none is there. A queue the group
    never read starts at its first message (``FIRST_OFFSET``) or its end."""

    group: Text
    topic: Text
    max_nums: Annotated[int, Meta(ge=1, le=POP_MAX_MESSAGES)] = 32
    invisible_ms: InvisibleMs = 30_000
    expression: Text = "*"
    expression_type: FilterType = "TAG"
    wait_ms: Annotated[int, Meta(ge=0, le=POP_WAIT_MAX_MS)] = 0
    consume_from: ConsumeFromWhere = ConsumeFromWhere.FIRST_OFFSET
    # Deferred acks riding on this receive (Kafka share groups' acknowledgements on the
    # next fetch): handles of this group on this broker, settled before anything is
    # taken, all or none. A refusal does not fail the receive: ``ack_error`` says why.
    acks: Annotated[list[Text], Meta(max_length=ACK_MAX_HANDLES)] = []


class PopResponse(msgspec.Struct, frozen=True, kw_only=True):
    """The records taken (commit-log format, as a pull's ``buffer``) and, per record in
    order, its receipt handle; ``ack_error``: why the request's ``acks`` were refused
    ("" if they were settled, or there were none)."""

    buffer: bytes = b""
    count: int = 0
    handles: list[str] = []
    ack_error: str = ""


class AckRequest(_Request, frozen=True, kw_only=True):
    """Settle the messages of ``handles`` (all of ``group``): all or none."""

    group: Text
    topic: Text
    handles: Annotated[list[Text], Meta(min_length=1, max_length=ACK_MAX_HANDLES)]


class ChangeInvisibilityRequest(_Request, frozen=True, kw_only=True):
    """Make the leases of ``handles`` end ``invisible_ms`` from now; with ``release``, a
    lease may end now (``invisible_ms`` 0: a nack, delivered again at once)."""

    group: Text
    topic: Text
    handles: Annotated[list[Text], Meta(min_length=1, max_length=ACK_MAX_HANDLES)]
    invisible_ms: Annotated[int, Meta(ge=0, le=INVISIBLE_MAX_MS)]
    release: bool = False


class ChangeInvisibilityReply(msgspec.Struct, frozen=True, kw_only=True):
    """Each message's new receipt handle, in order (the old ones no longer work)."""

    handles: list[str]


class ReceiptHandle(msgspec.Struct, frozen=True, array_like=True):
    """What a receipt handle names: a lease on one message of one broker's queue."""

    group: str
    broker: str
    topic: str  # the queue's topic: the subscribed one, or %RETRY%<group>
    queue_id: QueueId
    queue_offset: QueueOffset
    lease: int  # the lease's random id: a handle of an ended lease no longer matches
    deadline_ms: int  # when the lease ends, as the broker last set it


_VERSION: Final[str] = "1"


def encode_handle(handle: ReceiptHandle) -> str:
    h = handle
    return (
        f"{_VERSION}.{h.lease}.{h.deadline_ms}.{h.queue_id}.{h.queue_offset}."
        f"{h.group}.{h.topic}.{h.broker}"
    )


def encode_handles(
    group: str,
    broker: str,
    topic: str,
    queue_id: int,
    offsets: Iterable[int],
    lease: int,
    deadline_ms: int,
) -> list[str]:
    """``encode_handle`` for many messages of one queue under one lease."""
    head = f"{_VERSION}.{lease}.{deadline_ms}.{queue_id}."
    tail = f".{group}.{topic}.{broker}"
    return [head + str(o) + tail for o in offsets]


def decode_handle(text: object) -> ReceiptHandle:
    """The ``ReceiptHandle`` in ``text``; InvalidReceiptHandleError if it is none."""
    if type(text) is not str or not text:
        raise InvalidReceiptHandleError(
            f"a receipt handle is the str a received message carries, got {text!r:.80}"
        )
    parts = text.split(".", 7)
    try:
        if len(parts) != 8 or parts[0] != _VERSION or not all(parts[5:]):
            raise ValueError(text)
        handle = ReceiptHandle(
            parts[5], parts[7], parts[6], int(parts[3]), int(parts[4]), int(parts[1]), int(parts[2])
        )
        if handle.queue_id < 0 or handle.queue_offset < 0:
            raise ValueError(text)
    except ValueError:
        raise InvalidReceiptHandleError(
            f"{text!r:.80} is not a receipt handle: pass the message received, or its "
            "receipt_handle, unchanged"
        ) from None
    return handle


__all__ = [
    "ACK_MAX_HANDLES",
    "INVISIBLE_MAX_MS",
    "POP_MAX_MESSAGES",
    "POP_WAIT_MAX_MS",
    "AckRequest",
    "ChangeInvisibilityReply",
    "ChangeInvisibilityRequest",
    "PopRequest",
    "PopResponse",
    "ReceiptHandle",
    "decode_handle",
    "encode_handle",
    "encode_handles",
]
