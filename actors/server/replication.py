"""Master/slave replication without Ray (RocketMQ HAService, fenced by epochs).

The slave drives it, as a Kafka follower does: it fetches from its master with the
offset it has the commit log up to (``HaFetch``); that offset is its acknowledgement
of every byte below. The master answers with raw commit-log bytes from there
(``HaChunk``, store/replica.py), or parks the fetch until something is appended.

* ``MasterReplication``: which slaves are connected and how far each is
  (``ReplicaStatus``: acked offset, lag in bytes and in time), the sends of a
  SYNC_MASTER waiting for ``min_in_sync_replicas`` slaves (one list of waiters resolved
  by every fetch: group commit), the offset acknowledged so far (sent to the slaves with
  every chunk), and the fencing of a slave whose history diverged.
* ``SlaveReplication``: what to fetch next, and applying a chunk: cutting a divergent
  tail first (after checking that the bytes below the cut agree with the master's),
  adopting the master's epochs, appending and dispatching.
* ``snapshot_tables`` / ``apply_tables``: the metadata a slave copies from its master
  (topics, subscription groups, consumer and delay offsets), and the consumer offsets
  committed on a slave while its master was away going the other way.

Fencing: the master answers a slave in an older epoch ``e`` whose log goes past the
point where ``e`` ended in the master's history with ``truncate_to`` = that point. A
slave in a newer epoch than its master, or in the master's epoch but ahead of it, has a
history the master cannot fence: ReplicationError naming both offsets, and the
slave's files are left alone.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections.abc import Callable

import msgspec

from rayq.actors.protocol import HaChunk, HaFetch, MetadataReply, MetadataRequest, ReplicaStatus
from rayq.actors.protocol.config import BrokerConfig
from rayq.actors.server.tables import ConfigStore
from rayq.actors.server.transactions import TransactionService
from rayq.store import MessageStore
from rayq.store.epochs import EpochHistory
from rayq.store.errors import ReplicationError

logger = logging.getLogger(__name__)

TAIL_CHECK_BYTES = 4096  # bytes below a truncation point the slave compares with the master


class _Slave(msgspec.Struct, kw_only=True):
    acked: int
    seen_ms: int


class MasterReplication:
    """A master's view of its slaves, and the sends waiting for them."""

    def __init__(
        self,
        store: MessageStore,
        epochs: EpochHistory,
        config: BrokerConfig,
        topics_version: Callable[[], int] = lambda: 0,
    ) -> None:
        self.store = store
        self.epochs = epochs
        self.config = config
        self.topics_version = topics_version
        self.slaves: dict[int, _Slave] = {}
        # Thread-safe: sends wait on one event loop, fetches answer on another (the actor's
        # concurrency groups), so the waiters are concurrent.futures under a lock.
        self._waiters: list[tuple[int, concurrent.futures.Future[None]]] = []
        self._lock = threading.Lock()

    # ------------------------------------------------------------ fetches
    def fetch(self, req: HaFetch, now_ms: int) -> HaChunk | None:
        """The answer to a slave's fetch, or None when it has everything (park it).

        Records the slave's acknowledgement first, which may release waiting sends."""
        written = self.store.written_offset
        fence = self._fence(req, written)
        if fence is not None:
            return fence
        self._ack(req.broker_id, req.offset, now_ms)
        if req.offset >= written and req.epoch == self.epochs.current:
            return None
        data = self.store.replica_read(
            req.offset, min(req.max_bytes, self.config.ha_transfer_batch_bytes)
        )
        epochs = self.epochs.entries if req.epoch != self.epochs.current else []
        return HaChunk(
            offset=req.offset,
            data=data,
            master_offset=written,
            epochs=epochs,
            topics_version=self.topics_version(),
            sync=self.sync,
            acked_offset=self.acknowledged(),
        )

    def _fence(self, req: HaFetch, written: int) -> HaChunk | None:
        current = self.epochs.current
        if req.epoch > current:
            raise ReplicationError(
                f"slave {req.broker_id} is in epoch {req.epoch} at commit-log offset "
                f"{req.offset}, newer than its master's epoch {current} (master at {written}): "
                "it followed another master; it is refused and keeps its files",
                offset=req.offset,
                master_offset=written,
            )
        end = written if req.epoch == current else self.epochs.end_of(req.epoch)
        if end is None:
            raise ReplicationError(
                f"slave {req.broker_id} is in epoch {req.epoch}, which its master's history "
                f"does not know (master epochs {self.epochs.entries}); slave at "
                f"{req.offset}, master at {written}: it is refused and keeps its files",
                offset=req.offset,
                master_offset=written,
            )
        if req.offset <= end:
            return None
        if req.epoch == current:
            raise ReplicationError(
                f"slave {req.broker_id} has the commit log up to {req.offset} in epoch "
                f"{current}, past its master's end {written} in the same epoch: the two "
                "histories cannot be fenced; it is refused and keeps its files",
                offset=req.offset,
                master_offset=written,
            )
        tail_from = max(end - TAIL_CHECK_BYTES, self.store.commitlog.min_offset)
        tail = _read_range(self.store, tail_from, end)
        logger.warning(
            "slave %d is ahead in epoch %d (%d > %d): telling it to truncate",
            req.broker_id,
            req.epoch,
            req.offset,
            end,
        )
        return HaChunk(
            offset=end,
            master_offset=written,
            epochs=self.epochs.entries,
            truncate_to=end,
            tail=tail,
        )

    def _ack(self, broker_id: int, offset: int, now_ms: int) -> None:
        with self._lock:
            slave = self.slaves.get(broker_id)
            if slave is None:
                logger.info("slave %d connected at commit-log offset %d", broker_id, offset)
                self.slaves[broker_id] = _Slave(acked=offset, seen_ms=now_ms)
            else:
                slave.acked, slave.seen_ms = offset, now_ms
            self._release()

    # ------------------------------------------------------- SYNC_MASTER
    @property
    def sync(self) -> bool:
        return self.config.broker_role.value == "SYNC_MASTER"

    def in_sync(self, written: int, now_ms: int) -> int:
        """How many slaves are connected and at most ``ha_slave_fallbehind_max`` behind
        ``written``."""
        return sum(
            written - s.acked <= self.config.ha_slave_fallbehind_max
            for s in self._connected(now_ms)
        )

    def slave_available(self, written: int, now_ms: int) -> bool:
        """At least ``min_in_sync_replicas`` slaves are in sync (``in_sync``)."""
        return self.in_sync(written, now_ms) >= self.config.min_in_sync_replicas

    def wait(self, offset: int) -> concurrent.futures.Future[None]:
        """A future done once ``min_in_sync_replicas`` slaves have acknowledged the log up
        to ``offset`` (await it with ``asyncio.wrap_future``; cancel it to stop waiting)."""
        future: concurrent.futures.Future[None] = concurrent.futures.Future()
        with self._lock:
            if self.acked() >= offset:
                future.set_result(None)
            else:
                self._waiters.append((offset, future))
        return future

    def acked(self) -> int:
        """The offset ``min_in_sync_replicas`` slaves have the log up to (the k-th highest
        acknowledgement; -1 while fewer slaves have fetched)."""
        k = self.config.min_in_sync_replicas
        offsets = sorted((s.acked for s in self.slaves.values()), reverse=True)
        return offsets[k - 1] if len(offsets) >= k else -1

    def acknowledged(self) -> int:
        """How far this master's sends are acknowledged as replicated: ``acked`` for a
        SYNC_MASTER, -1 (nothing promised) for an ASYNC_MASTER. Slaves learn it with every
        chunk and report it, so that a failover promotes no slave below it."""
        if not self.sync:
            return -1
        with self._lock:
            return self.acked()

    def _release(self) -> None:
        acked = self.acked()
        still = []
        for offset, future in self._waiters:
            if future.done():  # timed out and cancelled meanwhile
                continue
            if offset <= acked:
                future.set_result(None)
            else:
                still.append((offset, future))
        self._waiters = still

    # ------------------------------------------------------------ status
    def _connected(self, now_ms: int) -> list[_Slave]:
        horizon = now_ms - self.config.ha_housekeeping_ms
        return [s for s in self.slaves.values() if s.seen_ms >= horizon]

    def status(self, now_ms: int) -> list[ReplicaStatus]:
        written = self.store.written_offset
        horizon = now_ms - self.config.ha_housekeeping_ms
        out = []
        for broker_id, s in sorted(self.slaves.items()):
            lag_ms = 0
            if s.acked < written:
                stored = self.store.commitlog.store_timestamp_at(s.acked)
                lag_ms = max(now_ms - stored, 0) if stored else 0
            out.append(
                ReplicaStatus(
                    broker_id=broker_id,
                    acked_offset=s.acked,
                    lag_bytes=max(written - s.acked, 0),
                    lag_ms=lag_ms,
                    connected=s.seen_ms >= horizon,
                )
            )
        return out


