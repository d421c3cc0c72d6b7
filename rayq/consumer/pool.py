"""``rayq.ConsumerPool``: Ray actors that POP a topic and run a handler, as many as the
backlog asks for::

    def handle(msg: rayq.ReceivedMessage) -> None:      # or: async def handle(msg)
        run_inference(msg.body)

    pool = rayq.ConsumerPool(group="workers", topic="jobs", handler=handle,
                             min_workers=1, max_workers=16, num_gpus=1)
    pool.start()
    print(pool.status())      # workers, backlog, in flight, msgs/s
    pool.shutdown()

Each worker is a Ray actor (``num_cpus``/``num_gpus``/``resources`` per worker, so
Ray's autoscaler adds nodes for workers that do not fit) holding a
``rayq.aio.SimpleConsumer``: it receives as many messages as it has free handler slots
(``concurrency``), runs the handler on each (an async handler on the actor's event
loop, a sync one in a thread), acks what returned and nacks what raised (the message
comes again with ``delivery_count`` one higher, and past the group's
``retry_max_times`` goes to ``%DLQ%<group>``). A handler that runs past half its lease
has the lease extended, so a slow message is not delivered twice.

The pool's controller (a thread of the process that called ``start``) looks every
``interval_s`` at the group's backlog on the topic (``Admin.consumer_progress``: what
is not settled) and at each worker, and adds or stops workers (pool_policy.py). A
worker that dies loses nothing: its leases end and its messages come again to the
others; the controller replaces it. Workers stop gracefully: they finish what they
hold and release what they received but did not start.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import msgspec
import ray

from rayq.actors.protocol.config import ClientConfig
from rayq.consumer.pool_policy import Decision, ScalePolicy, WorkerView, decide
from rayq.store.errors import ClientError, ClosedError, RayqError
from rayq.store.names import retry_topic, validate_group, validate_topic
from rayq.transport.context import ClientContext

logger = logging.getLogger(__name__)

STATS_TIMEOUT_S = 1.0  # a worker that does not answer this fast is pending (or starting)
STOP_GRACE_S = 30.0


class WorkerStatus(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    state: str  # "running", "pending" (not placed or not answering yet), "dead"
    processed: int = 0
    failed: int = 0
    in_flight: int = 0
    oldest_in_flight_s: float = 0.0
    idle_s: float = 0.0


class PoolStatus(msgspec.Struct, frozen=True, kw_only=True):
    group: str
    topic: str
    workers: list[WorkerStatus]
    backlog: int  # messages of the group on the topic not settled (not received or in flight)
    in_flight: int
    processed: int  # by the workers alive now, since each started
    failed: int
    rate: float  # messages settled a second over the last round
    decision: str  # what the controller did last, and why
    replaced: int = 0  # workers found dead and replaced so far


class _PoolWorker:
    """One worker: a ``rayq.aio.SimpleConsumer`` feeding ``concurrency`` handler slots."""

    def __init__(
        self,
        group: str,
        topic: str,
        expression: str,
        handler: Callable[[Any], Any],
        concurrency: int,
        invisible_duration: float,
        namespace: str,
        config: ClientConfig | None,
    ) -> None:
        import rayq.aio

        self.consumer = rayq.aio.SimpleConsumer(
            group,
            await_duration=1.0,
            invisible_duration=invisible_duration,
            namespace=namespace,
            config=config,
        )
        self.consumer.subscribe(topic, expression)
        self.handler = handler
        call = handler if inspect.isfunction(handler) else type(handler).__call__
        self.is_async = inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(call)
        self.concurrency = concurrency
        self.invisible = invisible_duration
        self.processed = self.failed = 0
        self.started: dict[int, float] = {}  # task id -> when its handler started
        self.tasks: set[asyncio.Task[None]] = set()
        self.last_work = time.monotonic()
        self.stopping = False
        self.loop_task: asyncio.Task[None] | None = None

    async def start(self) -> bool:
        await self.consumer.start()
        self.loop_task = asyncio.get_running_loop().create_task(self._loop())
        return True

    async def _loop(self) -> None:
        while not self.stopping:
            free = self.concurrency - len(self.tasks)
            if free <= 0:
                await asyncio.wait(self.tasks, return_when=asyncio.FIRST_COMPLETED)
                continue
            try:
                msgs = await self.consumer.receive(free, self.invisible)
            except ClosedError:
                return
            except RayqError as exc:
                logger.warning("pool worker: receive failed (%s); trying again in 1 s", exc)
                await asyncio.sleep(1.0)
                continue
            if msgs:
                self.last_work = time.monotonic()
            for msg in msgs:
                task = asyncio.get_running_loop().create_task(self._handle(msg))
                self.tasks.add(task)
                task.add_done_callback(self.tasks.discard)

    async def _handle(self, msg: Any) -> None:
        key = id(msg)
        self.started[key] = time.monotonic()
        try:
            try:
                await self._run(msg)
            except Exception:
                self.failed += 1
                logger.exception("pool worker: the handler raised; the message comes again")
                with contextlib.suppress(RayqError):
                    await msg.nack()
                return
            try:
                await msg.ack()
                self.processed += 1
            except RayqError as exc:  # the lease had ended: the message comes again
                logger.warning("pool worker: acknowledging a message failed: %s", exc)
        finally:
            self.started.pop(key, None)
            self.last_work = time.monotonic()

    async def _run(self, msg: Any) -> None:
        """The handler on ``msg``, its lease extended while it runs past half of it."""
        if self.is_async:
            work = asyncio.ensure_future(self.handler(msg))
        else:
            work = asyncio.ensure_future(asyncio.to_thread(self.handler, msg))
        while True:
            try:
                await asyncio.wait_for(asyncio.shield(work), self.invisible / 2)
                return
            except TimeoutError:
                with contextlib.suppress(RayqError):
                    await msg.change_invisible_duration(self.invisible)

    async def stats(self) -> dict[str, float]:
        now = time.monotonic()
        oldest = min(self.started.values(), default=now)
        return {
            "processed": self.processed,
            "failed": self.failed,
            "in_flight": len(self.tasks),
            "oldest_in_flight_s": now - oldest,
            "idle_s": 0.0 if self.tasks else now - self.last_work,
        }

    async def stop(self, grace_s: float) -> dict[str, float]:
        """Stop receiving, let the handlers finish (up to ``grace_s``), release the rest."""
        self.stopping = True
        if self.tasks:
            await asyncio.wait(list(self.tasks), timeout=grace_s)
        if self.loop_task is not None:
            self.loop_task.cancel()
        await self.consumer.shutdown()
        return await self.stats()


class ConsumerPool:
    """POP workers as Ray actors, added while the backlog grows and stopped when idle
    (module doc). ``handler(msg)`` gets one ``rayq.aio.ReceivedMessage``; returning
    acknowledges it, raising gives it up for another delivery."""

    def __init__(
        self,
        group: str,
        topic: str,
        handler: Callable[[Any], Any],
        min_workers: int = 1,
        max_workers: int = 8,
        *,
        expression: str = "*",
        concurrency: int = 1,
        invisible_duration: float = 30.0,
        num_cpus: float = 1.0,
        num_gpus: float = 0.0,
        resources: dict[str, float] | None = None,
        interval_s: float = 2.0,
        idle_s: float = 30.0,
        backlog_per_slot: int = 8,
        max_in_flight_age_s: float | None = None,
        namespace: str | None = None,
        config: ClientConfig | None = None,
    ) -> None:
        validate_group(group)
        validate_topic(topic)
        if not callable(handler):
            raise ClientError(f"handler must be callable, got {type(handler).__name__}")
        self.policy = ScalePolicy(
            min_workers=min_workers,
            max_workers=max_workers,
            concurrency=concurrency,
            interval_s=interval_s,
            idle_s=idle_s,
            backlog_per_slot=backlog_per_slot,
            max_in_flight_age_s=max_in_flight_age_s or invisible_duration,
        )
        self.group, self.topic, self.handler = group, topic, handler
        self.expression = expression
        self.invisible_duration = invisible_duration
        self._ctx = ClientContext(config, namespace)
        self._namespace = namespace
        self._config = config
        self._options: dict[str, Any] = {"num_cpus": num_cpus, "num_gpus": num_gpus}
        if resources:
            self._options["resources"] = dict(resources)
        self._workers: dict[str, Any] = {}  # name -> actor handle
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_backlog: int | None = None
        self._last_processed: dict[str, int] = {}
        self._replaced = 0
        self._admin: Any = None  # a rayq.Admin, made by the controller's first round
        self._status = PoolStatus(
            group=group,
            topic=topic,
            workers=[],
            backlog=0,
            in_flight=0,
            processed=0,
            failed=0,
            rate=0.0,
            decision="not started",
        )

    # ----------------------------------------------------------- lifecycle
    def start(self) -> None:
        """Start ``min_workers`` workers and the controller; once."""
        if self._thread is not None:
            raise ClientError("a ConsumerPool starts once")
        self._ctx.read_queues(self.topic, refresh=True)  # TopicNotFoundError now
        from rayq.transport.namespace import current_namespace

        self._namespace = self._namespace or current_namespace()
        for _ in range(self.policy.min_workers):
            self._spawn()
        self._thread = threading.Thread(
            target=self._control, name=f"rayq-pool-{self.group}", daemon=True
        )
        self._thread.start()

    def shutdown(self, grace_s: float = STOP_GRACE_S) -> None:
        """Stop the controller and every worker (each finishes what it holds)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            names = list(self._workers)
        for name in names:
            self._retire(name, grace_s)

    def __enter__(self) -> ConsumerPool:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def status(self) -> PoolStatus:
        """Workers, backlog, in flight and rate as of the controller's last round."""
        return self._status

    # ---------------------------------------------------------- controller
    def _control(self) -> None:
        while not self._stop.wait(self.policy.interval_s):
            try:
                self._round()
            except Exception:  # logged; the next round looks again
                logger.exception("consumer pool %s: a scaling round failed", self.group)

    def _round(self) -> None:
        workers = self._observe()
        backlog = self._backlog()
        views = [
            WorkerView(w.name, w.state != "dead", w.in_flight, w.oldest_in_flight_s, w.idle_s)
            for w in workers
        ]
        decision = decide(self.policy, views, backlog, self._last_backlog)
        self._last_backlog = backlog
        for w in workers:
            if w.state == "dead":
                with self._lock:
                    self._workers.pop(w.name, None)
                self._replaced += 1
                logger.warning("consumer pool %s: worker %s died; replacing it", self.group, w.name)
        self._apply(decision)
        processed = {w.name: w.processed for w in workers if w.state == "running"}
        settled = sum(
            max(n - self._last_processed.get(name, 0), 0) for name, n in processed.items()
        )
        self._last_processed = processed
        live = [w for w in workers if w.state != "dead"]
        self._status = PoolStatus(
            group=self.group,
            topic=self.topic,
            workers=live,
            backlog=backlog,
            in_flight=sum(w.in_flight for w in live),
            processed=sum(w.processed for w in live),
            failed=sum(w.failed for w in live),
            rate=settled / self.policy.interval_s,
            decision=f"+{decision.add} -{len(decision.stop)}: {decision.why}",
            replaced=self._replaced,
        )

    def _observe(self) -> list[WorkerStatus]:
        """Every worker's stats, asked at once; one not answering within
        ``STATS_TIMEOUT_S`` is pending (not placed yet, or starting)."""
        with self._lock:
            items = list(self._workers.items())
        refs = {name: actor.stats.remote() for name, actor in items}
        if refs:
            ray.wait(list(refs.values()), num_returns=len(refs), timeout=STATS_TIMEOUT_S)
        out = []
        for name, ref in refs.items():
            try:
                stats = ray.get(ref, timeout=0)
            except ray.exceptions.GetTimeoutError:
                ray.cancel(ref)
                out.append(WorkerStatus(name=name, state="pending"))
                continue
            except ray.exceptions.RayError:
                out.append(WorkerStatus(name=name, state="dead"))
                continue
            out.append(
                WorkerStatus(
                    name=name,
                    state="running",
                    processed=int(stats["processed"]),
                    failed=int(stats["failed"]),
                    in_flight=int(stats["in_flight"]),
                    oldest_in_flight_s=stats["oldest_in_flight_s"],
                    idle_s=stats["idle_s"],
                )
            )
        return out

    def _backlog(self) -> int:
        """The group's messages on the topic (and its retry topic) not settled yet."""
        if self._admin is None:
            from rayq.admin.admin import Admin

            self._admin = Admin(config=self._config, namespace=self._namespace)
        topics = {self.topic, retry_topic(self.group)}
        progress = self._admin.consumer_progress(self.group)
        behind = sum(p.lag for p in progress if p.queue.topic in topics)
        if behind or progress:
            return behind
        # nothing received yet: everything the topic holds is the backlog
        stats = self._admin.topic_stats(self.topic)
        return sum(max(s.max_offset - s.min_offset, 0) for s in stats)

    def _apply(self, decision: Decision) -> None:
        for _ in range(decision.add):
            self._spawn()
        for name in decision.stop:
            self._retire(name, STOP_GRACE_S)
        if decision.add or decision.stop:
            logger.info(
                "consumer pool %s: %s (%d workers)", self.group, decision.why, len(self._workers)
            )

    def _spawn(self) -> None:
        name = f"rayq-pool-{self.group}-{uuid.uuid4().hex[:8]}"
        cls: Any = ray.remote(_PoolWorker)
        options = {"max_restarts": 0, "max_concurrency": 1000, **self._options}
        actor = cls.options(name=name, namespace=self._namespace, **options).remote(
            self.group,
            self.topic,
            self.expression,
            self.handler,
            self.policy.concurrency,
            self.invisible_duration,
            self._namespace,
            self._config,
        )
        actor.start.remote()
        with self._lock:
            self._workers[name] = actor

    def _retire(self, name: str, grace_s: float) -> None:
        with self._lock:
            actor = self._workers.pop(name, None)
        if actor is None:
            return
        with contextlib.suppress(ray.exceptions.RayError):
            ray.get(actor.stop.remote(grace_s), timeout=grace_s + 10)
        with contextlib.suppress(Exception):
            ray.kill(actor)


__all__ = ["ConsumerPool", "PoolStatus", "WorkerStatus"]
