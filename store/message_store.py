"""MessageStore: the facade the broker holds (RocketMQ ``DefaultMessageStore``).

Directory layout under the store root::

    lock                          flock'ed while a store has the directory open
    abort                         present while open; found on open => last run crashed
    checkpoint                    durable offsets (checkpoint.py)
    commitlog/<20 digits>         records (commitlog.py, codec.py)
    consumequeue/<topic>/<qid>/<20 digits>   20-byte entries (consume_queue.py)
    index/<20 digits>             key index (index_file.py)
    config/dispatch.json          known queues and their sizes, for damage detection (manifest.py)
    config/*.json                 topics, groups, offsets (rayq.actors.server.tables, the broker's)

Delayed messages are ordinary records of the system topic SCHEDULE_TOPIC_XXXX
until they are due (schedule.py keeps that topic's queues and progress).
Transaction halves (RMQ_SYS_TRANS_HALF_TOPIC, sys_flag PREPARED) and rollback ops
(RMQ_SYS_TRANS_OP_HALF_TOPIC, ROLLBACK) are records without consume-queue entries,
on append and on recovery alike; the broker's transaction table replays them.

One writer: ``put_messages`` appends a batch to the commit log and dispatches it
to consume queues and the index in the same call. Readers use ``get_messages``
(raw records, RocketMQ's statuses) and the lookups. ``flush`` makes everything
durable and writes the checkpoint; the same steps can run in another process
(flush.py). ``retention_tick`` deletes expired segments (retention.py). Past
``disk_warning_ratio`` puts are refused with DISK_FULL; the disk is measured only
when that is due (disk_gauge.py).
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import struct
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

import msgspec
import numpy as np

from . import codec
from . import properties as P
from .batch import (
    BatchRejected,
    EncodedBatch,
    check_encoded,
    encode_batch,
    fill_one_store_block,
    fill_store_block,
    own_layout,
    split_by_queue,
)
from .bulk_reader import RecordPage, read_page
from .checkpoint import ABORT_NAME, load_checkpoint
from .clock import SYSTEM_CLOCK, Clock
from .commitlog import CommitLog, DispatchBatch
from .config import DEFAULT_STORE_CONFIG, StoreConfig
from .consume_queue import ENTRY, HOLE_SIZE, ConsumeQueue, pack_entries
from .disk_gauge import DiskGauge
from .errors import (
    ClosedError,
    InvalidMessageError,
    InvalidOffsetError,
    MessageTooLargeError,
    RayqError,
    StoreLockedError,
)
from .filters import TagFilter
from .flush import DiskFlusher
from .index_file import IndexService
from .json_file import JsonFile
from .manifest import DispatchManifest, damaged_queues, index_damaged
from .message import (
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    TRANSACTION_TYPE_MASK,
    GetResult,
    GetStatus,
    InnerMessage,
    MessageExt,
    PutResult,
    PutStatus,
)
from .names import (
    NAME_PATTERN,
    NO_QUEUE_TOPICS,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
    validate_topic,
)
from .reader import QueueReader
from .recovery import RecoveryReport, rebuild_scan, validate_tail
from .replica import append_chunk, read_chunk, whole_records
from .retention import RetentionPolicy, RetentionReport
from .scanner import GoodRun
from .warm import Warmer

logger = logging.getLogger(__name__)

QueueKey = tuple[str, int]
QUEUE_ID_MAX = codec.QUEUE_ID_MAX
INDEX_BATCH = 8192  # index entries are buffered and written this many at a time
VIEW_CANDIDATES_MAX = 32  # view_message: messages of a topic whose KEYS hold the id, read


T = TypeVar("T")


def _permute(column: list[T], order: list[int]) -> None:
    """``column`` reordered in place: its ``order[i]``-th item goes to ``i``."""
    column[:] = [column[j] for j in order]


class MessageStore:
    """The storage engine of one broker. Not thread-safe: one caller at a time."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        config: StoreConfig = DEFAULT_STORE_CONFIG,
        *,
        clock: Clock = SYSTEM_CLOCK,
        store_host: str = "127.0.0.1:10911",
        disk_usage: Callable[[Path], float] | None = None,
        broker_name: str = "",
    ) -> None:
        self.root = Path(root)
        self.config = config
        self.clock = clock
        self.broker_name = broker_name
        self.root.mkdir(parents=True, exist_ok=True)
        self._lock_fd = _lock(self.root)
        self._closed = False
        self._store_host = codec.encode_host(store_host)
        self._store_host_hex = self._store_host.hex().upper()
        measure = disk_usage or _disk_used_ratio
        self.disk = DiskGauge(
            self.root, measure, config.disk_warning_ratio, config.disk_check_interval_ms
        )
        self.commitlog = CommitLog(
            self.root / "commitlog", config.commitlog_segment_size_bytes, self.disk.stale
        )
        self.index = IndexService(
            self.root / "index", config.index_hash_slots, config.index_entries_max, self.disk.stale
        )
        self._warmer: Warmer | None = None  # started by the first append (warm.py)
        self.queues: dict[QueueKey, ConsumeQueue] = {}
        self._queue_offsets: dict[QueueKey, int] = {}
        self._pending_index: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._pending_count = 0
        self._transaction_records: list[int] = []
        (self.root / "config").mkdir(exist_ok=True)
        self._manifest_file = JsonFile(self.root / "config" / "dispatch.json", DispatchManifest)
        self._manifest = self._manifest_file.load() or DispatchManifest()
        self._manifest_saved = msgspec.json.encode(self._manifest)
        self.retention = RetentionPolicy(config, measure)
        self._reader = QueueReader(self.commitlog, config)
        self.flusher = DiskFlusher(self.root, config.commitlog_segment_size_bytes, clock)
        try:
            self.recovery = self._recover()
        except BaseException:
            self._close_files()
            raise
        (self.root / ABORT_NAME).touch()

    # ------------------------------------------------------------------ open
    def _load_queues(self) -> None:
        cq_root = self.root / "consumequeue"
        if not cq_root.is_dir():
            return
        for topic_dir in sorted(cq_root.iterdir()):
            if not NAME_PATTERN.fullmatch(topic_dir.name):
                logger.warning("ignoring %s: not a topic name", topic_dir)
                continue
            for queue_dir in sorted(topic_dir.iterdir()):
                if queue_dir.name.isdigit():
                    self._open_queue(topic_dir.name, int(queue_dir.name))

    def _open_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = ConsumeQueue(
            self.root, topic, queue_id, self.config.cq_entries_per_file, self.disk.stale
        )
        self.queues[(topic, queue_id)] = cq
        self._queue_offsets[(topic, queue_id)] = cq.max_offset
        return cq

    def _damaged_queues(self) -> list[QueueKey]:
        return damaged_queues(self._manifest, self.queues)

    def _index_damaged(self) -> bool:
        if not self.config.message_index_enable:
            return False
        return index_damaged(self._manifest, self.index, self.commitlog.min_offset)

    def _recover(self) -> RecoveryReport:
        abnormal = (self.root / ABORT_NAME).exists()
        self._load_queues()
        cl = self.commitlog
        for seg in cl.file.segments:
            seg.wrote = seg.size  # provisional; validate_tail decides the end
        if cl.file.segments:
            last = cl.file.segments[-1]
            last.wrote = last.data_end(0)
        start = self._recover_start(load_checkpoint(self.root).recover_from)
        report = RecoveryReport(abnormal=abnormal, start_offset=start)
        if abnormal:
            logger.warning("store %s was not closed cleanly; recovering from %d", self.root, start)
        self._rebuild_damaged(start, report)
        owners: dict[int, tuple[str, int, int]] = {}
        for cq in self.queues.values():
            for queue_offset, offset in cq.entries_from_commitlog(start):
                owners[offset] = (cq.topic, cq.queue_id, queue_offset)
            report.cq_entries_dropped += cq.truncate_from_commitlog(start)
            self._queue_offsets[(cq.topic, cq.queue_id)] = cq.max_offset
        data_end = cl.max_offset  # the last non-zero byte (set above)
        end = validate_tail(cl, start, report, self._dispatch, owners)
        if end < data_end:
            report.truncated_at, report.truncated_bytes = end, data_end - end
            logger.error(
                "recovery: truncated commit log at %d, dropping %d bytes", end, data_end - end
            )
        cl.truncate(end)
        for cq in self.queues.values():
            cq.truncate_from_commitlog(end)
            self._queue_offsets[(cq.topic, cq.queue_id)] = cq.max_offset
        report.end_offset = end
        self._reindex_gap(start)
        self._write_index()
        for cq in self.queues.values():
            cq.correct_min_offset(cl.min_offset)
        self.flusher.reset(min(start, end))
        self._persist_manifest()
        self._replica_dispatched = end
        return report

    def _reindex_gap(self, start: int) -> None:
        """Index records between the index's last entry and ``start``.

        The checkpoint's index offset comes from whoever flushed; index entries are
        buffered before they reach the files, so the files may end earlier.
        """
        indexed_to = self.index.end_phy_offset
        if not self.config.message_index_enable or not 0 <= indexed_to < start:
            return
        rebuild_scan(self.commitlog, start, lambda b: self._dispatch(b, only=set()), indexed_to)

    def _recover_start(self, checkpointed: int) -> int:
        """Where re-validation starts: the checkpoint, unless the files contradict it.

        A segment found cut short lost bytes the checkpoint may call durable:
        re-validate from that segment's start, so that a torn record there is found
        and truncated (or set aside) before anything is appended after it."""
        cl = self.commitlog
        segs = cl.file.segments
        if not segs:
            return 0
        start = max(checkpointed, cl.min_offset)
        if start >= segs[-1].end or cl.file.find(start) is None:
            start = segs[-1].start  # checkpoint beyond the files: re-validate the last segment
        cut = [s for s in cl.file.cut if s < start]
        if cut:
            logger.error(
                "commit-log segments %s were found cut short; re-validating from %d", cut, cut[0]
            )
            start = cut[0]
        return start

    def _rebuild_damaged(self, upto: int, report: RecoveryReport) -> None:
        damaged = set(self._damaged_queues())
        rebuild_index = self._index_damaged()
        if not damaged and not rebuild_index:
            return
        for key in damaged:
            logger.error("consume queue %s/%d is damaged; rebuilding it", *key)
            cq = self.queues.pop(key, None)
            if cq is not None:
                cq.destroy()
            report.queues_rebuilt.append(f"{key[0]}/{key[1]}")
        if rebuild_index:
            logger.error("index files are missing; rebuilding the key index")
            self.index.destroy_all()
            report.index_rebuilt = True

        def sink(batch: DispatchBatch) -> None:
            self._dispatch(batch, only=damaged, index=rebuild_index)

        rebuild_scan(self.commitlog, upto, sink, report=report)
        self._write_index()
        for key in damaged:
            if key not in self.queues:
                self._open_queue(*key)

    # ---------------------------------------------------------------- append
    def put_message(self, msg: InnerMessage) -> PutResult:
        return self.put_messages([msg])

    def put_messages(self, msgs: Sequence[InnerMessage]) -> PutResult:
        """Encode and append messages (any topics/queues): all of them or none."""
        self._check_open()
        cfg = self.config
        try:
            if not msgs:
                raise InvalidMessageError("empty batch: nothing to append")
            if {m.__class__ for m in msgs} != {InnerMessage}:
                bad = next(m for m in msgs if m.__class__ is not InnerMessage)
                raise InvalidMessageError(
                    f"batch items must be InnerMessage, got {type(bad).__name__}"
                )
            _check_transaction_types(msgs)
            groups, order = split_by_queue(msgs)
            batches = [
                encode_batch(
                    group,
                    max_body_bytes=cfg.max_message_size_bytes,
                    max_properties_bytes=cfg.max_properties_size_bytes,
                )
                for group in groups
            ]
        except MessageTooLargeError as exc:
            props = exc.details.get("field") == "properties"
            status = PutStatus.PROPERTIES_SIZE_EXCEEDED if props else PutStatus.MESSAGE_ILLEGAL
            return PutResult(status=status, error=str(exc))
        except (RayqError, AttributeError, TypeError, struct.error) as exc:
            return PutResult(status=PutStatus.MESSAGE_ILLEGAL, error=f"invalid message: {exc}")
        result = self._put_batches(batches, transactional=True)
        if len(batches) > 1 and result.ok:  # columns back in the caller's message order
            back = sorted(range(len(order)), key=order.__getitem__)
            _permute(result.msg_ids, back)
            _permute(result.queue_offsets, back)
            _permute(result.commitlog_offsets, back)
            _permute(result.store_sizes, back)
        return result

    def put_encoded(self, batch: EncodedBatch, *, own: bool = False) -> PutResult:
        """Append a batch a producer encoded (batch.py): the broker's hot path.

        A batch marked ``scheduled`` is MESSAGE_ILLEGAL here: the broker's schedule service
        parks its delayed records (appended as is, they would be delivered at once).
        ``own``: the broker encoded the batch itself (``put_arrow``), so its records are
        not checked again one by one (batch.check_encoded); only its columns' shape is."""
        self._check_open()
        if getattr(batch, "topic", None) in NO_QUEUE_TOPICS:
            return PutResult(
                status=PutStatus.MESSAGE_ILLEGAL,
                error=f"topic {batch.topic!r} holds the broker's transaction records; "
                "send transactional messages with TransactionProducer",
            )
        if getattr(batch, "scheduled", False) is not False:
            return PutResult(
                status=PutStatus.MESSAGE_ILLEGAL,
                error="a batch marked scheduled (DELAY or __DELIVER_AT_MS) goes through the "
                "broker's schedule service, not straight into the store",
            )
        return self._put_batches([batch], own=own)

    def _put_batches(
        self, batches: list[EncodedBatch], transactional: bool = False, own: bool = False
    ) -> PutResult:
        checked = []
        for b in batches:
            try:
                layout = own_layout(b) if own else self._check_encoded(b, transactional)
                checked.append((b, layout))
            except (BatchRejected, RayqError) as exc:
                return PutResult(status=PutStatus.MESSAGE_ILLEGAL, error=str(exc))
        now = self.clock.now_ms()
        allocating = self.commitlog.needs_segment(sum(len(b.records) for b in batches))
        if self.disk.check(now, allocating=allocating):
            return PutResult(
                status=PutStatus.DISK_FULL,
                error=f"disk usage {self.disk.ratio:.1%} is past disk_warning_ratio="
                f"{self.config.disk_warning_ratio}; writes are refused until retention (or "
                "someone else) frees space",
            )
        out = PutResult(
            status=PutStatus.PUT_OK, store_timestamp=now, store_host=self._store_host_hex
        )
        for b, (starts, crcs) in checked:
            self._write_batch(b, starts, crcs, now, out)
        self._warm()
        return out

    def _check_encoded(
        self, b: EncodedBatch, transactional: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        if b.__class__ is not EncodedBatch:
            raise BatchRejected(f"expected an EncodedBatch, got {type(b).__name__}")
        validate_topic(b.topic)
        if b.queue_id.__class__ is not int or not 0 <= b.queue_id <= codec.QUEUE_ID_MAX:
            raise BatchRejected(f"queue_id {b.queue_id!r} is outside 0..{codec.QUEUE_ID_MAX}")
        cfg = self.config
        return check_encoded(
            b, cfg.max_message_size_bytes, cfg.max_properties_size_bytes, transactional
        )

    def _write_batch(
        self, b: EncodedBatch, starts: np.ndarray, crcs: np.ndarray, now: int, out: PutResult
    ) -> None:
        """Copy a checked batch into the commit log (rolling segments) and dispatch it.
        Records of NO_QUEUE_TOPICS (transaction halves and ops) get queue offset 0 and no
        consume-queue entry, as RocketMQ's PREPARED and ROLLBACK records."""
        key = (b.topic, b.queue_id)
        queued = b.topic not in NO_QUEUE_TOPICS
        qoff = self._queue_offsets.get(key) if queued else 0
        if qoff is None:
            qoff = self._new_queue(key)
        if b.count == 1:  # a single send: the same, without numpy's per-call costs
            self._write_one(b, int(crcs[0]), now, out, key if queued else None, qoff)
            return
        sizes = np.frombuffer(b.sizes, dtype="<i4").astype(np.int64)
        ends = starts + sizes
        phys = np.empty(b.count, dtype=np.int64)
        i = 0
        while i < b.count:
            seg = self.commitlog.writable_segment(int(sizes[i]))
            room = seg.size - seg.wrote - codec.BLANK_SIZE_MIN
            if int(ends[-1]) - int(starts[i]) <= room:  # the rest fits (a small batch)
                k = b.count - i
            else:
                k = int(np.searchsorted(ends[i:] - starts[i], room, side="right"))
            base = int(starts[i])
            chunk = fill_store_block(
                b.records[base : int(ends[i + k - 1])],
                starts[i : i + k] - base,
                crcs[i : i + k],
                qoff + i,
                seg.start + seg.wrote,
                now,
                self._store_host,
            )
            phys[i : i + k] = starts[i : i + k] - base + seg.start + seg.wrote
            seg.write(seg.wrote, chunk)
            seg.wrote += len(chunk)
            i += k
        if queued:
            self._queue_offsets[key] = qoff + b.count
            codes = np.frombuffer(b.tags_codes, dtype="<i8")
            self.queues[key].put(qoff, pack_entries(phys, sizes, codes))
        if self.config.message_index_enable and b.index_hashes:
            owners = np.frombuffer(b.index_records, dtype="<i4")
            hashes = np.frombuffer(b.index_hashes, dtype="<i8")
            self._queue_index(hashes, phys[owners], np.full(len(owners), now, dtype=np.int64))
        out.msg_ids.extend(b.msg_ids)
        out.queue_offsets.extend(range(qoff, qoff + b.count))
        out.commitlog_offsets.extend(phys.tolist())
        out.store_sizes.extend(sizes.tolist())

    def _write_one(
        self, b: EncodedBatch, crc: int, now: int, out: PutResult, key: QueueKey | None, qoff: int
    ) -> None:
        """``_write_batch`` of a checked batch of one record (``key``: its queue, None for
        records of NO_QUEUE_TOPICS)."""
        size = len(b.records)
        seg = self.commitlog.writable_segment(size)
        at = seg.start + seg.wrote
        record = fill_one_store_block(b.records, crc, qoff, at, now, self._store_host)
        seg.write(seg.wrote, record)
        seg.wrote += size
        if key is not None:
            self._queue_offsets[key] = qoff + 1
            (code,) = _TAGS_CODE.unpack(b.tags_codes)
            self.queues[key].put(qoff, ENTRY.pack(at, size, code))
        if self.config.message_index_enable and b.index_hashes:
            hashes = np.frombuffer(b.index_hashes, dtype="<i8")
            places = np.full(len(hashes), at, dtype=np.int64)
            self._queue_index(hashes, places, np.full(len(hashes), now, dtype=np.int64))
        out.msg_ids.extend(b.msg_ids)
        out.queue_offsets.append(qoff)
        out.commitlog_offsets.append(at)
        out.store_sizes.append(size)

    def _new_queue(self, key: QueueKey) -> int:
        cq = self.queues.get(key) or self._open_queue(*key)
        self._manifest.queues.setdefault(key[0], {})[key[1]] = [cq.min_offset, cq.max_offset]
        self._persist_manifest()
        return cq.max_offset

    # ----------------------------------------------------------- replication
    def replica_read(self, offset: int, max_bytes: int) -> bytes:
        """A master's answer to a slave at ``offset``: raw commit-log bytes (replica.py)."""
        self._check_open()
        return read_chunk(self.commitlog, offset, max_bytes)

    def truncate_to(self, offset: int) -> int:
        """Cut the commit log at ``offset`` (a record boundary): a slave's divergent tail,
        fenced by its master's epochs. The cut bytes are kept in ``quarantine/`` first;
        consume queues lose their entries from there on. Returns the bytes cut."""
        self._check_open()
        cl = self.commitlog
        end = cl.max_offset
        if not cl.min_offset <= offset <= end:
            raise InvalidOffsetError(
                f"cannot truncate the commit log at {offset}: it holds [{cl.min_offset}, {end})",
                offset=offset,
            )
        if offset == end:
            return 0
        self._write_index()
        cl.keep_copy(offset, end)
        cl.truncate(offset)
        for cq in self.queues.values():
            cq.truncate_from_commitlog(offset)
            self._queue_offsets[(cq.topic, cq.queue_id)] = cq.max_offset
        self._replica_dispatched = offset
        self.flusher.reset(min(offset, self.flusher.commitlog_flushed))
        self.flush()
        logger.warning(
            "store %s: commit log truncated at %d, %d bytes cut (kept in quarantine/)",
            self.root,
            offset,
            end - offset,
        )
        return end - offset

    def replica_append(self, offset: int, data: bytes) -> set[tuple[str, int]]:
        """A slave's append of its master's bytes at ``offset`` (its written offset), and
        the dispatch of every record they complete; returns the queues that grew."""
        self.replica_write(offset, data)
        return self.replica_dispatch()

    @property
    def replica_dispatched(self) -> int:
        """A slave's commit-log offset below which every record is dispatched."""
        return self._replica_dispatched

    def take_transaction_records(self) -> list[int]:
        """The offsets of the transaction records (TRAN_MSG) ``replica_dispatch`` found
        since the last call, in log order (a slave's transaction table applies them)."""
        found, self._transaction_records = self._transaction_records, []
        return found

    def replica_write(self, offset: int, data: bytes) -> None:
        """A slave's append of its master's bytes at ``offset`` (its written offset)."""
        self._check_open()
        append_chunk(self.commitlog, offset, data)
        self._warm()

    def replica_dispatch(self) -> set[tuple[str, int]]:
        """Dispatch every record the replicated bytes completed (each checked: framing,
        CRC, position); returns the queues that grew."""
        self._check_open()
        batch = DispatchBatch()
        pos = self._replica_dispatched
        for item in whole_records(self.commitlog, pos):
            if isinstance(item, GoodRun):
                batch.add_run(item)
                pos = item.offsets[-1] + item.sizes[-1]
            else:
                offset_, size, parsed = item
                self.commitlog.dispatch(offset_, size, parsed, batch)
                pos = offset_ + size
        if len(batch):
            self._dispatch(batch)
            self._transaction_records += batch.tx_offsets
        self._replica_dispatched = max(pos, self._replica_dispatched)
        return set(zip(batch.topics, batch.queue_ids, strict=True))

    # -------------------------------------------------------------- dispatch
    def _dispatch(
        self, batch: DispatchBatch, only: set[QueueKey] | None = None, index: bool = True
    ) -> None:
        """Recovery's dispatch of re-validated records (to ``only`` these queues)."""
        self._dispatch_queues(batch, only)
        if index and self.config.message_index_enable and batch.index_hashes:
            self._queue_index(
                np.asarray(batch.index_hashes, dtype=np.int64),
                np.asarray(batch.index_offsets, dtype=np.int64),
                np.asarray(batch.index_times, dtype=np.int64),
            )

    def _dispatch_queues(self, batch: DispatchBatch, only: set[QueueKey] | None = None) -> None:
        groups: dict[QueueKey, list[int]] = {}
        for i, key in enumerate(zip(batch.topics, batch.queue_ids, strict=True)):
            if (only is None or key in only) and key[0] not in NO_QUEUE_TOPICS:
                groups.setdefault(key, []).append(i)
        for key, idx in groups.items():
            cq = self.queues.get(key) or self._open_queue(*key)
            qoffs = [batch.queue_offsets[i] for i in idx]
            offs = [batch.offsets[i] for i in idx]
            sizes = [batch.sizes[i] for i in idx]
            codes = [batch.tags_codes[i] for i in idx]
            if qoffs[-1] - qoffs[0] == len(idx) - 1:
                cq.put(qoffs[0], pack_entries(offs, sizes, codes))
            else:  # not consecutive (a quarantined record left a hole)
                for q, o, z, c in zip(qoffs, offs, sizes, codes, strict=True):
                    cq.put(q, pack_entries([o], [z], [c]))
            self._queue_offsets[key] = cq.max_offset

    def _queue_index(self, hashes: np.ndarray, offsets: np.ndarray, times: np.ndarray) -> None:
        """Buffer index entries; they are written in large batches (cheap per key)."""
        if self._manifest.indexed_from < 0:
            self._manifest.indexed_from = int(offsets[0])
            self._persist_manifest()
        self._pending_index.append((hashes, offsets, times))
        self._pending_count += len(hashes)
        if self._pending_count >= INDEX_BATCH:
            self._write_index()

    def _write_index(self) -> None:
        if self._pending_index:
            parts = self._pending_index
            self._pending_index, self._pending_count = [], 0
            self.index.put(*(np.concatenate([p[j] for p in parts]) for j in range(3)))

    # ------------------------------------------------------------------ read
    def get_messages(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_nums: int = 32,
        tag_filter: TagFilter | None = None,
    ) -> GetResult:
        """Up to ``max_nums`` records of a queue from ``offset`` (RocketMQ ``getMessage``)."""
        self._check_open()
        validate_topic(topic)
        _check_int("queue_id", queue_id, 0, QUEUE_ID_MAX)
        _check_int("offset", offset, 0, 2**63 - 1)
        _check_int("max_nums", max_nums, 1, 2**31 - 1)
        del group  # offsets are the broker's business; kept for RocketMQ's signature
        cq = self.queues.get((topic, queue_id))
        if cq is None:
            return GetResult(
                status=GetStatus.NO_MATCHED_LOGIC_QUEUE,
                next_begin_offset=0,
                min_offset=0,
                max_offset=0,
            )
        return self._reader.read(cq, offset, max_nums, tag_filter)

    def read_page(
        self, topic: str, queue_id: int, queue_offset: int, max_count: int, max_bytes: int
    ) -> RecordPage:
        """Records of a queue in bulk, for columnar readers (bulk_reader.py); an unknown
        queue answers NO_MATCHED_LOGIC_QUEUE."""
        self._check_open()
        cq = self.queues.get((topic, queue_id))
        if cq is None:
            return RecordPage(GetStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0)
        return read_page(self.commitlog, cq, queue_offset, max_count, max_bytes)

    def lookup_message(
        self, commitlog_offset: int, *, decompress: bool = True
    ) -> MessageExt | None:
        """The message stored at a physical offset, or None. ``decompress=False`` keeps a
        compressed body as stored (its sys_flag still says so), for re-appending it."""
        self._check_open()
        _check_int("commitlog_offset", commitlog_offset, 0, 2**63 - 1)
        raw = self.commitlog.read_at(commitlog_offset)
        if raw is None or len(raw) < codec.FIXED_SIZE:
            return None
        view = memoryview(raw)
        verdict, _, _ = codec.parse_record(view, 0, len(raw))
        view.release()
        if verdict is not codec.Check.OK:
            return None
        return codec.decode_record(raw, decompress=decompress, broker_name=self.broker_name)

    def query_message(
        self, topic: str, key: str, max_num: int = 32, begin_ms: int = 0, end_ms: int | None = None
    ) -> list[MessageExt]:
        """Messages of ``topic`` whose KEYS or UNIQ_KEY is ``key``, newest first."""
        self._check_open()
        validate_topic(topic)
        _check_int("max_num", max_num, 1, 64 * 1024)
        end = self.clock.now_ms() if end_ms is None else end_ms
        out: list[MessageExt] = []
        self._write_index()
        for phys in self.index.lookup(f"{topic}#{key}", begin_ms, end, max_num):
            msg = self.lookup_message(phys) if phys >= self.commitlog.min_offset else None
            if msg is None or msg.topic != topic or not begin_ms <= msg.store_timestamp <= end:
                continue
            if key in msg.keys or msg.properties.get(P.UNIQ_KEY) == key:
                out.append(msg)
                if len(out) >= max_num:
                    break
        return out

    def view_message(self, msg_id: str, topic: str | None = None) -> MessageExt | None:
        """A message by offset message id, or by unique id (in ``topic`` or any topic)."""
        self._check_open()
        decoded = codec.decode_offset_msg_id(msg_id)
        if decoded is not None and decoded[1] >= 0:
            msg = self.lookup_message(decoded[1])
            if msg is not None and msg.offset_msg_id == msg_id.upper():
                return msg
        for t in [topic] if topic else self.topics():
            # by its unique id only: a message whose KEYS hold that id (a trace record)
            # is another message
            for msg in self.query_message(t, msg_id, max_num=VIEW_CANDIDATES_MAX):
                if msg.msg_id == msg_id:
                    return msg
        return None

    # --------------------------------------------------------------- offsets
    def topics(self) -> list[str]:
        self._check_open()
        return sorted({t for t, _ in self.queues})

    def queue_ids(self, topic: str) -> list[int]:
        self._check_open()
        return sorted(q for t, q in self.queues if t == topic)

    def min_offset(self, topic: str, queue_id: int) -> int:
        self._check_open()
        cq = self.queues.get((topic, queue_id))
        return cq.min_offset if cq is not None else 0

    def max_offset(self, topic: str, queue_id: int) -> int:
        self._check_open()
        cq = self.queues.get((topic, queue_id))
        return cq.max_offset if cq is not None else 0

    def queue_offset_at(self, topic: str, queue_id: int, commitlog_offset: int) -> int:
        """The first queue offset whose record starts at or past ``commitlog_offset`` (the
        queue's max offset if none does): where a queue stood when the commit log ended
        there, e.g. where an epoch ended (KIP-320's end offset for a leader epoch)."""
        self._check_open()
        cq = self.queues.get((topic, queue_id))
        if cq is None:
            return 0
        return cq.max_offset - cq.truncate_preview(commitlog_offset)

    def offset_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """First queue offset stored at or after ``timestamp_ms`` (max offset if none)."""
        self._check_open()
        cq = self.queues.get((topic, queue_id))
        if cq is None:
            return 0
        return cq.offset_by_time(timestamp_ms, self.commitlog.store_timestamp_at)

    def store_time_of(self, topic: str, queue_id: int, queue_offset: int) -> int | None:
        self._check_open()
        cq = self.queues.get((topic, queue_id))
        e = cq.entry(queue_offset) if cq is not None else None
        if e is None or e[1] in (0, HOLE_SIZE):
            return None
        return self.commitlog.store_timestamp_at(e[0])

    def delete_topic(self, topic: str) -> int:
        """Drop a topic's consume queues (its records age out of the commit log)."""
        self._check_open()
        validate_topic(topic)
        keys = [k for k in self.queues if k[0] == topic]
        for key in keys:
            self.queues.pop(key).destroy()
            self._queue_offsets.pop(key, None)
        shutil.rmtree(self.root / "consumequeue" / topic, ignore_errors=True)
        self._manifest.queues.pop(topic, None)
        self._persist_manifest()
        return len(keys)

    # ------------------------------------------------------------ durability
    @property
    def written_offset(self) -> int:
        """Commit-log bytes written so far (what a flusher should make durable)."""
        return self.commitlog.max_offset

    @property
    def dispatched_offset(self) -> int:
        """Commit-log offset below which consume-queue and index entries are in their files.

        Writes buffered index entries first; a flusher in another process passes this
        to ``DiskFlusher.flush_logics``.
        """
        self._check_open()
        self._write_index()
        return self.commitlog.max_offset

    def flush(self, least_pages: int = 0) -> int:
        """Flush commit log, consume queues and index, then write the checkpoint."""
        self._check_open()
        self._write_index()
        written = self.commitlog.max_offset
        flushed = self.flusher.flush_commitlog(written, least_pages)
        self.flusher.flush_logics(written)
        self._persist_manifest()
        self.flusher.checkpoint()
        return flushed

    def _persist_manifest(self) -> None:
        for (topic, qid), cq in self.queues.items():
            self._manifest.queues.setdefault(topic, {})[qid] = [cq.min_offset, cq.max_offset]
        self._manifest.indexed_to = self.index.end_phy_offset
        encoded = msgspec.json.encode(self._manifest)
        if encoded != self._manifest_saved:  # unchanged: no write, no .bak rotation
            self._manifest_file.save(self._manifest)
            self._manifest_saved = encoded

    # ------------------------------------------------------------- retention
    def retention_tick(self) -> RetentionReport:
        """Delete expired segments if it is time (or the disk is filling), update disk state."""
        self._check_open()
        now = self.clock.now_ms()
        report = self.retention.tick(self.root, now, self._segment_ages())
        self.disk.update(report.disk_ratio, now)
        for _ in range(report.segments_to_delete):
            self.commitlog.delete_first_segment()
        if report.segments_to_delete:
            self._write_index()
            cl_min = self.commitlog.min_offset
            for cq in self.queues.values():
                report.cq_segments_deleted += cq.delete_expired(cl_min)
            report.index_files_deleted = self.index.delete_before(cl_min)
            self._persist_manifest()
            logger.info("retention: %s", report)
            self.disk.stale()  # space was freed: the next put measures again
        return report

    def _segment_ages(self) -> list[int | None]:
        """For every commit-log segment but the last: when it was last written (ms).

        A segment's last record is older than the next segment's first record.
        """
        segs = self.commitlog.file.segments
        return [self.commitlog.store_timestamp_at(s.start) for s in segs[1:]]

    # ----------------------------------------------------------------- close
    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(f"message store {self.root} is closed")

    def close(self) -> None:
        """Flush everything, write the checkpoint and release the directory."""
        if self._closed:
            return
        self.flush()
        self._persist_manifest()
        self._closed = True
        self._close_files()
        (self.root / ABORT_NAME).unlink(missing_ok=True)
        _unlock(self._lock_fd)

    def crash(self) -> None:
        """Close without flushing or cleaning up (tests: a process killed here)."""
        self._closed = True
        self._close_files()
        _unlock(self._lock_fd)

    def _warm(self) -> None:
        """Tell the warmer where the commit log's writes are now (warm.py)."""
        ahead = self.config.commitlog_warm_ahead_bytes
        seg = self.commitlog.file.last()
        if not ahead or seg is None:
            return
        if self._warmer is None:
            self._warmer = Warmer(ahead, f"rayq-warmer-{self.broker_name}")
        self._warmer.wrote(seg.path, seg.wrote, seg.size)

    def _close_files(self) -> None:
        if self._warmer is not None:
            self._warmer.close()
            self._warmer = None
        self.commitlog.close()
        for cq in self.queues.values():
            cq.close()
        self.index.close()

    def __enter__(self) -> MessageStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _check_transaction_types(msgs: Sequence[InnerMessage]) -> None:
    """PREPARED records only in the half topic, ROLLBACK only in the op topic, and those
    two topics hold nothing else; COMMIT (a committed message, or a copy of one sent
    back) goes anywhere else."""
    for m in msgs:
        kind = m.sys_flag & TRANSACTION_TYPE_MASK
        wanted = _NO_QUEUE_TYPES.get(m.topic)
        if wanted is not None and kind != wanted:
            raise InvalidMessageError(
                f"topic {m.topic!r} holds only the broker's transaction records "
                f"(sys_flag type {wanted:#x}), not type {kind:#x}"
            )
        if wanted is None and kind in (TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE):
            raise InvalidMessageError(
                f"a half message or rollback (sys_flag type {kind:#x}) belongs in "
                f"{TRANS_HALF_TOPIC} or {TRANS_OP_HALF_TOPIC}, not {m.topic!r}"
            )


_TAGS_CODE = struct.Struct("<q")  # one item of EncodedBatch.tags_codes

_NO_QUEUE_TYPES = {
    TRANS_HALF_TOPIC: TRANSACTION_PREPARED_TYPE,
    TRANS_OP_HALF_TOPIC: TRANSACTION_ROLLBACK_TYPE,
}


def _check_int(name: str, value: object, lo: int, hi: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise InvalidOffsetError(
            f"{name} must be an int in [{lo}, {hi}], got {value!r}", value=repr(value)
        )


def _lock(root: Path) -> int:
    fd = os.open(root / "lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise StoreLockedError(
            f"store directory {root} is already open in another MessageStore or process; "
            "close it first or use another directory",
            path=str(root),
        ) from None
    return fd


def ensure_unlocked(root: Path) -> None:
    """StoreLockedError if a MessageStore (in any process of this machine) holds the store
    directory ``root`` open; the lock is let go again at once."""
    if (root / "lock").exists():
        _unlock(_lock(root))


def _unlock(fd: int) -> None:
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


def _disk_used_ratio(path: Path) -> float:
    usage = shutil.disk_usage(path)
    return usage.used / usage.total if usage.total else 0.0
