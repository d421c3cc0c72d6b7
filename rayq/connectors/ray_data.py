"""Ray Data without Spark: a topic as a Dataset source and sink.

    import rayq.data
    ds = rayq.data.read_topic("orders", starting="earliest", ending="latest")
    ds.write_datasink(rayq.data.TopicDatasink("results", body_col="body"))

``read_topic`` plans offset ranges on the driver (rayq/connectors/ranges.py, same specs as
``rayq.spark.read``); each read task reads one range from its broker, one page
(``arrow_io.PAGE_BYTES`` of records) per block, so ``iter_batches()`` streams: a page
is asked for while the one before it is handed on, and Ray Data's backpressure
stops a task that runs ahead of its consumer. A page is a record batch the broker
builds column-wise (actors/server/columnar.py) and Ray hands over through the
object store without re-encoding it. A read task's metadata carries the exact row
count (a range of a queue holds exactly ``end - start`` messages).

``TopicDatasink`` writes each write task's rows to one queue with idempotent puts
(producer id per write and task, sequence per row), like ``rayq.spark.write``. With
ACL on, ``config=ClientConfig(credentials=...)`` signs the planning calls on the
driver and every task's broker calls (the credentials travel to the tasks; the
secret never shows in a repr or a task name).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa
import ray
from ray.data.block import BlockMetadata
from ray.data.datasource import Datasink, Datasource, ReadTask

from rayq.actors.protocol.config import ClientConfig
from rayq.connectors.arrow_io import (
    PAGE_BYTES,
    SCHEMA,
    Columns,
    check_bodies,
    check_columns,
    read_range,
    write_batches,
)
from rayq.connectors.ranges import DEFAULT_MAX_MESSAGES_PER_PARTITION, OffsetRange, plan_ranges
from rayq.store.errors import ConfigError, InvalidMessageError
from rayq.store.names import validate_group, validate_topic
from rayq.transport.context import ClientContext
from rayq.transport.namespace import current_namespace

AVG_ROW_OVERHEAD_BYTES = 200
PAGE_BYTES_MAX = 1 << 30  # ReadArrowRequest.max_bytes


class TopicDatasource(Datasource):
    """Messages of a topic between two offset specs; ranges fixed at construction. A read
    task yields one block per broker page of about ``page_bytes`` of records."""

    def __init__(
        self,
        topic: str,
        starting: object = "earliest",
        ending: object = "latest",
        *,
        max_messages_per_partition: int = DEFAULT_MAX_MESSAGES_PER_PARTITION,
        namespace: str | None = None,
        config: ClientConfig | None = None,
        page_bytes: int = PAGE_BYTES,
    ) -> None:
        super().__init__()
        self.topic = validate_topic(topic)
        if type(page_bytes) is not int or not 1 <= page_bytes <= PAGE_BYTES_MAX:
            raise ConfigError(
                f"page_bytes must be an int in 1..{PAGE_BYTES_MAX} (bytes of records per "
                f"block), got {page_bytes!r}",
                value=page_bytes,
                limit=PAGE_BYTES_MAX,
            )
        self.page_bytes = page_bytes
        ctx = ClientContext(config, namespace)
        self.namespace = ctx.namespace
        self.credentials = ctx.config.credentials
        self.ranges = plan_ranges(ctx, topic, starting, ending, max_messages_per_partition)

    def estimate_inmemory_data_size(self) -> int | None:
        return None

    def get_read_tasks(
        self,
        parallelism: int,
        per_task_row_limit: int | None = None,  # not used: a task reads its whole range
        data_context: object = None,
        **_: Any,
    ) -> list[ReadTask]:
        topic, ns, credentials = self.topic, self.namespace, self.credentials
        page_bytes = self.page_bytes

        def task(r: OffsetRange) -> ReadTask:
            def read() -> Iterator[pa.Table]:
                # One block per broker page, read as the block before it is handed on:
                # a consumer of iter_batches() holds a few pages, never the whole range.
                empty = True
                for batch in read_range(topic, r, ns, page_bytes, credentials=credentials):
                    empty = False
                    yield pa.Table.from_batches([batch], schema=SCHEMA)
                if empty:
                    yield SCHEMA.empty_table()

            meta = BlockMetadata(
                num_rows=r.count, size_bytes=None, input_files=None, exec_stats=None
            )
            return ReadTask(read, meta, schema=SCHEMA)

        return [task(r) for r in self.ranges]

    def get_name(self) -> str:
        return f"Rayq({self.topic})"


def read_topic(
    topic: str,
    starting: object = "earliest",
    ending: object = "latest",
    *,
    max_messages_per_partition: int = DEFAULT_MAX_MESSAGES_PER_PARTITION,
    namespace: str | None = None,
    config: ClientConfig | None = None,
    page_bytes: int = PAGE_BYTES,
) -> ray.data.Dataset:
    """A Dataset of the messages of ``topic`` (columns as ``rayq.spark.read``), one block
    per broker page of about ``page_bytes`` of records (the dataset's
    ``context.target_max_block_size`` is lowered to that, so a page is handed on as soon
    as it is read); with ACL on, ``config=ClientConfig(credentials=...)`` signs every
    broker call."""
    source = TopicDatasource(
        topic,
        starting,
        ending,
        namespace=namespace,
        config=config,
        page_bytes=page_bytes,
        max_messages_per_partition=max_messages_per_partition,
    )
    if not source.ranges:
        return ray.data.from_arrow(SCHEMA.empty_table())
    dataset = ray.data.read_datasource(source, override_num_blocks=len(source.ranges))
    # Ray Data buffers a read task's output into blocks of target_max_block_size (128 MiB
    # by default: a whole range); at the page size each page goes on as it is read.
    context = dataset.context
    context.target_max_block_size = min(context.target_max_block_size or page_bytes, page_bytes)
    return dataset


class TopicDatasink(Datasink):
    """Writes rows to a topic: ``ds.write_datasink(TopicDatasink("results"))``; with ACL
    on, ``config=ClientConfig(credentials=...)`` signs the puts."""

    def __init__(
        self,
        topic: str,
        body_col: str = "body",
        keys_col: str | None = None,
        tags_col: str | None = None,
        properties_col: str | None = None,
        *,
        group: str = "rayq-data-writer",
        namespace: str | None = None,
        config: ClientConfig | None = None,
    ) -> None:
        self.topic = validate_topic(topic)
        self.group = validate_group(group)
        self.cols = Columns(body_col, keys_col, tags_col, properties_col)
        ctx = ClientContext(config, namespace)
        self.namespace = ctx.namespace or current_namespace()
        self.credentials = ctx.config.credentials  # the puts' signer, in each write task
        queues = sorted(ctx.write_queues(topic, refresh=True))
        if not queues:
            raise InvalidMessageError(f"topic {topic!r} has no writeable queue")
        self.targets = sorted(
            ((q.broker_name, q.queue_id) for q in queues), key=lambda t: (t[1], t[0])
        )
        self.write_id = uuid.uuid4().hex[:12]
        self.rows_written = 0

    def on_write_start(self, schema: pa.Schema | None = None) -> None:
        if schema is not None:
            check_columns(schema, self.cols)

    def write(self, blocks: Iterable[Any], ctx: Any) -> int:
        from ray.data.block import BlockAccessor

        idx = ctx.task_idx
        broker, qid = self.targets[idx % len(self.targets)]
        tables = [_checked(BlockAccessor.for_block(b).to_arrow(), self.cols) for b in blocks]
        batches = (b for t in tables for b in t.to_batches())  # all checked before a put
        return write_batches(
            batches,
            self.topic,
            broker,
            qid,
            f"data-{self.write_id}-{idx}",
            self.cols,
            self.namespace,
            self.group,
            credentials=self.credentials,
        )

    def on_write_complete(self, write_result: Any) -> None:
        self.rows_written = sum(write_result.write_returns)

    def get_name(self) -> str:
        return f"Rayq({self.topic})"


def _checked(table: pa.Table, cols: Columns) -> pa.Table:
    check_columns(table.schema, cols)
    check_bodies(table, cols)
    return table


__all__ = ["TopicDatasink", "TopicDatasource", "read_topic"]
