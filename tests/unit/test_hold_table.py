"""The hold service's table: waiting for one queue or any of several (no Ray)."""

from __future__ import annotations

import asyncio

from rayq.actors.pull_hold import HoldTable


def test_wait_returns_when_the_queue_passes_the_offset_and_times_out_otherwise() -> None:
    async def run() -> tuple[bool, bool]:
        table = HoldTable()
        waiter = asyncio.create_task(table.wait("t", 0, beyond=5, timeout_s=5))
        await asyncio.sleep(0.01)
        table.notify("t", 0, 5)  # not beyond 5 yet
        await asyncio.sleep(0.01)
        assert not waiter.done()
        table.notify("t", 0, 6)
        got = await waiter
        return got, await table.wait("t", 1, beyond=0, timeout_s=0.05)

    assert asyncio.run(run()) == (True, False)


def test_wait_any_wakes_on_any_queue_and_checks_what_is_already_known() -> None:
    async def run() -> tuple[bool, bool, bool]:
        table = HoldTable()
        keys = {("t", 0): 3, ("t", 1): 7}
        waiter = asyncio.create_task(table.wait_any(keys, timeout_s=5))
        await asyncio.sleep(0.01)
        table.notify("t", 0, 2)  # older news: keeps waiting
        await asyncio.sleep(0.01)
        assert not waiter.done()
        table.notify("t", 1, 8)
        woke = await waiter
        already = await table.wait_any({("t", 1): 7}, timeout_s=0)
        quiet = await table.wait_any({("u", 0): 0, ("u", 1): 0}, timeout_s=0.05)
        return woke, already, quiet

    assert asyncio.run(run()) == (True, True, False)
