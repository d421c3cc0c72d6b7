"""Arrow batches to and from brokers, for code running inside Spark or Ray Data tasks.

Spark's Python workers are not Ray workers: ``ensure_ray`` connects such a process
to the driver's Ray cluster once (later calls are free) and brokers are looked up
by name there (an actor handle captured in a closure does not deserialize in a
Spark worker). Ray tasks (Ray Data) are connected already.

``read_range`` yields a queue range as ``SCHEMA`` record batches, one broker page
(``PAGE_BYTES`` of records) at a time, asking for the next page before handing out
the current one. ``write_batches`` sends a task's rows to one queue as idempotent
puts: producer id fixed per (write, partition), sequence numbers counted over the
partition's rows, batches cut by a deterministic rule, so a re-run task re-sends
exactly the same (producer id, sequence) batches and the broker drops the ones it
has. Rows are encoded column-wise (store/arrow_encode.py) into puts of up to
``PUT_BYTES`` of records, joined across input batches (a properties column too:
``properties_text``). A null body raises before the batch holding it is encoded
(callers that must write nothing check every batch first: ``check_bodies``). The
producer's sender (produce_sender.py) sends them, ``MAX_PUTS_IN_FLIGHT`` at a time,
under its retry policy with ``PUT_ATTEMPTS`` attempts: a failed put is sent again to
the same queue, with the puts behind it, in order.

A row's properties (a ``properties_col``) may not set the names the producer or the
broker set (produce_validation.py): those a read returns (TAGS, KEYS, UNIQ_KEY,
PGROUP, __PID, __PSEQ, __SHARDINGKEY, WAIT, RETRY_TOPIC, ORIGIN_MESSAGE_ID,
DLQ_ORIGIN_*, RECONSUME_TIME, MAX_RECONSUME_TIMES) are dropped, so that rows read from
rayq can be written back; the others (DELAY, __DELIVER_AT_MS, REAL_TOPIC, REAL_QID)
raise InvalidMessageError, as does a name given twice in one row.

With ACL on, tasks sign their broker calls: the driver hands a task the user's
``Credentials`` (``ClientConfig.credentials``) and ``read_range`` / ``write_batches``
wrap each broker client with a ``Signer`` made once per task (actors/auth.py), as
``ClientContext.broker`` does for the other clients. ``None`` sends unsigned requests.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Final, TypeVar

import msgspec
import numpy as np
import pyarrow as pa
import ray

from rayq.actors.auth import Credentials, Signer
from rayq.actors.config import ClientConfig
from rayq.actors.protocol import ArrowPage, MessageQueue, ReadArrowRequest
from rayq.actors.server.columnar import SCHEMA, from_ipc
from rayq.actors.server.dedupe import sequence_properties
from rayq.ranges import OffsetRange
from rayq.ray_transport import RayTransport
from rayq.store import properties as P
from rayq.store.arrow_encode import (
    ArrowRows,
    arrow_rows,
    cuts,
    encode_rows,
    properties_text,
    record_bounds,
    sequence_ids,
)
from rayq.store.errors import BrokerUnavailableError, InvalidMessageError
from rayq.transport import BrokerClient, Reply

from .produce_accumulator import Put
from .produce_sender import RetryPolicy, Sender
from .produce_validation import READ_BACK_PROPERTIES, RESERVED_PROPERTIES, check_topic

logger = logging.getLogger(__name__)

PAGE_BYTES: Final[int] = 4 * 1024 * 1024
PUT_BYTES: Final[int] = ClientConfig().batch_max_bytes  # records per column-wise put
MAX_PUTS_IN_FLIGHT: Final[int] = 4
PUT_ATTEMPTS: Final[int] = 5
CALL_TIMEOUT_S: Final[float] = 60.0
MAX_BODY_BYTES: Final[int] = 4 * 1024 * 1024
MAX_PROPERTIES_BYTES: Final[int] = 32 * 1024

# Reserved names a properties column may not set (those a read returns are dropped).
_REFUSED: Final[dict[str, str]] = {
    name: f"{why}; remove it from the properties column (Arrow writes do not schedule delivery)"
    for name, why in RESERVED_PROPERTIES.items()
    if name not in READ_BACK_PROPERTIES
}

_lock = threading.Lock()
_transports: dict[str, RayTransport] = {}
T = TypeVar("T")


def ensure_ray(address: str | None, namespace: str) -> None:
    """Connect this process to Ray once (no-op in Ray workers and drivers)."""
    if ray.is_initialized():
        return
    with _lock:
        if not ray.is_initialized():
            ray.init(address=address, namespace=namespace, log_to_driver=False,
                     logging_level=logging.WARNING, configure_logging=False)  # fmt: skip


def broker_handle(
    namespace: str, broker: str, *, refresh: bool = False, signer: Signer | None = None
) -> BrokerClient:
    """The broker's client, through this process's transport for ``namespace``; its
    requests signed by ``signer`` if given."""
    client = _unsigned_handle(namespace, broker, refresh)
    if signer is None:
        return client
    return BrokerClient(signer.wrap(client._invoke))


def _signer(credentials: Credentials | None) -> Signer | None:
    return None if credentials is None else Signer(credentials)


def _unsigned_handle(namespace: str, broker: str, refresh: bool) -> BrokerClient:
    with _lock:
        transport = _transports.get(namespace)
        if transport is None:
            transport = _transports[namespace] = RayTransport(namespace)
    if refresh:
        transport.forget(broker)
    try:
        return transport.broker(broker)
    except BrokerUnavailableError:
        raise BrokerUnavailableError(
            f"broker {broker!r} is not running in namespace {namespace!r}: its queues "
            "cannot be read or written now", broker=broker,
        ) from None  # fmt: skip


def _get(reply: Reply[T], broker: str) -> T:
    try:
        return reply.result(CALL_TIMEOUT_S)
    except BrokerUnavailableError as err:
        raise BrokerUnavailableError(f"broker {broker!r} is unavailable: {err}",
                                     broker=broker) from None  # fmt: skip


# ------------------------------------------------------------------ read
def read_range(
    topic: str,
    r: OffsetRange,
    namespace: str,
    page_bytes: int = PAGE_BYTES,
    *,
    credentials: Credentials | None = None,
) -> Iterator[pa.RecordBatch]:
    """The records of ``r`` as ``SCHEMA`` batches (nothing for an empty range); each
    page request signed with ``credentials`` if given."""
    if r.start >= r.end:
        return
    handle = broker_handle(namespace, r.broker, signer=_signer(credentials))
    offset = r.start

    def ask(start: int) -> Reply[ArrowPage]:
        return handle.read_arrow(ReadArrowRequest(topic=topic, queue_id=r.queue_id, start=start,
                                                  end=r.end, max_bytes=page_bytes))  # fmt: skip

    ref = ask(offset)
    while True:
        page = _get(ref, r.broker)
        nxt = page.next_offset
        if nxt <= offset:
            raise BrokerUnavailableError(
                f"{topic}/{r.queue_id} on broker {r.broker!r} stopped at offset {offset} before "
                f"the planned end {r.end}", broker=r.broker,
            )  # fmt: skip
        offset = nxt
        if offset < r.end:  # ask for the next page while this one is handed out
            ref = ask(offset)
        yield from [page.batch] if page.batch is not None else from_ipc(page.data)
        if offset >= r.end:
            return


# ----------------------------------------------------------------- write
class Columns(msgspec.Struct, frozen=True):
    """Which input columns make up a message."""

    body: str
    keys: str | None = None
    tags: str | None = None
    properties: str | None = None


def check_columns(schema: pa.Schema, cols: Columns) -> None:
    """InvalidMessageError for a missing column or one of the wrong type."""
    wanted = {
        cols.body: ("body_col", (pa.types.is_binary, pa.types.is_large_binary, pa.types.is_string,
                                 pa.types.is_large_string), "binary or string"),
        cols.keys: ("keys_col", (pa.types.is_string, pa.types.is_large_string, _is_str_list),
                    "string or array<string>"),
        cols.tags: ("tags_col", (pa.types.is_string, pa.types.is_large_string), "string"),
        cols.properties: ("properties_col", (_is_str_map,), "map<string, string>"),
    }  # fmt: skip
    for name, (arg, tests, kind) in wanted.items():
        if name is None:
            continue
        if name not in schema.names:
            raise InvalidMessageError(f"{arg}={name!r}: no such column; columns are "
                                      f"{schema.names}", column=name)  # fmt: skip
        typ = schema.field(name).type
        if not any(t(typ) for t in tests):
            raise InvalidMessageError(f"{arg}={name!r} must be {kind}, got {typ}", column=name)


def _is_str_list(t: pa.DataType) -> bool:
    return pa.types.is_list(t) and pa.types.is_string(t.value_type)


def _is_str_map(t: pa.DataType) -> bool:
    return (pa.types.is_map(t) and pa.types.is_string(t.key_type)
            and pa.types.is_string(t.item_type))  # fmt: skip


def write_batches(
    batches: Iterable[pa.RecordBatch],
    topic: str,
    broker: str,
    queue_id: int,
    producer_id: str,
    cols: Columns,
    namespace: str,
    group: str,
    *,
    credentials: Credentials | None = None,
) -> int:
    """Send every row to ``broker``/``queue_id`` idempotently (puts signed with
    ``credentials`` if given); returns the rows sent."""
    check_topic(topic)
    policy = RetryPolicy(attempts=PUT_ATTEMPTS, timeout_s=CALL_TIMEOUT_S, backoff_s=0.5)
    brokers = _NamedBrokers(namespace, _signer(credentials))
    sender = Sender(f"write-{producer_id}", policy, lambda: brokers)
    queue = MessageQueue(topic, broker, queue_id)
    puts = _puts(batches, queue, producer_id, cols, group)
    return sum(put.batch.count for put, _ in sender.pipeline(puts, MAX_PUTS_IN_FLIGHT))  # type: ignore[union-attr]


def check_bodies(batch: pa.RecordBatch | pa.Table, cols: Columns) -> None:
    """InvalidMessageError for a null body (before anything is sent)."""
    body = batch.column(cols.body)
    if body.null_count:
        raise InvalidMessageError(
            f"column {cols.body!r} has {body.null_count} null bodies in {len(body)} rows; a "
            "message needs one: fill them or filter them out (nothing was written)",
            column=cols.body,
        )  # fmt: skip


def _puts(batches: Iterable[pa.RecordBatch], queue: MessageQueue, producer_id: str,
          cols: Columns, group: str) -> Iterator[Put]:  # fmt: skip
    """The rows as idempotent puts of at most ``PUT_BYTES`` of records (a larger record
    alone), cut from the rows of consecutive input batches by a deterministic rule
    (arrow_encode.cuts over upper bounds of the record sizes), each encoded column-wise."""
    other = len(P.encode_properties(_widest_properties(producer_id, group)).encode())
    pending: list[ArrowRows] = []  # rows not put yet, as they came (zero-copy slices)
    pending_bounds: list[np.ndarray] = []
    seq = 0
    for batch in batches:
        if batch.num_rows == 0:
            continue
        check_bodies(batch, cols)
        rows = arrow_rows(batch.column(cols.body), _column(batch, cols.tags),
                          _column(batch, cols.keys))  # fmt: skip
        if cols.properties is not None:
            own = properties_text(batch.column(cols.properties), READ_BACK_PROPERTIES, _REFUSED)
            rows = rows._replace(properties=own)
        pending.append(rows)
        pending_bounds.append(record_bounds(rows, queue.topic, other))
        if sum(int(b.sum()) for b in pending_bounds) < PUT_BYTES:
            continue
        bounds = np.concatenate(pending_bounds)
        pieces = cuts(bounds, PUT_BYTES)
        for start, stop in pieces[:-1]:
            yield _column_put(_rows_between(pending, start, stop), queue, producer_id, seq, group)
            seq += stop - start
        start, stop = pieces[-1]
        pending, pending_bounds = _parts_between(pending, start, stop), [bounds[start:stop]]
    if pending:
        bounds = np.concatenate(pending_bounds)
        for start, stop in cuts(bounds, PUT_BYTES):
            yield _column_put(_rows_between(pending, start, stop), queue, producer_id, seq, group)
            seq += stop - start


def _column(batch: pa.RecordBatch, name: str | None) -> pa.Array | None:
    return None if name is None else batch.column(name)


def _parts_between(parts: list[ArrowRows], start: int, stop: int) -> list[ArrowRows]:
    """Rows ``start .. stop - 1`` of the parts taken as one, as zero-copy slices of them."""
    out, at = [], 0
    for part in parts:
        n = len(part.bodies)
        lo, hi = max(start, at), min(stop, at + n)
        if lo < hi:
            out.append(part.slice(lo - at, hi - at))
        at += n
    return out


def _rows_between(parts: list[ArrowRows], start: int, stop: int) -> ArrowRows:
    """Rows ``start .. stop - 1`` of the parts taken as one: copied only when they span
    two parts (a piece inside one input batch is a slice of it)."""
    inside = _parts_between(parts, start, stop)
    if len(inside) == 1:
        return inside[0]
    columns = zip(*inside, strict=True)
    return ArrowRows(*(None if c[0] is None else pa.concat_arrays(list(c)) for c in columns))


def _widest_properties(producer_id: str, group: str) -> dict[str, str]:
    """A record's properties besides TAGS and KEYS with the longest sequence numbers."""
    widest = 2**63 - 1
    return {P.UNIQ_KEY: f"{producer_id}-{widest}", P.PRODUCER_GROUP: group,
            **sequence_properties(producer_id, widest, widest)}  # fmt: skip


