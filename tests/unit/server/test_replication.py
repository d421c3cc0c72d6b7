"""Master/slave replication between two in-process BrokerServers (no Ray): the fetch and
apply steps, the SYNC_MASTER waiters, fencing by epoch, and the metadata sync."""

from __future__ import annotations

import concurrent.futures
import contextlib
import random
from pathlib import Path

import msgspec
import pytest

from rayq.actors.protocol import (
    CommitOffsetsRequest,
    CreateTopicRequest,
    HaFetch,
    QueryOffsetsRequest,
)
from rayq.actors.protocol.config import BrokerConfig, BrokerRole
from rayq.actors.server.broker_server import BrokerServer
from rayq.store import SYSTEM_CLOCK, InnerMessage, StoreConfig
from rayq.store.batch import encode_batch
from rayq.store.errors import NotMasterError, ReplicationError

STORE = StoreConfig.for_tests()
MASTER = BrokerConfig(store=STORE)
SLAVE = BrokerConfig(store=STORE, broker_id=1, broker_role=BrokerRole.SLAVE)


def send(server: BrokerServer, rng: random.Random, batches: int, topic: str = "Rep") -> None:
    for _ in range(batches):
        q = rng.randrange(2)
        msgs = [
            InnerMessage(topic=topic, queue_id=q, body=rng.randbytes(rng.randint(10, 2000)))
            for _ in range(rng.randint(1, 8))
        ]
        server.put(encode_batch(msgs, max_body_bytes=1 << 14, max_properties_bytes=4096))


def catch_up(master: BrokerServer, slave: BrokerServer, now: int = 0) -> int:
    """Fetch and apply until the slave has everything; the fetches made."""
    assert slave.slave is not None and master.master is not None
    fetches = 0
    while True:
        chunk = master.master.fetch(slave.slave.request(), now)
        fetches += 1
        if chunk is None:
            return fetches
        slave.slave.apply(chunk)


def log_bytes(server: BrokerServer) -> bytes:
    cl = server.store.commitlog
    return b"".join(bytes(s.mv[: s.wrote]) for s in cl.file.segments)


def reopen(server: BrokerServer, config: BrokerConfig) -> BrokerServer:
    root = str(server.root)
    server.close()
    return BrokerServer(config, root)


@pytest.fixture
def pair(tmp_path: Path):
    master = BrokerServer(MASTER, str(tmp_path / "m"))
    slave = BrokerServer(SLAVE, str(tmp_path / "s"))
    master.create_topic(topic("Rep", 2))
    yield master, slave
    for s in (master, slave):
        with contextlib.suppress(Exception):  # closed by the test
            s.close()


def topic(name: str, queues: int) -> CreateTopicRequest:
    return CreateTopicRequest(topic=name, read_queue_nums=queues, write_queue_nums=queues, perm=6)


def test_slave_catches_up_byte_for_byte_and_serves_the_same_queues(pair) -> None:
    master, slave = pair
    rng = random.Random(1)
    for _ in range(4):
        send(master, rng, 30)
        catch_up(master, slave)
    assert log_bytes(slave) == log_bytes(master)
    assert len(master.store.commitlog.file.segments) >= 3
    for q in range(2):
        assert slave.store.max_offset("Rep", q) == master.store.max_offset("Rep", q)
    with pytest.raises(NotMasterError, match="SLAVE"):
        send(slave, rng, 1)


def test_sync_waiters_are_released_together_by_the_fetch_that_acknowledges_them(pair) -> None:
    master, slave = pair
    rng = random.Random(2)
    send(master, rng, 3)
    first = master.master.wait(master.store.written_offset)
    send(master, rng, 3)
    second = master.master.wait(master.store.written_offset)
    assert not first.done() and not second.done()
    assert not master.master.slave_available(master.store.written_offset, 0)
    chunk = master.master.fetch(slave.slave.request(), 0)  # the slave's first fetch: offset 0
    assert not first.done()
    slave.slave.apply(chunk)
    catch_up(master, slave)  # the next fetch carries the slave's new offset
    assert first.done() and second.done()
    assert master.master.slave_available(master.store.written_offset, 0)
    [status] = master.master.status(0)
    assert (status.broker_id, status.lag_bytes, status.connected) == (1, 0, True)


