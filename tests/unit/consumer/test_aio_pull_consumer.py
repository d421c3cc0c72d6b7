"""``rayq.aio.PullConsumer`` against the fake cluster (no Ray): ``async for`` and
``await poll`` get what the sync consumer gets; a poll waits on the event loop (other
tasks run meanwhile) and wakes when a held pull is answered; commits, ``committed`` and
send-backs are awaited; misuse raises as the sync consumer does."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import rayq
import rayq.aio
from rayq.actors.protocol import ConsumeFromWhere, MessageQueue
from rayq.actors.protocol.config import ClientConfig
from rayq.store.errors import ClientError, ClosedError, RayqError
from rayq.testing import FakeCluster, FakeTransport

TOPIC = "orders"


@pytest.fixture
def cluster_options() -> dict[str, Any]:
    return {"topics": {TOPIC: 2}}


def send(cluster: FakeCluster, bodies: list[bytes]) -> None:
    with rayq.Producer("pg", transport=FakeTransport(cluster)) as producer:
        producer.send_batch([rayq.Message(TOPIC, b) for b in bodies])


def consumer(cluster: FakeCluster, group: str = "lg", **options: Any) -> rayq.aio.PullConsumer:
    c = rayq.aio.PullConsumer(
        group,
        consume_from=ConsumeFromWhere.FIRST_OFFSET,
        transport=FakeTransport(cluster),
        **options,
    )
    c.subscribe(TOPIC)
    return c


def test_async_for_reads_everything_and_shutdown_commits_it(cluster: FakeCluster) -> None:
    sent = [f"m{i}".encode() for i in range(30)]
    send(cluster, sent)

    async def main() -> tuple[list[bytes], int]:
        got: list[bytes] = []
        async with consumer(cluster) as c:
            async for msg in c:
                got.append(msg.body)
                if len(got) == len(sent):
                    break
            positions = sum(c.position(mq) for mq in c.assignment())
        return got, positions

    got, positions = asyncio.run(main())
    assert sorted(got) == sorted(sent) and positions == len(sent)
    check = rayq.PullConsumer("lg", transport=FakeTransport(cluster))
    mqs = [MessageQueue(TOPIC, "broker-a", q) for q in (0, 1)]
    assert sum(check.committed(mq) for mq in mqs) == len(sent)  # shutdown committed


def test_a_poll_waits_on_the_loop_and_wakes_when_a_held_pull_is_answered(
    cluster: FakeCluster,
) -> None:
    async def main() -> tuple[list[bytes], int]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        c = consumer(cluster, config=ClientConfig(broker_suspend_max_ms=60_000))
        await c.start()
        beat = asyncio.create_task(ticker())
        assert await c.poll(timeout=0.3) == []  # nothing yet: the pulls are held
        quiet_ticks = ticks
        later = asyncio.get_running_loop().call_later(0.1, lambda: send(cluster, [b"late"]))
        # The held pull's answer wakes the poll long before its 60 s timeout.
        got = await asyncio.wait_for(c.poll(timeout=60.0), 20.0)
        later.cancel()
        beat.cancel()
        await c.shutdown()
        return [m.body for m in got], quiet_ticks

    got, quiet_ticks = asyncio.run(main())
    assert got == [b"late"]
    assert quiet_ticks >= 3  # the loop ran other tasks while the poll waited


def test_commits_send_backs_and_committed_are_awaited(cluster: FakeCluster) -> None:
    send(cluster, [b"a", b"b", b"c"])

    async def main() -> tuple[int, list[str], int]:
        c = consumer(cluster, auto_commit=False)
        await c.start()
        got: list[rayq.MessageExt] = []
        while len(got) < 3:
            got += await c.poll(timeout=1.0)
        await c.commit()
        committed = sum([await c.committed(mq) for mq in c.assignment()])
        topics = await c.send_back(got[:1])
        await c.seek_to_begin(MessageQueue(TOPIC, got[0].broker_name, got[0].queue_id))
        again = await c.poll(timeout=1.0)
        await c.shutdown()
        return committed, topics, len(again)

    committed, topics, again = asyncio.run(main())
    assert committed == 3
    assert topics == ["%RETRY%lg"]
    assert again >= 1  # read again from the start of that queue


def test_misuse_raises_as_the_sync_consumer_does(cluster: FakeCluster) -> None:
    async def main() -> None:
        c = consumer(cluster)
        with pytest.raises(ClientError, match="not started"):
            await c.poll(timeout=0.1)
        with pytest.raises(ClientError, match="async with"), c:
            pass
        await c.start()
        with pytest.raises(RayqError):
            await c.poll(timeout=-1)
        with pytest.raises(ClientError):
            await c.start()
        await c.shutdown()
        await c.shutdown()  # idempotent
        with pytest.raises(ClosedError):
            await c.poll(timeout=0.1)
        assert [m async for m in c] == []  # a shut-down consumer's loop ends

    asyncio.run(main())