def _column_put(rows: ArrowRows, queue: MessageQueue, producer_id: str, first: int,
                group: str) -> Put:  # fmt: skip
    """One idempotent put; message ids are ``<producer id>-<sequence>`` (the same on
    every attempt)."""
    n = len(rows.bodies)
    shared = {P.PRODUCER_GROUP: group, **sequence_properties(producer_id, first, first + n - 1)}
    batch = encode_rows(rows, topic=queue.topic, queue_id=queue.queue_id,
                        uniq_keys=sequence_ids(f"{producer_id}-", first, n), properties=shared,
                        born_timestamp=time.time_ns() // 1_000_000, max_body_bytes=MAX_BODY_BYTES,
                        max_properties_bytes=MAX_PROPERTIES_BYTES)  # fmt: skip
    batch = msgspec.structs.replace(batch, producer_id=producer_id, first_sequence=first)
    return Put(queue, batch=batch, fixed="idempotent writes never move to another queue")


class _NamedBrokers:
    """Broker handles looked up by name in ``namespace`` (no coordinator needed), signed
    by ``signer`` if given."""

    def __init__(self, namespace: str, signer: Signer | None = None) -> None:
        self.namespace = namespace
        self._signer = signer

    def broker(self, broker_name: str) -> BrokerClient:
        return broker_handle(self.namespace, broker_name, signer=self._signer)

    def forget(self, broker_name: str) -> None:
        with _lock:
            transport = _transports.get(self.namespace)
        if transport is not None:
            transport.forget(broker_name)


__all__ = [
    "SCHEMA",
    "Columns",
    "check_bodies",
    "check_columns",
    "ensure_ray",
    "read_range",
    "write_batches",
]
