"""The Flusher actor: makes a broker's files durable, next to it on the same node.

ASYNC_FLUSH: every ``flush_interval_ms`` it asks the broker (found by name, again
after a failed call) how far it has written (``Broker.flush_targets``)
and fdatasyncs the commit log when at least ``flush_least_pages`` pages are
pending (unconditionally every ``flush_thorough_interval_ms``), and the consume
queues and index every ``flush_cq_interval_ms``, then writes the checkpoint.
SYNC_FLUSH: ``sync(offset)`` returns once the commit log is durable up to
``offset``; concurrent callers share one fdatasync (group commit).
The disk work runs in a thread (``asyncio.to_thread``), off the event loop.
Each round reports the bytes it found not yet durable and the time each flush took
(actors/metrics.py: ``rayq_flush_dirty_bytes``, ``rayq_flush_latency_seconds``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import ray

from rayq.actors.handles import deployment_key
from rayq.actors.metrics import metric, record_tally
from rayq.actors.peers import PEER_LOST_ERRORS, Peer
from rayq.actors.placement import server_actor_options
from rayq.actors.protocol import FlushTargets, broker_actor_name, flusher_actor_name
from rayq.actors.protocol.server_key import Guard, ServerKey, ServerProof, Signed
from rayq.store import DiskFlusher, StoreConfig
from rayq.store.tally import Tally

logger = logging.getLogger(__name__)


class FlushService:
    """Group commit over a DiskFlusher: many waiters, one fdatasync at a time."""

    def __init__(self, store_dir: str, config: StoreConfig) -> None:
        self.config = config
        self.disk = DiskFlusher(store_dir, config.commitlog_segment_size_bytes)
        self._waiters: list[tuple[int, asyncio.Future[int]]] = []
        self._running: asyncio.Task | None = None
        self._disk_lock = asyncio.Lock()  # one disk operation at a time
        self.timings = Tally()  # ("sync",) group commits, ("async",) rounds: seconds

    async def sync(self, offset: int) -> int:
        """Wait until the commit log is durable up to ``offset``; returns the durable offset."""
        if offset <= self.disk.commitlog_flushed:
            return self.disk.commitlog_flushed
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._waiters.append((offset, future))
        if self._running is None or self._running.done():
            self._running = asyncio.create_task(self._group_commit())
        return await future

    async def _group_commit(self) -> None:
        while self._waiters:
            target = max(o for o, _ in self._waiters)
            try:
                async with self._disk_lock:
                    started = time.perf_counter()
                    done = await asyncio.to_thread(self.disk.flush_commitlog, target)
                    self.timings.observe(("sync",), time.perf_counter() - started)
            except Exception as exc:  # the waiters see the failure
                for _, fut in self._waiters:
                    if not fut.done():
                        fut.set_exception(exc)
                self._waiters = []
                return
            still = []
            for o, fut in self._waiters:
                if o <= done:
                    if not fut.done():
                        fut.set_result(done)
                else:
                    still.append((o, fut))
            self._waiters = still

    async def tick(self, written: int, dispatched: int, *, thorough: bool, logics: bool) -> None:
        """One round of async flush."""
        least = 0 if thorough else self.config.flush_least_pages
        async with self._disk_lock:
            started = time.perf_counter()
            if written < self.disk.commitlog_flushed:
                # The broker cut its log (a slave fenced by its master's epochs): what
                # is durable ends there now. (A stale ``written`` only makes it lower.)
                self.disk.reset(written)
            await asyncio.to_thread(self.disk.flush_commitlog, written, least)
            if logics:
                await asyncio.to_thread(self.disk.flush_logics, dispatched)
            await asyncio.to_thread(self.disk.checkpoint)
            self.timings.observe(("async",), time.perf_counter() - started)


async def flush_loop(
    service: FlushService, broker: Peer, broker_name: str, server_key: ServerKey
) -> None:
    """The flusher's rounds: ask the broker how far its files are written (a server
    operation: signed with ``server_key``), flush that (thoroughly, and the consume
    queues, every so many rounds), report, sleep."""
    cfg = service.config
    thorough_every = max(1, cfg.flush_thorough_interval_ms // cfg.flush_interval_ms)
    logics_every = max(1, cfg.flush_cq_interval_ms // cfg.flush_interval_ms)
    tags = {"broker": broker_name}
    n = 0
    while True:  # the first round at once: a restarted flusher catches up now
        n += 1
        handle = broker.get()  # None while not there (yet): next round looks again
        try:
            if handle is not None:
                signed = Signed(handle, server_key, "broker", broker.name)
                targets: FlushTargets = await signed.flush_targets.remote()
                report(service, tags, targets.written)
                await service.tick(
                    targets.written,
                    targets.dispatched,
                    thorough=n % thorough_every == 0,
                    logics=n % logics_every == 0,
                )
        except PEER_LOST_ERRORS as exc:  # restarting or replaced: look it up again
            logger.info(
                "flusher %s: broker unreachable (%s); retrying next round",
                broker_name,
                type(exc).__name__,
            )
            broker.forget()
        except Exception:
            logger.exception("flusher %s: flush round failed", broker_name)
        await asyncio.sleep(cfg.flush_interval_ms / 1000)


def report(service: FlushService, tags: dict[str, str], written: int) -> None:
    """The bytes not yet durable now, and the flush timings since the last round."""
    dirty = max(written - service.disk.commitlog_flushed, 0)
    metric("rayq_flush_dirty_bytes").set(dirty, tags)
    record_tally(service.timings, tags, (), "rayq_flush_latency_seconds")


class FlusherActor:
    """Ray shell over FlushService (``__init__`` and registry operations only). It finds
    its broker by name and starts its flush loop in its constructor, so a flusher that
    Ray restarted flushes again at once (no one has to re-wire it)."""

    def __init__(
        self,
        store_dir: str,
        config: StoreConfig,
        broker_name: str,
        namespace: str,
        *,
        server_key: ServerKey,
    ) -> None:
        self.service = FlushService(store_dir, config)
        self.guard = Guard(server_key, "flusher", flusher_actor_name(broker_name))
        broker = Peer(broker_actor_name(broker_name), namespace)
        # An async actor's __init__ runs on its event loop: the loop starts now.
        self.task: asyncio.Task[None] = asyncio.get_running_loop().create_task(
            flush_loop(self.service, broker, broker_name, server_key)
        )

    async def sync(self, offset: int, proof: ServerProof | None = None) -> int:
        """SYNC_FLUSH: the broker's wait for ``offset`` (with its proof of the server key:
        a stranger's offset past the log's end would keep the flusher syncing)."""
        self.guard.check("sync", proof, offset)
        return await self.service.sync(offset)

    async def durable(self) -> int:
        """Commit-log offset below which everything is known durable."""
        return self.service.disk.commitlog_flushed

    async def ready(self) -> bool:
        return True


def spawn_flusher(
    store_dir: str,
    config: StoreConfig,
    broker_name: str,
    namespace: str,
    node_id: str,
    *,
    server_key: ServerKey | None = None,
) -> Any:
    """Start (or get) a replica's flusher, holding ``server_key`` (default: this
    process's, ``deployment_key()``: the coordinator's)."""
    options = server_actor_options(flusher_actor_name(broker_name), namespace, node_id)
    return (
        ray.remote(FlusherActor)
        .options(**options)
        .remote(
            store_dir, config, broker_name, namespace, server_key=server_key or deployment_key()
        )
    )
