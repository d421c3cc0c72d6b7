"""rayq.data: a topic as a Ray Data source (exact row counts) and sink (idempotent)."""

from __future__ import annotations

import json
import time

import numpy as np
import pyarrow as pa
import pytest
import ray

import rayq
import rayq.connectors.arrow_io
import rayq.connectors.ray_data
from rayq.actors.protocol import (
    ReadArrowRequest,
    broker_actor_name,
    page_reader_actor_name,
    replica_actor_names,
)
from rayq.cluster import Cluster, running_actors
from rayq.connectors import arrow_io

pytestmark = pytest.mark.integration
NAMESPACE = "rayq-test-ray-data"


@pytest.fixture(scope="module")
def topic(cluster: Cluster) -> str:
    admin = rayq.Admin(namespace=NAMESPACE)
    admin.create_topic("events", queues=3)
    admin.create_topic("copy", queues=2)
    with rayq.Producer(group="pg", namespace=NAMESPACE) as producer:
        for i in range(10):
            producer.send_batch(
                [
                    rayq.Message("events", f"e{i}-{j}".encode(), tags=f"t{j % 2}", keys=[f"k{i}"])
                    for j in range(10)
                ]
            )
    return "events"


def test_read_topic_with_exact_block_metadata(topic: str) -> None:
    source = rayq.connectors.ray_data.TopicDatasource(
        topic, max_messages_per_partition=15, namespace=NAMESPACE
    )
    tasks = source.get_read_tasks(4)
    assert sum(t.metadata.num_rows for t in tasks) == 100 and len(tasks) > 3
    for task in tasks[:3]:
        (block,) = list(task())
        assert block.num_rows == task.metadata.num_rows
    ds = rayq.connectors.ray_data.read_topic(topic, namespace=NAMESPACE)
    assert ds.count() == 100
    rows = [r for r in ds.take_all() if r["tags"] == "t0"]
    assert len(rows) == 50 and all(r["body"].startswith(b"e") for r in rows)
    assert ds.schema().names[:4] == ["topic", "broker", "queue_id", "queue_offset"]
    assert rayq.connectors.ray_data.read_topic(topic, "latest", namespace=NAMESPACE).count() == 0


def test_write_datasink_and_retried_tasks_do_not_duplicate(topic: str) -> None:
    ds = rayq.connectors.ray_data.read_topic(topic, namespace=NAMESPACE).select_columns(
        ["body", "tags", "keys"]
    )
    sink = rayq.connectors.ray_data.TopicDatasink(
        "copy", body_col="body", tags_col="tags", keys_col="keys", namespace=NAMESPACE
    )
    ds.write_datasink(sink)
    assert sink.rows_written == 100
    assert rayq.connectors.ray_data.read_topic("copy", namespace=NAMESPACE).count() == 100

    class Ctx:
        task_idx = 7

    table = pa.table({"body": [b"x", b"y", b"z"]})
    again = rayq.connectors.ray_data.TopicDatasink("copy", namespace=NAMESPACE)
    assert again.write([table], Ctx()) == 3
    assert again.write([table], Ctx()) == 3  # a re-run task: dropped by the broker
    assert rayq.connectors.ray_data.read_topic("copy", namespace=NAMESPACE).count() == 103


def test_bad_columns_raise_rayq_errors(topic: str) -> None:
    sink = rayq.connectors.ray_data.TopicDatasink("copy", body_col="nope", namespace=NAMESPACE)
    with pytest.raises(rayq.InvalidMessageError, match="no such column"):
        sink.on_write_start(pa.schema([("body", pa.binary())]))
    with pytest.raises(rayq.InvalidMessageError, match="must be binary or string"):
        rayq.connectors.ray_data.TopicDatasink("copy", namespace=NAMESPACE).on_write_start(
            pa.schema([("body", pa.int64())])
        )
    with pytest.raises(rayq.TopicNotFoundError):
        rayq.connectors.ray_data.read_topic("missing", namespace=NAMESPACE)
    with pytest.raises(rayq.InvalidOffsetError):
        rayq.connectors.ray_data.read_topic(topic, starting="sometime", namespace=NAMESPACE)
    assert ray.data.from_items([{"a": 1}]).count() == 1  # Ray Data still works


