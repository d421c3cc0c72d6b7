"""Shared helpers for the recovery tests: a workload writer, readers and a commit-log oracle.

The oracle (``scan_commitlog``) walks the commit-log segment files on disk with the
codec's own framing rules and decodes every record. It never looks at consume
queues or index files, so "the consume queue equals one derived from the commit
log" compares two independent views (TigerBeetle ``testing/storage.zig``).

Test modules cannot import this file (``--import-mode=importlib``): they get the
helpers through the ``kit`` fixture, one ``StoreKit`` per test.
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import tempfile
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import pytest

from rayq.store import (
    FakeClock,
    GetStatus,
    InnerMessage,
    MessageExt,
    MessageStore,
    StoreConfig,
    UniqIdGenerator,
    codec,
    decode_records,
)
from rayq.store.codec import Check
from rayq.store.consume_queue import HOLE_SIZE
from rayq.store.filters import tags_code

QueueKey = tuple[str, int]
# (queue_offset, commitlog_offset, size, tags_code): one consume-queue entry.
Entry = tuple[int, int, int, int]

GROUP = "recovery-tests"


@dataclass(frozen=True)
class Sent:
    """One message the store acknowledged, and where it said it stored it."""

    topic: str
    queue_id: int
    body: bytes
    keys: tuple[str, ...]
    uniq: str
    tags: str
    queue_offset: int
    commitlog_offset: int
    store_size: int

    @property
    def queue(self) -> QueueKey:
        return (self.topic, self.queue_id)

    @property
    def end(self) -> int:
        """One past the record's last byte in the commit log."""
        return self.commitlog_offset + self.store_size

    def fingerprint(self) -> tuple[object, ...]:
        return (
            self.topic,
            self.queue_id,
            self.queue_offset,
            self.commitlog_offset,
            self.store_size,
            body_digest(self.body),
            self.keys,
            self.uniq,
            self.tags,
        )


def body_digest(body: bytes) -> str:
    """Length and hash of a body: exact enough, and short in an assertion diff."""
    return f"{len(body)}:{hashlib.blake2b(body, digest_size=8).hexdigest()}"


def fingerprint(msg: MessageExt) -> tuple[object, ...]:
    """The fields of a read-back message that ``Sent.fingerprint`` pins."""
    return (
        msg.topic,
        msg.queue_id,
        msg.queue_offset,
        msg.commitlog_offset,
        msg.store_size,
        body_digest(msg.body),
        tuple(msg.keys),
        msg.properties.get("UNIQ_KEY"),
        msg.tags,
    )


class Record(NamedTuple):
    """The dispatch-relevant fields of one valid commit-log record."""

    commitlog_offset: int
    size: int
    topic: str
    queue_id: int
    queue_offset: int
    tags: str | None


def read_record(raw: bytes, pos: int, commitlog_offset: int) -> Record:
    msg = codec.decode_record(raw, pos, decompress=False)
    assert msg.commitlog_offset == commitlog_offset, (
        f"record at {commitlog_offset} says it is at {msg.commitlog_offset}"
    )
    return Record(
        commitlog_offset, msg.store_size, msg.topic, msg.queue_id, msg.queue_offset, msg.tags
    )


@dataclass
class CommitLogScan:
    """What the segment files on disk hold, record by record."""

    records: list[Record] = field(default_factory=list)  # valid, in commit-log order
    quarantined: list[int] = field(default_factory=list)
    bad_crc: list[int] = field(default_factory=list)  # framing holds, CRC does not
    bad_framing: int | None = None  # where the walk hit a record it cannot frame
    end: int = 0  # where the walk stopped: one past the last framed record
    stale_bytes: int = 0  # non-zero bytes after ``end`` in its segment

    def entries(self) -> dict[QueueKey, list[Entry]]:
        """The consume queues this commit log implies, valid records only."""
        out: dict[QueueKey, list[Entry]] = defaultdict(list)
        for r in self.records:
            out[(r.topic, r.queue_id)].append(
                (r.queue_offset, r.commitlog_offset, r.size, tags_code(r.tags))
            )
        return dict(out)


def _segment_files(root: Path) -> list[Path]:
    directory = root / "commitlog"
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if p.name.isdigit())