class SlaveReplication:
    """A slave's side: the next fetch, and applying the master's answer."""

    def __init__(self, store: MessageStore, epochs: EpochHistory, config: BrokerConfig) -> None:
        self.store = store
        self.epochs = epochs
        self.config = config
        self.master_offset = 0
        # the highest offset a master said its sends were acknowledged up to (HaChunk's
        # acked_offset): a failover promotes no slave whose log ends below it
        self.master_acked = -1
        self.transactions: TransactionService | None = None  # set by the broker server

    def request(self) -> HaFetch:
        return HaFetch(
            broker_id=self.config.broker_id,
            offset=self.store.written_offset,
            epoch=self.epochs.current,
            max_bytes=self.config.ha_transfer_batch_bytes,
            wait_ms=self.config.ha_fetch_wait_ms,
        )

    def apply(self, chunk: HaChunk) -> set[tuple[str, int]]:
        """Fence, adopt epochs, append, dispatch; returns the queues that grew."""
        self.write(chunk)
        return self.dispatch()

    def write(self, chunk: HaChunk) -> None:
        """Fence, adopt epochs and append the bytes: after this the next fetch may carry
        the acknowledgement, while ``dispatch`` indexes what came."""
        self.master_offset = chunk.master_offset
        self.master_acked = max(self.master_acked, chunk.acked_offset)
        if chunk.truncate_to >= 0:
            self._truncate(chunk)
        if chunk.epochs:
            self.epochs.adopt(chunk.epochs)
        if chunk.data:
            self.store.replica_write(chunk.offset, chunk.data)

    def dispatch(self) -> set[tuple[str, int]]:
        """Consume-queue and index entries for the records the last writes completed;
        their transaction records go to ``transactions`` (its open halves follow)."""
        grown = self.store.replica_dispatch()
        found = self.store.take_transaction_records()
        if found and self.transactions is not None:
            self.transactions.apply_offsets(found)
        return grown

    def _truncate(self, chunk: HaChunk) -> None:
        cut, mine = chunk.truncate_to, self.store.written_offset
        low = self.store.commitlog.min_offset
        start = cut - len(chunk.tail)
        below = _read_range(self.store, start, cut) if start >= low else b""
        if cut < low or below != chunk.tail:
            raise ReplicationError(
                f"this slave's commit log (up to {mine}) and its master's differ below the "
                f"master's fencing point {cut}: its history cannot be truncated safely, so it "
                "is refused and its files are left as they are; rebuild it from a copy of "
                "the master's store",
                offset=mine,
                master_offset=cut,
            )
        logger.warning("fenced by the master: truncating this slave's log from %d to %d", mine, cut)
        self.store.truncate_to(cut)
        if self.transactions is not None:  # records past the cut may have opened or ended some
            self.transactions.rebuild()


