"""The send processor (RocketMQ ``SendMessageProcessor``): puts, half messages of
transactions, the JVM's Arrow puts and consumers' send-backs to retry/DLQ topics.

A part of ``BrokerServer`` (actors/server/broker_server.py), which builds the shared
state (store, tables, services) these methods serve from; no Ray.
"""

from __future__ import annotations

import logging

import msgspec
import pyarrow as pa

from rayq.actors.protocol import (
    ArrowPutRequest,
    BatchSendResult,
    HalfSendRequest,
    ResendDeadLetterReply,
    ResendDeadLetterRequest,
    SendBackRequest,
    SendBackResult,
    SendStatus,
)
from rayq.actors.protocol.config import ClientConfig
from rayq.actors.server.dedupe import Verdict
from rayq.actors.server.processor_base import ProcessorBase
from rayq.actors.server.send_back import (
    GROUP_TOPIC_QUEUE_NUMS,
    prepare_send_back,
    resend_message,
)
from rayq.actors.server.table_files import is_writeable
from rayq.store import SYSTEM_CLOCK, EncodedBatch, PutStatus
from rayq.store.arrow_puts import Columns, check_bodies, check_columns, encoded_puts
from rayq.store.batch import BatchRejected, check_encoded
from rayq.store.codec import decode_records
from rayq.store.errors import (
    BrokerBusyError,
    DiskFullError,
    InvalidMessageError,
    InvalidOffsetError,
    InvalidRequestError,
    MessageTooLargeError,
    PermissionDeniedError,
)
from rayq.store.message import PutResult
from rayq.store.names import (
    TRANS_HALF_TOPIC,
    check_client_write_topic,
    dlq_topic,
    retry_topic,
    validate_group,
    validate_topic,
)

# Records per batch that ``put_arrow`` appends (as a producer's batches).
ARROW_PUT_BYTES = ClientConfig().batch_max_bytes

logger = logging.getLogger(__name__)


