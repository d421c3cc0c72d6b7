"""The waits of a send before it is acknowledged, without Ray.

SYNC_FLUSH: the flusher must report the append durable (``sync_flush``); SYNC_MASTER:
``min_in_sync_replicas`` slaves must have fetched past it (``sync_slave``, every
concurrent send waits on the same fetches: group commit). ``wait_safe`` runs the waits
the configuration asks for side by side; ``log_safe`` runs them for the POP log's
records (leases, acks) before a receive or an ack is answered. ``earlier_batches`` is
``put_arrow``'s reorder wait: Ray may start a call before an earlier one of the same
producer, so a JVM batch waits briefly for those.
"""

from __future__ import annotations

import asyncio
import logging
import time

import msgspec

from rayq.actors.protocol import BatchSendResult, SendStatus
from rayq.actors.server.broker_server import BrokerServer
from rayq.actors.server.dedupe import ProducerSequences, Verdict
from rayq.actors.server.peer_api import Flusher, PeerLostError
from rayq.store import SYSTEM_CLOCK, EncodedBatch

logger = logging.getLogger(__name__)

# How long ``put_arrow`` waits for a producer's earlier batches, and how often it looks.
REORDER_WAIT_S = 2.0
REORDER_POLL_S = 0.002


async def sync_flush(server: BrokerServer, flusher: Flusher, written: int) -> SendStatus:
    """SYNC_FLUSH: acknowledge only once the flusher reports the append durable;
    FLUSH_DISK_TIMEOUT if it does not in time (or is unreachable)."""
    timeout = server.config.store.sync_flush_timeout_ms / 1000
    try:
        await asyncio.wait_for(flusher.sync(written), timeout)
        return SendStatus.SEND_OK
    except PeerLostError as exc:
        logger.warning("broker %s: flusher unreachable (%s)", server.name, exc)
    except TimeoutError:
        pass
    return SendStatus.FLUSH_DISK_TIMEOUT


async def sync_slave(server: BrokerServer, written: int) -> SendStatus:
    """SYNC_MASTER: acknowledge only once ``min_in_sync_replicas`` slaves have the
    append; SLAVE_NOT_AVAILABLE (before waiting) if fewer slaves are connected and at
    most ``ha_slave_fallbehind_max`` behind, FLUSH_SLAVE_TIMEOUT if they do not all have
    it within ``sync_flush_timeout_ms``. Either way the message is stored on the master."""
    master = server.master
    assert master is not None
    if not master.slave_available(written, SYSTEM_CLOCK.now_ms()):
        return SendStatus.SLAVE_NOT_AVAILABLE
    acked = master.wait(written)
    try:
        await asyncio.wait_for(
            asyncio.wrap_future(acked), server.config.store.sync_flush_timeout_ms / 1000
        )
        return SendStatus.SEND_OK
    except TimeoutError:
        acked.cancel()
        return SendStatus.FLUSH_SLAVE_TIMEOUT


async def _statuses(server: BrokerServer, flusher: Flusher) -> list[SendStatus]:
    """The waits the flush type and the role ask for, for the log up to its written
    offset now, side by side: their statuses ([] if neither asks for one)."""
    cfg = server.config
    written = server.store.written_offset
    waits = []
    if cfg.flush_disk_type.value == "SYNC_FLUSH":
        waits.append(sync_flush(server, flusher, written))
    if cfg.broker_role.value == "SYNC_MASTER":
        waits.append(sync_slave(server, written))
    return list(await asyncio.gather(*waits)) if waits else []


async def wait_safe(
    server: BrokerServer, flusher: Flusher, result: BatchSendResult
) -> BatchSendResult:
    """The waits the flush type and the role ask for, side by side; the first status
    that is not SEND_OK (the disk's first) is the send's."""
    bad = next((s for s in await _statuses(server, flusher) if s is not SendStatus.SEND_OK), None)
    if bad is None:
        return result
    return msgspec.structs.replace(result, status=bad)


async def log_safe(server: BrokerServer, flusher: Flusher, what: str) -> None:
    """Wait until the broker's own last record (a POP log record: a lease, an ack) is
    as safe as a send would be: flushed (SYNC_FLUSH) and on ``min_in_sync_replicas``
    slaves (SYNC_MASTER), so a failover keeps it. Nothing to wait for on an ASYNC
    master with ASYNC_FLUSH. If it is not safe in time it stays on the master and is
    logged: at worst a lease or an ack is lost with the master, and the message comes
    again (at least once)."""
    bad = [s for s in await _statuses(server, flusher) if s is not SendStatus.SEND_OK]
    if bad:
        logger.warning(
            "broker %s: a %s is stored on the master only (%s): a failover may lose it",
            server.name,
            what,
            bad[0].value,
        )


async def earlier_batches(sequences: ProducerSequences, batch: EncodedBatch) -> None:
    """Wait (up to ``REORDER_WAIT_S``) for the batches of ``batch``'s producer that
    come before it: Ray may start a call before an earlier one of the same caller
    (whose rows are still on their way), and the JVM keeps several puts in flight.
    Past the wait, ``put`` refuses it as out of order and the JVM sends it again."""
    first, last = batch.first_sequence, batch.first_sequence + batch.count - 1
    key = (batch.producer_id, batch.topic, batch.queue_id)
    deadline = time.monotonic() + REORDER_WAIT_S
    while time.monotonic() < deadline:
        verdict, _ = sequences.check(*key, first, last)
        if verdict is not Verdict.OUT_OF_ORDER:
            return
        await asyncio.sleep(REORDER_POLL_S)
