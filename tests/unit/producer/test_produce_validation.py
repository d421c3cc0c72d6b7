"""The producer's input checks (rayq/producer/validation.py): pure functions, no Ray."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rayq.actors.protocol.config import ClientConfig
from rayq.producer.validation import (
    READ_BACK_PROPERTIES,
    RESERVED_PROPERTIES,
    check_topic,
    check_written_properties,
    prepare,
)
from rayq.store import Message, UniqIdGenerator
from rayq.store import properties as P
from rayq.store.errors import InvalidMessageError, InvalidTopicError, PermissionDeniedError
from rayq.store.names import SYSTEM_TOPICS, TRACE_TOPIC

IDS = UniqIdGenerator()
BROKER_SET = [
    P.RETRY_TOPIC,
    P.ORIGIN_MESSAGE_ID,
    P.DLQ_ORIGIN_TOPIC,
    P.DLQ_ORIGIN_MESSAGE_ID,
    P.REAL_TOPIC,
    P.REAL_QID,
    P.WAIT,
    P.MAX_RECONSUME_TIMES,
    P.RECONSUME_TIME,
]


def prep(msg: Message):  # type: ignore[no-untyped-def]
    return prepare(msg, "pg", ClientConfig(), IDS)


def test_the_validation_module_imports_no_ray() -> None:
    code = "import sys, rayq.producer.validation; assert 'ray' not in sys.modules, 'ray imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize(
    "topic",
    [
        *sorted(SYSTEM_TOPICS - {TRACE_TOPIC}),  # trace records: clients write them
        "rmq_sys_REVIVE_LOG_a",
        "%RETRY%cg",
        "%DLQ%cg",
        "%RETRY%",
        "%DLQ%x",
    ],
)
def test_system_retry_and_dead_letter_topics_are_refused_with_the_reason(topic: str) -> None:
    with pytest.raises(PermissionDeniedError, match=r"system topic|retry or dead-letter") as info:
        prep(Message(topic, b"x"))
    assert "send to a topic of your own" in str(info.value)
    assert info.value.details["topic"] == topic


@pytest.mark.parametrize("topic", ["a%b", "a|b", "RETRY%x", "x%DLQ%", "tbw102", "rmq_sysx"])
def test_percent_and_bar_stay_legal_in_ordinary_topic_names(topic: str) -> None:
    assert check_topic(topic) == topic
    assert prep(Message(topic, b"x")).topic == topic


def test_bad_names_are_still_invalid_topics_first() -> None:
    with pytest.raises(InvalidTopicError):
        check_topic("%DLQ% with space")


@pytest.mark.parametrize("name", BROKER_SET)
def test_properties_the_broker_sets_are_refused_by_name(name: str) -> None:
    """A spoofed RETRY_TOPIC or DLQ_ORIGIN_TOPIC would show up as a dead letter's origin."""
    with pytest.raises(InvalidMessageError, match=f"{name}.*reserved") as info:
        prep(Message("orders", b"x", properties={"ok": "1", name: "forged"}))
    assert info.value.details["name"] == name


def test_ordinary_properties_pass_and_the_producer_adds_its_group() -> None:
    inner = prep(Message("orders", b"x", properties={"color": "red", "retry_topic": "lower"}))
    assert inner.properties == {"color": "red", "retry_topic": "lower", P.PRODUCER_GROUP: "pg"}


def test_arrow_writes_drop_what_a_read_returns_and_refuse_the_rest() -> None:
    read_back = {name: "v" for name in READ_BACK_PROPERTIES}
    assert check_written_properties({**read_back, "color": "red"}) == {"color": "red"}
    refused = set(RESERVED_PROPERTIES) - READ_BACK_PROPERTIES
    assert refused == {P.DELAY, P.DELIVER_AT_MS, P.REAL_TOPIC, P.REAL_QID}
    for name in refused:
        with pytest.raises(InvalidMessageError, match=f"{name}.*reserved"):
            check_written_properties({"color": "red", name: "1"})
    assert {P.RETRY_TOPIC, P.DLQ_ORIGIN_TOPIC, "__PID", P.UNIQ_KEY} <= READ_BACK_PROPERTIES
