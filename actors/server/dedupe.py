"""Idempotent produce: the broker drops a batch it already appended.

A producer that wants exactly-once appends across its own retries (a Spark task
re-run, a timed-out send sent again) gives each batch a producer id and a range of
sequence numbers ``[first, last]`` (one number per message, counted from 0 per
producer id and queue, without gaps). The broker keeps, per ``(producer id, topic,
queue)``, the last sequence it appended:

* ``last <= stored``: a duplicate, not appended again; answered with the original
  result when it is the latest batch of that producer (else with offsets -1);
* ``first == stored + 1`` (or ``first == 0`` for a producer it does not know):
  appended, and the table moves to ``last``;
* ``first <= stored < last``: a partial overlap, refused (the producer re-batched);
* ``first > stored + 1``: out of order, refused as retriable: an earlier batch is
  still on its way (Ray does not order calls to an async actor), and accepting this
  one would make the earlier one look like a duplicate. A producer that gave up on
  a batch starts a new producer id.

Epochs (Kafka's producer epochs): a producer id ``<family>~<epoch>`` (store/properties.py
``producer_epoch``) is one epoch of the producer ``family``, and the table keeps one
entry per (family, topic, queue) with its latest epoch. A batch of a newer epoch starts
the family over (from sequence 0, the entry replaced); one of an older epoch is
refused (FENCED, as Kafka fences a producer's old epochs): a family's epochs write one
after the other, each complete before the next starts, so an older epoch is a zombie
or an epoch counter that went back (a stream restarted without its checkpoint under
the same name), never data still to store. Spark's writes (connectors/stream_sink.py)
are such families, one per query (or ``write_id``) and partition, one epoch per
micro-batch, so a query costs the table one entry per partition however many batches
it runs, where a producer id per batch would add one per batch and partition until
they expire. Any other producer id is its own family at epoch 0.

Durability: each record of such a batch carries the properties ``__PID`` (the
producer id) and ``__PSEQ`` (``first-last``), identical for the whole batch so the
encoder's fast path holds. The table is snapshotted to
``config/producerSequence.json`` (``.tmp``/``.bak`` as every config file) with the
commit-log offset it covers; on open it is brought up to date by replaying the
commit log from that offset. A batch counts only if all of its records survived
recovery (a torn tail makes it "not appended": its retry is appended again, never
lost). A snapshot past the recovered end of the log is dropped and the table is
rebuilt from the whole log.

Expiry (Kafka's ``producer.id.expiration.ms``): an entry no batch has touched for
``EXPIRY_MS`` (7 days) is forgotten when the table is next persisted, so the table holds
the producers of the last week, not every producer ever seen. A batch of a forgotten
producer is taken as new: a retry (or a Spark batch re-run) after a week appends again.
Batches without a producer id never touch this module.
"""

from __future__ import annotations

import enum
import logging
import re
from pathlib import Path
from typing import Any, Final

import msgspec

from rayq.store import properties as P
from rayq.store.errors import InvalidMessageError
from rayq.store.json_file import JsonFile

logger = logging.getLogger(__name__)

PRODUCER_ID: Final[str] = P.PRODUCER_ID
PRODUCER_SEQ: Final[str] = P.PRODUCER_SEQ
FILE_NAME: Final[str] = "producerSequence.json"
EXPIRY_MS: Final[int] = 7 * 24 * 3600 * 1000
# The producer-id rules and the properties of an idempotent batch are property facts
# (store/properties.py, shared with store/arrow_puts.py); named here as before.
MAX_PRODUCER_ID_LENGTH: Final[int] = P.MAX_PRODUCER_ID_LENGTH
check_producer_id = P.check_producer_id
sequence_properties = P.sequence_properties
_FOUND = re.compile(rb"__PID\x01([^\x02]*)\x02__PSEQ\x01(\d+)-(\d+)\x02")


class Verdict(enum.Enum):
    NEW = "NEW"
    DUPLICATE = "DUPLICATE"
    OVERLAP = "OVERLAP"
    OUT_OF_ORDER = "OUT_OF_ORDER"
    FENCED = "FENCED"  # an epoch older than the family's latest


class SequenceEntry(msgspec.Struct, array_like=True):
    last: int
    updated_ms: int
    epoch: int = 0  # of the family (a snapshot written before epochs has none: 0)


class SequenceFile(msgspec.Struct, kw_only=True):
    commitlog_offset: int = 0
    table: dict[str, SequenceEntry] = {}


def _key(family: str, topic: str, queue_id: int) -> str:
    return f"{family}|{topic}|{queue_id}"


