"""Pulls over damaged records answer at once, with the offset moved past the damage.

A byte of a stored record is flipped in the commit-log file under a running
``BrokerServer`` (no Ray): the store's read check skips that record. A pull whose
window holds nothing readable answers NO_MATCHED_MSG with ``next_offset`` past the
damage, which the broker and the hold service never park (``protocol.nothing_new``),
and consumers pull again from there at once.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rayq.actors.protocol import (
    CreateTopicRequest,
    MessageQueue,
    Park,
    PullItem,
    PullManyRequest,
    PullRequest,
    PullStatus,
    check,
    nothing_new,
    to_wire,
)
from rayq.actors.protocol.config import BrokerConfig, ClientConfig
from rayq.actors.protocol.server_key import ServerKey
from rayq.actors.pull_hold import PullHoldActor
from rayq.actors.server.broker_server import BrokerServer
from rayq.actors.server.long_polling import ParkedPulls
from rayq.consumer.pull import PullConsumer
from rayq.store import InnerMessage, StoreConfig, codec
from rayq.store.batch import encode_batch
from rayq.store.codec import decode_records
from rayq.testing import FakeCluster, FakeTransport

TOPIC = "t"
GOOD, DAMAGED = 5, 3  # queue 0: offsets 0..4 readable, 5..7 damaged (its end)


def append(srv: BrokerServer, queue_id: int, bodies: list[bytes]) -> None:
    msgs = [InnerMessage(topic=TOPIC, queue_id=queue_id, body=b) for b in bodies]
    srv.put(encode_batch(msgs, max_body_bytes=1 << 20, max_properties_bytes=4096))


def damage(srv: BrokerServer, queue_id: int, offsets: range) -> None:
    """Flip a body byte of each record in the segment file (the store's mapping sees it)."""
    store = srv.store
    got = store.get_messages("check", TOPIC, queue_id, offsets.start, len(offsets))
    msgs = decode_records(got.buffer)
    assert [m.queue_offset for m in msgs] == list(offsets)
    for m in msgs:
        seg = store.commitlog.file.find(m.commitlog_offset)
        assert seg is not None
        position = m.commitlog_offset - seg.start + codec.HEADER_SIZE + len(m.body) // 2
        fd = os.open(seg.path, os.O_RDWR)
        try:
            os.pwrite(fd, bytes([os.pread(fd, 1, position)[0] ^ 0x01]), position)
        finally:
            os.close(fd)


def setup_broker(srv: BrokerServer) -> None:
    srv.create_topic(CreateTopicRequest(topic=TOPIC, read_queue_nums=2, write_queue_nums=2, perm=6))
    append(srv, 0, [f"m{i}".encode() for i in range(GOOD + DAMAGED)])
    append(srv, 1, [b"other"])
    damage(srv, 0, range(GOOD, GOOD + DAMAGED))


@pytest.fixture
def server(tmp_path: Path) -> Iterator[BrokerServer]:
    srv = BrokerServer(BrokerConfig(store=StoreConfig.for_tests()), str(tmp_path))
    setup_broker(srv)
    yield srv
    srv.close()


def request(offset: int, max_nums: int = 32, suspend_ms: int = 15_000) -> PullRequest:
    return PullRequest(
        group="g",
        topic=TOPIC,
        queue_id=0,
        queue_offset=offset,
        max_nums=max_nums,
        suspend_ms=suspend_ms,
    )


def test_a_pull_from_before_the_damage_returns_what_is_readable_and_moves_past_it(
    server: BrokerServer,
) -> None:
    append(server, 0, [b"after1", b"after2"])
    resp = server.pull(request(3))
    assert resp.status is PullStatus.FOUND
    assert [m.body for m in decode_records(resp.buffer)] == [b"m3", b"m4", b"after1", b"after2"]
    assert resp.next_offset == GOOD + DAMAGED + 2


def test_a_pull_over_only_damaged_records_is_no_matched_msg_past_them(
    server: BrokerServer,
) -> None:
    """At the queue's end the answer moves to the end; in the middle, past its window."""
    at_end = server.pull(request(GOOD))
    assert (at_end.status, at_end.count) == (PullStatus.NO_MATCHED_MSG, 0)
    assert at_end.next_offset == at_end.max_offset == GOOD + DAMAGED
    assert not nothing_new([at_end])  # neither the broker nor the hold service parks it
    window = server.pull(request(GOOD, max_nums=2))
    assert (window.status, window.next_offset) == (PullStatus.NO_MATCHED_MSG, GOOD + 2)
    caught_up = server.pull(request(GOOD + DAMAGED))
    assert caught_up.status is PullStatus.NO_NEW_MSG and nothing_new([caught_up])


def test_pull_many_answers_a_damaged_queue_at_once_per_queue(server: BrokerServer) -> None:
    req = PullManyRequest(
        group="g", items=[PullItem(TOPIC, 0, GOOD), PullItem(TOPIC, 1, 1)], suspend_ms=15_000
    )
    results = server.pull_many(req).results
    assert [(r.status, r.next_offset) for r in results] == [  # type: ignore[union-attr]
        (PullStatus.NO_MATCHED_MSG, GOOD + DAMAGED),
        (PullStatus.NO_NEW_MSG, 1),
    ]
    assert not nothing_new(results)


class ParkingBroker:
    """The broker behind ``PullHoldActor``'s ``HoldService`` (a ``HoldBroker``), over a
    real BrokerServer: a pull sent with a ``Park`` token is parked first and stays parked
    only if its read found nothing new (``BrokerLongPolling.park_and_read``)."""

    def __init__(self, srv: BrokerServer) -> None:
        self.srv = srv
        self.parked = ParkedPulls()
        self.calls = 0

    async def pull(self, req: Any, park: Park | None = None) -> Any:
        return await self("pull", req, None if park is None else to_wire(park))

    async def pull_many(self, req: Any, park: Park | None = None) -> Any:
        return await self("pull_many", req, None if park is None else to_wire(park))

    async def __call__(self, method: str, req: Any, park: bytes | None = None) -> Any:
        self.calls += 1
        token = check(park, Park).token if park is not None else None
        if token is not None:
            keys = (
                tuple((i.topic, i.queue_id) for i in req.items)
                if method == "pull_many"
                else ((req.topic, req.queue_id),)
            )
            self.parked.park(token, req, keys, 15.0)
        reply = getattr(self.srv, method)(req)
        if token is not None and not nothing_new(
            reply.results if method == "pull_many" else [reply]
        ):
            self.parked.drop(token)
        return reply


def test_the_hold_service_answers_a_long_poll_over_damage_at_once(server: BrokerServer) -> None:
    """A waiting pull (and pull_many) at the damaged end of a queue comes back with the
    moved offset from the broker's first read: nothing stays parked at the broker or waits
    at the hold service."""

    async def run() -> tuple[Any, Any, int, int]:
        hold = PullHoldActor(BrokerConfig(), "ns", server_key=ServerKey.new())
        broker = ParkingBroker(server)
        hold.service.broker = broker
        one = await hold.pull(request(GOOD, suspend_ms=2_000))
        many = await hold.pull_many(
            PullManyRequest(
                group="g", items=[PullItem(TOPIC, 0, GOOD), PullItem(TOPIC, 1, 1)], suspend_ms=2_000
            )
        )
        return one, many, broker.calls, len(broker.parked)

    one, many, calls, parked = asyncio.run(run())
    assert (one.status, one.next_offset) == (PullStatus.NO_MATCHED_MSG, GOOD + DAMAGED)
    assert [r.status for r in many.results] == [PullStatus.NO_MATCHED_MSG, PullStatus.NO_NEW_MSG]
    assert many.results[0].next_offset == GOOD + DAMAGED
    assert (calls, parked) == (2, 0)  # one read each, and nothing left parked


@pytest.fixture
def cluster_options() -> dict[str, Any]:
    return {"setup": lambda c: setup_broker(c.servers["broker-a"])}


def test_a_held_pull_of_the_fake_cluster_over_damage_is_answered_at_once(
    cluster: FakeCluster,
) -> None:
    reply = FakeTransport(cluster).hold("broker-a").pull(request(GOOD))
    assert reply.done()  # not held: the fake holds exactly what nothing_new calls nothing
    resp = reply.result(0)
    assert (resp.status, resp.next_offset) == (PullStatus.NO_MATCHED_MSG, GOOD + DAMAGED)


def test_a_pull_consumer_moves_past_the_damage_and_gets_the_later_messages(
    cluster: FakeCluster,
) -> None:
    """Positioned at the damage, one poll moves the consumer past it with no new message
    sent (a held pull would have kept it there); later messages then arrive."""
    mq = MessageQueue(TOPIC, "broker-a", 0)
    consumer = PullConsumer(
        "cg",
        transport=FakeTransport(cluster),
        config=ClientConfig(auto_commit_interval_ms=1_000_000),
    )
    consumer.assign([mq])
    consumer.start()
    try:
        consumer.seek(mq, GOOD)
        assert consumer.poll(0.2) == []
        assert consumer.position(mq) == GOOD + DAMAGED
        batch = encode_batch(
            [
                InnerMessage(topic=TOPIC, queue_id=0, body=b"later1"),
                InnerMessage(topic=TOPIC, queue_id=0, body=b"later2"),
            ],
            max_body_bytes=1 << 20,
            max_properties_bytes=4096,
        )
        cluster.call_broker("broker-a", "put", batch).result(5)  # wakes the held pull
        got: list[bytes] = []
        for _ in range(50):
            got += [m.body for m in consumer.poll(0.1)]
            if len(got) >= 2:
                break
        assert got == [b"later1", b"later2"]
        assert consumer.position(mq) == GOOD + DAMAGED + 2
    finally:
        consumer.shutdown()
