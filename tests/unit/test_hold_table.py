"""The hold service's table of callers waiting for the broker's answer (no Ray)."""

from __future__ import annotations

import asyncio

from rayq.actors.config import BrokerConfig
from rayq.actors.protocol import Park, PullRequest, PullResponse, PullStatus
from rayq.actors.pull_hold import HoldTable, PullHoldActor


def test_a_delivered_answer_reaches_its_waiter_even_if_it_came_first() -> None:
    async def run() -> tuple[object, object, bool]:
        table = HoldTable()
        early, late = table.expect(), table.expect()
        assert table.deliver(early, "early answer")  # before anyone waits
        waiter = asyncio.create_task(table.wait(late, timeout_s=5))
        await asyncio.sleep(0.01)
        assert not waiter.done()
        assert table.deliver(late, "late answer")
        return await table.wait(early, timeout_s=0), await waiter, table.deliver(late, "again")

    assert asyncio.run(run()) == ("early answer", "late answer", False)


def test_wait_times_out_with_none_and_a_forgotten_or_foreign_token_takes_nothing() -> None:
    async def run() -> tuple[object, bool, bool, int]:
        table, other = HoldTable(), HoldTable()
        token = table.expect()
        got = await table.wait(token, timeout_s=0.05)
        table.forget(token)
        foreign = other.expect()  # an earlier life of the service: different prefix
        return got, table.deliver(token, "x"), table.deliver(foreign, "x"), len(table)

    assert asyncio.run(run()) == (None, False, False, 0)
    t1, t2 = asyncio.run(_two_tokens())
    assert t1 != t2


async def _two_tokens() -> tuple[str, str]:
    return HoldTable().expect(), HoldTable().expect()


class FakeBroker:
    """The broker side of ``PullHoldActor._call``: answers NO_NEW_MSG and records the
    calls; ``append`` delivers an answer to the parked token, as the broker does."""

    def __init__(self, hold: PullHoldActor) -> None:
        self.hold = hold
        self.calls: list[tuple[str, object]] = []
        self.parked: str | None = None

    async def __call__(self, method: str, req: object, park: Park | None = None) -> object:
        self.calls.append((method, req))
        if park is not None:
            self.parked = park.token
        return PullResponse(status=PullStatus.NO_NEW_MSG, next_offset=5, min_offset=0,
                            max_offset=5)  # fmt: skip

    async def append(self) -> None:
        assert self.parked is not None
        await self.hold.deliver(self.parked, FOUND)


FOUND = PullResponse(status=PullStatus.FOUND, next_offset=6, min_offset=0, max_offset=6,
                     buffer=b"records", count=1)  # fmt: skip


def test_a_held_pull_asks_the_broker_once_and_returns_what_the_broker_delivers() -> None:
    async def run() -> tuple[object, int, int]:
        hold = PullHoldActor(BrokerConfig(), "ns")
        broker = FakeBroker(hold)
        hold._call = broker  # type: ignore[method-assign]
        req = PullRequest(group="g", topic="t", queue_id=0, queue_offset=5, suspend_ms=30_000)
        waiter = asyncio.create_task(hold.pull(req))
        await asyncio.sleep(0.05)
        assert not waiter.done()
        await broker.append()
        got = await asyncio.wait_for(waiter, 5)
        return got, len(broker.calls), len(hold.table)

    assert asyncio.run(run()) == (FOUND, 1, 0)


def test_a_held_pull_nobody_answers_returns_the_first_answer_at_its_suspend_time() -> None:
    async def run() -> tuple[PullStatus, int]:
        hold = PullHoldActor(BrokerConfig(), "ns")
        broker = FakeBroker(hold)
        hold._call = broker  # type: ignore[method-assign]
        req = PullRequest(group="g", topic="t", queue_id=0, queue_offset=5, suspend_ms=100)
        got = await hold.pull(req)
        return got.status, len(broker.calls)

    assert asyncio.run(run()) == (PullStatus.NO_NEW_MSG, 1)
