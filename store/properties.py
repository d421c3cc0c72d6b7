"""RocketMQ's message property string: ``NAME\\x01VALUE\\x02NAME\\x01VALUE\\x02``.

Tags, keys and the unique id are properties too (TAGS, KEYS, UNIQ_KEY), exactly as
in RocketMQ; several keys are joined by a space.
"""

from __future__ import annotations

import re
from typing import Final

from .errors import InvalidMessageError

NAME_VALUE_SEPARATOR: Final[str] = "\x01"
PROPERTY_SEPARATOR: Final[str] = "\x02"
KEY_SEPARATOR: Final[str] = " "

KEYS: Final[str] = "KEYS"
TAGS: Final[str] = "TAGS"
UNIQ_KEY: Final[str] = "UNIQ_KEY"
WAIT: Final[str] = "WAIT"
DELAY: Final[str] = "DELAY"  # delay level (1 = the first of message_delay_level)
DELIVER_AT_MS: Final[str] = "__DELIVER_AT_MS"  # epoch ms before which it is not delivered
REAL_TOPIC: Final[str] = "REAL_TOPIC"  # a scheduled message's topic ...
REAL_QID: Final[str] = "REAL_QID"  # ... and queue, while it waits in SCHEDULE_TOPIC_XXXX
RETRY_TOPIC: Final[str] = "RETRY_TOPIC"  # a retry message's original topic
ORIGIN_MESSAGE_ID: Final[str] = "ORIGIN_MESSAGE_ID"  # a retry message's first msg id
DLQ_ORIGIN_TOPIC: Final[str] = "DLQ_ORIGIN_TOPIC"  # a dead letter's original topic
DLQ_ORIGIN_MESSAGE_ID: Final[str] = "DLQ_ORIGIN_MESSAGE_ID"  # a dead letter's first msg id
RECONSUME_TIME: Final[str] = "RECONSUME_TIME"
MAX_RECONSUME_TIMES: Final[str] = "MAX_RECONSUME_TIMES"
PRODUCER_GROUP: Final[str] = "PGROUP"
# Transactional messages (actors/server/transactions.py): every record of a transaction
# (half, commit, rollback op) carries TRAN_MSG; a half checked again carries how often.
TRANSACTION_PREPARED: Final[str] = "TRAN_MSG"
TRANSACTION_CHECK_TIMES: Final[str] = "TRANSACTION_CHECK_TIMES"
TRANSACTION_ID: Final[str] = "__transactionId__"
SHARDING_KEY: Final[str] = "__SHARDINGKEY"
# Idempotent produce (actors/server/dedupe.py): the producer id and the batch's
# sequence numbers ``first-last``.
PRODUCER_ID: Final[str] = "__PID"
PRODUCER_SEQ: Final[str] = "__PSEQ"
MAX_PRODUCER_ID_LENGTH: Final[int] = 128
# A producer id ``<family>~<epoch>`` (a decimal epoch) is epoch ``epoch`` of the producer
# ``family``: the broker keeps one sequence per family and queue, and a newer epoch starts
# it over (actors/server/dedupe.py). Spark's writes use them, one epoch per micro-batch.
EPOCH_MARK: Final[str] = "~"
_EPOCH_ID = re.compile(r"(.+)~(0|[1-9][0-9]{0,17})")

_BROKER_SETS_IT: Final[str] = "the broker sets it (send-back, dead letters, delayed delivery)"
# Property name -> why a user may not set it (and what to do instead).
RESERVED_PROPERTIES: Final[dict[str, str]] = {
    TAGS: "set Message.tags",
    KEYS: "set Message.keys",
    UNIQ_KEY: "the producer assigns it",
    PRODUCER_GROUP: "the producer sets it",
    DELAY: "set Message.delay_level",
    DELIVER_AT_MS: "set Message.deliver_at_ms",
    SHARDING_KEY: "use send_orderly(msg, sharding_key=...)",
    PRODUCER_ID: "use Producer(idempotent=True)",
    PRODUCER_SEQ: "use Producer(idempotent=True)",
    WAIT: "the broker decides when a send is stored",
    REAL_TOPIC: _BROKER_SETS_IT,
    REAL_QID: _BROKER_SETS_IT,
    RETRY_TOPIC: _BROKER_SETS_IT,
    ORIGIN_MESSAGE_ID: _BROKER_SETS_IT,
    DLQ_ORIGIN_TOPIC: _BROKER_SETS_IT,
    DLQ_ORIGIN_MESSAGE_ID: _BROKER_SETS_IT,
    RECONSUME_TIME: _BROKER_SETS_IT,
    MAX_RECONSUME_TIMES: _BROKER_SETS_IT,
}
# Reserved names only the broker writes (send-backs, dead letters, delayed delivery;
# WAIT: the broker decides when a send is stored): a producer's batch carrying one is
# refused by the broker too (batch.check_encoded), not only by the producer.
BROKER_ONLY_PROPERTIES: Final[frozenset[str]] = frozenset(
    n for n, why in RESERVED_PROPERTIES.items() if why == _BROKER_SETS_IT
) | {WAIT}
# Reserved names a read can return (a stored record keeps them; the delivery of a
# delayed message removes DELAY, __DELIVER_AT_MS, REAL_TOPIC and REAL_QID).
READ_BACK_PROPERTIES: Final[frozenset[str]] = frozenset(RESERVED_PROPERTIES) - {
    DELAY,
    DELIVER_AT_MS,
    REAL_TOPIC,
    REAL_QID,
}


