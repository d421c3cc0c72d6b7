"""The broker's timers and loops, without Ray: ``BrokerRuntime``.

Persisting offsets, retention, heartbeats (registration with the coordinator), the
metrics report, dropping idle shared-row slots; on a master the delayed-delivery
schedule and the transaction check service; on a slave the replication loop (fetch
from the master, apply, fetch again: the fetch is its acknowledgement) and the
metadata loop. The Ray shell (actors/broker.py) starts it and ends it; each loop
logs a failed round and tries again at the next.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, Protocol

from rayq.actors.protocol.config import BrokerConfig
from rayq.actors.server.broker_server import BrokerServer
from rayq.actors.server.endpoint import BrokerEndpoint
from rayq.actors.server.peer_api import PeerLostError, PeerMissingError
from rayq.actors.server.schedule import SCHEDULE_TICK_MS
from rayq.actors.server.shared_rows import IDLE_S as SHARED_IDLE_S
from rayq.store import SYSTEM_CLOCK
from rayq.store.errors import ClosedError

logger = logging.getLogger(__name__)

RETRY_S = 1.0  # a slave whose master is missing or unreachable tries again this often
REFUSED_RETRY_S = 5.0  # ... and this often when the master refused it
POP_REVIVE_INTERVAL_MS = 1000  # how often ended POP leases are redelivered (RocketMQ: 1 s)
LINGER_BELOW = 1 << 20  # a slave of an ASYNC master waits ha_fetch_linger_ms after chunks
# smaller than this before it fetches again


def open_server(config: BrokerConfig, store_dir: str, node_id: str, epoch: int) -> BrokerServer:
    """The broker's server over its store; a promoted slave (actors/failover.py) starts
    the new ``epoch`` from what its store holds now."""
    server = BrokerServer(config, store_dir, node_id)
    if epoch > server.epochs.current and server.master is not None:
        server.epochs.begin(epoch, server.store.written_offset)
        logger.warning(
            "broker %s: master in epoch %d from commit-log offset %d",
            config.broker_name,
            epoch,
            server.store.written_offset,
        )
        clamp_consumer_offsets(server)
    return server


def clamp_consumer_offsets(server: BrokerServer) -> int:
    """A promoted slave's consumer offsets past its queues' ends moved back to the ends;
    returns how many queues moved. Its table is its old master's (metadata sync): a group
    that consumed records the master had not replicated yet has its offset past this
    log, where those records were cut by the failover. The offsets from this log's end
    will hold new records, and the group must read them, not skip them."""
    table = server.tables.consumer_offsets
    moved = 0
    for group, topic, queues in table.entries():
        ends = {q: server.store.max_offset(topic, q) for q in queues}
        over = {q: ends[q] for q, o in queues.items() if o > ends[q]}
        if over:
            logger.warning(
                "broker %s: group %s's offsets of %s past this log's end moved back: %s",
                server.config.broker_name,
                group,
                topic,
                {q: f"{queues[q]} -> {end}" for q, end in sorted(over.items())},
            )
            table.commit_many(group, topic, over)
            moved += len(over)
    if moved:
        table.persist()
    return moved


class Reporter(Protocol):
    """Hands the broker's tallies and gauges over (actors/metrics.py ``BrokerMetrics``)."""

    def report(
        self,
        *,
        lags: dict[tuple[str, str], int],
        parked: int,
        disk_ratio: float,
        replicas: dict[str, tuple[int, float]],
        topics: Iterable[str] = (),
        groups: Iterable[str] = (),
    ) -> None: ...


