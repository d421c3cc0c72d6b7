"""Push-consumer groups at the coordinator, without Ray: membership and rebalances.

A push consumer joins through its Consumer actor (``MemberCalls.attach_member`` finds
it and reports its death); every membership or route change rebalances the group in
two steps (rebalance.py): owners release what they lose, then every member gets its
new queues. Calls that arrive while a rebalance runs are folded into one rerun, and a
safety rebalance of every group runs every ``SAFETY_REBALANCE_MS`` in case an event
was missed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from rayq.actors.protocol import (
    CountReply,
    Done,
    JoinGroupRequest,
    MemberRequest,
    MembersReply,
    MessageQueue,
)
from rayq.actors.server.coordinator_peers import MemberCalls
from rayq.actors.server.rebalance import Plan, Rebalancer
from rayq.store.clock import Clock

logger = logging.getLogger(__name__)

SAFETY_REBALANCE_MS = 20_000  # every push-consumer group, in case an event was missed
MEMBER_CALL_TIMEOUT_S = 30.0  # a revoke waits for in-flight work; a member slower is dropped
REBUILD_WAIT_S = 10.0  # how long a query waits for the rebuild before answering anyway


class Tasks(Protocol):
    """Where background work runs (``coordinator_service.Loops``)."""

    def ensure(self, name: str, make: Callable[[], Coroutine[Any, Any, None]]) -> None: ...

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None: ...


class GroupCoordinator:
    """Members of every push-consumer group, and carrying out their rebalances."""

    def __init__(
        self, members: MemberCalls, clock: Clock, tasks: Tasks, ready: asyncio.Event
    ) -> None:
        self.calls = members
        self.clock = clock
        self.tasks = tasks
        self.ready = ready  # set once the restart's rebuild is done
        self.rebalancer = Rebalancer()
        self.queues_of: Callable[[str], list[MessageQueue]] = lambda topic: []
        self._locks: dict[str, asyncio.Lock] = {}
        self._dirty: set[str] = set()

    async def join_group(self, req: JoinGroupRequest) -> CountReply:
        """A push consumer joins (ConfigError if it subscribes unlike the group); the group
        is rebalanced before this returns. Its Consumer actor is found by the peers."""
        group, client_id = req.group, req.client_id
        known = client_id in self.rebalancer.members(group)
        await self.calls.attach_member(group, client_id, lambda: self._gone(group, client_id))
        try:
            self.rebalancer.join(group, client_id, req.spec)
        except Exception:
            if not known:
                self.calls.detach_member(group, client_id)
            raise
        self.tasks.ensure("safety", self._safety_loop)
        await self.rebalance(group)
        return CountReply(count=len(self.rebalancer.members(group)))

    async def leave_group(self, req: MemberRequest) -> Done:
        """A member leaves (shut down): its queues go to the others at once."""
        existed = self._forget(req.group, req.client_id)
        if existed:
            await self.rebalance(req.group)
        return Done(existed=existed)

    async def member_alive(self, req: MemberRequest) -> Done:
        """``existed``: the caller is a member of the group now."""
        await wait_ready(self.ready)
        return Done(existed=req.client_id in self.rebalancer.members(req.group))

    async def group_members(self, req: MemberRequest) -> MembersReply:
        """Each member of a push-consumer group and the queues it owns now."""
        await wait_ready(self.ready)
        owned = self.rebalancer.owned(req.group)
        return MembersReply(
            members={
                m: sorted(owned.get(m, frozenset())) for m in self.rebalancer.members(req.group)
            }
        )

    def _forget(self, group: str, client_id: str) -> bool:
        self.calls.detach_member(group, client_id)
        return self.rebalancer.leave(group, client_id)

    async def _gone(self, group: str, client_id: str) -> None:
        """The member's Consumer actor died: its queues move at once."""
        logger.warning("consumer %s of group %s died; rebalancing", client_id, group)
        if self._forget(group, client_id):
            await self.rebalance(group)

    async def _safety_loop(self) -> None:
        while True:
            await asyncio.sleep(SAFETY_REBALANCE_MS / 1000)
            for group in self.rebalancer.groups():
                await self.rebalance(group)

    def routes_changed(self, topics: set[str]) -> None:
        for group in self.rebalancer.groups_of_topics(topics) if topics else []:
            self.tasks.spawn(self.rebalance(group))

    def rebalance_all(self) -> None:
        for group in self.rebalancer.groups():
            self.tasks.spawn(self.rebalance(group))

    async def rebalance(self, group: str) -> None:
        """Rebalance ``group``; calls that arrive while one runs are folded into one rerun,
        and calls while the state is being rebuilt into one when it is."""
        self._dirty.add(group)
        if not self.ready.is_set():
            return  # the rebuild rebalances every group when it is done
        lock = self._locks.setdefault(group, asyncio.Lock())
        if lock.locked():
            return
        async with lock:
            while group in self._dirty:
                self._dirty.discard(group)
                plan = self.rebalancer.plan(group, self.queues_of, self.clock.now_ms())
                if plan is not None:
                    await self._carry_out(plan)

    async def _carry_out(self, plan: Plan) -> None:
        """Step 1: owners release what they lose (acknowledged or dead). Step 2: assign."""
        group = plan.group
        self.calls.rebalanced(group)
        revokes = {m: qs for m, qs in plan.revoke.items() if qs}
        results = await self._call_members(group, self.calls.revoke, plan.generation, revokes)
        for member, qs in revokes.items():
            if results[member] is not None:
                logger.warning(
                    "group %s: %s did not release %d queues (%s); moving them anyway",
                    group,
                    member,
                    len(qs),
                    results[member],
                )
            self.rebalancer.released(group, member, qs)
        results = await self._call_members(group, self.calls.assign, plan.generation, plan.assign)
        for member, qs in plan.assign.items():
            if results[member] is None:
                self.rebalancer.assigned(group, member, qs)

    async def _call_members(
        self,
        group: str,
        call: Callable[[str, str, int, list[MessageQueue]], Coroutine[Any, Any, None]],
        generation: int,
        queues: dict[str, list[MessageQueue]],
    ) -> dict[str, BaseException | None]:
        """``call`` each member with its queues at once: by member, its error (None: ok)."""

        async def one(member: str, qs: list[MessageQueue]) -> BaseException | None:
            try:
                await asyncio.wait_for(call(group, member, generation, qs), MEMBER_CALL_TIMEOUT_S)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                return exc
            return None

        members = list(queues)
        got = await asyncio.gather(*(one(m, queues[m]) for m in members))
        return dict(zip(members, got, strict=True))


async def wait_ready(event: asyncio.Event) -> None:
    """Answer from rebuilt state (or from what there is after ``REBUILD_WAIT_S``)."""
    if not event.is_set():
        try:
            await asyncio.wait_for(event.wait(), REBUILD_WAIT_S)
        except TimeoutError:
            return