@pytest.fixture(scope="module")
def big_topic(cluster: Cluster) -> str:
    """300 messages of 1 KiB on one queue: about 100 pages of 4 KiB."""
    rayq.Admin(namespace=NAMESPACE).create_topic("big", queues=1)
    with rayq.Producer(group="pg-big", namespace=NAMESPACE) as producer:
        for i in range(6):
            body = bytes([i]) * 1024
            producer.send_batch([rayq.Message("big", body, keys=[f"k{j}"]) for j in range(50)])
    return "big"


def test_read_task_reads_pages_as_they_are_consumed(
    big_topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Given a range of about 100 pages, when the first block of its read task is taken,
    then at most the page after it was asked for too; the rest only as consumed."""
    asked: list[int] = []
    real = arrow_io.broker_handle

    class Counting:
        def __init__(self, client: object) -> None:
            self.client = client

        def read_arrow(self, req: ReadArrowRequest) -> object:
            asked.append(req.start)
            return self.client.read_arrow(req)  # type: ignore[attr-defined]

    monkeypatch.setattr(arrow_io, "broker_handle", lambda *a, **k: Counting(real(*a, **k)))
    source = rayq.connectors.ray_data.TopicDatasource(
        big_topic, namespace=NAMESPACE, page_bytes=4096
    )
    (task,) = source.get_read_tasks(1)
    blocks = iter(task())
    first = next(blocks)
    assert 0 < first.num_rows < 10 and len(asked) <= 2
    rest = sum(b.num_rows for b in blocks)
    assert first.num_rows + rest == 300 and len(asked) > 50


def test_iter_batches_streams_one_page_per_block(big_topic: str) -> None:
    ds = rayq.connectors.ray_data.read_topic(big_topic, namespace=NAMESPACE, page_bytes=4096)
    batches = ds.iter_batches(batch_size=None, batch_format="pyarrow")
    first = next(iter(batches))
    assert 0 < first.num_rows < 10  # one page, not the whole range
    assert first.schema == arrow_io.SCHEMA
    assert ds.count() == 300


def test_pages_arrive_as_record_batches_not_ipc_bytes(big_topic: str, cluster: Cluster) -> None:
    """The broker returns the batch itself (its buffers go through the object store)."""
    handle = arrow_io.broker_handle(NAMESPACE, cluster.broker_names[0])
    req = ReadArrowRequest(topic=big_topic, queue_id=0, start=0, end=300, max_bytes=1 << 20)
    page = handle.read_arrow(req).result(30)
    assert page.data == b"" and isinstance(page.batch, pa.RecordBatch)
    assert page.batch.num_rows == page.next_offset == 300
    assert page.batch.column("keys")[7].as_py() == ["k7"]


def test_null_bodies_raise_before_any_write(topic: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A block with a null body fails the write task before its first put: the good block
    before it in the same task is not written either (though it fills a put alone)."""
    monkeypatch.setattr(
        rayq.connectors.arrow_io, "PUT_BYTES", 100
    )  # this process's sink.write below
    before = rayq.connectors.ray_data.read_topic("copy", namespace=NAMESPACE).count()

    class Ctx:
        task_idx = 1

    good = pa.table({"body": [b"fine"] * 10})
    bad = pa.table({"body": pa.array([b"a", None, b"c"], pa.binary())})
    sink = rayq.connectors.ray_data.TopicDatasink("copy", namespace=NAMESPACE)
    with pytest.raises(rayq.InvalidMessageError, match="'body' has 1 null bodies in 3 rows"):
        sink.write([good, bad], Ctx())
    with pytest.raises(rayq.InvalidMessageError, match="null bodies"):
        ds = ray.data.from_arrow(bad)
        ds.write_datasink(rayq.connectors.ray_data.TopicDatasink("copy", namespace=NAMESPACE))
    assert rayq.connectors.ray_data.read_topic("copy", namespace=NAMESPACE).count() == before


@pytest.mark.parametrize("server", ["broker", "page reader"])
def test_jvm_pages_hold_the_asked_columns_and_bad_requests_are_refused(
    big_topic: str, cluster: Cluster, server: str
) -> None:
    """``read_arrow_ipc`` (what Spark's rayq source calls from the JVM, on a broker's page
    readers): a JSON request; the page is the header then Arrow IPC of the asked columns;
    a malformed request raises InvalidRequestError and the actor goes on serving."""
    name = broker_actor_name(cluster.broker_names[0])
    if server == "page reader":
        name = arrow_io.page_readers(NAMESPACE, cluster.broker_names[0])[1]
    actor = ray.get_actor(name, namespace=NAMESPACE)

    def ask(**req: object) -> bytes:
        return ray.get(actor.read_arrow_ipc.remote(json.dumps(req).encode()), timeout=30)

    base = {"topic": big_topic, "queue_id": 0, "start": 5, "end": 300, "max_bytes": 1 << 20}
    page = ask(**base, columns=["keys", "queue_offset"])
    nxt, rows = np.frombuffer(page[:16], "<i8").tolist()
    batch = pa.ipc.open_stream(page[16:]).read_all()
    assert batch.column_names == ["keys", "queue_offset"] and batch.num_rows == rows == nxt - 5
    assert batch.column("queue_offset")[0].as_py() == 5
    assert batch.column("keys")[0].as_py() == ["k5"]
    assert ask(**base, columns=[]) == np.array([300, 295], "<i8").tobytes()  # a count
    for bad in ({**base, "columns": ["nope"]}, {**base, "queue_id": -1}, {"topic": big_topic}):
        with pytest.raises(rayq.InvalidRequestError):
            ask(**bad)
    with pytest.raises(rayq.InvalidRequestError):
        ray.get(actor.read_arrow_ipc.remote(b"{not json"), timeout=30)
    assert np.frombuffer(ask(**base, columns=[])[:8], "<i8")[0] == 300  # still serving


def test_page_readers_serve_the_brokers_pages_and_stop_with_the_cluster(
    big_topic: str, cluster: Cluster
) -> None:
    """A broker's page readers (actors/page_reader.py) start on the first ask, pinned beside
    it, answer byte for byte what the broker answers, and are rayq actors of the cluster
    (listed, stopped by shutdown)."""
    broker = cluster.broker_names[0]
    names = arrow_io.page_readers(NAMESPACE, broker)
    assert names == [page_reader_actor_name(broker, i) for i in range(2)]
    assert arrow_io.page_readers(NAMESPACE, broker) == names  # the same ones again
    assert set(names) <= set(running_actors(NAMESPACE))
    broker_actor = ray.get_actor(broker_actor_name(broker), namespace=NAMESPACE)
    for columns in (None, [], ["body", "msg_id"]):
        req = json.dumps(
            {
                "topic": big_topic,
                "queue_id": 0,
                "start": 3,
                "end": 250,
                "max_bytes": 1 << 16,
                "columns": columns,
            }
        ).encode()
        want = ray.get(broker_actor.read_arrow_ipc.remote(req), timeout=30)
        for name in names:
            reader = ray.get_actor(name, namespace=NAMESPACE)
            assert ray.get(reader.read_arrow_ipc.remote(req), timeout=30) == want
    assert replica_actor_names(broker)[-2:] == names  # what shutdown and failover stop


def test_jvm_puts_append_idempotently_and_refuse_bad_rows(cluster: Cluster) -> None:
    """``put_arrow`` (what Spark's rayq sink calls from the JVM): JSON request, Arrow IPC
    rows; encoded and appended by the broker as idempotent batches; the same call again
    appends nothing; bad requests and rows raise rayq errors and append nothing."""
    admin = rayq.Admin(namespace=NAMESPACE)
    admin.create_topic("jvm-sink", queues=1)
    actor = ray.get_actor(broker_actor_name(cluster.broker_names[0]), namespace=NAMESPACE)

    def ipc(table: pa.Table) -> bytes:
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        return sink.getvalue().to_pybytes()

    def put_call(rows: bytes, **fields: object) -> ray.ObjectRef:
        req = {
            "topic": "jvm-sink",
            "queue_id": 0,
            "producer_id": "p1",
            "first_sequence": 0,
            "group": "g",
            "body": "body",
            **fields,
        }
        return actor.put_arrow.remote(json.dumps(req).encode(), rows)

    def put(rows: bytes, **fields: object) -> dict:
        return json.loads(ray.get(put_call(rows, **fields), timeout=30))

    def stored() -> int:
        return sum(q.max_offset for q in admin.topic_stats("jvm-sink"))

    rows = pa.table({"body": [f"m{i}".encode() for i in range(5)], "t": ["a", "b"] * 2 + ["a"]})
    assert put(ipc(rows), tags="t") == {"rows": 5}
    assert put(ipc(rows), tags="t") == {"rows": 5} and stored() == 5  # a retry: no copies
    more = pa.table({"body": [b"m5", b"m6"], "t": ["a", "b"]})
    assert put(ipc(more), tags="t", first_sequence=5) == {"rows": 2} and stored() == 7
    got = rayq.connectors.ray_data.read_topic("jvm-sink", namespace=NAMESPACE).take_all()
    assert [(r["body"], r["tags"]) for r in got][-2:] == [(b"m5", "a"), (b"m6", "b")]

    null_body = pa.table({"body": pa.array([b"x", None], pa.binary())})
    with pytest.raises(rayq.InvalidMessageError, match="null bodies"):
        put(ipc(null_body), first_sequence=7)
    with pytest.raises(rayq.InvalidMessageError, match="no such column"):
        put(ipc(more), tags="nope", first_sequence=7)
    with pytest.raises(rayq.InvalidRequestError, match="not an Arrow IPC stream"):
        put(b"not arrow", first_sequence=7)
    with pytest.raises(rayq.InvalidRequestError, match="malformed"):
        put(ipc(more), first_sequence=-1)
    with pytest.raises(rayq.InvalidMessageError):  # over the store's max_message_size_bytes
        put(ipc(pa.table({"body": [b"x" * (1 << 20)]})), first_sequence=7)
    two_batches_then_a_bad_row = pa.table({"body": [b"y" * 15_000] * 300 + [b"z" * (1 << 20)]})
    with pytest.raises(rayq.InvalidMessageError):  # all encoded before any is appended
        put(ipc(two_batches_then_a_bad_row), first_sequence=7)
    assert stored() == 7

    # A call that starts before an earlier one of its producer waits for it (Ray does not
    # order an async actor's calls); one whose earlier batch never comes is refused.
    ahead = put_call(ipc(pa.table({"body": [b"m8"]})), first_sequence=8)
    time.sleep(0.3)
    assert put(ipc(pa.table({"body": [b"m7"]})), first_sequence=7) == {"rows": 1}
    assert json.loads(ray.get(ahead, timeout=30)) == {"rows": 1}
    got = rayq.connectors.ray_data.read_topic("jvm-sink", namespace=NAMESPACE).take_all()
    assert [r["body"] for r in got][-2:] == [b"m7", b"m8"]
    with pytest.raises(rayq.BrokerBusyError, match="out of order"):
        put(ipc(more), first_sequence=20)
    assert stored() == 9