def scan_commitlog(root: Path) -> CommitLogScan:
    """Walk every commit-log segment file under ``root`` and decode its records."""
    scan = CommitLogScan()
    files = _segment_files(root)
    for n, path in enumerate(files):
        start = int(path.name)
        raw = path.read_bytes()
        view = memoryview(raw)
        pos = 0
        while True:
            verdict, size = codec.check_record(view, pos, len(raw))
            if verdict is Check.OK:
                scan.records.append(read_record(raw, pos, start + pos))
            elif verdict is Check.QUARANTINED:
                scan.quarantined.append(start + pos)
                if pos + size == len(raw):  # a damaged span set aside to the segment's end
                    break
            elif verdict is Check.BAD_CRC:
                scan.bad_crc.append(start + pos)
            elif verdict is Check.BLANK:
                break
            else:  # END or BAD_FRAMING: the data ends here
                if verdict is Check.BAD_FRAMING:
                    scan.bad_framing = start + pos
                scan.end = start + pos
                scan.stale_bytes = len(raw[pos:]) - raw[pos:].count(0)
                assert n == len(files) - 1, (
                    f"the commit log ends at {scan.end} ({verdict.name}) but segments "
                    f"{[p.name for p in files[n + 1 :]]} follow it"
                )
                return scan
            pos += size
        scan.end = start + len(raw)
    return scan


def read_queue(
    store: MessageStore, topic: str, queue_id: int
) -> tuple[list[MessageExt], list[int]]:
    """Every message of a queue through ``get_messages``, and the offsets it skipped."""
    messages: list[MessageExt] = []
    skipped: list[int] = []
    offset = store.min_offset(topic, queue_id)
    end = store.max_offset(topic, queue_id)
    while offset < end:
        result = store.get_messages(GROUP, topic, queue_id, offset, max_nums=32)
        assert result.status in (GetStatus.FOUND, GetStatus.OFFSET_FOUND_NULL), (
            f"{topic}/{queue_id} at {offset}: {result.status}"
        )
        assert result.next_begin_offset > offset, f"{topic}/{queue_id} stuck at {offset}"
        batch = decode_records(result.buffer)
        assert len(batch) == result.count
        got = {m.queue_offset for m in batch}
        skipped.extend(o for o in range(offset, result.next_begin_offset) if o not in got)
        messages.extend(batch)
        offset = result.next_begin_offset
    for m in messages:
        assert (m.topic, m.queue_id) == (topic, queue_id), f"{m} read from {topic}/{queue_id}"
    return messages, skipped


def consume_queue_entries(store: MessageStore, key: QueueKey) -> list[Entry]:
    """The raw entries of one consume queue, holes left out (an all-zero entry is kept)."""
    cq = store.queues.get(key)
    if cq is None:
        return []
    out: list[Entry] = []
    for queue_offset in range(cq.min_offset, cq.max_offset):
        entry = cq.entry(queue_offset)
        assert entry is not None, f"{key}: entry {queue_offset} is not on disk"
        commitlog_offset, size, code = entry
        if size != HOLE_SIZE:
            out.append((queue_offset, commitlog_offset, size, code))
    return out


def flip_byte(path: Path, position: int, mask: int = 0xFF) -> None:
    """XOR one byte of a file in place."""
    with path.open("r+b") as f:
        f.seek(position)
        old = f.read(1)[0]
        f.seek(position)
        f.write(bytes([old ^ mask]))


def segment_of(root: Path, commitlog_offset: int) -> tuple[Path, int]:
    """The commit-log segment file holding ``commitlog_offset``, and the offset within it."""
    for path in reversed(_segment_files(root)):
        if int(path.name) <= commitlog_offset:
            return path, commitlog_offset - int(path.name)
    raise AssertionError(f"no segment holds {commitlog_offset}")


