"""The PullHold actor: long polling (RocketMQ ``PullRequestHoldService``).

A pull that finds nothing new is parked per ``topic@queue`` until the broker
reports a larger max offset for that queue (``notify``, once per appended batch)
or the request's suspend time runs out, then pulled once more. No sleep-and-retry
loop: waiting is an ``asyncio.Event`` that ``notify`` sets. With long polling
off, the wait is ``short_polling_time_mills``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import ray

from rayq.store.errors import BrokerUnavailableError

from .config import BrokerConfig
from .peers import PEER_LOST_ERRORS, Peer
from .protocol import (
    PullManyRequest,
    PullManyResponse,
    PullRequest,
    PullResponse,
    PullStatus,
    broker_actor_name,
    check,
)

logger = logging.getLogger(__name__)


class HoldTable:
    """Waiters per queue and the newest max offset each queue reported (no Ray)."""

    def __init__(self) -> None:
        self._events: dict[tuple[str, int], asyncio.Event] = {}
        self._max: dict[tuple[str, int], int] = {}

    def max_offset(self, topic: str, queue_id: int) -> int:
        return self._max.get((topic, queue_id), -1)

    def notify(self, topic: str, queue_id: int, max_offset: int) -> None:
        key = (topic, queue_id)
        if max_offset > self._max.get(key, -1):
            self._max[key] = max_offset
        event = self._events.pop(key, None)
        if event is not None:
            event.set()

    async def wait(self, topic: str, queue_id: int, beyond: int, timeout_s: float) -> bool:
        """Wait until the queue's max offset passes ``beyond``; False on timeout."""
        return await self.wait_any({(topic, queue_id): beyond}, timeout_s)

    async def wait_any(self, beyond: dict[tuple[str, int], int], timeout_s: float) -> bool:
        """Wait until any queue's max offset passes its ``beyond``; False on timeout."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not any(self._max.get(k, -1) > b for k, b in beyond.items()):
            left = deadline - loop.time()
            if left <= 0:
                return False
            waiters = [asyncio.ensure_future(self._events.setdefault(k, asyncio.Event()).wait())
                       for k in beyond]  # fmt: skip
            try:
                await asyncio.wait(waiters, timeout=left, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waiters:
                    w.cancel()
        return True


class PullHoldActor:
    """Ray shell over HoldTable. Its broker is found by name on the first pull and
    again after a call to it failed, so a restarted hold service (or a restarted or
    replaced broker) needs no re-wiring."""

    def __init__(self, config: BrokerConfig, namespace: str) -> None:
        self.config = config
        self.table = HoldTable()
        self.broker = Peer(broker_actor_name(config.broker_name), namespace)

    def notify(self, topic: str, queue_id: int, max_offset: int) -> None:
        self.table.notify(topic, queue_id, max_offset)

    async def _call(self, method: str, req: Any) -> Any:
        """``method`` of the broker; a lost broker is looked up again by the next call
        (the caller sees BrokerUnavailableError and retries, as clients do)."""
        broker = self.broker.get()
        if broker is None:
            raise BrokerUnavailableError(
                f"broker {self.config.broker_name} is not running (yet); retry"
            )
        try:
            return await getattr(broker, method).remote(req)
        except PEER_LOST_ERRORS:
            self.broker.forget()
            raise

    async def pull(self, req: PullRequest) -> PullResponse:
        """Pull, waiting up to the suspend time if nothing new is there yet."""
        req = check(req, PullRequest)
        resp = await self._call("pull", req)
        if resp.status is not PullStatus.NO_NEW_MSG or req.suspend_ms <= 0:
            return resp
        beyond = max(req.queue_offset, resp.max_offset)
        if not await self.table.wait(req.topic, req.queue_id, beyond, self._hold_s(req.suspend_ms)):
            return resp
        return await self._call("pull", req)

    async def pull_many(self, req: PullManyRequest) -> PullManyResponse:
        """``pull`` for several queues of the broker: answered as soon as any of them has
        something (or an error), else after the suspend time with every queue's answer."""
        req = check(req, PullManyRequest)
        reply = await self._call("pull_many", req)
        resps = reply.results
        if req.suspend_ms <= 0 or any(
            not isinstance(r, PullResponse) or r.status is not PullStatus.NO_NEW_MSG for r in resps
        ):
            return reply
        waits = {(i.topic, i.queue_id): max(i.queue_offset, r.max_offset)
                 for i, r in zip(req.items, resps, strict=True)}  # fmt: skip
        if not await self.table.wait_any(waits, self._hold_s(req.suspend_ms)):
            return reply
        return await self._call("pull_many", req)

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
