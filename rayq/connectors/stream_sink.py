"""The planning half of Spark's Structured Streaming sink (``writeStream.format("rayq")``),
and the write plan it shares with ``rayq.spark.write``.

Spark's micro-batch engine drives rayq's JVM sink (connectors/jvm ``RayqStreamingWrite``,
whose tasks write with ``RayqWriter`` as ``write`` does), which asks this module, through
the driver's bridge (connectors/spark_bridge.py), for:

* ``sink.check``, at ``start()`` (before the query runs): the options, the query's
  columns against them (``body``, and ``keys``, ``tags``, ``properties`` when given,
  typed as ``write``'s), the topic (it must exist and have write queues), and, with
  one empty put per broker, that its brokers take the sink's puts (ACL: the options
  ``accessKey``/``secretKey`` name an account with PUB on the topic). Nothing is
  written.
* ``sink.plan``, for every micro-batch (when Spark makes the batch's writer factory):
  the queue of each partition (``write_targets``: partition p writes to queue
  p mod n of the topic's write queues, interleaved over brokers, so a partition
  maps to the same queue while the topic keeps its queues), the broker's Ray node
  (rows handed over in shared memory on that node) and, with ACL on, a write grant per
  partition, signed here (``WriteGrant``: the JVM does not sign).

Exactly once: partition p of micro-batch b of query q writes as the idempotent producer
``spark-<q>-<p>~<b>``, epoch b of the producer ``spark-<q>-<p>`` (actors/server/dedupe.py),
its rows numbered from 0 in the order the partition yields them. Spark keeps the query
id in the checkpoint (``LogicalWriteInfo.queryId`` is ``StreamingQuery.id``) and re-runs
an unfinished batch with its batch id, so the broker drops whatever a re-run task or
batch had appended already, and the broker keeps one entry per partition and queue for
the whole query. ``write(df, topic, write_id=..., batch_id=...)`` uses the same ids for
batch jobs and ``foreachBatch``.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
from collections.abc import Mapping
from typing import Any, Final

import msgspec
import pyarrow as pa
import ray

from rayq.actors.protocol import (
    ClientRequest,
    MessageQueue,
    WriteGrant,
    broker_actor_name,
)
from rayq.actors.protocol.auth import Credentials, Signer
from rayq.actors.protocol.config import ClientConfig
from rayq.actors.protocol.rows import SHARED_DIR
from rayq.connectors import spark_bridge
from rayq.connectors.arrow_io import MAX_PUTS_IN_FLIGHT, PUT_ATTEMPTS
from rayq.store.arrow_puts import Columns, check_columns
from rayq.store.errors import ConfigError, InvalidMessageError, TopicNotFoundError
from rayq.store.names import validate_group, validate_topic
from rayq.store.properties import EPOCH_MARK
from rayq.transport.context import ClientContext
from rayq.transport.ray_actors import RayReply

logger = logging.getLogger(__name__)

# Arrow bytes per put of rayq's Spark sink (the broker cuts them into batches of
# ClientConfig.batch_max_bytes of records: actors/broker.py put_arrow).
JVM_PUT_BYTES: Final[int] = 8 * 1024 * 1024
DEFAULT_GROUP: Final[str] = "rayq-spark-writer"
PROBE_TIMEOUT_S: Final[float] = 30.0
# A write id is part of producer ids (``spark-<write id>-<partition>~<batch>``, at most
# 128 characters): letters, digits, '.', '_' and '-' (a Spark query id is a UUID).
_WRITE_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
_ROLES: Final[tuple[str, ...]] = ("body", "keys", "tags", "properties")
_OPTION_NAMES: Final[frozenset[str]] = frozenset(
    {"topic", "namespace", "accesskey", "secretkey", "group", "putbytes", *_ROLES}
)
# Spark's own options of a writeStream (passed to the sink with the user's)
_SPARK_OPTIONS: Final[frozenset[str]] = frozenset({"checkpointlocation", "path", "queryname"})


# ------------------------------------------------------------------ write plans
def check_write_id(write_id: object) -> str:
    """``write_id`` as producer ids can carry it; ConfigError otherwise."""
    if not isinstance(write_id, str) or not _WRITE_ID.fullmatch(write_id):
        raise ConfigError(
            "write_id must be 1..64 letters, digits, '.', '_' or '-' (it names the write's "
            f"idempotent producers), got {write_id!r}"
        )
    return write_id


def producer_id(write_id: str, partition: int, batch_id: int | None = None) -> str:
    """The idempotent producer of ``partition`` of a write: ``spark-<write id>-<p>``, or
    epoch ``batch_id`` of it (``spark-<write id>-<p>~<batch id>``)."""
    family = f"spark-{write_id}-{partition}"
    return family if batch_id is None else f"{family}{EPOCH_MARK}{batch_id}"


def write_targets(queues: list[MessageQueue]) -> list[tuple[str, int]]:
    """The queues partitions write to, in order (partition p: entry p mod n): sorted by
    queue id, then broker, so consecutive partitions go to different brokers."""
    return sorted(((q.broker_name, q.queue_id) for q in queues), key=lambda t: (t[1], t[0]))


def broker_nodes(ctx: ClientContext) -> dict[str, str]:
    """The Ray node of each live master (where a JVM task on the same node hands its rows
    over in shared memory: actors/server/shared_rows.py)."""
    req = ClientRequest(client_id=ctx.client_id)
    entries = ctx.coordinator.broker_table(req).result(ctx.timeout_s).brokers
    return {e.broker_name: e.node_id for e in entries if e.broker_id == 0 and not e.lost}


def jvm_write_options(
    namespace: str,
    topic: str,
    group: str,
    write_id: str,
    targets: list[list[Any]],
    cols: Columns,
    put_bytes: int = JVM_PUT_BYTES,
) -> dict[str, str]:
    """The options of rayq's JVM writer (connectors/jvm ``RayqWriter``): ``targets`` per
    partition ``[broker actor, queue id, its node, write grant JSON or ""]``."""
    return {
        "namespace": namespace,
        "topic": topic,
        "group": group,
        "write_id": write_id,
        "targets": json.dumps(targets),
        "put_bytes": str(put_bytes),
        "rows_dir": SHARED_DIR if os.path.isdir(SHARED_DIR) else "",
        "in_flight": str(MAX_PUTS_IN_FLIGHT),
        "attempts": str(PUT_ATTEMPTS),
        **{role: name for role, name in msgspec.structs.asdict(cols).items() if name is not None},
    }


def arrow_schema_of(schema: Any) -> pa.Schema:
    """The Arrow types of a Spark schema's columns, as far as a write cares (the types
    it accepts map exactly; anything else maps to a stand-in named after it)."""
    from pyspark.sql import types as T

    def arrow(t: Any) -> pa.DataType:
        if isinstance(t, T.BinaryType):
            return pa.binary()
        if isinstance(t, T.StringType):
            return pa.string()
        if isinstance(t, T.ArrayType):
            return pa.list_(arrow(t.elementType))
        if isinstance(t, T.MapType):
            return pa.map_(arrow(t.keyType), arrow(t.valueType))
        return pa.struct([(t.simpleString(), pa.null())])  # fails every check, by name

    return pa.schema([(f.name, arrow(f.dataType)) for f in schema.fields])


# ------------------------------------------------------------------ the sink
class SinkOptions(msgspec.Struct, frozen=True):
    """The sink's options, checked (Spark passes them as strings, any case)."""

    topic: str
    columns: Columns
    namespace: str | None = None
    credentials: Credentials | None = None
    group: str = DEFAULT_GROUP
    put_bytes: int = JVM_PUT_BYTES