def _read_range(store: MessageStore, start: int, end: int) -> bytes:
    """Commit-log bytes ``[start, end)`` (``replica_read`` stops at a segment's end)."""
    out = b""
    while start + len(out) < end:
        out += store.replica_read(start + len(out), end - start - len(out))
    return out


# ---------------------------------------------------------------- metadata
_ENCODER = msgspec.json.Encoder()


def snapshot_tables(tables: ConfigStore) -> MetadataReply:
    """The master's four config tables as their JSON file bytes."""
    return MetadataReply(
        topics=_ENCODER.encode(tables.topics._snapshot()),
        groups=_ENCODER.encode(tables.subscription_groups._snapshot()),
        consumer_offsets=_ENCODER.encode(tables.consumer_offsets._snapshot()),
        delay_offsets=_ENCODER.encode(tables.delay_offsets._snapshot()),
    )


def merge_slave_offsets(tables: ConfigStore, req: MetadataRequest) -> int:
    """Consumer offsets committed on a slave while its master was away: kept where they
    are ahead of the master's. Returns how many queues moved."""
    from rayq.actors.server.table_files import split_offset_key

    moved = 0
    for key, queues in req.offsets.items():
        topic, group = split_offset_key(key)
        ahead = {
            q: o for q, o in queues.items() if o > tables.consumer_offsets.query(group, topic, q)
        }
        if ahead:
            tables.consumer_offsets.commit_many(group, topic, ahead)
            moved += len(ahead)
    return moved


def apply_tables(
    tables: ConfigStore, reply: MetadataReply, keep: dict[str, dict[int, int]]
) -> None:
    """Replace a slave's tables with its master's, then re-apply ``keep`` (consumer offsets
    committed on the slave that the master has not had yet), and persist."""
    from rayq.actors.server.table_files import (
        ConsumerOffsetFile,
        DelayOffsetFile,
        SubscriptionGroupsFile,
        TopicsFile,
        split_offset_key,
    )

    for table, raw, schema in (
        (tables.topics, reply.topics, TopicsFile),
        (tables.subscription_groups, reply.groups, SubscriptionGroupsFile),
        (tables.consumer_offsets, reply.consumer_offsets, ConsumerOffsetFile),
        (tables.delay_offsets, reply.delay_offsets, DelayOffsetFile),
    ):
        value = msgspec.json.decode(raw, type=schema)
        if _ENCODER.encode(table._snapshot()) != raw:
            table._restore(value)  # type: ignore[arg-type]
            table.dirty = True
    for key, queues in keep.items():
        topic, group = split_offset_key(key)
        tables.consumer_offsets.commit_many(group, topic, queues)
    tables.persist_all()
