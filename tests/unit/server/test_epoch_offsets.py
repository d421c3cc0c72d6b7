"""Positions read before a failover that cut records (Kafka's KIP-320, no Ray): a pull
carries the epoch its position was read in, a broker in a newer epoch moves a position
past that epoch's end back to it, and a promoted slave moves committed offsets past its
log's end back to the end."""

from __future__ import annotations

from pathlib import Path

import pytest

from rayq.actors.protocol import (
    CommitOffsetsRequest,
    PullRequest,
    PullResponse,
    PullStatus,
    QueryOffsetsRequest,
    epoch_after,
    follow_up,
)
from rayq.actors.protocol.config import BrokerConfig, BrokerRole
from rayq.actors.server.broker_runtime import open_server
from rayq.actors.server.broker_server import BrokerServer
from rayq.store import InnerMessage, StoreConfig
from rayq.store.batch import encode_batch

from .test_replication import catch_up, topic

STORE = StoreConfig.for_tests()
MASTER = BrokerConfig(store=STORE, broker_role=BrokerRole.SYNC_MASTER)
SLAVE = BrokerConfig(store=STORE, broker_id=1, broker_role=BrokerRole.SLAVE)


def put(server: BrokerServer, n: int, tag: str) -> None:
    msgs = [InnerMessage(topic="T", queue_id=0, body=f"{tag}{i}".encode()) for i in range(n)]
    server.put(encode_batch(msgs, max_body_bytes=1 << 14, max_properties_bytes=4096))


def pull(server: BrokerServer, offset: int, epoch: int) -> PullResponse:
    return server.pull(
        PullRequest(group="G", topic="T", queue_id=0, queue_offset=offset, epoch=epoch)
    )


@pytest.fixture
def failed_over(tmp_path: Path):
    """A master with 10 records, 6 of them replicated, then its slave promoted (epoch 1)
    and 2 new records written there: the old epoch 0 ends at queue offset 6."""
    old = BrokerServer(MASTER, str(tmp_path / "m"))
    slave = BrokerServer(SLAVE, str(tmp_path / "s"))
    old.create_topic(topic("T", 1))
    put(old, 6, "a")
    catch_up(old, slave)
    put(old, 4, "lost")  # never replicated: cut by the failover
    seen = pull(old, 0, -1)
    old.commit_offsets(CommitOffsetsRequest(group="G", topic="T", offsets={0: 10}))
    catch_up_metadata(old, slave)
    old.close()
    slave.close()
    new = open_server(MASTER, str(tmp_path / "s"), "", epoch=1)
    put(new, 2, "new")
    yield new, seen
    new.close()


def catch_up_metadata(master: BrokerServer, slave: BrokerServer) -> None:
    sent = slave.metadata_request()
    slave.apply_metadata(sent, master.ha_metadata(sent))


def test_a_position_read_in_an_epoch_that_was_cut_moves_back_to_its_end(failed_over) -> None:
    new, seen = failed_over
    assert seen.status is PullStatus.FOUND and seen.count == 10 and seen.epoch == 0
    assert new.epochs.current == 1 and new.store.max_offset("T", 0) == 8
    for position in (8, 10, 12):  # inside the new log, at its end, past it
        moved = pull(new, position, seen.epoch)
        assert moved.status is PullStatus.OFFSET_ILLEGAL
        assert moved.next_offset == 6 and moved.epoch == 1
        assert epoch_after(seen.epoch, moved) == 1
    got = pull(new, 6, seen.epoch)  # the epoch's end itself: nothing was cut below it
    assert got.status is PullStatus.FOUND and got.count == 2 and got.epoch == 1
    assert pull(new, 8, -1).status is PullStatus.NO_NEW_MSG  # unknown epoch: not checked
    assert pull(new, 8, 1).status is PullStatus.NO_NEW_MSG  # read in the current epoch


def test_a_promoted_slave_moves_committed_offsets_past_its_log_back(failed_over) -> None:
    new, _ = failed_over
    reply = new.query_offsets(QueryOffsetsRequest(group="G", topic="T"))
    assert reply.offsets == {0: 6}  # the group had committed 10, past the 6 replicated


def test_the_epoch_kept_after_an_answer_and_in_a_parked_follow_up() -> None:
    req = PullRequest(group="G", topic="T", queue_id=0, queue_offset=3, epoch=2)
    found = PullResponse(
        status=PullStatus.FOUND, next_offset=5, min_offset=0, max_offset=5, epoch=3
    )
    empty = PullResponse(
        status=PullStatus.NO_NEW_MSG, next_offset=3, min_offset=0, max_offset=3, epoch=4
    )
    assert epoch_after(2, found) == 3
    assert epoch_after(2, empty) == 2  # nothing read: the position is as known before
    nxt = follow_up(req, found)
    assert nxt is not None and nxt.queue_offset == 5 and nxt.epoch == 3