class BrokerRuntime:
    """The loops of one broker around its endpoint, started once, ended by ``close``."""

    def __init__(
        self, endpoint: BrokerEndpoint, reporter: Reporter, report_interval_ms: int
    ) -> None:
        self.endpoint = endpoint
        self.server = endpoint.server
        self.reporter = reporter
        self.report_interval_ms = report_interval_ms
        self.tasks: list[asyncio.Task[None]] = []
        self.closed = False
        self.stopped: concurrent.futures.Future[None] = concurrent.futures.Future()

    async def start_services(self) -> bool:
        """Start the timers (once) and register with the coordinator now."""
        if not self.tasks:
            self.tasks = [asyncio.create_task(c) for c in self._loops()]
            try:  # the counters exist (at 0) from the start, not from the first timer
                self.report_metrics()
            except Exception:
                logger.exception("broker %s: first metrics report failed", self.server.name)
        return await self.endpoint.register()

    def _loops(self) -> list[Coroutine[Any, Any, None]]:
        cfg = self.server.config
        loops = [
            self._every(cfg.persist_offset_interval_ms, self.server.persist),
            self._every(cfg.retention_check_interval_ms, self.server.retention_tick),
            self._heartbeat_loop(cfg.heartbeat_interval_ms),
            self._every(self.report_interval_ms, self.report_metrics),
            self._every(int(SHARED_IDLE_S * 250), self.endpoint.shared_rows.drop_idle),
        ]
        if self.server.slave is None:
            revive = self._every(POP_REVIVE_INTERVAL_MS, self._pop_revive)
            return [*loops, self._schedule_loop(), self._transaction_loop(), revive]
        return [*loops, self._replicate_loop(), self._metadata_loop()]

    async def park(self) -> None:
        """Never returns while the broker lives; raises ClosedError once it is closed."""
        await asyncio.wrap_future(self.stopped)
        raise ClosedError(f"broker {self.server.name} was shut down")

    def close(self, also: list[asyncio.Task[Any]]) -> None:
        """End the loops (and ``also``), answer parked calls, close the store cleanly."""
        self.closed = True
        if not self.stopped.done():
            self.stopped.set_result(None)  # parked calls end (in their own event loops)
        for task in [*also, *self.tasks]:
            task.cancel()
        try:
            self.server.close()
        except Exception:
            logger.exception("broker %s: closing the store failed", self.server.name)

    async def _heartbeat_loop(self, interval_ms: int) -> None:
        while not self.closed:
            await asyncio.sleep(interval_ms / 1000)
            try:
                await self.endpoint.register()
            except Exception:  # logged; the next heartbeat tries again
                logger.exception("broker %s: heartbeat failed", self.server.name)

    async def _every(self, interval_ms: int, fn: Callable[[], object]) -> None:
        while not self.closed:
            await asyncio.sleep(interval_ms / 1000)
            try:
                fn()
            except Exception:  # a failed tick is logged; the next one tries again
                name = getattr(fn, "__name__", repr(fn))
                logger.exception("broker %s: periodic %s failed", self.server.name, name)

    def report_metrics(self) -> None:
        """Hand the tallies over and set the gauges: consumer lag, parked pulls, disk
        usage, and a master's view of its slaves' lag."""
        now_ms = SYSTEM_CLOCK.now_ms()
        store = self.server.store
        store.disk.check(now_ms)
        master = self.server.master
        replicas = {
            str(r.broker_id): (r.lag_bytes, r.lag_ms / 1000)
            for r in (master.status(now_ms) if master is not None else [])
        }
        self.reporter.report(
            lags=self.server.group_lags(),
            parked=len(self.endpoint.polling.parked),
            disk_ratio=store.disk.ratio,
            replicas=replicas,
            topics=self.server.tables.topics.names(),
            groups=self.server.tables.subscription_groups.names(),
        )

    async def _schedule_loop(self) -> None:
        """Deliver delayed messages when due and wake the long polls waiting for them."""
        while not self.closed:
            wait_ms = SCHEDULE_TICK_MS
            try:
                self.endpoint.wake(self.server.schedule_tick())
                wait_ms = self.server.schedule.next_wait_ms()
            except Exception:  # logged; the next tick tries again
                logger.exception("broker %s: delayed delivery tick failed", self.server.name)
            await asyncio.sleep(wait_ms / 1000)

    def _pop_revive(self) -> None:
        """POP leases that ended: their messages to the retry topic (pop_processor.py)."""
        self.endpoint.wake(self.server.pop_revive_tick())

    async def _transaction_loop(self) -> None:
        """The transaction check service: every ``transaction_check_interval`` ms."""
        while not self.closed:
            await asyncio.sleep(self.server.config.transaction_check_interval / 1000)
            try:
                self.endpoint.wake(self.server.transaction_tick())
            except Exception:  # logged; the next round tries again
                logger.exception("broker %s: transaction check round failed", self.server.name)

    async def _replicate_loop(self) -> None:
        """A slave's life: fetch from the master, apply, fetch again (the fetch is its
        acknowledgement); a master that is missing or refuses is retried, logged."""
        name = self.server.config.replica_name
        while not self.closed:
            try:
                await self._replicate()
            except PeerMissingError as exc:
                self._replication_failed(
                    f"slave {name}: its master {self.server.name} is not running ({exc}); "
                    f"retrying every {RETRY_S:.0f} s"
                )
                await asyncio.sleep(RETRY_S)
            except PeerLostError as exc:
                self._replication_failed(
                    f"slave {name}: master {self.server.name} unreachable ({exc}); "
                    f"retrying every {RETRY_S:.0f} s"
                )
                await asyncio.sleep(RETRY_S)
            except Exception as exc:  # refused (fencing), or bytes that fail their checks
                self._replication_failed(
                    f"slave {name}: replication from {self.server.name} failed: {exc}; "
                    f"retrying every {REFUSED_RETRY_S:.0f} s"
                )
                await asyncio.sleep(REFUSED_RETRY_S)

    async def _replicate(self) -> None:
        """Fetch and apply until closed (or a fetch fails)."""
        master = self.endpoint.peers.master
        slave = self.server.slave
        assert slave is not None
        linger = self.server.config.ha_fetch_linger_ms / 1000
        fetch = master.ha_fetch(slave.request())
        while not self.closed:
            chunk = await fetch
            slave.write(chunk)
            self.server.replication_error = ""
            if chunk.sync or not chunk.data or len(chunk.data) >= LINGER_BELOW:
                # the next fetch (the acknowledgement of these bytes) goes at once,
                # and the records are dispatched while it travels
                fetch = master.ha_fetch(slave.request())
                self.endpoint.wake(slave.dispatch())
            else:
                # An ASYNC master waits for nobody: let the bytes gather a moment,
                # so that a busy master is copied in fewer, larger fetches.
                self.endpoint.wake(slave.dispatch())
                await asyncio.sleep(linger)
                fetch = master.ha_fetch(slave.request())
            if chunk.topics_version != self.server.tables.topics.data_version:
                await self.endpoint.sync_metadata_now()  # a topic changed: now, not at the tick

    def _replication_failed(self, why: str) -> None:
        """Log a slave's replication problem once (until it changes or clears) and keep it
        for ``replication`` (Admin, operators)."""
        if why != self.server.replication_error:
            logger.error("%s", why)
        self.server.replication_error = why

    async def _metadata_loop(self) -> None:
        """A slave copies its master's topics, groups and offsets every interval."""
        interval = self.server.config.slave_sync_metadata_interval_ms / 1000
        while not self.closed:
            try:
                await self.endpoint.sync_metadata_now()
            except Exception as exc:
                logger.warning(
                    "slave %s: metadata sync failed (%s); next in %.0f s",
                    self.server.config.replica_name,
                    exc,
                    interval,
                )
            await asyncio.sleep(interval)