class SendProcessor(ProcessorBase):
    """Puts, half messages, Arrow puts and send-backs over the broker's state."""

    # --------------------------------------------------------------- send
    def put(self, batch: EncodedBatch, *, own: bool = False) -> BatchSendResult:
        """Append one producer batch; raises RayqErrors for what the sender must fix.
        ``own``: encoded by this broker (``put_arrow``): its records are not re-checked,
        and the answer has no per-message columns."""
        self._check_put(batch, "sends")
        cached = self._duplicate(batch, batch.topic)
        if cached is not None:
            return cached
        with self.writing:
            if batch.scheduled:  # some record has DELAY or __DELIVER_AT_MS: park those
                result = self.schedule.put_batch(batch)
            else:
                result = self.store.put_encoded(batch, own=own)
        return self._sent(batch, batch.topic, result, columns=not own)

    def _check_put(self, batch: EncodedBatch, what: str) -> None:
        """The checks of a producer's batch before anything is appended."""
        if not isinstance(batch, EncodedBatch):
            raise InvalidMessageError(f"expected an EncodedBatch, got {type(batch).__name__}")
        self._check_master(f"takes no {what}")
        check_client_write_topic(validate_topic(batch.topic))  # send-back and delays: not here
        cfg = self.topic_config(batch.topic, create=True)
        if not is_writeable(cfg.perm):
            raise PermissionDeniedError(f"topic {batch.topic!r} is not writeable (perm={cfg.perm})")
        if not 0 <= batch.queue_id < cfg.write_queue_nums:
            raise InvalidOffsetError(
                f"queue {batch.queue_id} of topic {batch.topic!r} does not exist: it has "
                f"{cfg.write_queue_nums} write queues",
                queue_id=batch.queue_id,
            )

    def _duplicate(self, batch: EncodedBatch, topic: str) -> BatchSendResult | None:
        """Idempotent produce (dedupe.py, keyed on ``topic``): the answer to a batch that
        was appended before, or None to append it; raises for overlaps and gaps."""
        if not batch.producer_id:
            return None
        pid, first = batch.producer_id, batch.first_sequence
        last_seq = first + batch.count - 1
        verdict, cached = self.sequences.check(pid, topic, batch.queue_id, first, last_seq)
        if verdict is Verdict.OVERLAP:
            raise InvalidMessageError(
                f"sequences {first}..{last_seq} of producer {pid!r} overlap what "
                f"{batch.topic}/{batch.queue_id} already has"
            )
        if verdict is Verdict.FENCED:
            raise InvalidMessageError(
                f"producer {pid!r} is fenced on {batch.topic}/{batch.queue_id}: epoch "
                f"{cached} of its family has written there since, and epochs write one "
                "after the other (a zombie task, or a batch id that went back: a stream "
                "restarted without its checkpoint under the same write id)"
            )
        if verdict is Verdict.OUT_OF_ORDER:
            raise BrokerBusyError(
                f"sequence {first} of producer {pid!r} on {batch.topic}/{batch.queue_id} is "
                "out of order: an earlier batch has not arrived yet; retry"
            )
        if verdict is Verdict.DUPLICATE:
            return cached or BatchSendResult(
                status=SendStatus.SEND_OK,
                msg_ids=batch.msg_ids,
                offset_msg_ids=[""] * batch.count,
                queue_offsets=[-1] * batch.count,
            )
        return None

    def _sent(
        self, batch: EncodedBatch, topic: str, result: PutResult, columns: bool = True
    ) -> BatchSendResult:
        """The answer to an appended batch (and the producer's sequences moved on). Without
        ``columns`` (the broker's own batches: ``put_arrow`` answers a row count) it has no
        per-message ids and offsets, which cost ~0.5 us a message to format."""
        raise_for_put(result)
        self.put_rate.add(batch.count, SYSTEM_CLOCK.now_ms())
        if columns:
            out = BatchSendResult(
                status=SendStatus.SEND_OK,
                msg_ids=result.msg_ids,
                offset_msg_ids=result.offset_msg_ids,
                queue_offsets=result.queue_offsets,
            )
        else:
            out = BatchSendResult(
                status=SendStatus.SEND_OK, msg_ids=[], offset_msg_ids=[], queue_offsets=[]
            )
        if batch.producer_id:
            self.sequences.appended(
                batch.producer_id,
                topic,
                batch.queue_id,
                batch.first_sequence,
                batch.first_sequence + batch.count - 1,
                out,
                result.store_timestamp,
            )
        return out

    # ------------------------------------------------------- transactions
    def put_half(self, req: HalfSendRequest) -> BatchSendResult:
        """Store a transactional send's messages as half messages (transactions.py): in
        no consume queue until ``end_transaction`` commits them. The answer's offset
        message ids carry each half's commit-log offset (the transaction's key); its
        queue offsets are -1. Idempotent produce applies (keyed on the half topic)."""
        batch = req.batch
        self._check_put(batch, "transactional sends")
        validate_group(req.group)
        if batch.scheduled:
            raise InvalidMessageError(
                "a transactional message cannot be delayed (DELAY or __DELIVER_AT_MS): "
                "send it without a delay"
            )
        cached = self._duplicate(batch, TRANS_HALF_TOPIC)
        if cached is not None:
            return cached
        cfg = self.config.store
        try:
            check_encoded(batch, cfg.max_message_size_bytes, cfg.max_properties_size_bytes)
        except BatchRejected as exc:
            raise InvalidMessageError(str(exc)) from None
        msgs = decode_records(batch.records, decompress=False)
        with self.writing:
            result = self.transactions.put_halves(msgs, req.group)
        out = self._sent(batch, TRANS_HALF_TOPIC, result)
        return msgspec.structs.replace(out, queue_offsets=[-1] * len(msgs))

    def arrow_batches(self, req: ArrowPutRequest, rows: object) -> list[EncodedBatch]:
        """The rows of a ``put_arrow`` (an Arrow IPC stream from Spark's JVM: ``bytes``, or
        a ``memoryview`` of a shared slot) as the idempotent batches of
        ``req.producer_id`` (store/arrow_puts.py), all encoded before any is appended (and
        copied out of ``rows``): a bad row (a null body, one over the store's limits, a
        reserved property) raises and leaves nothing appended by this call."""
        cols = Columns(req.body, req.keys, req.tags, req.properties)
        data = pa.py_buffer(rows) if type(rows) in (bytes, memoryview) else b""
        try:
            table = pa.ipc.open_stream(data).read_all()
        except (pa.ArrowInvalid, OSError) as exc:
            raise InvalidRequestError(
                f"put_arrow: rows are not an Arrow IPC stream: {exc}", request="ArrowPutRequest"
            ) from None
        check_columns(table.schema, cols)
        check_bodies(table, cols)
        limits = self.store.config
        return list(
            encoded_puts(
                table.to_batches(),
                req.topic,
                req.queue_id,
                req.producer_id,
                cols,
                req.group,
                ARROW_PUT_BYTES,
                req.first_sequence,
                limits.max_message_size_bytes,
                limits.max_properties_size_bytes,
            )
        )

    # ------------------------------------------------- delays and retries
    def send_back(self, request: SendBackRequest) -> SendBackResult:
        """Failed messages of a consumer group to its retry or dead-letter topic: one call
        per batch, all or none (store/send_back.py). Bad input raises a RayqError and
        writes nothing. The group's config applies: ``retry_max_times`` when the request
        gives no ``max_reconsume_times`` (-1), ``retry_queue_nums`` queues for the retry
        topic, and with ``retry_queue_nums`` 0 the messages are dropped (logged)."""
        items = request.items
        self._check_master("takes no send-backs")
        group = self.group_or_defaults(request.group)
        most = request.max_reconsume_times
        retry = retry_topic(request.group)
        known = self.tables.topics.get(retry)
        queues = (
            group.retry_queue_nums
            if known is None
            else min(group.retry_queue_nums, known.write_queue_nums)
        )
        msgs = prepare_send_back(
            self.store,
            request.group,
            [(i.commitlog_offset, i.delay_level) for i in items],
            group.retry_max_times if most < 0 else most,
            queues,
        )
        if group.retry_queue_nums <= 0:
            logger.warning(
                "broker %s: group %s has retry_queue_nums 0: %d failed messages "
                "dropped, neither retried nor dead-lettered",
                self.name,
                request.group,
                len(msgs),
            )
            return SendBackResult(
                topics=[""] * len(msgs),
                msg_ids=[""] * len(msgs),
                reconsume_times=[m.reconsume_times for m in msgs],
            )
        for topic in {m.topic for m in msgs}:
            n = group.retry_queue_nums if topic == retry else GROUP_TOPIC_QUEUE_NUMS
            self.ensure_system_topic(topic, n)
        with self.writing:
            result = self.schedule.put(msgs)
        raise_for_put(result)
        return SendBackResult(
            topics=[m.topic for m in msgs],
            msg_ids=result.msg_ids,
            reconsume_times=[m.reconsume_times for m in msgs],
        )

    def resend_dead_letter(self, request: ResendDeadLetterRequest) -> ResendDeadLetterReply:
        """A dead letter of ``request.group`` (at its commit-log offset) to the group's
        retry topic, to be consumed again by that group only (``resend_message``).
        InvalidRequestError, writing nothing, when no dead letter of the group is there."""
        self._check_master("takes no resends")
        group = self.group_or_defaults(request.group)
        dlq = dlq_topic(request.group)
        msg = self.store.lookup_message(request.commitlog_offset, decompress=False)
        if msg is None or msg.topic != dlq:
            where = "no message" if msg is None else f"a message of {msg.topic!r}"
            raise InvalidRequestError(
                f"broker {self.name}: commit-log offset {request.commitlog_offset} holds "
                f"{where}, not a dead letter of group {request.group!r} (those are in {dlq!r}: "
                "list them with Admin.dead_letters)",
                group=request.group,
            )
        retry = retry_topic(request.group)
        known = self.tables.topics.get(retry)
        queues = max(group.retry_queue_nums, 1)
        if known is not None:
            queues = max(min(queues, known.write_queue_nums), 1)
        copy = resend_message(msg, retry, queues)
        self.ensure_system_topic(retry, max(group.retry_queue_nums, 1))
        with self.writing:
            result = self.schedule.put([copy])
        raise_for_put(result)
        return ResendDeadLetterReply(
            topic=retry,
            msg_id=result.msg_ids[0],
            queue_id=copy.queue_id,
            queue_offset=result.queue_offsets[0],
        )


def raise_for_put(result: PutResult) -> None:
    """The RayqError for a failed append (nothing was written)."""
    if result.status is PutStatus.DISK_FULL:
        raise DiskFullError(result.error)
    if result.status is PutStatus.PROPERTIES_SIZE_EXCEEDED:
        raise MessageTooLargeError(result.error)
    if not result.ok:
        raise InvalidMessageError(result.error)
