"""Transactional messages on the broker (RocketMQ's TransactionalMessageService).

A transaction's records, each carrying the TRAN_MSG property (store/properties.py):

* **half**: the producer's message, stored again in ``RMQ_SYS_TRANS_HALF_TOPIC`` (its
  real queue id as queue id) with sys_flag PREPARED and the properties REAL_TOPIC,
  REAL_QID and PGROUP (the producer group). The store gives it no consume-queue entry,
  so no consumer sees it. Its commit-log offset is the transaction's **key**
  (``transaction_offset``), which the producer gets back and ends the transaction with.
* **half checked again**: each check writes the half once more (PREPARED) with
  ``TRANSACTION_CHECK_TIMES`` = n and ``prepared_transaction_offset`` = the key, as
  RocketMQ puts a half back; the count survives restarts.
* **commit**: the message in its real topic and queue, sys_flag COMMIT,
  ``prepared_transaction_offset`` = the key: consumers see it from here on.
* **rollback op**: a record in ``RMQ_SYS_TRANS_OP_HALF_TOPIC``, sys_flag ROLLBACK,
  ``prepared_transaction_offset`` = the key, body the key in decimal (tag ``d``).
* **discard**: a half checked ``transaction_check_max`` times goes, as a COMMIT record,
  to ``TRANS_CHECK_MAX_TIME_TOPIC`` (readable; logged), and is closed.

A COMMIT or ROLLBACK record closes its key: ``end`` is idempotent (a second end of a
closed key writes nothing), so a message is committed at most once.

The check service (``tick``, every ``transaction_check_interval`` ms, run by the broker
actor): an open half older than ``transaction_timeout`` ms is checked, at most
``transaction_check_max`` times, then discarded. A check is queued for the half's
producer group; any live producer of the group takes it (``take_checks``: each
``TransactionProducer`` polls its brokers), asks its listener and ends the
transaction. A check taken by a producer that dies is asked again a tick later.

Durability (``config/transactions.json``, written with ``.tmp``/``.bak`` as every
config file): the open halves and the commit-log offset they cover; on open, the
table is brought up to date by replaying the commit log from that offset, reading the
transaction type and prepared offset of each TRAN_MSG record. A snapshot past the
recovered end of the log (a lost tail) is dropped and the table rebuilt from the whole
log. A slave applies the records its master's bytes bring (``apply_offsets``), so a
promoted slave knows the open transactions.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Final

import msgspec

from rayq.actors.server.dedupe import PRODUCER_ID, PRODUCER_SEQ
from rayq.store import MessageStore
from rayq.store import properties as P
from rayq.store.codec import Check
from rayq.store.errors import InvalidRequestError
from rayq.store.json_file import JsonFile
from rayq.store.message import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    TRANSACTION_TYPE_MASK,
    InnerMessage,
    MessageExt,
    PutResult,
)
from rayq.store.names import TRANS_CHECK_MAX_TIME_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from rayq.store.scanner import GoodRun, scan

logger = logging.getLogger(__name__)

FILE_NAME: Final[str] = "transactions.json"
TRAN_MARK: Final[bytes] = P.TRANSACTION_PREPARED.encode() + b"\x01"
OP_TAG: Final[str] = "d"  # RocketMQ's op tag: "delete" the half
# properties of a half that the committed message does not keep
_SEQUENCE_ONLY: Final = (PRODUCER_ID, PRODUCER_SEQ)  # the half send's dedupe numbers
_HALF_ONLY: Final = (P.REAL_TOPIC, P.REAL_QID, P.TRANSACTION_CHECK_TIMES, *_SEQUENCE_ONLY)


def _typed(sys_flag: int, kind: int) -> int:
    """``sys_flag`` with its transaction type set to ``kind``."""
    return (sys_flag & ~TRANSACTION_TYPE_MASK) | kind


class OpenHalf(msgspec.Struct, array_like=True):
    """One transaction without an end: its latest half record and what checks need."""

    offset: int  # commit-log offset of the latest half record (the key at first)
    group: str  # the producer group that checks it
    topic: str  # the real topic and queue
    queue_id: int
    msg_id: str  # the message's unique id (the transaction id)
    stored_ms: int  # when the first half was stored: the timeout counts from here
    checks: int = 0  # how often it was checked


class TransactionFile(msgspec.Struct, kw_only=True):
    commitlog_offset: int = 0
    open: dict[int, OpenHalf] = {}


class Ended(msgspec.Struct, frozen=True, kw_only=True):
    """What ``end`` did: ``ended`` False if the transaction had ended before."""

    ended: bool
    committed: bool = False
    topic: str = ""
    queue_id: int = 0
    put: PutResult | None = None


class TransactionService:
    """Open transactions of one broker: halves, ends, checks. The caller holds the
    broker's writing lock around every method that appends."""

    def __init__(
        self,
        store: MessageStore,
        config_dir: str | Path,
        *,
        timeout_ms: int,
        check_interval_ms: int,
        check_max: int,
    ) -> None:
        self.store = store
        self.file = JsonFile(Path(config_dir) / FILE_NAME, TransactionFile)
        self.timeout_ms, self.check_interval_ms, self.check_max = (
            timeout_ms,
            check_interval_ms,
            check_max,
        )
        self.open: dict[int, OpenHalf] = {}
        self.pending: dict[str, dict[int, None]] = {}  # group -> keys to check, in order
        self.snapshot_offset = -1
        self.dirty = False
        self.discarded = 0

    # ------------------------------------------------------------ replay
    def recover(self) -> int:
        """Load the snapshot and replay the log past it; returns the records replayed."""
        cl = self.store.commitlog
        snap = self.file.load() or TransactionFile()
        if snap.commitlog_offset > cl.max_offset:
            logger.warning(
                "transactions cover the log up to %d but it ends at %d (lost tail):"
                " rebuilding them from the whole log",
                snap.commitlog_offset,
                cl.max_offset,
            )
            snap = TransactionFile()
        self.open = dict(snap.open)
        start = max(snap.commitlog_offset, cl.min_offset)
        replayed = self.replay(start, cl.max_offset)
        self.snapshot_offset = snap.commitlog_offset
        if self.open:
            logger.info("broker: %d open transaction(s) after recovery", len(self.open))
        return replayed

    def rebuild(self) -> int:
        """Forget the table and replay the whole log (after the log was cut)."""
        self.open, self.pending, self.dirty = {}, {}, True
        return self.replay(self.store.commitlog.min_offset, self.store.commitlog.max_offset)

    def replay(self, start: int, end: int) -> int:
        """Apply the TRAN_MSG records in ``[start, end)`` of the log, in log order."""
        offsets: list[int] = []
        if start < end:
            for item in scan(self.store.commitlog, start, check_crc=False):
                if isinstance(item, GoodRun):
                    offsets += [
                        o
                        for o, p in zip(item.offsets, item.properties, strict=True)
                        if TRAN_MARK in p and o < end
                    ]
                    if item.offsets[-1] >= end:
                        break
                elif item[0] is Check.OK and item[3] is not None:
                    if item[1] >= end:
                        break
                    if TRAN_MARK in item[3][2]:
                        offsets.append(item[1])
        self.apply_offsets(offsets)
        return len(offsets)

    def apply_offsets(self, offsets: Iterable[int]) -> None:
        """Apply the transaction records at these commit-log offsets (in log order)."""
        for offset in offsets:
            msg = self.store.lookup_message(offset, decompress=False)
            if msg is not None:
                self._apply(msg)

    def _apply(self, msg: MessageExt) -> None:
        """One record read back from the log (replay)."""
        self._apply_record(
            msg.commitlog_offset,
            msg.topic,
            msg.sys_flag,
            msg.properties,
            msg.prepared_transaction_offset,
            msg.msg_id,
            msg.store_timestamp,
        )

    def _apply_record(
        self,
        offset: int,
        topic: str,
        sys_flag: int,
        props: dict[str, str],
        prepared: int,
        msg_id: str,
        stored_ms: int,
    ) -> None:
        """One transaction record's effect on the table (replay and live writes alike)."""
        if P.TRANSACTION_PREPARED not in props:
            return
        kind = sys_flag & TRANSACTION_TYPE_MASK
        if kind == TRANSACTION_PREPARED_TYPE and topic == TRANS_HALF_TOPIC:
            checks = int(props.get(P.TRANSACTION_CHECK_TIMES, "0") or 0)
            if checks == 0:
                self.open[offset] = OpenHalf(
                    offset=offset,
                    group=props.get(P.PRODUCER_GROUP, ""),
                    topic=props.get(P.REAL_TOPIC, ""),
                    queue_id=int(props.get(P.REAL_QID, 0)),
                    msg_id=msg_id,
                    stored_ms=stored_ms,
                )
            else:
                half = self.open.get(prepared)
                if half is not None:
                    half.offset, half.checks = offset, max(half.checks, checks)
            self.dirty = True
        elif (
            kind in (TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE)
            and self.open.pop(prepared, None) is not None
        ):
            self.dirty = True

    # ------------------------------------------------------------- writes
    def put_halves(self, msgs: list[MessageExt], group: str) -> PutResult:
        """Store a producer's decoded messages as half messages (the caller checked them)."""
        halves = []
        for m in msgs:
            inner = m.to_inner()
            props = dict(inner.properties)
            props.update(
                {
                    P.TRANSACTION_PREPARED: "true",
                    P.PRODUCER_GROUP: group,
                    P.REAL_TOPIC: m.topic,
                    P.REAL_QID: str(m.queue_id),
                }
            )
            halves.append(
                msgspec.structs.replace(
                    inner,
                    topic=TRANS_HALF_TOPIC,
                    properties=props,
                    sys_flag=_typed(inner.sys_flag, TRANSACTION_PREPARED_TYPE),
                    prepared_transaction_offset=0,
                )
            )
        return self._put(halves)

    def _put(self, records: list[InnerMessage]) -> PutResult:
        """Append records and apply them to the table (from what was written: no read)."""
        result = self.store.put_messages(records)
        if result.ok:
            for m, offset, msg_id in zip(
                records, result.commitlog_offsets, result.msg_ids, strict=True
            ):
                self._apply_record(
                    offset,
                    m.topic,
                    m.sys_flag,
                    m.properties,
                    m.prepared_transaction_offset,
                    msg_id,
                    result.store_timestamp,
                )
        return result

    def half(self, key: int, group: str, msg_id: str) -> OpenHalf | None:
        """The open transaction ``key`` (None if it ended); InvalidRequestError if ``key``
        is no transaction of ``group`` with message ``msg_id``."""
        half = self.open.get(key)
        if half is None:
            msg = self.store.lookup_message(key, decompress=False) if key >= 0 else None
            if msg is None or msg.topic != TRANS_HALF_TOPIC or msg.msg_id != msg_id:
                raise InvalidRequestError(
                    f"no half message {msg_id!r} at commit-log offset {key} on this broker: "
                    "end a transaction with the transaction_offset its half's send returned",
                    transaction_offset=key,
                )
            found_group, found_id = msg.properties.get(P.PRODUCER_GROUP, ""), msg.msg_id
        else:
            found_group, found_id = half.group, half.msg_id
        if found_group != group or found_id != msg_id:
            raise InvalidRequestError(
                f"the transaction at commit-log offset {key} is message {found_id!r} of "
                f"producer group {found_group!r}, not {msg_id!r} of {group!r}",
                transaction_offset=key,
            )
        return half

    def end(
        self,
        key: int,
        group: str,
        msg_id: str,
        topic: str,
        commit: bool,
        writable: Callable[[str, int], None],
    ) -> Ended:
        """Commit (the real message appended, COMMIT) or roll back (an op, ROLLBACK) the
        transaction ``key`` of message ``msg_id`` to ``topic``; nothing if it has ended
        already. ``writable(topic, queue)`` raises if the real queue may not be written
        now (the transaction stays open)."""
        half = self.half(key, group, msg_id)
        if half is None:
            logger.debug("transaction %d (%s) had ended already", key, msg_id)
            return Ended(ended=False)
        if half.topic != topic:
            raise InvalidRequestError(
                f"the transaction at commit-log offset {key} is a message of topic "
                f"{half.topic!r}, not {topic!r}",
                transaction_offset=key,
            )
        stored = self.store.lookup_message(half.offset, decompress=False)
        if stored is None:
            raise InvalidRequestError(
                f"the half message of transaction {key} is gone (its commit-log segment expired)"
            )
        if commit:
            writable(half.topic, half.queue_id)
            record = self._real(stored, half, key)
        else:
            record = self._op(half, key)
        result = self._put([record])
        return Ended(
            ended=result.ok, committed=commit, topic=half.topic, queue_id=half.queue_id, put=result
        )

    @staticmethod
    def _real(stored: MessageExt, half: OpenHalf, key: int) -> InnerMessage:
        inner = stored.to_inner()
        props = {k: v for k, v in inner.properties.items() if k not in _HALF_ONLY}
        return msgspec.structs.replace(
            inner,
            topic=half.topic,
            queue_id=half.queue_id,
            properties=props,
            sys_flag=_typed(inner.sys_flag, TRANSACTION_COMMIT_TYPE),
            prepared_transaction_offset=key,
        )

    @staticmethod
    def _op(half: OpenHalf, key: int) -> InnerMessage:
        return InnerMessage(
            topic=TRANS_OP_HALF_TOPIC,
            queue_id=half.queue_id,
            body=str(key).encode(),
            tags=OP_TAG,
            uniq_key=half.msg_id,
            properties={P.TRANSACTION_PREPARED: "true", P.PRODUCER_GROUP: half.group},
            sys_flag=TRANSACTION_ROLLBACK_TYPE,
            prepared_transaction_offset=key,
        )

    # ------------------------------------------------------------- checks
    def tick(self, now_ms: int) -> list[tuple[str, int]]:
        """Check every open half older than the timeout once: put it back with one more
        check (and queue the check for its group), or discard it after ``check_max``
        checks. Returns the queues discarded halves were appended to."""
        woken: list[tuple[str, int]] = []
        for key, half in list(self.open.items()):
            if now_ms - half.stored_ms < self.timeout_ms:
                continue
            stored = self.store.lookup_message(half.offset, decompress=False)
            if stored is None:  # expired with its segment: nothing left to check
                logger.error(
                    "transaction %d (%s): its half message expired unchecked", key, half.msg_id
                )
                del self.open[key]
                self.dirty = True
                continue
            if half.checks >= self.check_max:
                if self._discard(key, half, stored):
                    woken.append((TRANS_CHECK_MAX_TIME_TOPIC, 0))
                continue
            inner = stored.to_inner()
            props = dict(inner.properties)
            for name in _SEQUENCE_ONLY:
                props.pop(name, None)
            props[P.TRANSACTION_CHECK_TIMES] = str(half.checks + 1)
            again = msgspec.structs.replace(
                inner, properties=props, prepared_transaction_offset=key
            )
            result = self._put([again])
            if not result.ok:
                logger.error("transaction %d: putting its half back failed: %s", key, result.error)
                continue
            self.pending.setdefault(half.group, {})[key] = None
        return woken

    def _discard(self, key: int, half: OpenHalf, stored: MessageExt) -> bool:
        inner = stored.to_inner()
        record = msgspec.structs.replace(
            inner,
            topic=TRANS_CHECK_MAX_TIME_TOPIC,
            queue_id=0,
            sys_flag=_typed(inner.sys_flag, TRANSACTION_COMMIT_TYPE),
            prepared_transaction_offset=key,
        )
        result = self._put([record])
        if not result.ok:
            logger.error("transaction %d: discarding it failed: %s", key, result.error)
            return False
        self.discarded += 1
        logger.warning(
            "transaction %d (message %s of producer group %r, topic %s) was checked %d times "
            "without an answer: discarded to %s",
            key,
            half.msg_id,
            half.group,
            half.topic,
            half.checks,
            TRANS_CHECK_MAX_TIME_TOPIC,
        )
        return True

    def take_checks(self, group: str, max_num: int) -> list[tuple[int, MessageExt]]:
        """Up to ``max_num`` queued checks of ``group``: (key, the message as sent)."""
        queued = self.pending.get(group)
        out: list[tuple[int, MessageExt]] = []
        while queued and len(out) < max_num:
            key = next(iter(queued))
            del queued[key]
            half = self.open.get(key)
            msg = self.store.lookup_message(half.offset) if half is not None else None
            if half is None or msg is None:
                continue
            msg.topic, msg.queue_id = half.topic, half.queue_id
            msg.properties = {
                k: v for k, v in msg.properties.items() if k not in (P.REAL_TOPIC, P.REAL_QID)
            }
            msg.prepared_transaction_offset = key
            out.append((key, msg))
        if not queued:
            self.pending.pop(group, None)
        return out

    # -------------------------------------------------------- durability
    def persist(self, commitlog_offset: int) -> bool:
        """Snapshot the table as covering the log up to ``commitlog_offset``."""
        if not self.dirty and commitlog_offset == self.snapshot_offset:
            return False
        self.file.save(TransactionFile(commitlog_offset=commitlog_offset, open=dict(self.open)))
        self.snapshot_offset, self.dirty = commitlog_offset, False
        return True


__all__ = ["FILE_NAME", "Ended", "OpenHalf", "TransactionService"]
