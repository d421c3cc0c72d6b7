"""Arrow record batches as idempotent commit-log batches, column-wise.

What a writer of Arrow rows sends: the Spark and Ray Data writers in Python tasks
(rayq/connectors/arrow_io.py) and the broker's ``put_arrow`` (the rows Spark's JVM sends:
rayq/connectors/jvm). ``encoded_puts`` cuts a stream of record batches into batches of at most
``put_bytes`` of records by a deterministic rule over the rows alone (so a re-run
Spark task cuts the same batches), numbers the rows from 0 (the idempotent sequence
numbers of one producer id: actors/server/dedupe.py) and encodes each batch with
``arrow_encode.encode_rows``.

A row's properties (a ``properties`` column) may not set the names the producer or the
broker set (``properties.RESERVED_PROPERTIES``): those a read returns (TAGS, KEYS,
UNIQ_KEY, PGROUP, __PID, __PSEQ, __SHARDINGKEY, WAIT, RETRY_TOPIC, ORIGIN_MESSAGE_ID,
DLQ_ORIGIN_*, RECONSUME_TIME, MAX_RECONSUME_TIMES) are dropped, so that rows read from
rayq can be written back; the others (DELAY, __DELIVER_AT_MS, REAL_TOPIC, REAL_QID)
raise InvalidMessageError, as does a name given twice in one row.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import Final

import msgspec
import numpy as np
import pyarrow as pa

from . import properties as P
from .arrow_encode import (
    ArrowRows,
    arrow_rows,
    cuts,
    encode_rows,
    properties_text,
    record_bounds,
    sequence_ids,
)
from .batch import EncodedBatch
from .errors import InvalidMessageError

MAX_BODY_BYTES: Final[int] = 4 * 1024 * 1024
MAX_PROPERTIES_BYTES: Final[int] = 32 * 1024

# Reserved names a properties column may not set (those a read returns are dropped).
REFUSED: Final[dict[str, str]] = {
    name: f"{why}; remove it from the properties column (Arrow writes do not schedule delivery)"
    for name, why in P.RESERVED_PROPERTIES.items()
    if name not in P.READ_BACK_PROPERTIES
}


class Columns(msgspec.Struct, frozen=True):
    """Which input columns make up a message."""

    body: str
    keys: str | None = None
    tags: str | None = None
    properties: str | None = None


def check_columns(schema: pa.Schema, cols: Columns) -> None:
    """InvalidMessageError for a missing column or one of the wrong type."""
    wanted = {
        cols.body: (
            "body_col",
            (
                pa.types.is_binary,
                pa.types.is_large_binary,
                pa.types.is_string,
                pa.types.is_large_string,
            ),
            "binary or string",
        ),
        cols.keys: (
            "keys_col",
            (pa.types.is_string, pa.types.is_large_string, _is_str_list),
            "string or array<string>",
        ),
        cols.tags: ("tags_col", (pa.types.is_string, pa.types.is_large_string), "string"),
        cols.properties: ("properties_col", (_is_str_map,), "map<string, string>"),
    }
    for name, (arg, tests, kind) in wanted.items():
        if name is None:
            continue
        if name not in schema.names:
            raise InvalidMessageError(
                f"{arg}={name!r}: no such column; columns are {schema.names}", column=name
            )
        typ = schema.field(name).type
        if not any(t(typ) for t in tests):
            raise InvalidMessageError(f"{arg}={name!r} must be {kind}, got {typ}", column=name)


def _is_str_list(t: pa.DataType) -> bool:
    return bool(pa.types.is_list(t) and pa.types.is_string(t.value_type))


def _is_str_map(t: pa.DataType) -> bool:
    return bool(
        pa.types.is_map(t) and pa.types.is_string(t.key_type) and pa.types.is_string(t.item_type)
    )


def check_bodies(batch: pa.RecordBatch | pa.Table, cols: Columns) -> None:
    """InvalidMessageError for a null body (before anything is sent)."""
    body = batch.column(cols.body)
    if body.null_count:
        raise InvalidMessageError(
            f"column {cols.body!r} has {body.null_count} null bodies in {len(body)} rows; a "
            "message needs one: fill them or filter them out (nothing was written)",
            column=cols.body,
        )


def encoded_puts(
    batches: Iterable[pa.RecordBatch],
    topic: str,
    queue_id: int,
    producer_id: str,
    cols: Columns,
    group: str,
    put_bytes: int,
    first: int = 0,
    max_body_bytes: int = MAX_BODY_BYTES,
    max_properties_bytes: int = MAX_PROPERTIES_BYTES,
) -> Iterator[EncodedBatch]:
    """The rows as idempotent batches of at most ``put_bytes`` of records (a larger
    record alone), cut from the rows of consecutive input batches by a deterministic
    rule (arrow_encode.cuts over upper bounds of the record sizes), each encoded
    column-wise; the rows' sequence numbers count from ``first``. A body or a properties
    text over its limit raises MessageTooLargeError."""
    other = len(P.encode_properties(_widest_properties(producer_id, group)).encode())

    def encode(rows: ArrowRows, first: int) -> EncodedBatch:
        return _encoded(
            rows, topic, queue_id, producer_id, first, group, max_body_bytes, max_properties_bytes
        )

    pending: list[ArrowRows] = []  # rows not put yet, as they came (zero-copy slices)
    pending_bounds: list[np.ndarray] = []
    seq = first
    for batch in batches:
        if batch.num_rows == 0:
            continue
        check_bodies(batch, cols)
        rows = arrow_rows(
            batch.column(cols.body), _column(batch, cols.tags), _column(batch, cols.keys)
        )
        if cols.properties is not None:
            own = properties_text(batch.column(cols.properties), P.READ_BACK_PROPERTIES, REFUSED)
            rows = rows._replace(properties=own)
        pending.append(rows)
        pending_bounds.append(record_bounds(rows, topic, other))
        if sum(int(b.sum()) for b in pending_bounds) < put_bytes:
            continue
        bounds = np.concatenate(pending_bounds)
        pieces = cuts(bounds, put_bytes)
        for start, stop in pieces[:-1]:
            yield encode(_rows_between(pending, start, stop), seq)
            seq += stop - start
        start, stop = pieces[-1]
        pending, pending_bounds = _parts_between(pending, start, stop), [bounds[start:stop]]
    if pending:
        bounds = np.concatenate(pending_bounds)
        for start, stop in cuts(bounds, put_bytes):
            yield encode(_rows_between(pending, start, stop), seq)
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
    return {
        P.UNIQ_KEY: f"{producer_id}-{widest}",
        P.PRODUCER_GROUP: group,
        **P.sequence_properties(producer_id, widest, widest),
    }


def _encoded(
    rows: ArrowRows,
    topic: str,
    queue_id: int,
    producer_id: str,
    first: int,
    group: str,
    max_body: int,
    max_properties: int,
) -> EncodedBatch:
    """One idempotent batch; message ids are ``<producer id>-<sequence>`` (the same on
    every attempt)."""
    n = len(rows.bodies)
    shared = {P.PRODUCER_GROUP: group, **P.sequence_properties(producer_id, first, first + n - 1)}
    batch = encode_rows(
        rows,
        topic=topic,
        queue_id=queue_id,
        uniq_keys=sequence_ids(f"{producer_id}-", first, n),
        properties=shared,
        born_timestamp=time.time_ns() // 1_000_000,
        max_body_bytes=max_body,
        max_properties_bytes=max_properties,
    )
    return msgspec.structs.replace(batch, producer_id=producer_id, first_sequence=first)