def test_a_slave_too_far_behind_or_silent_is_not_available(tmp_path: Path) -> None:
    cfg = msgspec.structs.replace(MASTER, ha_slave_fallbehind_max=1000, ha_housekeeping_ms=50)
    master = BrokerServer(cfg, str(tmp_path / "m"))
    slave = BrokerServer(SLAVE, str(tmp_path / "s"))
    rng = random.Random(3)
    send(master, rng, 2)
    catch_up(master, slave, now=0)
    assert master.master.slave_available(master.store.written_offset, 10)
    send(master, rng, 5)
    written = master.store.written_offset
    assert not master.master.slave_available(written, 10)  # more than 1000 bytes behind
    [status] = master.master.status(10)
    assert status.lag_bytes == written - status.acked_offset > 1000
    catch_up(master, slave, now=20)
    assert master.master.slave_available(written, 20)
    assert not master.master.slave_available(written, 100)  # silent for 80 ms > 50
    cancelled = master.master.wait(written + 1)
    cancelled.cancel()  # a send that timed out
    catch_up(master, slave, now=100)
    with pytest.raises(concurrent.futures.CancelledError):
        cancelled.result(0)
    master.close()
    slave.close()


def test_a_returning_master_is_fenced_its_divergent_tail_cut_and_kept(pair) -> None:
    old, new = pair
    rng = random.Random(4)
    send(old, rng, 20)
    catch_up(old, new)
    agreed = new.store.written_offset
    send(old, rng, 6)  # acknowledged by the old master only (ASYNC): lost in the failover
    diverged = old.store.written_offset
    new = reopen(new, MASTER)  # promoted
    new.epochs.begin(1, new.store.written_offset)
    send(new, rng, 10)
    old = reopen(old, SLAVE)  # rejoins as a slave

    chunk = new.master.fetch(old.slave.request(), 0)
    assert chunk.truncate_to == agreed
    old.slave.apply(chunk)
    assert old.store.written_offset == agreed
    kept = (old.root / "quarantine").iterdir()
    assert sum(p.stat().st_size for p in kept) == diverged - agreed
    catch_up(new, old)
    assert log_bytes(old) == log_bytes(new)
    assert old.epochs.entries == new.epochs.entries == [(0, 0), (1, agreed)]
    old.close()
    new.close()


def test_histories_that_cannot_be_fenced_are_refused_and_the_files_kept(pair) -> None:
    master, slave = pair
    rng = random.Random(5)
    send(master, rng, 5)
    catch_up(master, slave)
    written = slave.store.written_offset
    ahead = HaFetch(broker_id=1, offset=written, epoch=3, max_bytes=1 << 20)
    with pytest.raises(ReplicationError, match=rf"epoch 3 at commit-log offset {written}"):
        master.master.fetch(ahead, 0)
    beyond = HaFetch(broker_id=1, offset=written + 100, epoch=0, max_bytes=1 << 20)
    with pytest.raises(ReplicationError, match=rf"up to {written + 100}.*end {written}"):
        master.master.fetch(beyond, 0)
    # The master's history below the fencing point differs from the slave's.
    master.epochs.begin(1, written)
    send(slave_as_master := reopen(slave, MASTER), rng, 3)  # the slave wrote on its own
    slave = reopen(slave_as_master, SLAVE)
    before = log_bytes(slave)
    chunk = master.master.fetch(slave.slave.request(), 0)
    assert chunk.truncate_to == written
    tampered = msgspec.structs.replace(chunk, tail=b"x" + chunk.tail[1:])
    with pytest.raises(ReplicationError, match=rf"up to {slave.store.written_offset}.*{written}"):
        slave.slave.apply(tampered)
    assert log_bytes(slave) == before
    slave.close()


def test_metadata_sync_copies_tables_and_brings_slave_commits_home(pair) -> None:
    master, slave = pair
    master.create_topic(topic("Meta", 3))
    master.commit_offsets(CommitOffsetsRequest(group="g", topic="Rep", offsets={0: 5}))
    req = slave.metadata_request()
    slave.apply_metadata(req, master.ha_metadata(req))
    assert "Meta" in slave.tables.topics
    got = slave.query_offsets(QueryOffsetsRequest(group="g", topic="Rep"))
    assert got.offsets == {0: 5}

    # The master is away; a consumer reads from the slave and commits there.
    slave.commit_offsets(CommitOffsetsRequest(group="g", topic="Rep", offsets={0: 9, 1: 2}))
    req = slave.metadata_request()
    reply = master.ha_metadata(req)  # the master is back: the slave's commits reach it
    slave.commit_offsets(CommitOffsetsRequest(group="g", topic="Rep", offsets={1: 4}))  # meanwhile
    slave.apply_metadata(req, reply)
    mine = master.query_offsets(QueryOffsetsRequest(group="g", topic="Rep"))
    assert mine.offsets == {0: 9, 1: 2}
    theirs = slave.query_offsets(QueryOffsetsRequest(group="g", topic="Rep"))
    assert theirs.offsets == {0: 9, 1: 4}  # the newer commit is kept until the next sync
    req = slave.metadata_request()
    slave.apply_metadata(req, master.ha_metadata(req))
    mine = master.query_offsets(QueryOffsetsRequest(group="g", topic="Rep"))
    assert mine.offsets == {0: 9, 1: 4}


