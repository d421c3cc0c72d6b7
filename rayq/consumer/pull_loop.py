"""How a push consumer pulls (RocketMQ's ``PullMessageService`` and the pull half of
``DefaultMQPushConsumerImpl``), a part of ``ConsumeService``.

One asyncio loop per broker pulls all the owned queues of that broker with one
``pull_many`` call per round:

- **through the hold service** (long polling) while every queue is caught up: the
  hold service answers when any of them gets a message. Such a round asks each queue
  for ``pull_batch_size`` messages, the same every time, so the hold service can hand
  it the follow-up pull the broker parked ahead of it;
- **straight from the broker** (no wait) while any queue has a backlog or the last
  round brought messages (at a steady rate more are on their way: one call instead of
  hold + broker). Such a round asks each queue for as much as flow control lets every
  queue of the round take (``ProcessQueue.room``: ``pull_threshold_for_queue``,
  ``pull_threshold_size_for_queue_mib`` and, for concurrent listeners,
  ``consume_concurrently_max_span``), at least ``pull_batch_size`` and at most
  ``ROUND_MAX_BYTES`` in all.

A queue that flow control (or a pause after an error) leaves out of a round through
the hold service is not left waiting for that round: the round is cancelled as soon
as the queue may be pulled, and the next one takes it in.

A round that gets no answer within ``broker_suspend_max_ms`` plus
``PULL_STALE_GRACE_S`` (as the pull consumer's pulls) is given up and sent again: a
call Ray never answers (one in flight when its broker or hold service was killed, or
to an actor that hangs) must not stop the loop, and with it every queue of the
broker, for good. A round that cannot even be sent (the broker's actor cannot be
looked up while it restarts) is tried again after ``pull_time_delay_when_exception_ms``,
and so is one that failed in a way nobody foresaw (logged with its traceback): the loop
only ends when the consumer owns none of the broker's queues.

An OFFSET_ILLEGAL answer (RocketMQ's ``DefaultMQPushConsumerImpl``): the queue's process
queue is dropped (what it holds is neither consumed nor committed any more), the
offset the broker corrected to is committed, and the queue is removed; the next
rebalance (the coordinator's safety rebalance at the latest) assigns it again, and it
starts at that offset.

The next round is sent before a large answer is decoded (decoding overlaps the
call; the answer's records count against flow control until they are put), and
after a small one was handed to the listener (its latency comes first).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any, NamedTuple

from rayq.actors.protocol import (
    MessageQueue,
    PullItem,
    PullManyRequest,
    PullManyResponse,
    PullResponse,
    PullStatus,
    QueueCommit,
    epoch_after,
)
from rayq.consumer.process_queue import ProcessQueue
from rayq.consumer.pull import PULL_STALE_GRACE_S
from rayq.consumer.selector import filter_type
from rayq.metrics import RECORDER
from rayq.store.errors import RayqError
from rayq.transport.base import Reply

logger = logging.getLogger(__name__)

# What one round read from the broker directly may bring at most (estimated from each
# queue's last message size): a larger answer costs more per message through Ray's
# object store than it saves in calls (push_bench: 8 MiB rounds drained slower than 4).
ROUND_MAX_BYTES = 4 * 1024 * 1024


class _Round(NamedTuple):
    """One pull call for some queues of a broker."""

    reply: Reply[PullManyResponse]
    queues: list[tuple[MessageQueue, ProcessQueue]]  # in the call's order
    waiting: list[ProcessQueue]  # held rounds: queues left out that may be pulled soon
    commits: list[tuple[MessageQueue, Any]]  # (queue, commit state) the call carries


# A round that could not be sent (``_took``'s answer: pause, then send again).
_UNSENT: Any = object()


class PullRounds:
    """Mixed into ``ConsumeService``: uses its queues, filters, context and offsets."""

    queues: dict[MessageQueue, ProcessQueue]
    broker_loops: dict[str, asyncio.Task]
    freed: dict[str, asyncio.Event]
    read_from: dict[str, str]  # broker -> the slave it suggested (far behind)
    filters: dict[str, Any]
    config: Any
    ctx: Any
    offsets: Any
    group: str
    client_id: str
    generation: int
    orderly: bool
    broadcasting: bool
    tasks: dict[MessageQueue, list[asyncio.Task]]
    history: list[tuple[MessageQueue, float, float]]
    _owned_since: dict[MessageQueue, float]

    def _dispatch(self, mq: MessageQueue, pq: ProcessQueue, resp: PullResponse) -> None: ...

    def _spawn(self, coro: Any) -> None: ...

    def _restart_pulls(self, broker: str) -> None:
        """(Re)start the one pull loop of ``broker`` for the queues owned there now."""
        old = self.broker_loops.pop(broker, None)
        if old is not None:
            old.cancel()  # a pull in flight is dropped; its queues restart at next_pull
        if any(mq.broker_name == broker for mq in self.queues):
            self.broker_loops[broker] = asyncio.create_task(self._pull_broker(broker))

    def _freed(self, broker: str) -> asyncio.Event:
        event = self.freed.get(broker)
        if event is None:
            event = self.freed[broker] = asyncio.Event()
        return event

    def _room(self, pq: ProcessQueue, now: float) -> int:
        """How many messages ``pq`` may be pulled now (0: not pulled; see ``ProcessQueue.room``)."""
        if not pq.pulling or now < pq.retry_at:
            return 0
        cfg = self.config
        return pq.room(
            cfg.pull_threshold_for_queue,
            cfg.pull_threshold_size_for_queue_mib * 1024 * 1024,
            None if self.orderly else cfg.consume_concurrently_max_span,
        )

    async def _pull_broker(self, broker: str) -> None:
        """The pull loop of ``broker``: one round at a time (see the module doc); ends
        when this consumer owns none of its queues any more."""
        cfg = self.config
        freed = self._freed(broker)
        rnd: _Round | None = None
        try:
            while True:
                try:
                    if rnd is None:
                        freed.clear()
                        rnd = await self._send_or_pause(broker)
                    if rnd is None:
                        if not any(
                            mq.broker_name == broker and pq.pulling
                            for mq, pq in self.queues.items()
                        ):
                            return
                        with contextlib.suppress(TimeoutError):  # flow control: until room frees
                            await asyncio.wait_for(
                                freed.wait(), cfg.pull_time_delay_when_flow_control_ms / 1000
                            )
                        continue
                    resps = await self._answer(broker, rnd)
                    queues, rnd = rnd.queues, None
                    if resps is not None:
                        rnd = self._took(broker, queues, resps)
                        if rnd is _UNSENT:
                            rnd = None
                            await self._pause_after_error(broker)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    # RocketMQ's PullMessageService catches everything: an error nobody
                    # foresaw (a Ray lookup failing its own way while a node goes) must
                    # not end this loop, and with it every queue of the broker, silently
                    logger.exception(
                        "consumer %s: pull loop of %s failed; pulling again in %.1f s",
                        self.client_id,
                        broker,
                        cfg.pull_time_delay_when_exception_ms / 1000,
                    )
                    if rnd is not None and rnd is not _UNSENT:
                        rnd.reply.cancel()
                    rnd = None
                    await self._pause_after_error(broker)
        except asyncio.CancelledError:
            if rnd is not None:  # stopped or restarted: its pull in flight is of no use now
                rnd.reply.cancel()
            raise

    def _took(
        self, broker: str, queues: list[tuple[MessageQueue, ProcessQueue]], resps: list[Any]
    ) -> _Round | None:
        """A round's answers: move each queue on, send the next round, and hand what came
        to the listener (before sending if it is small, after if it is worth overlapping)."""
        found = []
        for (mq, pq), resp in zip(queues, resps, strict=True):
            if pq.pulling and self._advance(mq, pq, resp):
                found.append((mq, pq, resp))
        small = sum(resp.count for _, _, resp in found) <= self.config.pull_batch_size
        for mq, pq, resp in found if small else ():
            self._dispatch(mq, pq, resp)
        self._freed(broker).clear()
        rnd = self._try_send(broker)
        for mq, pq, resp in () if small else found:
            self._dispatch(mq, pq, resp)
        return rnd

    def _try_send(self, broker: str) -> _Round | None:
        """``_send_pull``, or ``_UNSENT`` if the call could not be made (logged)."""
        try:
            return self._send_pull(broker)
        except RayqError as exc:
            logger.warning(
                "consumer %s: pull from %s could not be sent (%s); again in %.1f s",
                self.client_id,
                broker,
                exc,
                self.config.pull_time_delay_when_exception_ms / 1000,
            )
            return _UNSENT

    async def _send_or_pause(self, broker: str) -> _Round | None:
        """The next round; None if none may be sent now, or it could not be sent (then
        after a pause, with the broker's handles looked up again)."""
        rnd = self._try_send(broker)
        if rnd is _UNSENT:
            await self._pause_after_error(broker)
            return None
        return rnd

    async def _pause_after_error(self, broker: str) -> None:
        self._failed(broker)
        await asyncio.sleep(self.config.pull_time_delay_when_exception_ms / 1000)

    def _failed(self, broker: str) -> None:
        """A call to ``broker`` failed: look it up again, and commit its queues' offsets
        again (it may have lost the latest ones: ``recommit``)."""
        self.ctx.forget(self.read_from.pop(broker, "") or broker)
        self.offsets.recommit(broker)

    def _send_pull(self, broker: str) -> _Round | None:
        """Send one round for the owned queues of ``broker`` that may be pulled now."""
        cfg = self.config
        now = time.monotonic()
        ready: list[tuple[MessageQueue, ProcessQueue]] = []
        waiting: list[ProcessQueue] = []
        room = 1 << 20  # PullManyRequest.max_nums's limit
        record_bytes = 1
        for mq, pq in self.queues.items():
            if mq.broker_name != broker or not pq.pulling:
                continue
            n = self._room(pq, now)
            if n <= 0:
                waiting.append(pq)
                continue
            ready.append((mq, pq))
            room = min(room, n)
            record_bytes = max(record_bytes, pq.record_bytes)
        if not ready:
            return None
        direct = any(pq.backlog or pq.found for _, pq in ready)
        room = min(room, ROUND_MAX_BYTES // (record_bytes * len(ready)))
        commits = self._commits(ready)
        req = PullManyRequest(
            group=self.group,
            client_id=self.client_id,
            max_nums=max(cfg.pull_batch_size, room) if direct else cfg.pull_batch_size,
            suspend_ms=0 if direct else cfg.broker_suspend_max_ms,
            items=[
                PullItem(
                    mq.topic,
                    mq.queue_id,
                    pq.pull_from(),
                    self.filters[mq.topic].expression,
                    filter_type(self.filters[mq.topic]),
                    pq.epoch,
                )
                for mq, pq in ready
            ],
            commits=[
                QueueCommit(mq.topic, mq.queue_id, off, acked) for mq, (off, acked) in commits
            ],
            generation=self.generation,
            broadcasting=self.broadcasting,
        )
        source = self.read_from.get(broker) or broker  # a slave the broker suggested
        target = self.ctx.broker(source) if direct else self.ctx.hold(broker)
        return _Round(target.pull_many(req), ready, [] if direct else waiting, commits)

    def _commits(self, ready: list[tuple[MessageQueue, ProcessQueue]]) -> list[tuple[Any, Any]]:
        """The commit states of ``ready`` that changed since their last commit (RocketMQ's
        commit-offset flag: the pull carries them, so no separate commit call is needed)."""
        out = []
        for mq, pq in ready:
            self.offsets.update(mq, *pq.commit_state())
            state = self.offsets.pending(mq)
            if state is not None:
                out.append((mq, state))
        return out

    async def _answer(self, broker: str, rnd: _Round) -> list[Any] | None:
        """The answers of a round, one per queue; None if it failed (logged, after a
        pause) or was given up for a left-out queue that may be pulled now."""
        cfg = self.config
        stale_s = cfg.broker_suspend_max_ms / 1000 + PULL_STALE_GRACE_S
        answer = self._answer_or_room(broker, rnd) if rnd.waiting else rnd.reply.wait()
        try:
            reply = await asyncio.wait_for(answer, stale_s)
        except asyncio.CancelledError:
            raise
        except TimeoutError:
            logger.warning(
                "consumer %s: pull from %s got no answer in %.0f s; pulling again",
                self.client_id,
                broker,
                stale_s,
            )
            rnd.reply.cancel()
            self._failed(broker)
            return None
        except Exception as exc:
            logger.warning(
                "consumer %s: pull from %s failed (%s); again in %.1f s",
                self.client_id,
                broker,
                exc,
                cfg.pull_time_delay_when_exception_ms / 1000,
            )
            await self._pause_after_error(broker)
            return None
        if reply is None:
            return None
        for mq, state in rnd.commits:
            self.offsets.committed(mq, state)
        # RocketMQ's suggestWhichBrokerId, per broker: a slave while these queues are far
        # behind and the broker has slave_read_enable, else the master.
        self.read_from[broker] = next(
            (
                r.suggest_replica
                for r in reply.results
                if isinstance(r, PullResponse) and r.suggest_replica
            ),
            "",
        )
        return reply.results

    async def _answer_or_room(self, broker: str, rnd: _Round) -> Any | None:
        """A round through the hold service may wait ``broker_suspend_max_ms``; a queue
        it left out (flow control, or a pause after an error) must not wait that long
        once it may be pulled again: then the round is cancelled (None; its queues are
        pulled again from where they were) and the next one takes that queue in too."""
        freed = self._freed(broker)
        answer = asyncio.ensure_future(rnd.reply.wait())
        try:
            while True:
                freed.clear()
                now = time.monotonic()
                if any(self._room(pq, now) for pq in rnd.waiting):
                    rnd.reply.cancel()
                    return None
                wake = [pq.retry_at - now for pq in rnd.waiting if pq.retry_at > now]
                room = asyncio.ensure_future(freed.wait())
                done, _ = await asyncio.wait(
                    {answer, room},
                    timeout=min(wake, default=None),
                    return_when=asyncio.FIRST_COMPLETED,
                )
                room.cancel()
                if answer in done:
                    return answer.result()
        finally:
            answer.cancel()

    def _advance(self, mq: MessageQueue, pq: ProcessQueue, resp: Any) -> bool:
        """A queue's answer: its next offset now; True if it brought messages (decoded
        by ``_dispatch``, after or before the next round is sent)."""
        if not isinstance(resp, PullResponse):
            logger.warning(
                "consumer %s: pull of %s failed (%s); again in %.1f s",
                self.client_id,
                mq,
                resp,
                self.config.pull_time_delay_when_exception_ms / 1000,
            )
            pq.retry_at = time.monotonic() + self.config.pull_time_delay_when_exception_ms / 1000
            pq.backlog = pq.found = False
            return False
        if resp.status is PullStatus.OFFSET_ILLEGAL:
            self._offset_illegal(mq, pq, resp)
            return False
        pq.epoch = epoch_after(pq.epoch, resp)
        RECORDER.lag(self.group, mq, resp.max_offset - resp.next_offset)
        pq.found = found = resp.status is PullStatus.FOUND
        pq.backlog = found and resp.records_left
        if found:
            pq.arriving(resp.count, len(resp.buffer), resp.next_offset)
        else:
            pq.next_pull = resp.next_offset
        return found

    def _offset_illegal(self, mq: MessageQueue, pq: ProcessQueue, resp: PullResponse) -> None:
        """Drop ``pq`` and let ``_offset_moved`` commit the corrected offset and remove it."""
        logger.warning(
            "consumer %s: %s offset %d is outside %d..%d; dropping the queue and committing "
            "%d, where the next rebalance starts it again",
            self.client_id,
            mq,
            pq.next_pull,
            resp.min_offset,
            resp.max_offset,
            resp.next_offset,
        )
        pq.drop()  # its consume work stops, and what it holds is never committed
        pq.pulling = False
        pq.msgs.clear()
        pq.taken.clear()
        pq.next_pull = resp.next_offset  # pq.commit_offset() is the corrected offset now
        self.offsets.update(mq, resp.next_offset)
        self._spawn(self._offset_moved(mq, pq))

    async def _offset_moved(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        try:
            await self.offsets.persist([mq], self.generation)
        except Exception:  # the queue starts again at its last committed offset
            logger.exception(
                "consumer %s: committing the corrected offset of %s failed", self.client_id, mq
            )
        if self.queues.get(mq) is not pq:
            return  # revoked (or assigned anew) meanwhile
        del self.queues[mq]
        for task in self.tasks.pop(mq, []):  # the orderly consume loop
            task.cancel()
        self.offsets.forget(mq)
        self.history.append((mq, self._owned_since.pop(mq, 0.0), time.monotonic()))