def parse_sink_options(raw: Mapping[str, str]) -> SinkOptions:
    """``raw`` (a writeStream's options) checked; ConfigError names a bad one."""
    opts = {k.lower(): v for k, v in raw.items()}
    unknown = sorted(set(opts) - _OPTION_NAMES - _SPARK_OPTIONS)
    if unknown:
        logger.warning("rayq sink: options %s are not the sink's; ignored", unknown)
    topic = opts.get("topic", "").strip()
    if not topic:
        raise ConfigError("rayq sink: the option topic (the topic to write to) is missing")
    access, secret = opts.get("accesskey"), opts.get("secretkey")
    if (access is None) != (secret is None):
        raise ConfigError("rayq: give both accessKey and secretKey (ACL credentials), or neither")
    for role in _ROLES:
        name = opts.get(role)
        if name is not None and not name.strip():
            raise ConfigError(f"rayq sink: the option {role} must name a column, got {name!r}")
    columns = Columns(
        opts.get("body", "body"), opts.get("keys"), opts.get("tags"), opts.get("properties")
    )
    put_bytes = opts.get("putbytes", str(JVM_PUT_BYTES))
    if not put_bytes.strip().isdigit() or not 1 <= int(put_bytes) <= 1 << 30:
        raise ConfigError(f"rayq sink: putBytes must be an integer in 1..2^30, got {put_bytes!r}")
    credentials = None
    if access and secret is not None:
        credentials = Credentials(access_key=access, secret_key=secret)
    return SinkOptions(
        topic=validate_topic(topic),
        columns=columns,
        namespace=opts.get("namespace") or None,
        credentials=credentials,
        group=validate_group(opts.get("group", DEFAULT_GROUP)),
        put_bytes=int(put_bytes),
    )


