"""Store-level replication: a slave store fed its master's raw bytes in chunks of any
size is byte-identical to the master and serves the same queues, offsets and keys."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from rayq.store import FakeClock, InnerMessage, MessageStore, StoreConfig, decode_records
from rayq.store.errors import InvalidOffsetError

CONFIG = StoreConfig.for_tests()
QUEUES = [("Rep", 0), ("Rep", 1), ("Other", 0)]


def fill(store: MessageStore, rng: random.Random, count: int) -> None:
    n = 0
    while n < count:
        k = rng.randint(1, 5)
        msgs = [
            InnerMessage(
                topic=t,
                queue_id=q,
                body=rng.randbytes(rng.randint(10, 3000)),
                keys=f"k{n + i}",
                tags=f"t{(n + i) % 3}",
            )
            for i, (t, q) in enumerate(rng.choice(QUEUES) for _ in range(k))
        ]
        assert store.put_messages(msgs).ok
        n += k


def catch_up(master: MessageStore, slave: MessageStore, rng: random.Random) -> int:
    calls = 0
    while slave.written_offset < master.written_offset:
        chunk = master.replica_read(slave.written_offset, rng.choice([1, 7, 100, 5000, 1 << 20]))
        slave.replica_append(slave.written_offset, chunk)
        calls += 1
    return calls


def commitlog_bytes(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted((root / "commitlog").iterdir()))


def queue_view(store: MessageStore) -> dict:
    out = {}
    for topic in store.topics():
        for q in store.queue_ids(topic):
            got = store.get_messages("g", topic, q, 0, max_nums=10_000)
            out[(topic, q)] = (
                store.min_offset(topic, q),
                store.max_offset(topic, q),
                [(m.queue_offset, m.commitlog_offset, m.body) for m in decode_records(got.buffer)],
            )
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_slave_fed_chunks_of_any_size_is_byte_identical(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    master = MessageStore(tmp_path / "m", CONFIG, clock=FakeClock())
    slave = MessageStore(tmp_path / "s", CONFIG, clock=FakeClock())
    for _ in range(3):
        fill(master, rng, 60)
        catch_up(master, slave, rng)
    assert slave.written_offset == master.written_offset
    assert len(master.commitlog.file.segments) >= 3
    master.close()
    slave.close()
    assert commitlog_bytes(tmp_path / "s") == commitlog_bytes(tmp_path / "m")
    master = MessageStore(tmp_path / "m", CONFIG, clock=FakeClock())
    slave = MessageStore(tmp_path / "s", CONFIG, clock=FakeClock())
    assert queue_view(slave) == queue_view(master)
    assert [m.body for m in slave.query_message("Rep", "k7")] == [
        m.body for m in master.query_message("Rep", "k7")
    ]
    master.close()
    slave.close()


def test_slave_restarted_mid_record_resumes_from_its_own_end(tmp_path: Path) -> None:
    rng = random.Random(9)
    master = MessageStore(tmp_path / "m", CONFIG, clock=FakeClock())
    slave = MessageStore(tmp_path / "s", CONFIG, clock=FakeClock())
    fill(master, rng, 40)
    slave.replica_append(0, master.replica_read(0, 5_001))  # ends inside a record
    slave.crash()
    slave = MessageStore(tmp_path / "s", CONFIG, clock=FakeClock())
    assert slave.written_offset < 5_001  # the cut record was truncated by recovery
    catch_up(master, slave, rng)
    assert queue_view(slave) == queue_view(master)
    master.close()
    slave.close()


def test_chunks_that_do_not_continue_the_log_are_refused(tmp_path: Path) -> None:
    rng = random.Random(4)
    master = MessageStore(tmp_path / "m", CONFIG, clock=FakeClock())
    slave = MessageStore(tmp_path / "s", CONFIG, clock=FakeClock())
    fill(master, rng, 10)
    with pytest.raises(InvalidOffsetError, match="ends at 0"):
        slave.replica_append(100, master.replica_read(100, 1000))
    with pytest.raises(InvalidOffsetError, match="holds"):
        master.replica_read(master.written_offset + 1, 10)
    assert slave.written_offset == 0
    assert master.replica_read(master.written_offset, 10) == b""
    master.close()
    slave.close()


def test_damaged_replicated_bytes_raise_and_nothing_of_them_is_served(tmp_path: Path) -> None:
    from rayq.store.errors import CorruptRecordError

    rng = random.Random(5)
    master = MessageStore(tmp_path / "m", CONFIG, clock=FakeClock())
    slave = MessageStore(tmp_path / "s", CONFIG, clock=FakeClock())
    fill(master, rng, 10)
    chunk = bytearray(master.replica_read(0, 1 << 20))
    chunk[200] ^= 0x01  # inside the first record
    with pytest.raises(CorruptRecordError, match="at 0"):
        slave.replica_append(0, bytes(chunk))
    assert all(slave.max_offset(t, q) == 0 for t, q in QUEUES)
    master.close()
    slave.close()
