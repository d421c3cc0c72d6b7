"""SQL92 property filters: the language (a table of expressions against messages), its
errors, and the filter through the broker, a pull consumer and a push consumer's
service on the in-process fake cluster (no Ray)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest

import rayq
from rayq.actors.protocol import (
    ConsumeFromWhere,
    MessageModel,
    MessageQueue,
    PullRequest,
    PullStatus,
)
from rayq.actors.protocol.config import BrokerConfig
from rayq.actors.server.allocation import AllocateStrategy
from rayq.consumer.service import ConsumeService
from rayq.store import StoreConfig
from rayq.store.errors import InvalidFilterError
from rayq.store.sql92 import compile_sql
from rayq.testing import FakeCluster, FakeTransport

P = {"a": "10", "b": "x", "f": "2.5", "neg": "-3", "s": "it's", "flag": "true", "TAGS": "TagA"}

TABLE = [
    ("a > 5", True),
    ("a >= 10", True),
    ("a < 10", False),
    ("a <= 10.0", True),
    ("a = 10", True),
    ("a <> 10", False),
    ("f BETWEEN 2 AND 3", True),
    ("f NOT BETWEEN 2 AND 3", False),
    ("neg < -2", True),
    ("neg > -2.5e0", False),
    ("b = 'x'", True),
    ("b <> 'x'", False),
    ("b IN ('x', 'y')", True),
    ("b NOT IN ('x', 'y')", False),
    ("s = 'it''s'", True),
    ("flag = TRUE", True),
    ("flag = FALSE", False),
    ("TAGS = 'TagA'", True),
    ("TAGS IN ('TagB', 'TagC')", False),
    ("missing > 1", False),  # a comparison with a missing property is false
    ("NOT (missing > 1)", False),  # ... and so is its negation (unknown)
    ("missing = 'x' OR a > 5", True),
    ("missing = 'x' AND a > 5", False),
    ("missing IS NULL", True),
    ("a IS NULL", False),
    ("a IS NOT NULL", True),
    ("b > 1", False),  # a type mismatch: 'x' is not a number
    ("b BETWEEN 1 AND 2", False),
    ("a = 'x'", False),
    ("TRUE", True),
    ("FALSE OR NOT FALSE", True),
    ("a > 5 AND b IN ('x','y') AND NOT f > 3", True),
    ("(a > 50 OR b = 'x') AND (neg < 0)", True),
    ("a > 5 and b in ('y') or tags = 'TagA'", False),  # keywords any case; TAGS is a name
]


@pytest.mark.parametrize(("expression", "expected"), TABLE)
def test_expression_against_a_message(expression: str, expected: bool) -> None:
    assert compile_sql(expression).matches(P) is expected


@pytest.mark.parametrize(
    ("expression", "position", "what"),
    [
        ("a >", 3, "a number, a string or TRUE/FALSE"),
        ("a > 5 AND", 9, "a property name"),
        ("a IN ('x'", 9, "')' or ','"),
        ("a ! 3", 2, "unexpected character '!'"),
        ("", 0, "an expression"),
        ("a > 'x'", 4, "a number after '>'"),
        ("a BETWEEN 1 OR 2", 12, "AND"),
        ("(a > 1", 6, "')'"),
        ("a > 1 b", 6, "AND, OR or the end"),
        ("a NOT LIKE 'x'", 6, "BETWEEN or IN after NOT"),
    ],
)
def test_a_syntax_error_names_the_position(expression: str, position: int, what: str) -> None:
    with pytest.raises(InvalidFilterError, match=f"position {position}") as exc:
        compile_sql(expression)
    assert what in str(exc.value)
    assert exc.value.details["position"] == position


def test_selectors_check_at_once_and_compile_once() -> None:
    with pytest.raises(InvalidFilterError, match="position 3"):
        rayq.MessageSelector.by_sql("a >")
    selector = rayq.MessageSelector.by_sql("a > 1")
    assert (selector.type, selector.expression) == ("SQL92", "a > 1")
    assert compile_sql("a > 1") is compile_sql("a > 1")
    assert rayq.MessageSelector.by_tag("A || B").type == "TAG"


TOPIC = "Props"


def send_props(c: FakeCluster) -> None:
    with rayq.Producer("pg", transport=FakeTransport(c)) as producer:
        producer.send_batch(
            [
                rayq.Message(
                    TOPIC,
                    f"m{i}".encode(),
                    tags="even" if i % 2 == 0 else "odd",
                    properties={"n": str(i), "kind": "big" if i >= 50 else "small"},
                )
                for i in range(100)
            ]
        )


@pytest.fixture
def cluster_options() -> dict[str, Any]:
    config = BrokerConfig(store=StoreConfig.for_tests(), enable_property_filter=True)
    return {"config": config, "topics": {TOPIC: 1}, "setup": send_props}


def test_the_broker_filters_a_pull_by_properties(cluster: FakeCluster) -> None:
    server = cluster.server()
    req = PullRequest(
        group="g",
        topic=TOPIC,
        queue_id=0,
        queue_offset=0,
        max_nums=10,
        expression="n >= 95 OR (kind = 'small' AND TAGS = 'odd' AND n < 5)",
        expression_type="SQL92",
    )
    resp = server.pull(req)
    got = [m.body for m in rayq.store.decode_records(resp.buffer)]
    assert got == [b"m1", b"m3", b"m95", b"m96", b"m97", b"m98", b"m99"]
    assert resp.next_offset == 100
    none = server.pull(msgspec.structs.replace(req, expression="n > 1000"))
    assert (none.status, none.count, none.next_offset) == (PullStatus.NO_MATCHED_MSG, 0, 100)


def test_a_broker_without_property_filtering_refuses_clearly(tmp_path: Path) -> None:
    with FakeCluster(tmp_path) as c:
        rayq.Admin(transport=FakeTransport(c)).create_topic(TOPIC, queues=1)
        req = PullRequest(
            group="g",
            topic=TOPIC,
            queue_id=0,
            queue_offset=0,
            expression="a > 1",
            expression_type="SQL92",
        )
        with pytest.raises(InvalidFilterError, match="enable_property_filter"):
            c.server().pull(req)
        consumer = rayq.PullConsumer("g", transport=FakeTransport(c))
        with pytest.raises(InvalidFilterError, match=r"broker\(s\) \['broker-a'\]"):
            consumer.subscribe(TOPIC, rayq.MessageSelector.by_sql("a > 1"))  # at subscribe
        consumer.shutdown()


def test_a_pull_consumer_with_an_sql_selector(cluster: FakeCluster) -> None:
    consumer = rayq.PullConsumer(
        "g", transport=FakeTransport(cluster), consume_from=ConsumeFromWhere.FIRST_OFFSET
    )
    consumer.subscribe(TOPIC, rayq.MessageSelector.by_sql("kind = 'big' AND n BETWEEN 60 AND 64"))
    consumer.start()
    got: list[bytes] = []
    deadline = time.monotonic() + 10
    try:
        while len(got) < 5 and time.monotonic() < deadline:
            got += [m.body for m in consumer.poll(0.2)]
    finally:
        consumer.shutdown()
    assert got == [b"m60", b"m61", b"m62", b"m63", b"m64"]


def test_a_push_consumer_service_with_an_sql_selector(cluster: FakeCluster) -> None:
    seen: list[bytes] = []

    def listener(msgs: list) -> rayq.ConsumeStatus:
        seen.extend(m.body for m in msgs)
        return rayq.ConsumeStatus.CONSUME_SUCCESS

    svc = ConsumeService(
        group="pg-sql",
        client_id="c1",
        subscriptions={TOPIC: rayq.MessageSelector.by_sql("n < 3 OR n = 99")},
        listener=listener,
        orderly=False,
        model=MessageModel.CLUSTERING,
        consume_from=ConsumeFromWhere.FIRST_OFFSET,
        consume_timestamp_ms=0,
        max_reconsume_times=16,
        strategy=AllocateStrategy.AVERAGELY,
        allocation=[],
        config=rayq.ClientConfig(),
        namespace="rayq-fake",
        transport=FakeTransport(cluster),
    )

    async def run() -> None:
        await svc.open()
        await svc.assign(1, [MessageQueue(TOPIC, "broker-a", 0)])
        for _ in range(500):  # up to 10 s
            if len(seen) >= 4:
                break
            await asyncio.sleep(0.02)
        await svc.shutdown()

    asyncio.run(run())
    assert sorted(seen) == [b"m0", b"m1", b"m2", b"m99"]