def test_role_and_id_must_agree() -> None:
    from rayq.store.errors import ConfigError

    with pytest.raises(ConfigError, match="broker id 0 is the master"):
        BrokerConfig(broker_id=0, broker_role=BrokerRole.SLAVE)
    with pytest.raises(ConfigError, match="#"):
        BrokerConfig(broker_name="a#b")


def test_a_pull_far_behind_is_pointed_at_the_slave_with_slave_read_enable(tmp_path: Path) -> None:
    """RocketMQ's suggestWhichBrokerId: past access_message_in_memory_max_ratio of RAM from
    the end of the log (here ~20 KB), a pull is told to go to the group's slave; the slave
    keeps it while it is far behind and sends it back to the master once it is not."""
    from rayq.actors.protocol import PullRequest
    from rayq.store.reader import MEMORY_BYTES

    store = STORE.replace(access_message_in_memory_max_ratio=20_000 / MEMORY_BYTES)
    master = BrokerServer(
        msgspec.structs.replace(MASTER, store=store, slave_read_enable=True), str(tmp_path / "m")
    )
    slave = BrokerServer(
        msgspec.structs.replace(SLAVE, store=store, slave_read_enable=True), str(tmp_path / "s")
    )
    master.create_topic(topic("Rep", 1))
    msgs = [InnerMessage(topic="Rep", queue_id=0, body=b"x" * 1000) for _ in range(100)]
    master.put(encode_batch(msgs, max_body_bytes=1 << 14, max_properties_bytes=4096))

    def pull(server: BrokerServer, offset: int) -> str:
        req = PullRequest(group="g", topic="Rep", queue_id=0, queue_offset=offset, max_nums=4)
        return server.pull(req).suggest_replica

    assert pull(master, 0) == ""  # no slave connected: nowhere else to go
    catch_up(master, slave, now=SYSTEM_CLOCK.now_ms())
    sync = slave.metadata_request()
    slave.apply_metadata(sync, master.ha_metadata(sync))  # the slave knows the topic
    assert pull(master, 0) == "broker-a#1"  # ~100 KB behind
    assert pull(master, 95) == ""  # ~5 KB behind: the master's page cache has it
    assert pull(slave, 0) == "broker-a#1"  # the slave keeps a pull that is still far behind
    assert pull(slave, 95) == ""  # and sends one that caught up back to the master
    plain = BrokerServer(msgspec.structs.replace(MASTER, store=store), str(tmp_path / "p"))
    plain.create_topic(topic("Rep", 1))
    plain.put(encode_batch(msgs, max_body_bytes=1 << 14, max_properties_bytes=4096))
    assert pull(plain, 0) == ""  # slave_read_enable off
    for server in (master, slave, plain):
        server.close()


def test_a_slave_follows_its_masters_open_transactions(pair) -> None:
    """Halves, a check's put-back and ends reach the slave's transaction table with the
    bytes, so a promoted slave checks the same open transactions (and after a restart)."""
    from rayq.actors.protocol import EndTransactionRequest, HalfSendRequest

    master, slave = pair
    master.create_topic(topic("Tx", 1))

    def half(body: bytes) -> int:
        msg = InnerMessage(
            topic="Tx",
            queue_id=0,
            body=body,
            uniq_key=body.hex() * 4,
            properties={"TRAN_MSG": "true"},
        )
        batch = encode_batch([msg], max_body_bytes=1 << 14, max_properties_bytes=4096)
        res = master.put_half(HalfSendRequest(group="txg", batch=batch))
        return int(res.offset_msg_ids[0][-16:], 16)

    keys = [half(b"a"), half(b"b"), half(b"c")]
    master.end_transaction(
        EndTransactionRequest(
            group="txg",
            topic="Tx",
            commit=True,
            transaction_offset=keys[0],
            msg_id=(b"a".hex() * 4).upper(),
        )
    )
    master.end_transaction(
        EndTransactionRequest(
            group="txg",
            topic="Tx",
            commit=False,
            transaction_offset=keys[1],
            msg_id=(b"b".hex() * 4).upper(),
        )
    )
    master.transactions.timeout_ms = 0
    master.transaction_tick()  # "c" is put back with one check
    catch_up(master, slave)
    assert list(slave.transactions.open) == [keys[2]]
    assert slave.transactions.open == master.transactions.open
    assert slave.transactions.open[keys[2]].checks == 1
    assert slave.transaction_tick() == []  # a slave checks nothing
    slave = reopen(slave, SLAVE)
    assert slave.transactions.open == master.transactions.open
    slave.close()
