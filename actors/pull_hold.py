"""The PullHold actor: long polling (RocketMQ ``PullRequestHoldService``).

A waiting pull goes to the broker once, with a ``Park`` token. If it finds nothing
new, the broker keeps it parked (actors/server/parked_pulls.py) and, when it appends
to one of its queues, reads for it and sends the answer here (``deliver``): the hold
service answers its caller with those records, two actor hops after the put
(broker -> hold -> consumer), without asking the broker again. Else the caller gets
"nothing new" when the request's suspend time (capped by ``broker_suspend_max_ms``;
``short_polling_time_mills`` with long polling off) runs out. Waiting is a future per
token: a waiting consumer costs no CPU anywhere.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

import msgspec
import ray

from rayq.actors.peers import PEER_LOST_ERRORS, Peer
from rayq.actors.protocol import (
    Park,
    PullManyRequest,
    PullManyResponse,
    PullRequest,
    PullResponse,
    broker_actor_name,
    check,
    follow_up,
    follow_up_token,
    from_wire,
    nothing_new,
    to_wire,
)
from rayq.actors.protocol.config import BrokerConfig
from rayq.store.errors import BrokerUnavailableError

logger = logging.getLogger(__name__)
_encode = msgspec.msgpack.Encoder().encode


class HoldTable:
    """Callers waiting for an answer the broker sends (``deliver``), by token, and the
    follow-up pulls the broker parked ahead of time, by the exact request (no Ray)."""

    def __init__(
        self,
        hold_s: Callable[[Any], float] = lambda request: 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._hold_s = hold_s  # how long the broker parks a request's follow-up
        self._prefix = uuid.uuid4().hex[:12]  # a restarted hold service never reuses one
        self._count = itertools.count()
        self._clock = clock
        self._waiting: dict[str, asyncio.Future[Any]] = {}
        self._awaited: set[str] = set()  # tokens a caller is waiting on right now
        self._requests: dict[str, Any] = {}  # token -> the request it answers
        self._follow_ups: dict[bytes, tuple[str, float]] = {}  # request -> token, until
        self._next_sweep = 0.0

    def __len__(self) -> int:
        return len(self._waiting)

    def expect(self, request: Any, token: str | None = None) -> str:
        """A token for ``request`` (a new one unless given); ``wait`` on it gets what is
        delivered for it (also if that arrives before the caller starts waiting)."""
        token = token or f"{self._prefix}-{next(self._count)}"
        if token not in self._waiting:
            self._waiting[token] = asyncio.get_running_loop().create_future()
        self._requests[token] = request
        return token

    def deliver(self, token: str, answer: Any) -> bool:
        """Keep ``answer`` for ``token``; True if a caller was waiting for it right now.
        Then the broker parks the caller's next pull (``follow_up``) for the hold time
        of its request: it is noted here under that request, for ``adopt``."""
        fut = self._waiting.get(token)
        if fut is None or fut.done():
            return False
        fut.set_result(answer)
        if token not in self._awaited:
            return False
        nxt = follow_up(self._requests.get(token), answer)
        if nxt is not None:
            following = follow_up_token(token)
            self.expect(nxt, following)
            # Ends before the broker's (which adds parked_pulls.GRACE_S), so a follow-up
            # adopted here is always still parked there.
            self._follow_ups[_key(nxt)] = (following, self._clock() + self._hold_s(nxt))
        return True

    def adopt(self, request: Any) -> tuple[str, float] | None:
        """The follow-up token the broker parked for exactly ``request`` and how long it
        stays parked there; None if there is none (or it ran out)."""
        now = self._clock()
        if now >= self._next_sweep:
            self._sweep(now)
        found = self._follow_ups.pop(_key(request), None)
        if found is None:
            return None
        if found[1] <= now:
            self.forget(found[0])
            return None
        return found[0], found[1] - now

    async def wait(self, token: str, timeout_s: float) -> Any | None:
        """What is delivered for ``token`` within ``timeout_s``, else None."""
        fut = self._waiting[token]
        if fut.done():
            return fut.result()
        self._awaited.add(token)
        try:
            return await asyncio.wait_for(asyncio.shield(fut), timeout_s)
        except TimeoutError:
            return fut.result() if fut.done() else None
        finally:
            self._awaited.discard(token)

    def forget(self, token: str) -> None:
        self._requests.pop(token, None)
        fut = self._waiting.pop(token, None)
        if fut is not None and not fut.done():
            fut.cancel()

    def _sweep(self, now: float) -> None:
        """Forget follow-ups nobody adopted in time (with any answer kept for them)."""
        self._next_sweep = now + 1.0
        stale = [key for key, (_, until) in self._follow_ups.items() if until <= now]
        for key in stale:
            self.forget(self._follow_ups.pop(key)[0])


def _key(request: Any) -> bytes:
    return _encode(request)


class PullHoldActor:
    """Ray shell over HoldTable. Its broker is found by name on the first pull and
    again after a call to it failed, so a restarted hold service (or a restarted or
    replaced broker) needs no re-wiring."""

    def __init__(self, config: BrokerConfig, namespace: str) -> None:
        self.config = config
        self.table = HoldTable(lambda request: config.hold_s(request.suspend_ms))
        self.broker = Peer(broker_actor_name(config.replica_name), namespace)

    async def deliver(self, token: str, answer: Any) -> bool:
        """The broker's answer to a parked pull (internal: broker -> hold service); True
        if a caller was waiting for it (the broker then parks that caller's next pull)."""
        if type(answer) is bytes:
            answer = from_wire(answer, PullResponse)
        return self.table.deliver(token, answer)

    async def _call(self, method: str, req: Any, *args: Any) -> Any:
        """``method`` of the broker for ``req`` (sent and, for one queue, answered as
        ``to_wire`` bytes); a lost broker is looked up again by the next call (the
        caller sees BrokerUnavailableError and retries, as clients do)."""
        broker = self.broker.get()
        if broker is None:
            raise BrokerUnavailableError(
                f"broker {self.config.replica_name} is not running (yet); retry"
            )
        try:
            reply = await getattr(broker, method).remote(to_wire(req), *args)
        except PEER_LOST_ERRORS:
            self.broker.forget()
            raise
        return from_wire(reply, PullResponse) if type(reply) is bytes else reply

    async def pull(self, req: PullRequest | bytes) -> PullResponse | bytes:
        """Pull, waiting up to the suspend time if nothing new is there yet (answered in
        bytes if asked in bytes, as the Ray transport asks)."""
        wire = type(req) is bytes
        req = check(req, PullRequest)
        if req.suspend_ms <= 0:
            resp = await self._call("pull", req)
        else:
            resp = await self._held("pull", req, lambda r: nothing_new([r]))
        return to_wire(resp) if wire else resp

    async def pull_many(self, req: PullManyRequest | bytes) -> PullManyResponse:
        """``pull`` for several queues of the broker: answered as soon as any of them has
        something (or an error), else after the suspend time with every queue's answer."""
        req = check(req, PullManyRequest)
        if req.suspend_ms <= 0:
            return await self._call("pull_many", req)
        return await self._held("pull_many", req, lambda r: nothing_new(r.results))

    async def _held(
        self, method: str, req: PullRequest | PullManyRequest, empty: Callable[[Any], bool]
    ) -> Any:
        """A waiting pull. If the broker parked exactly this pull already (the follow-up
        of the caller's last one), wait for its answer without a broker call. Else one
        broker call that parks the pull there if it finds nothing; then wait for the
        broker's ``deliver`` (an append to one of its queues) or the hold time."""
        hold_s = self.config.hold_s(req.suspend_ms)
        adopted = self.table.adopt(req)
        if adopted is not None:
            token, parked_s = adopted
            self.table.expect(req, token)
            started = time.monotonic()
            try:
                got = await self.table.wait(token, min(hold_s, parked_s))
            finally:
                self.table.forget(token)
            if got is not None:
                return got
            hold_s -= time.monotonic() - started
            if hold_s <= 0:
                return await self._call(method, msgspec.structs.replace(req, suspend_ms=0))
        token = self.table.expect(req)
        try:
            park = to_wire(Park(token=token, hold_ms=max(int(hold_s * 1000), 0)))
            first = await self._call(method, req, park)
            if not empty(first):
                return first
            return await self.table.wait(token, hold_s) or first
        finally:
            self.table.forget(token)

    async def ready(self) -> bool:
        return True


def spawn_hold(config: BrokerConfig, namespace: str, node_id: str) -> Any:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from rayq.actors.protocol import hold_actor_name

    return (
        ray.remote(PullHoldActor)
        .options(
            name=hold_actor_name(config.replica_name),
            namespace=namespace,
            get_if_exists=True,
            lifetime="detached",
            max_restarts=-1,
            num_cpus=0,
            max_concurrency=10_000,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node_id, soft=False),
        )
        .remote(config, namespace)
    )