def zero_range(path: Path, start: int, end: int) -> None:
    """Overwrite ``[start, end)`` of a file with zeros."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, bytes(end - start), start)
    finally:
        os.close(fd)


def _by_queue(sent: Sequence[Sent]) -> dict[QueueKey, list[Sent]]:
    out: dict[QueueKey, list[Sent]] = defaultdict(list)
    for s in sent:
        out[s.queue].append(s)
    return out


def _assert_queue_holds(
    store: MessageStore, key: QueueKey, got: list[MessageExt], want: list[Sent]
) -> None:
    want = sorted(want, key=lambda s: s.queue_offset)
    assert [fingerprint(m) for m in got] == [s.fingerprint() for s in want], key
    max_offset = want[-1].queue_offset + 1 if want else 0
    assert store.max_offset(*key) == max_offset, key


class StoreKit:
    """Opens stores on one fake clock, writes workloads and checks what a store holds."""

    store_host = "127.0.0.1:10911"

    def __init__(self) -> None:
        self.clock = FakeClock()
        self.config = StoreConfig.for_tests()
        self.ids = UniqIdGenerator()
        self.seq = 0
        self._stores: list[MessageStore] = []

    # ------------------------------------------------------------- writing
    def open(self, root: Path) -> MessageStore:
        store = MessageStore(root, self.config, clock=self.clock, store_host=self.store_host)
        self._stores.append(store)
        return store

    def message(self, topic: str, queue_id: int, body_size: int) -> InnerMessage:
        """A message with a unique body, two unique keys and a unique id."""
        self.seq += 1
        n = self.seq
        stem = f"{topic}/{queue_id}/#{n}:".encode()
        filler = bytes((n * 7 + i) % 251 for i in range(max(body_size - len(stem), 0)))
        return InnerMessage(
            topic=topic,
            queue_id=queue_id,
            body=(stem + filler)[: max(body_size, 1)],
            tags=f"tag{n % 3}",
            keys=f"key-{n} order-{n}",
            uniq_key=self.ids.next_id(),
        )

    def put(self, store: MessageStore, msgs: Sequence[InnerMessage]) -> list[Sent]:
        result = store.put_messages(list(msgs))
        assert result.ok, result.error
        self.clock.advance(1)
        return [
            Sent(
                topic=m.topic,
                queue_id=m.queue_id,
                body=m.body,
                keys=tuple(m.keys.split()),
                uniq=m.uniq_key,
                tags=m.tags or "",
                queue_offset=r.queue_offset,
                commitlog_offset=r.commitlog_offset,
                store_size=r.store_size,
            )
            for m, r in zip(msgs, result.results, strict=True)
        ]

    def write(
        self,
        store: MessageStore,
        rng: random.Random,
        count: int,
        queues: Sequence[QueueKey],
        body_sizes: tuple[int, int] = (50, 1500),
        batch_max: int = 1,
    ) -> list[Sent]:
        """``count`` messages to random queues, in random batches of 1..batch_max."""
        sent: list[Sent] = []
        while len(sent) < count:
            n = min(rng.randint(1, batch_max), count - len(sent))
            msgs = [self.message(*rng.choice(queues), rng.randint(*body_sizes)) for _ in range(n)]
            sent += self.put(store, msgs)
        return sent

    # ------------------------------------------------------------ checking
    def assert_holds_exactly(self, store: MessageStore, expected: Sequence[Sent]) -> None:
        """Every queue reads back exactly ``expected`` (bodies, keys, offsets), nothing more."""
        by_queue = _by_queue(expected)
        for key in sorted(set(by_queue) | set(store.queues)):
            got, _skipped = read_queue(store, *key)
            _assert_queue_holds(store, key, got, by_queue.get(key, []))

    def assert_consistent(
        self, store: MessageStore, expected: Sequence[Sent] | None = None
    ) -> CommitLogScan:
        """The commit log holds whole records only, and every consume queue (raw entries
        and through get_messages) equals the one the commit log implies; given
        ``expected``, the store also holds exactly those messages. One read per queue."""
        scan = scan_commitlog(store.root)
        assert scan.bad_crc == [], f"records at {scan.bad_crc} fail their CRC"
        assert scan.bad_framing is None, f"a torn record remains at {scan.bad_framing}"
        assert scan.stale_bytes == 0, f"{scan.stale_bytes} stale bytes after {scan.end}"
        assert store.commitlog.max_offset == scan.end
        derived = scan.entries()
        by_queue = _by_queue(expected or [])
        for key in sorted(set(derived) | set(store.queues) | set(by_queue)):
            want = derived.get(key, [])
            assert consume_queue_entries(store, key) == want, key
            got, _skipped = read_queue(store, *key)
            read = [(m.queue_offset, m.commitlog_offset, m.store_size) for m in got]
            assert read == [e[:3] for e in want], key
            if expected is not None:
                _assert_queue_holds(store, key, got, by_queue.get(key, []))
        return scan

    def assert_keys_found(self, store: MessageStore, sent: Sequence[Sent]) -> None:
        """``query_message`` finds every key and unique id of ``sent``, and nothing else."""
        for s in sent:
            for key in (*s.keys, s.uniq):
                found = store.query_message(s.topic, key, max_num=4)
                assert [m.commitlog_offset for m in found] == [s.commitlog_offset], key

    # ------------------------------------------------------ disk and reads
    scan = staticmethod(scan_commitlog)
    read_queue = staticmethod(read_queue)
    cq_entries = staticmethod(consume_queue_entries)
    flip_byte = staticmethod(flip_byte)
    zero_range = staticmethod(zero_range)
    segment_of = staticmethod(segment_of)

    def close_all(self) -> None:
        """Crash every store a test left open (crash() twice would unlock a stale fd)."""
        for store in self._stores:
            if not store._closed:
                store.crash()


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[Path]:
    """A work directory on tmpfs when there is one, else ``tmp_path``.

    Every store open fsyncs its dispatch manifest; the sweeps reopen stores
    hundreds of times, which on a real disk is most of their run time.
    """
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        yield tmp_path
        return
    path = Path(tempfile.mkdtemp(prefix="rayq-recovery-", dir=shm))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def kit() -> Iterator[StoreKit]:
    k = StoreKit()
    yield k
    k.close_all()
