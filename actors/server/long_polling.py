"""Long polling (RocketMQ ``PullRequestHoldService``), in one place and without Ray.

A waiting pull goes to the broker once, with a ``Park`` token. The broker parks the
token *before* it reads (``ParkedPulls.park``) and drops it again if the read found
something. An append takes the tokens parked on the queues it touched (``take``) and
the broker answers each with a fresh read, sent straight to the hold service
(``BrokerLongPolling``; ``Hold.deliver``): the consumer gets the records two actor
hops after the put (broker -> hold, hold -> consumer). Park-then-read and
append-then-take, under one lock, mean an append either is seen by the read or finds
the token. A token whose hold time is over is swept and never answered: the hold
service has answered its caller with "nothing new" by then.

The hold service's side (``HoldService`` over ``HoldTable``) waits for that answer,
per token, with a future: a waiting consumer costs no CPU anywhere. When a caller was
waiting, the broker parks the caller's next pull at once (``follow_up``, under
``follow_up_token``) and the hold service adopts it without a broker call, so a
consumer that keeps up costs the broker no pull calls at all. A broker that dies takes
its parked pulls with it: the hold service sees the broker's socket close and lets
every waiting caller go on at once (``HoldService.broker_lost``) instead of waiting
out the hold time for answers that cannot come.

The Ray shells (actors/broker.py, actors/pull_hold.py) and the fake
(rayq/testing/fake.py) run these same objects.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec

from rayq.actors.protocol import (
    HOLD_REPLY_BYTES,
    Park,
    PullManyRequest,
    PullManyResponse,
    PullRequest,
    PullResponse,
    follow_up,
    follow_up_token,
    nothing_new,
)
from rayq.actors.protocol.frames import decode_reply
from rayq.actors.protocol.server_key import Guard, ServerProof
from rayq.actors.server.peer_api import Hold, HoldBroker, PeerLostError
from rayq.store.errors import InvalidRequestError

logger = logging.getLogger(__name__)
_encode = msgspec.msgpack.Encoder().encode

QueueKey = tuple[str, int]
Pull = PullRequest | PullManyRequest
Reply = PullResponse | PullManyResponse


# Kept a little past the hold time, so an append just before the hold service gives
# up still finds the token (an answer that arrives too late is dropped there).
GRACE_S = 1.0


@dataclass(slots=True)
class Parked:
    """One parked pull: its request (a PullRequest or a PullManyRequest), its queues
    and when it stops mattering."""

    request: Any
    keys: tuple[QueueKey, ...]
    deadline: float = field(default=0.0)


class ParkedPulls:
    """Parked pulls by token and by queue; safe to use from several threads (the
    broker's send and pull concurrency groups run in threads of their own)."""

    def __init__(self, clock: Any = time.monotonic) -> None:
        self._lock = threading.Lock()
        self._clock = clock
        self._by_token: dict[str, Parked] = {}
        self._by_queue: dict[QueueKey, set[str]] = {}
        self._next_sweep = 0.0

    def __len__(self) -> int:
        return len(self._by_token)

    def watched(self, key: QueueKey) -> bool:
        """Whether a pull waits on ``key`` (a cheap check before ``take``)."""
        return key in self._by_queue

    def park(self, token: str, request: Any, keys: tuple[QueueKey, ...], hold_s: float) -> None:
        now = self._clock()
        with self._lock:
            self._forget(token)
            self._by_token[token] = Parked(request, keys, now + hold_s + GRACE_S)
            for key in keys:
                self._by_queue.setdefault(key, set()).add(token)
        if now >= self._next_sweep:
            self.sweep()

    def drop(self, token: str) -> bool:
        """Unpark ``token``; whether it was still parked (then the caller answers it)."""
        with self._lock:
            return self._forget(token) is not None

    def take(self, keys: list[QueueKey] | tuple[QueueKey, ...]) -> list[tuple[str, Any]]:
        """Unpark and return the live pulls waiting on any of ``keys`` (token, request)."""
        now = self._clock()
        out: list[tuple[str, Any]] = []
        with self._lock:
            tokens = {t for key in keys for t in self._by_queue.get(key, ())}
            for token in tokens:
                parked = self._forget(token)
                if parked is not None and parked.deadline > now:
                    out.append((token, parked.request))
        return out

    def sweep(self) -> int:
        """Forget every pull whose hold time is over; how many."""
        now = self._clock()
        with self._lock:
            self._next_sweep = now + GRACE_S
            stale = [t for t, p in self._by_token.items() if p.deadline <= now]
            for token in stale:
                self._forget(token)
        return len(stale)

    def _forget(self, token: str) -> Parked | None:
        parked = self._by_token.pop(token, None)
        if parked is not None:
            for key in parked.keys:
                tokens = self._by_queue.get(key)
                if tokens is not None:
                    tokens.discard(token)
                    if not tokens:
                        del self._by_queue[key]
        return parked


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

    def request(self, token: str) -> Any:
        """The request ``token`` was given for (None once it is forgotten)."""
        return self._requests.get(token)

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

    def release(self) -> int:
        """End every wait now with nothing (``wait`` returns None) and drop the
        follow-ups: the broker that parked them is gone. Returns how many waits ended."""
        self._follow_ups.clear()
        released = 0
        for fut in self._waiting.values():
            if not fut.done():
                fut.set_result(None)
                released += 1
        return released

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


class PullReader(Protocol):
    """The broker's reads (actors/server/pull_processor.py)."""

    def pull(self, req: PullRequest, max_bytes: int | None = None) -> PullResponse: ...

    def pull_many(self, req: PullManyRequest, max_bytes: int | None = None) -> PullManyResponse: ...


def keys_of(req: Pull) -> tuple[QueueKey, ...]:
    """The queues a pull waits on."""
    if isinstance(req, PullManyRequest):
        return tuple((item.topic, item.queue_id) for item in req.items)
    return ((req.topic, req.queue_id),)


class BrokerLongPolling:
    """The broker's side: parks pulls that found nothing, answers them on appends and
    sends the answers to the hold service (``Hold.deliver``), then parks the caller's
    next pull ahead of time when the hold service's caller was waiting."""

    def __init__(
        self,
        reader: PullReader,
        hold: Hold,
        *,
        name: str,
        hold_s: Callable[[int], float],
        follow_ups: Callable[[], bool],
        on_answer: Callable[[Pull, Reply], None],
        on_append: Callable[[], None],
    ) -> None:
        self.parked = ParkedPulls()
        self._reader = reader
        self._hold = hold
        self._name = name
        self._hold_s = hold_s  # a request's suspend_ms -> how long it stays parked
        self._follow_ups = follow_ups  # whether follow-ups may be parked (not with ACL on)
        self._on_answer = on_answer  # tallies what a delivered answer holds
        self._on_append = on_append  # wakes the slaves' fetches
        self._delivering: set[asyncio.Future[None]] = set()  # answers sent, not yet acked

    def read(self, req: Pull) -> tuple[Reply, bool]:
        """A read answered through the hold service (at most HOLD_REPLY_BYTES), and
        whether it found nothing new."""
        if isinstance(req, PullManyRequest):
            many = self._reader.pull_many(req, HOLD_REPLY_BYTES)
            return many, nothing_new(many.results)
        one = self._reader.pull(req, HOLD_REPLY_BYTES)
        return one, nothing_new([one])

    def park(self, token: str, req: Pull) -> None:
        self.parked.park(token, req, keys_of(req), self._hold_s(req.suspend_ms))

    def park_and_read(self, token: str, req: Pull) -> tuple[Reply, bool, bool]:
        """Park ``req`` under ``token``, then read (park, then read; append, then take: an
        append either is seen by the read or finds the token). A read that found news,
        or failed, unparks it again. Returns the read, whether it found nothing new, and
        whether this call unparked it for its news (False: still parked, or an append
        took it meanwhile and answers it)."""
        self.park(token, req)
        try:
            reply, empty = self.read(req)
        except BaseException:
            self.parked.drop(token)
            raise
        return reply, empty, not empty and self.parked.drop(token)

    def wake(self, keys: Iterable[QueueKey]) -> None:
        """Answer the pulls parked on ``keys`` (just appended to), and the slaves' fetches."""
        keys = tuple(keys)
        if keys:
            self._on_append()
        for token, req in self.parked.take(keys):
            self.answer(token, req)

    def answer(self, token: str, req: Pull, got: tuple[Reply, bool] | None = None) -> None:
        """Read for the parked pull ``token`` and send what it finds to the hold service.
        A pull that still finds nothing (another tag, a delayed message) stays parked."""
        if got is None:
            try:
                got = self.read(req)
            except Exception:  # the waiting pull times out and is sent again
                logger.exception("broker %s: answering a parked pull failed", self._name)
                return
        reply, empty = got
        if empty:
            self.park(token, req)
            return
        task = asyncio.ensure_future(self._deliver(token, req, reply))
        self._delivering.add(task)
        task.add_done_callback(self._delivering.discard)

    async def _deliver(self, token: str, req: Pull, reply: Reply) -> None:
        """Deliver, then park the caller's next pull if the caller was waiting."""
        try:
            self._on_answer(req, reply)
            waited = await self._hold.deliver(token, reply)
        except PeerLostError:  # a hold service that restarts has nobody waiting
            return
        nxt = follow_up(req, reply) if waited is True and self._follow_ups() else None
        if nxt is None:
            return
        token = follow_up_token(token)
        try:
            reply, empty, found = self.park_and_read(token, nxt)
        except Exception:  # not parked: the caller's next pull goes to the broker
            logger.exception("broker %s: parking a follow-up pull failed", self._name)
            return
        if found:
            self.answer(token, nxt, (reply, empty))


class HoldService:
    """The hold service's side: a waiting pull goes to the broker once (with a
    ``Park``); its answer comes through ``deliver`` or the hold time runs out."""

    def __init__(self, broker: HoldBroker, hold_s: Callable[[int], float], guard: Guard) -> None:
        self.broker = broker
        self.hold_s = hold_s  # a request's suspend_ms -> how long it is held
        self.table = HoldTable(lambda request: hold_s(request.suspend_ms))
        self.guard = guard  # ``deliver`` is the broker's only: proof of the server key

    def deliver(self, token: str, answer: Reply | bytes, proof: ServerProof | None = None) -> bool:
        """The broker's answer to a parked pull; True if a caller was waiting for it.
        Its ``proof`` (of the server key, bound to the token) is checked first; then an
        answer in bytes (``frames.encode_reply``'s) is read as the reply to the request
        the token was given for."""
        self.guard.check("deliver", proof, token, answer)
        if type(answer) is bytes:
            request = self.table.request(token)
            if request is None:
                return False  # nobody waits for it any more
            many = isinstance(request, PullManyRequest)
            try:
                if many:
                    answer = decode_reply(answer, PullManyResponse)
                else:
                    answer = decode_reply(answer, PullResponse)
            except (msgspec.DecodeError, InvalidRequestError) as exc:
                raise InvalidRequestError(
                    f"hold.deliver: an answer that is not a "
                    f"{'PullManyResponse' if many else 'PullResponse'}: {exc}"
                ) from None
        return self.table.deliver(token, answer)

    def broker_lost(self) -> None:
        """The broker's connection failed (it died or restarts): the pulls parked there
        will never be answered. Each waiting caller goes on at once: one that waited on
        a follow-up parks its pull again (at the restarted broker, or gets
        ``BrokerUnavailableError`` and retries, as clients do); one that waited on its
        own park gets "nothing new" and pulls again."""
        released = self.table.release()
        if released:
            logger.warning(
                "the broker's connection was lost: %d parked pull(s) go on without it", released
            )

    async def pull(self, req: PullRequest) -> PullResponse:
        """Pull, waiting up to the suspend time if nothing new is there yet."""
        if req.suspend_ms <= 0:
            return await self.broker.pull(req)
        answer: PullResponse = await self._held(req, lambda r: nothing_new([r]))
        return answer

    async def pull_many(self, req: PullManyRequest) -> PullManyResponse:
        """``pull`` for several queues: answered as soon as any of them has something (or
        an error), else after the suspend time with every queue's answer."""
        if req.suspend_ms <= 0:
            return await self.broker.pull_many(req)
        answer: PullManyResponse = await self._held(req, lambda r: nothing_new(r.results))
        return answer

    async def _call(self, req: Any, park: Park | None = None) -> Any:
        if isinstance(req, PullManyRequest):
            return await self.broker.pull_many(req, park)
        return await self.broker.pull(req, park)

    async def _held(self, req: Any, empty: Callable[[Any], bool]) -> Any:
        """A waiting pull. If the broker parked exactly this pull already (the follow-up
        of the caller's last one), wait for its answer without a broker call. Else one
        broker call that parks the pull there if it finds nothing; then wait for the
        broker's ``deliver`` (an append to one of its queues) or the hold time."""
        hold_s = self.hold_s(req.suspend_ms)
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
                return await self._call(msgspec.structs.replace(req, suspend_ms=0))
        token = self.table.expect(req)
        try:
            park = Park(token=token, hold_ms=max(int(hold_s * 1000), 0))
            first = await self._call(req, park)
            if not empty(first):
                return first
            return await self.table.wait(token, hold_s) or first
        finally:
            self.table.forget(token)