def check_sink_columns(schema: pa.Schema, cols: Columns) -> None:
    """``check_columns`` in the sink's words: its options name the columns."""
    try:
        check_columns(schema, cols)
    except InvalidMessageError as exc:
        text = str(exc)
        for role in _ROLES:
            text = text.replace(f"{role}_col=", f"option {role}=")
        raise InvalidMessageError(f"rayq sink: {text}", **exc.details) from None


class SinkPlanner:
    """The answers one streaming sink gets (one per option set; see the module doc)."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options
        config = ClientConfig(credentials=options.credentials) if options.credentials else None
        self.ctx = ClientContext(config, options.namespace)
        self._signer = Signer(options.credentials) if options.credentials else None

    def targets(self) -> list[tuple[str, int]]:
        """The topic's write queues in partition order (it must exist: a sink does not
        create topics)."""
        topic = self.options.topic
        route = self.ctx.route(topic, refresh=True)
        if route is None:
            raise TopicNotFoundError(
                f"rayq sink: topic {topic!r} does not exist (create it first)", topic=topic
            )
        targets = write_targets(route.write_queues())
        if not targets:
            raise InvalidMessageError(f"rayq sink: topic {topic!r} has no writeable queue")
        return targets

    def check(self, schema: pa.Schema) -> None:
        """What ``start()`` checks (the module doc): nothing is written."""
        check_sink_columns(schema, self.options.columns)
        first: dict[str, int] = {}
        for broker, qid in self.targets():
            first.setdefault(broker, qid)
        for broker, qid in sorted(first.items()):
            self._probe(broker, qid)

    def _probe(self, broker: str, queue_id: int) -> None:
        """An empty put to ``broker``'s queue, as the tasks' puts go (by the broker's
        actor name, with the grant ACL needs): raises what the broker refuses."""
        pid = producer_id("check", 0)
        body = self.options.columns.body
        req = {
            "topic": self.options.topic,
            "queue_id": queue_id,
            "producer_id": pid,
            "first_sequence": 0,
            "group": self.options.group,
            "body": body,
        }
        grant = self._grant(queue_id, pid)
        if grant:
            req["grant"] = json.loads(grant)
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, pa.schema([(body, pa.binary())])):
            pass  # a stream with the schema and no batch: no rows
        actor = ray.get_actor(broker_actor_name(broker), namespace=self.ctx.namespace)
        ref: Any = actor.put_arrow.remote(json.dumps(req).encode(), sink.getvalue().to_pybytes())
        RayReply(ref).result(PROBE_TIMEOUT_S)

    def plan(self, query_id: str, partitions: int) -> dict[str, str]:
        """A micro-batch's writer options (``jvm_write_options``), for ``partitions``
        partitions of the query ``query_id``."""
        write_id = check_write_id(query_id)
        targets = self.targets()
        nodes = broker_nodes(self.ctx)
        plan = []
        for p in range(max(partitions, 1)):
            broker, qid = targets[p % len(targets)]
            grant = self._grant(qid, producer_id(write_id, p))
            plan.append([broker_actor_name(broker), qid, nodes.get(broker, ""), grant])
        return jvm_write_options(
            self.ctx.namespace,
            self.options.topic,
            self.options.group,
            write_id,
            plan,
            self.options.columns,
            self.options.put_bytes,
        )

    def _grant(self, queue_id: int, producer: str) -> str:
        """A signed grant to append to ``queue_id`` as ``producer`` and its epochs (ACL),
        as JSON; "" without credentials."""
        if self._signer is None:
            return ""
        grant = WriteGrant(topic=self.options.topic, queue_id=queue_id, producer_id=producer)
        return msgspec.json.encode(self._signer.sign("write_grant", grant)).decode()


_planners: dict[str, SinkPlanner] = {}
_lock = threading.Lock()


def planner(options: dict[str, str]) -> SinkPlanner:
    """The planner of one option set (a query's calls reuse its client context)."""
    key = json.dumps(options, sort_keys=True)
    with _lock:
        found = _planners.get(key)
        if found is None:
            found = _planners[key] = SinkPlanner(parse_sink_options(options))
        return found


@spark_bridge.handler("sink.check")
def _check(bridge: Any, options: dict[str, str], args: dict[str, Any]) -> None:
    from pyspark.sql.types import StructType

    sink = planner(options)  # the options first: ConfigError names a bad one
    sink.check(arrow_schema_of(StructType.fromJson(json.loads(args["schema"]))))


@spark_bridge.handler("sink.plan")
def _plan(bridge: Any, options: dict[str, str], args: dict[str, Any]) -> dict[str, str]:
    return planner(options).plan(str(args["query_id"]), int(args["partitions"]))


__all__ = [
    "JVM_PUT_BYTES",
    "SinkOptions",
    "SinkPlanner",
    "arrow_schema_of",
    "broker_nodes",
    "check_write_id",
    "jvm_write_options",
    "parse_sink_options",
    "producer_id",
    "write_targets",
]