class ProducerSequences:
    """The (producer id, topic, queue) -> last appended sequence table of one store."""

    def __init__(self, config_dir: str | Path) -> None:
        self.file = JsonFile(Path(config_dir) / FILE_NAME, SequenceFile)
        self.table: dict[str, SequenceEntry] = {}
        self.snapshot_offset = 0
        self._results: dict[str, tuple[int, int, Any]] = {}  # latest batch's answer
        self.dirty = False

    # -------------------------------------------------------------- broker
    def check(
        self, producer_id: str, topic: str, queue_id: int, first: int, last: int
    ) -> tuple[Verdict, Any]:
        """What to do with batch ``[first, last]``; with DUPLICATE, the cached answer (or
        None); with FENCED, the family's latest epoch."""
        if not 0 <= first <= last:
            raise InvalidMessageError(f"sequence range [{first}, {last}] is not valid")
        family, epoch = P.producer_epoch(producer_id)
        key = _key(family, topic, queue_id)
        entry = self.table.get(key)
        if entry is None or epoch > entry.epoch:  # a new producer, or its next epoch
            return (Verdict.NEW if first == 0 else Verdict.OUT_OF_ORDER), None
        if epoch < entry.epoch:  # an epoch that ended (a zombie, or a counter gone back)
            return Verdict.FENCED, entry.epoch
        if first == entry.last + 1:
            return Verdict.NEW, None
        if first > entry.last + 1:
            return Verdict.OUT_OF_ORDER, None
        if last <= entry.last:
            cached = self._results.get(key)
            if cached is not None and cached[0] == first and cached[1] == last:
                return Verdict.DUPLICATE, cached[2]
            return Verdict.DUPLICATE, None
        return Verdict.OVERLAP, None

    def appended(
        self,
        producer_id: str,
        topic: str,
        queue_id: int,
        first: int,
        last: int,
        result: Any,
        now_ms: int,
    ) -> None:
        family, epoch = P.producer_epoch(producer_id)
        key = _key(family, topic, queue_id)
        self.table[key] = SequenceEntry(last, now_ms, epoch)
        self._results[key] = (first, last, result)
        self.dirty = True

    # ---------------------------------------------------------- durability
    def persist(self, commitlog_offset: int, now_ms: int) -> bool:
        """Snapshot the table as covering the log up to ``commitlog_offset``."""
        if not self.dirty and commitlog_offset == self.snapshot_offset:
            return False
        for key in [k for k, e in self.table.items() if now_ms - e.updated_ms > EXPIRY_MS]:
            del self.table[key]
            self._results.pop(key, None)
        self.file.save(SequenceFile(commitlog_offset=commitlog_offset, table=dict(self.table)))
        self.snapshot_offset, self.dirty = commitlog_offset, False
        return True

    def load(self, log_min: int, log_max: int) -> int:
        """Load the snapshot; the commit-log offset to replay from."""
        snap = self.file.load() or SequenceFile()
        if snap.commitlog_offset > log_max:
            logger.warning(
                "producer sequences cover the log up to %d but it ends at %d "
                "(lost tail): rebuilding them from the log",
                snap.commitlog_offset,
                log_max,
            )
            snap = SequenceFile()
        self.table = dict(snap.table)
        return max(snap.commitlog_offset, log_min)

    def replay(
        self, topics: list[str], queue_ids: list[int], properties: list[bytes], now_ms: int
    ) -> None:
        """Update the table from records read back from the log (in log order)."""
        pending: dict[tuple[str, str, int, int, int], int] = {}
        for topic, qid, props in zip(topics, queue_ids, properties, strict=True):
            if b"__PID" not in props:
                continue
            m = _FOUND.search(props)
            if m is None:
                continue
            pid, first, last = m.group(1).decode(), int(m.group(2)), int(m.group(3))
            batch = (pid, topic, qid, first, last)
            seen = pending.get(batch, 0) + 1
            pending[batch] = seen
            if seen == last - first + 1:  # every record of the batch survived
                family, epoch = P.producer_epoch(pid)
                key = _key(family, topic, qid)
                entry = self.table.get(key)
                if entry is None or (entry.epoch, entry.last) < (epoch, last):
                    self.table[key] = SequenceEntry(last, now_ms, epoch)
                    self.dirty = True


def open_sequences(config_dir: str | Path, commitlog: Any, now_ms: int) -> ProducerSequences:
    """Load the table and replay the commit log (a ``CommitLog``) past its snapshot."""
    from rayq.store.codec import Check
    from rayq.store.scanner import GoodRun, scan

    seqs = ProducerSequences(config_dir)
    start = seqs.load(commitlog.min_offset, commitlog.max_offset)
    topics: list[str] = []
    qids: list[int] = []
    props: list[bytes] = []
    if start < commitlog.max_offset:
        for item in scan(commitlog, start, check_crc=False):
            if isinstance(item, GoodRun):
                topics += item.topics
                qids += item.queue_ids
                props += item.properties
            elif item[0] is Check.OK and item[3] is not None:
                header, topic, raw = item[3]
                topics.append(topic)
                qids.append(header[7])
                props.append(raw)
    seqs.replay(topics, qids, props, now_ms)
    seqs.snapshot_offset = commitlog.max_offset
    return seqs
