"""connectors.stream_sink without Ray or Spark: the sink's options, its column checks in
its own words, the producer ids of exactly-once writes (epochs the broker understands),
the partitions' queues, and the JVM writer's options."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from rayq.actors.protocol import MessageQueue
from rayq.connectors import spark_bridge, stream_sink
from rayq.connectors.stream_sink import (
    check_sink_columns,
    check_write_id,
    jvm_write_options,
    parse_sink_options,
    producer_id,
    write_targets,
)
from rayq.store.arrow_puts import Columns
from rayq.store.errors import ConfigError, InvalidMessageError, InvalidTopicError
from rayq.store.properties import check_producer_id, producer_epoch


def test_options_any_case_with_defaults() -> None:
    opts = parse_sink_options(
        {
            "Topic": "out",
            "checkpointLocation": "/ck",
            "KEYS": "k",
            "accessKey": "a",
            "secretkey": "s",
        }
    )
    assert opts.topic == "out" and opts.group == stream_sink.DEFAULT_GROUP
    assert opts.columns == Columns("body", keys="k")
    assert opts.credentials is not None and opts.credentials.access_key == "a"
    assert opts.put_bytes == stream_sink.JVM_PUT_BYTES and opts.namespace is None
    opts = parse_sink_options({"topic": "out", "body": "value", "putBytes": "4096", "group": "g"})
    assert (opts.columns.body, opts.put_bytes, opts.group) == ("value", 4096, "g")


@pytest.mark.parametrize(
    ("options", "error", "text"),
    [
        ({}, ConfigError, "option topic"),
        ({"topic": " "}, ConfigError, "option topic"),
        ({"topic": "a,b"}, InvalidTopicError, "a,b"),
        ({"topic": "out", "accessKey": "a"}, ConfigError, "secretKey"),
        ({"topic": "out", "secretKey": "s"}, ConfigError, "accessKey"),
        ({"topic": "out", "tags": ""}, ConfigError, "option tags"),
        ({"topic": "out", "putBytes": "0"}, ConfigError, "putBytes"),
        ({"topic": "out", "putBytes": "lots"}, ConfigError, "putBytes"),
    ],
)
def test_bad_options_raise_naming_them(options: dict, error: type, text: str) -> None:
    with pytest.raises(error, match=text):
        parse_sink_options(options)


def test_column_errors_name_the_sink_options() -> None:
    schema = pa.schema([("value", pa.binary()), ("n", pa.int64())])
    check_sink_columns(schema, Columns("value"))
    with pytest.raises(InvalidMessageError, match="rayq sink: option body='body': no such"):
        check_sink_columns(schema, Columns("body"))
    with pytest.raises(InvalidMessageError, match="option tags='n' must be string"):
        check_sink_columns(schema, Columns("value", tags="n"))


def test_producer_ids_are_epochs_of_one_producer_per_partition() -> None:
    """Partition p of batch b of a write is epoch b of ``spark-<write id>-<p>``: the broker
    (dedupe.py) sees one producer per partition, whatever the batch."""
    query = "0f8e4a52-5c0b-4b8e-9d4e-2a2f3c1d9b7e"  # a Spark query id
    for batch in (0, 7, 10**17):
        pid = check_producer_id(producer_id(query, 3, batch))
        assert producer_epoch(pid) == (f"spark-{query}-3", batch)
    assert producer_id("nightly", 2) == "spark-nightly-2"
    assert producer_epoch("spark-nightly-2") == ("spark-nightly-2", 0)
    assert check_write_id("a.b_c-9") == "a.b_c-9"
    for bad in ("", "a b", "a~1", "a|b", "x" * 65, 3, None):
        with pytest.raises(ConfigError, match="write_id"):
            check_write_id(bad)


def test_partitions_spread_over_brokers_and_keep_their_queue() -> None:
    queues = [MessageQueue("t", b, q) for b in ("broker-b", "broker-a") for q in range(2)]
    targets = write_targets(queues)
    assert targets == [("broker-a", 0), ("broker-b", 0), ("broker-a", 1), ("broker-b", 1)]
    assert write_targets(list(reversed(queues))) == targets  # whatever order the route has


def test_jvm_write_options() -> None:
    plan = [["rayq-broker-broker-a", 0, "ab12", "{}"]]
    opts = jvm_write_options("ns", "out", "g", "q1", plan, Columns("v", tags="t"), 4096)
    assert json.loads(opts["targets"]) == plan
    assert {k: opts[k] for k in ("namespace", "topic", "group", "write_id", "put_bytes")} == {
        "namespace": "ns",
        "topic": "out",
        "group": "g",
        "write_id": "q1",
        "put_bytes": "4096",
    }
    assert (opts["body"], opts["tags"]) == ("v", "t") and "keys" not in opts
    assert all(isinstance(v, str) for v in opts.values())  # the JVM reads strings


def test_the_bridge_answers_the_sinks_calls() -> None:
    assert {"sink.check", "sink.plan"} <= set(spark_bridge._handlers)
    bridge = spark_bridge.Bridge()
    answer = json.loads(bridge.call("sink.check", json.dumps({}), json.dumps({"schema": "{}"})))
    assert answer == {"error": "ConfigError", "message": answer["message"]}
    assert "option topic" in answer["message"]