def sequence_properties(producer_id: str, first: int, last: int) -> dict[str, str]:
    """The properties every record of an idempotent batch carries."""
    check_producer_id(producer_id)
    return {PRODUCER_ID: producer_id, PRODUCER_SEQ: f"{first}-{last}"}


def producer_epoch(producer_id: str) -> tuple[str, int]:
    """(family, epoch) of a producer id: ``"<family>~<epoch>"`` split, any other id is
    its own family at epoch 0."""
    m = _EPOCH_ID.fullmatch(producer_id)
    if m is None:
        return producer_id, 0
    return m.group(1), int(m.group(2))


def check_producer_id(producer_id: object) -> str:
    if (
        not isinstance(producer_id, str)
        or not 0 < len(producer_id) <= MAX_PRODUCER_ID_LENGTH
        or any(c in producer_id for c in "\x00\x01\x02|")
    ):
        raise InvalidMessageError(
            f"producer id must be a str of 1..{MAX_PRODUCER_ID_LENGTH} characters without "
            f"control characters or '|', got {producer_id!r}"
        )
    return producer_id


_FORBIDDEN: Final[tuple[str, str]] = (NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR)


def encode_properties(props: dict[str, str]) -> str:
    """Encode a property dict; names and values must not contain \\x01 or \\x02."""
    if not props:
        return ""
    return "".join([f"{k}\x01{v}\x02" for k, v in props.items()])


def encode_message_properties(
    tags: str | None, keys: str, uniq_key: str, others: dict[str, str]
) -> str:
    """TAGS, KEYS and UNIQ_KEY (when set) followed by the other properties."""
    if tags and keys and uniq_key:  # the common case: one format call
        text = f"TAGS\x01{tags}\x02KEYS\x01{keys}\x02UNIQ_KEY\x01{uniq_key}\x02"
    else:
        text = "".join(
            [f"{n}\x01{v}\x02" for n, v in ((TAGS, tags), (KEYS, keys), (UNIQ_KEY, uniq_key)) if v]
        )
    return text + encode_properties(others) if others else text


def count_entries(tags: str | None, keys: str, uniq_key: str, others: dict[str, str]) -> int:
    return bool(tags) + bool(keys) + bool(uniq_key) + len(others)


def decode_properties(text: str) -> dict[str, str]:
    """Inverse of :func:`encode_properties` (tolerates a missing final separator)."""
    if not text:
        return {}
    out: dict[str, str] = {}
    for item in text.split(PROPERTY_SEPARATOR):
        if item:
            name, _, value = item.partition(NAME_VALUE_SEPARATOR)
            out[name] = value
    return out


def check_properties(props: dict[str, str]) -> None:
    """Raise InvalidMessageError if a name or value cannot be encoded."""
    for name, value in props.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise InvalidMessageError(
                f"property {name!r}={value!r}: names and values must be str", name=repr(name)
            )
        if not name:
            raise InvalidMessageError("property names must not be empty")
        for sep in _FORBIDDEN:
            if sep in name or sep in value:
                raise InvalidMessageError(
                    f"property {name!r} contains a control character \\x01 or \\x02, "
                    "which the property encoding reserves",
                    name=name,
                )


def split_keys(value: str | None) -> list[str]:
    """The KEYS property value as a list of keys (empty ones dropped)."""
    if not value:
        return []
    keys = value.split(KEY_SEPARATOR)
    return keys if "" not in keys else [k for k in keys if k]


_TAGS_RAW: Final[bytes] = TAGS.encode()
_TAGS_FIRST: Final[bytes] = _TAGS_RAW + NAME_VALUE_SEPARATOR.encode()
_PROPERTY_SEPARATOR_RAW: Final[bytes] = PROPERTY_SEPARATOR.encode()


def find_tags(raw: bytes) -> str | None:
    """``decode_properties(raw.decode("utf-8")).get(TAGS)`` of UTF-8 property bytes, without
    decoding the rest when TAGS is absent or comes first (as our encoder writes it) and
    appears nowhere else; any other text is decoded in full."""
    if raw.startswith(_TAGS_FIRST):
        end = raw.find(_PROPERTY_SEPARATOR_RAW)
        if end < 0:
            end = len(raw)
        if raw.find(_TAGS_RAW, end) < 0:  # no later property can be named TAGS
            return raw[len(_TAGS_FIRST) : end].decode("utf-8")
    elif _TAGS_RAW not in raw:
        return None
    return decode_properties(raw.decode("utf-8")).get(TAGS)
