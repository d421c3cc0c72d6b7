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

How rows become batches (the cuts, the sequence numbers, the properties a
``properties_col`` may not set) is store/arrow_puts.py, shared with the broker's
``put_arrow`` (the rows Spark's JVM sends).

With ACL on, tasks sign their broker calls: the driver hands a task the user's
``Credentials`` (``ClientConfig.credentials``) and ``read_range`` / ``write_batches``
wrap each broker client with a ``Signer`` made once per task (actors/protocol/auth.py), as
``ClientContext.broker`` does for the other clients. ``None`` sends unsigned requests.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator
from typing import Final, TypeVar

import pyarrow as pa
import ray

from rayq.actors.protocol import ArrowPage, MessageQueue, PageReadersRequest, ReadArrowRequest
from rayq.actors.protocol.arrow import SCHEMA, from_ipc
from rayq.actors.protocol.auth import Credentials, Signer
from rayq.actors.protocol.config import ClientConfig
from rayq.connectors.ranges import OffsetRange
from rayq.producer.accumulator import Put
from rayq.producer.sender import RetryPolicy, Sender
from rayq.producer.validation import check_topic
from rayq.store.arrow_puts import Columns, check_bodies, check_columns, encoded_puts
from rayq.store.errors import BrokerUnavailableError
from rayq.transport.base import BrokerClient, Reply
from rayq.transport.ray_actors import RayTransport

logger = logging.getLogger(__name__)

PAGE_BYTES: Final[int] = 4 * 1024 * 1024
PUT_BYTES: Final[int] = ClientConfig().batch_max_bytes  # records per column-wise put
MAX_PUTS_IN_FLIGHT: Final[int] = 4
PUT_ATTEMPTS: Final[int] = 5
CALL_TIMEOUT_S: Final[float] = 60.0

_lock = threading.Lock()
_transports: dict[str, RayTransport] = {}
T = TypeVar("T")


def ensure_ray(address: str | None, namespace: str) -> None:
    """Connect this process to Ray once (no-op in Ray workers and drivers)."""
    if ray.is_initialized():
        return
    with _lock:
        if not ray.is_initialized():
            ray.init(
                address=address,
                namespace=namespace,
                log_to_driver=False,
                logging_level=logging.WARNING,
                configure_logging=False,
            )


def broker_handle(
    namespace: str, broker: str, *, refresh: bool = False, signer: Signer | None = None
) -> BrokerClient:
    """The broker's client, through this process's transport for ``namespace``; its
    requests signed by ``signer`` if given."""
    client = _unsigned_handle(namespace, broker, refresh)
    if signer is None:
        return client
    return BrokerClient(signer.wrap(client._invoke))


def serving_replica(namespace: str, broker: str) -> str:
    """The replica serving reads of ``broker`` now (RayTransport.serving_replica)."""
    return _transport(namespace).serving_replica(broker)


def page_readers(
    namespace: str, broker: str, signer: Signer | None = None, *, refresh: bool = True
) -> list[str]:
    """The actor names of the page readers of the replica serving ``broker`` now
    (actors/page_reader.py; started by the broker on the first ask); the ask signed by
    ``signer`` if given (ACL). ``refresh``: which replica serves is asked afresh (else
    the transport's handle is used, as a client's calls do until one fails)."""
    client = _unsigned_handle(namespace, broker, refresh=refresh)
    if signer is not None:
        client = BrokerClient(signer.wrap(client._invoke))
    return client.page_readers(PageReadersRequest()).result(CALL_TIMEOUT_S).names


def _signer(credentials: Credentials | None) -> Signer | None:
    return None if credentials is None else Signer(credentials)


def _transport(namespace: str) -> RayTransport:
    with _lock:
        transport = _transports.get(namespace)
        if transport is None:
            transport = _transports[namespace] = RayTransport(namespace)
    return transport


def _unsigned_handle(namespace: str, broker: str, refresh: bool) -> BrokerClient:
    transport = _transport(namespace)
    if refresh:
        transport.forget(broker)
    try:
        return transport.broker(broker)
    except BrokerUnavailableError:
        raise BrokerUnavailableError(
            f"broker {broker!r} is not running in namespace {namespace!r}: its queues "
            "cannot be read or written now",
            broker=broker,
        ) from None


def _get(reply: Reply[T], broker: str) -> T:
    try:
        return reply.result(CALL_TIMEOUT_S)
    except BrokerUnavailableError as err:
        raise BrokerUnavailableError(
            f"broker {broker!r} is unavailable: {err}", broker=broker
        ) from None


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
        return handle.read_arrow(
            ReadArrowRequest(
                topic=topic, queue_id=r.queue_id, start=start, end=r.end, max_bytes=page_bytes
            )
        )

    ref = ask(offset)
    while True:
        page = _get(ref, r.broker)
        nxt = page.next_offset
        if nxt <= offset:
            raise BrokerUnavailableError(
                f"{topic}/{r.queue_id} on broker {r.broker!r} stopped at offset {offset} before "
                f"the planned end {r.end}",
                broker=r.broker,
            )
        offset = nxt
        if offset < r.end:  # ask for the next page while this one is handed out
            ref = ask(offset)
        yield from [page.batch] if page.batch is not None else from_ipc(page.data)
        if offset >= r.end:
            return


# ----------------------------------------------------------------- write
def _puts(
    batches: Iterable[pa.RecordBatch],
    queue: MessageQueue,
    producer_id: str,
    cols: Columns,
    group: str,
) -> Iterator[Put]:
    """The rows as idempotent puts of at most ``PUT_BYTES`` of records (arrow_puts.py)."""
    for batch in encoded_puts(
        batches, queue.topic, queue.queue_id, producer_id, cols, group, PUT_BYTES
    ):
        yield Put(queue, batch=batch, fixed="idempotent writes never move to another queue")


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
    sent = 0
    for put, _ in sender.pipeline(puts, MAX_PUTS_IN_FLIGHT):
        assert put.batch is not None  # _puts encodes each batch
        sent += put.batch.count
    return sent


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
