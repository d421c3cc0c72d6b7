"""The hold service without Ray: its table of waiting callers and follow-up pulls, and
``PullHoldActor`` over a fake broker that records its calls."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec

from rayq.actors.protocol import (
    Park,
    PullRequest,
    PullResponse,
    PullStatus,
    check,
    follow_up,
    follow_up_token,
    to_wire,
)
from rayq.actors.protocol.config import BrokerConfig
from rayq.actors.protocol.server_key import ServerKey
from rayq.actors.pull_hold import PullHoldActor
from rayq.actors.server.long_polling import HoldTable

REQ = PullRequest(
    group="g", topic="t", queue_id=0, queue_offset=5, suspend_ms=30_000, client_id="c1"
)


def found(first: int, n: int) -> PullResponse:
    return PullResponse(
        status=PullStatus.FOUND,
        next_offset=first + n,
        min_offset=0,
        max_offset=first + n,
        buffer=b"r" * n,
        count=n,
    )


def test_a_delivered_answer_reaches_its_waiter_even_if_it_came_first() -> None:
    async def run() -> tuple[object, object, bool, bool]:
        table = HoldTable(lambda r: 10.0)
        early, late = table.expect(REQ), table.expect(REQ)
        waited_early = table.deliver(early, "early answer")  # before anyone waits
        waiter = asyncio.create_task(table.wait(late, timeout_s=5))
        await asyncio.sleep(0.01)
        assert not waiter.done()
        assert table.deliver(late, found(5, 1))  # a caller waited: True
        return (
            await table.wait(early, timeout_s=0),
            await waiter,
            waited_early,
            (table.deliver(late, "again")),
        )

    assert asyncio.run(run()) == ("early answer", found(5, 1), False, False)


def test_wait_times_out_with_none_and_a_forgotten_or_foreign_token_takes_nothing() -> None:
    async def run() -> tuple[object, bool, bool, int]:
        table, other = HoldTable(), HoldTable()
        token = table.expect(REQ)
        got = await table.wait(token, timeout_s=0.05)
        table.forget(token)
        foreign = other.expect(REQ)  # an earlier life of the service: another prefix
        return got, table.deliver(token, "x"), table.deliver(foreign, "x"), len(table)

    assert asyncio.run(run()) == (None, False, False, 0)


def test_an_answer_a_caller_waited_for_notes_the_follow_up_for_adoption_until_it_runs_out() -> None:
    now = [100.0]

    tokens: list[str] = []

    async def run() -> tuple[object, object, object]:
        table = HoldTable(lambda r: 10.0, clock=lambda: now[0])
        token = table.expect(REQ)
        waiter = asyncio.create_task(table.wait(token, 5))
        await asyncio.sleep(0.01)
        assert table.deliver(token, found(5, 3))
        await waiter
        table.forget(token)
        tokens.append(follow_up_token(token))
        nxt = msgspec.structs.replace(REQ, queue_offset=8)
        assert table.adopt(msgspec.structs.replace(nxt, client_id="c2")) is None  # not exact
        adopted = table.adopt(nxt)
        again = table.adopt(nxt)  # taken once
        token2 = table.expect(REQ)
        waiter2 = asyncio.create_task(table.wait(token2, 5))
        await asyncio.sleep(0.01)
        table.deliver(token2, found(5, 3))
        await waiter2
        now[0] += 11  # past the follow-up's hold time
        return adopted, again, table.adopt(nxt)

    adopted, again, expired = asyncio.run(run())
    assert adopted == (tokens[0], 10.0)
    assert again is None and expired is None


class FakeBroker:
    """The broker behind ``PullHoldActor``'s ``HoldService`` (a ``HoldBroker``): answers
    NO_NEW_MSG (parking the pull) and records the calls; ``append`` delivers the next
    records as the broker does."""

    def __init__(self, hold: PullHoldActor) -> None:
        self.hold = hold
        self.calls: list[tuple[str, object]] = []
        self.parked: tuple[str, PullRequest] | None = None
        self.offset = 5
        self.waited: list[bool] = []

    async def pull(self, req: Any, park: Park | None = None) -> Any:
        return await self("pull", req, None if park is None else to_wire(park))

    async def pull_many(self, req: Any, park: Park | None = None) -> Any:
        return await self("pull_many", req, None if park is None else to_wire(park))

    async def __call__(self, method: str, req: PullRequest, park: bytes | None = None) -> object:
        self.calls.append((method, req))
        if park is not None:  # sent as to_wire bytes, as the broker gets it
            self.parked = (check(park, Park).token, req)
        return PullResponse(
            status=PullStatus.NO_NEW_MSG,
            next_offset=req.queue_offset,
            min_offset=0,
            max_offset=self.offset,
        )

    async def append(self, n: int) -> None:
        assert self.parked is not None
        token, req = self.parked
        answer = found(req.queue_offset, n)
        self.offset += n
        proof = self.hold.service.guard.prove("deliver", token, answer)
        waited = await self.hold.deliver(token, answer, proof)
        self.waited.append(waited)
        nxt = follow_up(req, answer)
        self.parked = (follow_up_token(token), nxt) if waited and nxt is not None else None


def test_a_consumer_that_keeps_up_is_answered_by_deliveries_with_one_broker_call() -> None:
    async def run() -> tuple[list[object], int, list[bool]]:
        hold = PullHoldActor(BrokerConfig(), "ns", server_key=ServerKey.new())
        broker = FakeBroker(hold)
        hold.service.broker = broker
        got: list[object] = []
        offset = 5
        for n in (1, 2, 3):
            waiter = asyncio.create_task(
                hold.pull(msgspec.structs.replace(REQ, queue_offset=offset))
            )
            await asyncio.sleep(0.02)
            assert not waiter.done()
            await broker.append(n)
            answer = await asyncio.wait_for(waiter, 5)
            got.append(answer)
            offset = answer.next_offset
        return got, len(broker.calls), broker.waited

    got, calls, waited = asyncio.run(run())
    assert got == [found(5, 1), found(6, 2), found(8, 3)]
    assert calls == 1  # the first pull parked at the broker; the rest were follow-ups
    assert waited == [True, True, True]


def test_an_answer_that_comes_before_the_next_pull_is_kept_for_it() -> None:
    async def run() -> tuple[object, int, list[bool]]:
        hold = PullHoldActor(BrokerConfig(), "ns", server_key=ServerKey.new())
        broker = FakeBroker(hold)
        hold.service.broker = broker
        waiter = asyncio.create_task(hold.pull(REQ))
        await asyncio.sleep(0.02)
        await broker.append(2)
        first = await waiter
        await broker.append(4)  # the consumer is busy: nobody waits for this one
        second = await hold.pull(msgspec.structs.replace(REQ, queue_offset=first.next_offset))
        assert broker.parked is None  # nobody waited: no further follow-up was parked
        return second, len(broker.calls), broker.waited

    assert asyncio.run(run()) == (found(7, 4), 1, [True, False])


def test_a_held_pull_nobody_answers_returns_the_first_answer_at_its_suspend_time() -> None:
    async def run() -> tuple[PullStatus, int]:
        hold = PullHoldActor(BrokerConfig(), "ns", server_key=ServerKey.new())
        broker = FakeBroker(hold)
        hold.service.broker = broker
        got = await hold.pull(msgspec.structs.replace(REQ, suspend_ms=100))
        return got.status, len(broker.calls)

    assert asyncio.run(run()) == (PullStatus.NO_NEW_MSG, 1)


def test_a_lost_broker_lets_held_pulls_go_on_at_once() -> None:
    """The broker dies with pulls parked there (its socket to the hold service closes,
    ``broker_lost``): a caller waiting on its own park gets "nothing new" at once rather
    than after its 30 s suspend time; one waiting on a follow-up the broker had parked
    parks its pull again, at the restarted broker, and gets what comes next there."""

    async def run() -> tuple[PullStatus, object, int]:
        hold = PullHoldActor(BrokerConfig(), "ns", server_key=ServerKey.new())
        broker = FakeBroker(hold)
        hold.service.broker = broker
        own = asyncio.create_task(hold.pull(REQ))
        await asyncio.sleep(0.02)
        hold.service.broker_lost()
        status = (await asyncio.wait_for(own, 5)).status

        waiter = asyncio.create_task(hold.pull(REQ))  # parked again; answered
        await asyncio.sleep(0.02)
        await broker.append(1)
        first = await asyncio.wait_for(waiter, 5)
        follow = asyncio.create_task(  # adopts the follow-up the broker parked
            hold.pull(msgspec.structs.replace(REQ, queue_offset=first.next_offset))
        )
        await asyncio.sleep(0.02)
        calls = len(broker.calls)
        hold.service.broker_lost()  # ... and the broker restarts without it
        await asyncio.sleep(0.02)
        assert not follow.done()  # parked once more, at the restarted broker
        await broker.append(2)
        return status, await asyncio.wait_for(follow, 5), len(broker.calls) - calls

    status, answer, calls = asyncio.run(run())
    assert status is PullStatus.NO_NEW_MSG
    assert answer == found(6, 2)
    assert calls == 1  # the follow-up went to the broker again once
