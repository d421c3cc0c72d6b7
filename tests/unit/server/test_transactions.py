"""Transactional messages through the public API, against the in-process fake (no Ray).

``TransactionProducer`` over real ``BrokerServer``s: commit, rollback, unknown then
checked, the producer gone between half and end, broker restarts with open halves,
visibility, exactly one copy, discard after the last check, and bad input.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import msgspec
import pytest

import rayq
from rayq.actors.protocol import (
    CreateTopicRequest,
    EndTransactionRequest,
    HalfSendRequest,
    PullRequest,
    TransactionChecksRequest,
)
from rayq.actors.protocol.config import BrokerConfig, ClientConfig
from rayq.actors.server.transactions import FILE_NAME
from rayq.store import StoreConfig
from rayq.store.batch import encode_batch
from rayq.store.codec import decode_records
from rayq.store.errors import InvalidMessageError, InvalidRequestError, PermissionDeniedError
from rayq.store.message import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_TYPE_MASK,
    InnerMessage,
)
from rayq.store.names import TRANS_CHECK_MAX_TIME_TOPIC, TRANS_HALF_TOPIC
from rayq.testing import FakeCluster, FakeTransport

TOPIC = "tx-orders"
GROUP = "txg"
# checks at once (timeout 1 ms); ticks are driven by hand (FakeCluster.transaction_tick)
CONFIG = BrokerConfig(store=StoreConfig.for_tests(), transaction_timeout=1, transaction_check_max=3)
NO_POLL = ClientConfig(check_request_poll_ms=3_600_000)  # checks answered by check_now()

COMMIT, ROLLBACK, UNKNOWN = (
    rayq.TransactionStatus.COMMIT,
    rayq.TransactionStatus.ROLLBACK,
    rayq.TransactionStatus.UNKNOWN,
)


class Listener:
    """Answers from tables: ``local[body]`` at execute, ``checks[body]`` at check."""

    def __init__(self, local: Any = UNKNOWN, check: Any = UNKNOWN) -> None:
        self.local, self.check = local, check
        self.executed: list[tuple[bytes, Any]] = []
        self.checked: list[rayq.MessageExt] = []

    def execute_local_transaction(self, msg: rayq.Message, arg: Any) -> Any:
        self.executed.append((msg.body, arg))
        if isinstance(self.local, BaseException):
            raise self.local
        return self.local

    def check_local_transaction(self, msg: rayq.MessageExt) -> Any:
        self.checked.append(msg)
        return self.check


@pytest.fixture
def cluster_options() -> dict[str, Any]:
    def setup(c: FakeCluster) -> None:
        c.server().create_topic(
            CreateTopicRequest(topic=TOPIC, read_queue_nums=1, write_queue_nums=1, perm=6)
        )

    return {"config": CONFIG, "setup": setup}


def producer(cluster: FakeCluster, listener: Listener) -> rayq.TransactionProducer:
    return rayq.TransactionProducer(
        GROUP, listener, config=NO_POLL, transport=FakeTransport(cluster)
    )


def tick(cluster: FakeCluster) -> None:
    """One check round, once every half so far is past the timeout (1 ms: a round in the
    same millisecond as the send would find nothing due)."""
    time.sleep(CONFIG.transaction_timeout / 1000 + 0.005)
    cluster.transaction_tick()


def visible(cluster: FakeCluster) -> list[bytes]:
    """Every body a consumer of TOPIC can read now."""
    resp = cluster.server().pull(
        PullRequest(group="cg", topic=TOPIC, queue_id=0, queue_offset=0, max_nums=1024)
    )
    return [m.body for m in decode_records(resp.buffer)]


def test_commit_appends_exactly_one_visible_copy(cluster: FakeCluster) -> None:
    listener = Listener(local=COMMIT)
    with producer(cluster, listener) as p:
        result = p.send_in_transaction(rayq.Message(TOPIC, b"paid", keys=["o-1"]), arg=42)
    assert listener.executed == [(b"paid", 42)]
    assert result.local_state is COMMIT
    assert result.transaction_id == result.msg_id and result.transaction_offset >= 0
    assert result.queue_offset == -1
    assert visible(cluster) == [b"paid"]
    [msg] = decode_records(
        cluster.server()
        .pull(PullRequest(group="cg", topic=TOPIC, queue_id=0, queue_offset=0))
        .buffer
    )
    assert msg.msg_id == result.msg_id and msg.keys == ["o-1"]
    assert msg.sys_flag & TRANSACTION_TYPE_MASK == TRANSACTION_COMMIT_TYPE
    assert msg.prepared_transaction_offset == result.transaction_offset
    assert msg.properties["TRAN_MSG"] == "true" and "REAL_TOPIC" not in msg.properties
    assert cluster.server().transactions.open == {}


def test_rollback_never_shows(cluster: FakeCluster) -> None:
    with producer(cluster, Listener(local=ROLLBACK)) as p:
        result = p.send_in_transaction(rayq.Message(TOPIC, b"cancelled"))
    assert result.local_state is ROLLBACK
    tick(cluster)
    assert visible(cluster) == []
    assert cluster.server().transactions.open == {}


def test_half_is_invisible_until_commit(cluster: FakeCluster) -> None:
    listener = Listener(local=UNKNOWN, check=COMMIT)
    with producer(cluster, listener) as p:
        result = p.send_in_transaction(rayq.Message(TOPIC, b"later"))
        assert result.local_state is UNKNOWN
        assert visible(cluster) == []  # stored, but in no queue
        srv = cluster.server()
        assert srv.store.max_offset(TOPIC, 0) == 0
        assert (TRANS_HALF_TOPIC, 0) not in srv.store.queues
        with pytest.raises(PermissionDeniedError):  # nor can anyone pull the half topic
            srv.pull(PullRequest(group="cg", topic=TRANS_HALF_TOPIC, queue_id=0, queue_offset=0))
        tick(cluster)
        assert p.check_now() == 1
    assert [m.body for m in listener.checked] == [b"later"]
    checked = listener.checked[0]
    assert checked.topic == TOPIC and checked.msg_id == result.msg_id
    assert "REAL_TOPIC" not in checked.properties
    assert visible(cluster) == [b"later"]


@pytest.mark.parametrize("answer", [COMMIT, ROLLBACK])
def test_unknown_then_checked(cluster: FakeCluster, answer: Any) -> None:
    with producer(cluster, Listener(local=UNKNOWN, check=answer)) as p:
        p.send_in_transaction(rayq.Message(TOPIC, b"m"))
        tick(cluster)
        p.check_now()
        tick(cluster)  # nothing open: nothing more to check
        assert p.check_now() == 0
    assert visible(cluster) == ([b"m"] if answer is COMMIT else [])


def test_listener_that_raises_counts_as_unknown(cluster: FakeCluster) -> None:
    with producer(cluster, Listener(local=RuntimeError("db down"), check=COMMIT)) as p:
        result = p.send_in_transaction(rayq.Message(TOPIC, b"m"))
        assert result.local_state is UNKNOWN
        assert visible(cluster) == []
        tick(cluster)
        p.check_now()
    assert visible(cluster) == [b"m"]


def test_check_goes_to_another_producer_of_the_group(cluster: FakeCluster) -> None:
    first = producer(cluster, Listener(local=UNKNOWN, check=ROLLBACK))
    first.send_in_transaction(rayq.Message(TOPIC, b"orphan"))
    first.shutdown()  # gone between the half and its end
    other_listener = Listener(check=COMMIT)
    other = producer(cluster, other_listener)
    other.start()
    tick(cluster)
    assert other.check_now() == 1
    other.shutdown()
    assert [m.body for m in other_listener.checked] == [b"orphan"]
    assert visible(cluster) == [b"orphan"]


def test_check_of_another_group_is_not_handed_out(cluster: FakeCluster) -> None:
    with producer(cluster, Listener(local=UNKNOWN)) as p:
        p.send_in_transaction(rayq.Message(TOPIC, b"m"))
    tick(cluster)
    reply = cluster.server().transaction_checks(TransactionChecksRequest(group="someone-else"))
    assert reply.checks == []
    assert (
        len(cluster.server().transaction_checks(TransactionChecksRequest(group=GROUP)).checks) == 1
    )


def two_halves_one_ended(
    cluster: FakeCluster, kept: bytes, ended: bytes, commit: bool
) -> tuple[Any, int]:
    """Two halves left UNKNOWN, the second (``ended``) then ended by hand: the broker
    server and the key of the half still open."""
    with producer(cluster, Listener(local=UNKNOWN)) as p:
        keep = p.send_in_transaction(rayq.Message(TOPIC, kept))
        p.send_in_transaction(rayq.Message(TOPIC, ended))
    srv = cluster.server()
    other = next(k for k in srv.transactions.open if k != keep.transaction_offset)
    srv.end_transaction(
        EndTransactionRequest(
            group=GROUP,
            topic=TOPIC,
            transaction_offset=other,
            msg_id=srv.transactions.open[other].msg_id,
            commit=commit,
        )
    )
    return srv, keep.transaction_offset


def test_broker_restart_keeps_open_halves(cluster: FakeCluster) -> None:
    srv, _ = two_halves_one_ended(cluster, b"open", b"x", commit=False)
    before = dict(srv.transactions.open)
    srv = cluster.restart()
    assert srv.transactions.open == before
    with producer(cluster, Listener(check=COMMIT)) as p:
        tick(cluster)
        assert p.check_now() == 1
    assert visible(cluster) == [b"open"]


def test_restart_after_crash_replays_the_log(cluster: FakeCluster) -> None:
    """No snapshot covers the halves (crash before any persist): the log is replayed."""
    srv, kept = two_halves_one_ended(cluster, b"a", b"b", commit=True)
    tick(cluster)  # one check: the count must survive
    (srv.tables.config_dir / FILE_NAME).unlink(missing_ok=True)
    srv.store.crash()
    srv.tables.close()
    from rayq.actors.server.broker_server import BrokerServer

    cluster.servers["broker-a"] = again = BrokerServer(srv.config, str(srv.root), "fake-node")
    assert list(again.transactions.open) == [kept]
    assert again.transactions.open[kept].checks == 1
    assert visible(cluster) == [b"b"]


def test_end_twice_commits_once(cluster: FakeCluster) -> None:
    with producer(cluster, Listener(local=UNKNOWN)) as p:
        result = p.send_in_transaction(rayq.Message(TOPIC, b"once"))
    srv = cluster.server()
    req = EndTransactionRequest(
        group=GROUP,
        topic=TOPIC,
        msg_id=result.msg_id,
        transaction_offset=result.transaction_offset,
        commit=True,
    )
    first, second = srv.end_transaction(req), srv.end_transaction(req)
    assert first.ended and first.committed and first.queue_offset == 0
    assert not second.ended
    rollback = msgspec.structs.replace(req, commit=False)
    assert not srv.end_transaction(rollback).ended
    assert visible(cluster) == [b"once"]


def test_discarded_after_the_last_check(cluster: FakeCluster) -> None:
    with producer(cluster, Listener(local=UNKNOWN, check=UNKNOWN)) as p:
        result = p.send_in_transaction(rayq.Message(TOPIC, b"lost"))
        for _ in range(CONFIG.transaction_check_max):
            tick(cluster)
            assert p.check_now() == 1
        tick(cluster)  # the fourth round discards it
        assert p.check_now() == 0
    srv = cluster.server()
    assert srv.transactions.open == {}
    assert visible(cluster) == []
    resp = srv.pull(
        PullRequest(group="ops", topic=TRANS_CHECK_MAX_TIME_TOPIC, queue_id=0, queue_offset=0)
    )
    [dropped] = decode_records(resp.buffer)
    assert dropped.body == b"lost" and dropped.msg_id == result.msg_id
    assert dropped.properties["REAL_TOPIC"] == TOPIC


def test_checks_wait_for_the_timeout(tmp_path: Path) -> None:
    slow = msgspec.structs.replace(CONFIG, transaction_timeout=3_600_000)
    with FakeCluster(tmp_path, config=slow) as c:
        with producer(c, Listener(local=UNKNOWN)) as p:
            p.send_in_transaction(rayq.Message(TOPIC, b"young"))
            tick(c)
            assert p.check_now() == 0
        assert len(c.server().transactions.open) == 1


def test_check_poller_thread_answers(cluster: FakeCluster) -> None:
    fast = ClientConfig(check_request_poll_ms=20)
    p = rayq.TransactionProducer(
        GROUP, Listener(local=UNKNOWN, check=COMMIT), config=fast, transport=FakeTransport(cluster)
    )
    try:
        p.send_in_transaction(rayq.Message(TOPIC, b"polled"))
        tick(cluster)
        deadline = time.monotonic() + 30
        while visible(cluster) != [b"polled"] and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        p.shutdown()
    assert visible(cluster) == [b"polled"]


def test_plain_sends_work_on_a_transaction_producer(cluster: FakeCluster) -> None:
    with producer(cluster, Listener()) as p:
        p.send(rayq.Message(TOPIC, b"plain"))
    assert visible(cluster) == [b"plain"]


# ------------------------------------------------------------------ bad input
def test_listener_must_have_both_methods(cluster: FakeCluster) -> None:
    with pytest.raises(rayq.ConfigError, match="check_local_transaction"):
        rayq.TransactionProducer(GROUP, object(), transport=FakeTransport(cluster))


def test_delayed_transactional_message_is_refused(cluster: FakeCluster) -> None:
    with (
        producer(cluster, Listener(local=COMMIT)) as p,
        pytest.raises(InvalidMessageError, match="cannot be delayed"),
    ):
        p.send_in_transaction(rayq.Message(TOPIC, b"m", delay_level=2))
    assert cluster.server().transactions.open == {}


def test_end_of_an_unknown_offset_is_refused(cluster: FakeCluster) -> None:
    with producer(cluster, Listener(local=UNKNOWN)) as p:
        result = p.send_in_transaction(rayq.Message(TOPIC, b"m"))
    srv = cluster.server()
    bad = [
        dict(transaction_offset=result.transaction_offset + 1),  # no record starts there
        dict(msg_id="0" * 32),  # another message
        dict(group="other-group"),  # another group's transaction
        dict(topic="another-topic"),
    ]
    for change in bad:
        req = EndTransactionRequest(
            **{
                **dict(
                    group=GROUP,
                    topic=TOPIC,
                    transaction_offset=result.transaction_offset,
                    msg_id=result.msg_id,
                    commit=True,
                ),
                **change,
            }
        )
        with pytest.raises(InvalidRequestError):
            srv.end_transaction(req)
    assert visible(cluster) == []
    assert list(srv.transactions.open) == [result.transaction_offset]


def test_forged_transaction_records_are_refused(cluster: FakeCluster) -> None:
    """A producer cannot write PREPARED/COMMIT records or the half topic itself."""
    srv = cluster.server()
    forged = InnerMessage(
        topic=TOPIC,
        queue_id=0,
        body=b"x",
        sys_flag=TRANSACTION_COMMIT_TYPE,
        properties={"TRAN_MSG": "true"},
    )
    batch = encode_batch([forged], max_body_bytes=1 << 20, max_properties_bytes=32767)
    with pytest.raises(InvalidMessageError, match="transaction type"):
        srv.put(batch)
    with pytest.raises(InvalidMessageError, match="transaction type"):
        srv.put_half(HalfSendRequest(group=GROUP, batch=batch))
    half_topic = msgspec.structs.replace(forged, topic=TRANS_HALF_TOPIC, sys_flag=0)
    batch = encode_batch([half_topic], max_body_bytes=1 << 20, max_properties_bytes=32767)
    with pytest.raises(PermissionDeniedError):
        srv.put(batch)
    assert visible(cluster) == [] and srv.transactions.open == {}


def test_send_in_transaction_to_a_slave_is_refused(tmp_path: Path) -> None:
    slave_cfg = msgspec.structs.replace(CONFIG, broker_id=1, broker_role=rayq.BrokerRole.SLAVE)
    with FakeCluster(tmp_path, config=slave_cfg) as c:
        inner = InnerMessage(topic=TOPIC, queue_id=0, body=b"x")
        batch = encode_batch([inner], max_body_bytes=1 << 20, max_properties_bytes=32767)
        with pytest.raises(rayq.NotMasterError, match="SLAVE"):
            c.server().put_half(HalfSendRequest(group=GROUP, batch=batch))
