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
import uuid
from collections.abc import Callable
from typing import Any

import ray

from rayq.store.errors import BrokerUnavailableError

from .config import BrokerConfig
from .peers import PEER_LOST_ERRORS, Peer
from .protocol import (
    Park,
    PullManyRequest,
    PullManyResponse,
    PullRequest,
    PullResponse,
    broker_actor_name,
    check,
    nothing_new,
)

logger = logging.getLogger(__name__)


class HoldTable:
    """Callers waiting for an answer the broker sends (``deliver``), by token (no Ray)."""

    def __init__(self) -> None:
        self._prefix = uuid.uuid4().hex[:12]  # a restarted hold service never reuses one
        self._count = itertools.count()
        self._waiting: dict[str, asyncio.Future[Any]] = {}

    def __len__(self) -> int:
        return len(self._waiting)

    def expect(self) -> str:
        """A new token; ``wait`` on it gets what is delivered for it (also if that
        arrives before the caller starts waiting)."""
        token = f"{self._prefix}-{next(self._count)}"
        self._waiting[token] = asyncio.get_running_loop().create_future()
        return token

    def deliver(self, token: str, answer: Any) -> bool:
        """Hand ``answer`` to the caller waiting on ``token``; False if none does (it
        gave up, or the token is of an earlier life of this service)."""
        fut = self._waiting.get(token)
        if fut is None or fut.done():
            return False
        fut.set_result(answer)
        return True

    async def wait(self, token: str, timeout_s: float) -> Any | None:
        """What is delivered for ``token`` within ``timeout_s``, else None."""
        fut = self._waiting[token]
        try:
            return await asyncio.wait_for(asyncio.shield(fut), timeout_s)
        except TimeoutError:
            return fut.result() if fut.done() else None

    def forget(self, token: str) -> None:
        fut = self._waiting.pop(token, None)
        if fut is not None and not fut.done():
            fut.cancel()


class PullHoldActor:
    """Ray shell over HoldTable. Its broker is found by name on the first pull and
    again after a call to it failed, so a restarted hold service (or a restarted or
    replaced broker) needs no re-wiring."""

    def __init__(self, config: BrokerConfig, namespace: str) -> None:
        self.config = config
        self.table = HoldTable()
        self.broker = Peer(broker_actor_name(config.broker_name), namespace)

    async def deliver(self, token: str, answer: Any) -> None:
        """The broker's answer to a parked pull (internal: broker -> hold service)."""
        self.table.deliver(token, answer)

    async def _call(self, method: str, *args: Any) -> Any:
        """``method`` of the broker; a lost broker is looked up again by the next call
        (the caller sees BrokerUnavailableError and retries, as clients do)."""
        broker = self.broker.get()
        if broker is None:
            raise BrokerUnavailableError(
                f"broker {self.config.broker_name} is not running (yet); retry"
            )
        try:
            return await getattr(broker, method).remote(*args)
        except PEER_LOST_ERRORS:
            self.broker.forget()
            raise

    async def pull(self, req: PullRequest) -> PullResponse:
        """Pull, waiting up to the suspend time if nothing new is there yet."""
        req = check(req, PullRequest)
        if req.suspend_ms <= 0:
            return await self._call("pull", req)
        return await self._held("pull", req, lambda r: nothing_new([r]))

    async def pull_many(self, req: PullManyRequest) -> PullManyResponse:
        """``pull`` for several queues of the broker: answered as soon as any of them has
        something (or an error), else after the suspend time with every queue's answer."""
        req = check(req, PullManyRequest)
        if req.suspend_ms <= 0:
            return await self._call("pull_many", req)
        return await self._held("pull_many", req, lambda r: nothing_new(r.results))

    async def _held(self, method: str, req: PullRequest | PullManyRequest,
                    empty: Callable[[Any], bool]) -> Any:  # fmt: skip
        """One broker call that parks the pull there if it finds nothing; then wait for
        the broker's ``deliver`` (an append to one of its queues) or the hold time."""
        hold_s = self._hold_s(req.suspend_ms)
        token = self.table.expect()
        try:
            first = await self._call(method, req, Park(token=token, hold_ms=int(hold_s * 1000)))
            if not empty(first):
                return first
            return await self.table.wait(token, hold_s) or first
        finally:
            self.table.forget(token)

    def _hold_s(self, suspend_ms: int) -> float:
        """How long a pull that found nothing is held: its suspend time, capped by the
        broker's long-polling limit, or the short-polling time when long polling is off."""
        cap = (self.config.broker_suspend_max_ms if self.config.long_polling_enable
               else self.config.short_polling_time_mills)  # fmt: skip
        return min(suspend_ms, cap) / 1000

    async def ready(self) -> bool:
        return True


def spawn_hold(config: BrokerConfig, namespace: str, node_id: str) -> Any:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from .protocol import hold_actor_name

    return ray.remote(PullHoldActor).options(
        name=hold_actor_name(config.broker_name), namespace=namespace, get_if_exists=True,
        lifetime="detached", max_restarts=-1, num_cpus=0, max_concurrency=10_000,
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node_id, soft=False),
    ).remote(config, namespace)  # fmt: skip
