"""``rayq.aio``: the asyncio Producer and SimpleConsumer against the fake cluster (no
Ray): sends awaited, ``async for`` with ``await msg.ack()``, the same checks and
retries as the sync clients, and no thread waiting per call."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

import rayq
import rayq.aio
from rayq.store.errors import (
    BrokerUnavailableError,
    ClientError,
    ClosedError,
    InvalidMessageError,
    InvalidReceiptHandleError,
)
from rayq.testing import FakeCluster, FakeTransport

TOPIC = "jobs"


@pytest.fixture
def cluster_options() -> dict[str, Any]:
    return {"under": "brokers", "topics": {TOPIC: 2}}


def test_sends_are_awaited_and_land_like_the_sync_producers(cluster: FakeCluster) -> None:
    async def main() -> list[rayq.SendResult]:
        async with rayq.aio.Producer("pg", transport=FakeTransport(cluster)) as producer:
            one = await producer.send(rayq.Message(TOPIC, b"a", tags="T", keys=["k"]))
            many = await producer.send_batch([rayq.Message(TOPIC, b"b"), rayq.Message(TOPIC, b"c")])
            gathered = await asyncio.gather(
                *(producer.send(rayq.Message(TOPIC, f"g{i}".encode())) for i in range(20))
            )
            return [one, *many, *gathered]

    results = asyncio.run(main())
    assert len(results) == 23 and {r.status for r in results} == {rayq.SendStatus.SEND_OK}
    assert len({r.msg_id for r in results}) == 23
    c = rayq.SimpleConsumer("check", transport=FakeTransport(cluster), await_duration=0)
    c.subscribe(TOPIC)
    c.start()
    bodies: list[bytes] = []
    while got := c.receive():
        bodies += [m.body for m in got]
    assert sorted(bodies) == sorted([b"a", b"b", b"c", *(f"g{i}".encode() for i in range(20))])


def test_bad_messages_and_closed_producers_raise_as_in_the_sync_api(cluster: FakeCluster) -> None:
    async def main() -> None:
        producer = rayq.aio.Producer("pg", transport=FakeTransport(cluster))
        with pytest.raises(InvalidMessageError):
            await producer.send(rayq.Message(TOPIC, b""))
        await producer.shutdown()
        with pytest.raises(ClosedError):
            await producer.send(rayq.Message(TOPIC, b"x"))

    asyncio.run(main())


def test_a_failed_attempt_is_retried_by_the_shared_policy(cluster: FakeCluster) -> None:
    cluster.fail_next("broker-a", "put", BrokerUnavailableError, times=1)

    async def main() -> rayq.SendResult:
        async with rayq.aio.Producer("pg", transport=FakeTransport(cluster)) as producer:
            return await producer.send(rayq.Message(TOPIC, b"x"))

    assert asyncio.run(main()).status is rayq.SendStatus.SEND_OK
    assert cluster.calls_of("put").count("broker-a") == 2


def test_async_for_with_await_ack_consumes_each_message_once(cluster: FakeCluster) -> None:
    with rayq.Producer("pg", transport=FakeTransport(cluster)) as producer:
        for i in range(10):
            producer.send(rayq.Message(TOPIC, f"m{i}".encode()))
    threads = threading.active_count()

    async def main() -> list[bytes]:
        consumer = rayq.aio.SimpleConsumer(
            "workers", transport=FakeTransport(cluster), await_duration=0.2
        )
        consumer.subscribe(TOPIC)
        await consumer.start()
        seen: list[bytes] = []
        async for msg in consumer:
            assert isinstance(msg, rayq.aio.ReceivedMessage) and msg.delivery_count == 1
            seen.append(msg.body)
            await msg.ack()
            if len(seen) == 6:
                break
        rest = await consumer.receive(max_messages=10)
        await consumer.ack_many(rest)
        await consumer.shutdown()
        return seen + [m.body for m in rest]

    assert sorted(asyncio.run(main())) == sorted(f"m{i}".encode() for i in range(10))
    assert threading.active_count() <= threads + 1  # no thread per call


def test_async_nack_and_lease_change_and_stale_acks(cluster: FakeCluster) -> None:
    with rayq.Producer("pg", transport=FakeTransport(cluster)) as producer:
        producer.send(rayq.Message(TOPIC, b"x"))

    async def main() -> None:
        async with rayq.aio.SimpleConsumer(
            "workers", transport=FakeTransport(cluster), await_duration=0
        ) as consumer:
            with pytest.raises(ClientError, match="subscribe"):
                await consumer.receive()
            consumer.subscribe(TOPIC)
            (m,) = await consumer.receive(invisible_duration=5)
            old = m.receipt_handle
            await m.change_invisible_duration(10)
            assert m.receipt_handle != old
            await m.nack()
            with pytest.raises(InvalidReceiptHandleError):
                await m.ack()  # released: not in flight any more
            cluster.pop_revive_tick()
            (again,) = await consumer.receive()
            assert again.body == b"x" and again.delivery_count == 2
            await again.ack()

    asyncio.run(main())


def test_a_sync_received_message_settles_itself(cluster: FakeCluster) -> None:
    import pickle

    with rayq.Producer("pg", transport=FakeTransport(cluster)) as producer:
        producer.send(rayq.Message(TOPIC, b"x"))
    c = rayq.SimpleConsumer("workers", transport=FakeTransport(cluster), await_duration=0)
    c.subscribe(TOPIC)
    c.start()
    (m,) = c.receive()
    copy = pickle.loads(pickle.dumps(m))
    with pytest.raises(ClientError, match="copied from another process"):
        copy.ack()
    m.ack()
    assert c.receive() == []


def test_shutdown_releases_what_async_for_received_and_did_not_hand_out(
    cluster: FakeCluster,
) -> None:
    with rayq.Producer("pg", transport=FakeTransport(cluster)) as producer:
        for i in range(5):
            producer.send(rayq.Message(TOPIC, f"m{i}".encode()))

    async def main() -> bytes:
        consumer = rayq.aio.SimpleConsumer("workers", transport=FakeTransport(cluster))
        consumer.subscribe(TOPIC)
        await consumer.start()
        async for msg in consumer:  # takes all 5, hands out one
            await msg.ack()
            break
        await consumer.shutdown()  # the 4 others are released, not left to their leases
        return msg.body

    first = asyncio.run(main())
    cluster.pop_revive_tick()
    other = rayq.SimpleConsumer("workers", transport=FakeTransport(cluster), await_duration=0)
    other.subscribe(TOPIC)
    other.start()
    rest = other.receive()
    assert sorted([first] + [m.body for m in rest]) == [f"m{i}".encode() for i in range(5)]
    assert {m.delivery_count for m in rest} == {2}


def test_deferred_acks_ride_on_the_next_receive_and_go_at_shutdown(cluster: FakeCluster) -> None:
    with rayq.Producer("pg", transport=FakeTransport(cluster)) as producer:
        producer.send_batch([rayq.Message(TOPIC, f"d{i}".encode()) for i in range(5)])
    admin = rayq.Admin(transport=FakeTransport(cluster))

    def lag() -> int:
        return sum(p.lag for p in admin.consumer_progress("aio-defer") if p.queue.topic == TOPIC)

    async def main() -> list[int]:
        c = rayq.aio.SimpleConsumer("aio-defer", transport=FakeTransport(cluster))
        c.subscribe(TOPIC)
        await c.start()
        lags = []
        got = await c.receive(max_messages=3, invisible_duration=60)
        await c.ack_many(got, defer=True)
        lags.append(lag())
        rest = await c.receive(max_messages=3, invisible_duration=60)
        lags.append(lag())
        await c.ack_many(rest, defer=True)
        await c.shutdown()
        lags.append(lag())
        return lags

    assert asyncio.run(main()) == [5, 2, 0]
