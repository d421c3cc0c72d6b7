"""The broker's endpoint: one typed request handled end to end, without Ray.

``BrokerEndpoint`` has one async method per operation of the broker in the registry
(actors/protocol/registry.py, ``operations("broker")``), so any server loop can call
it: the Ray actor (actors/broker.py) today, a socket server next, the fake
(rayq/testing/fake.py) in tests. Each method checks its request at the boundary
(``protocol.check``/``check_json``), authorizes it (the ACL, actors/server/acl.py),
serves it (``BrokerServer`` and its processors) and, for sends, waits until the
append is as safe as the flush type and the role ask: SYNC_FLUSH waits for the
flusher, SYNC_MASTER for a slave's acknowledgement (replication_wait.py). The peers
it waits on are typed interfaces (actors/server/peer_api.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import msgspec

from rayq.actors.protocol import broker as b
from rayq.actors.protocol import check, check_json, to_wire
from rayq.actors.protocol import hold as h
from rayq.actors.protocol import internal as i
from rayq.actors.protocol.config import BrokerConfig
from rayq.actors.protocol.names import broker_actor_name
from rayq.actors.protocol.server_key import Guard, ServerKey, ServerProof
from rayq.actors.server import columnar
from rayq.actors.server.broker_server import BrokerServer
from rayq.actors.server.long_polling import BrokerLongPolling, Pull, Reply
from rayq.actors.server.peer_api import (
    Flusher,
    Hold,
    Master,
    PageReaders,
    PeerLostError,
    PeerMissingError,
    Registrar,
)
from rayq.actors.server.pop_endpoint import PopEndpoint, PopWaits
from rayq.actors.server.replication_wait import earlier_batches, wait_safe
from rayq.actors.server.shared_rows import SharedRows
from rayq.store import EncodedBatch
from rayq.store.batch import BatchRejected, check_shape
from rayq.store.errors import InvalidRequestError, PermissionDeniedError
from rayq.store.names import is_dlq_topic
from rayq.store.tally import Tally

R = TypeVar("R")

logger = logging.getLogger(__name__)

REGISTER_TIMEOUT_S = 30.0
STATUS_PEER_TIMEOUT_S = 5.0  # broker_status: a flusher or hold service slower is reported


class Tallies(Protocol):
    """What the endpoint counts (actors/metrics.py ``BrokerMetrics``)."""

    puts: Tally
    pulls: Tally
    send_backs: Tally


@dataclass(slots=True)
class BrokerPeers:
    """The actors a broker calls, as typed interfaces (``master``: a slave's)."""

    flusher: Flusher
    hold: Hold
    registrar: Registrar
    page_readers: PageReaders
    master: Master


class BrokerEndpoint(PopEndpoint):
    """Check, authorize and serve every broker operation (one async method each; the
    POP ones in pop_endpoint.py)."""

    def __init__(
        self, server: BrokerServer, peers: BrokerPeers, tallies: Tallies, server_key: ServerKey
    ) -> None:
        self.server = server
        # the server operations' proofs (protocol/server_key.py), made for this actor's name
        self.guard = Guard(server_key, "broker", broker_actor_name(server.config.replica_name))
        self.peers = peers
        self.tallies = tallies
        self.shared_rows = SharedRows()  # put_arrow's rows in slots of this node's executors
        # the slaves' fetches waiting for an append: (their event loop, their event)
        self.fetching: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()
        self.pop_waits = PopWaits()  # POP receives waiting for an append
        self.stopped: asyncio.Future[None] | None = None  # set by the shell's runtime
        self.polling = BrokerLongPolling(
            server,
            peers.hold,
            name=server.name,
            hold_s=server.config.hold_s,
            follow_ups=lambda: server.acl is None,  # with ACL on, each pull is checked
            on_answer=self.count_pull,
            on_append=self.notify_append,
        )

    # ------------------------------------------------------------ plumbing

    async def register(self) -> bool:
        """Register (or heartbeat) with the coordinator; False if it is not reachable
        (logged; the next heartbeat tries again, looking it up anew)."""
        try:
            await asyncio.wait_for(
                self.peers.registrar.register_broker(self.server.info()), REGISTER_TIMEOUT_S
            )
            return True
        except PeerMissingError:  # logged once by the lookup
            pass
        except PermissionDeniedError as exc:  # another deployment's key: never routed
            logger.error(
                "broker %s: the coordinator refused its registration: %s", self.server.name, exc
            )
        except PeerLostError as exc:
            logger.warning(
                "broker %s: coordinator unreachable (%s); registering again later",
                self.server.name,
                exc,
            )
        except TimeoutError:
            logger.warning(
                "broker %s: coordinator did not answer the registration in %.0f s",
                self.server.name,
                REGISTER_TIMEOUT_S,
            )
        return False

    def wake(self, keys: Iterable[tuple[str, int]]) -> None:
        """Answer the pulls parked on ``keys`` (just appended to), and the slaves' fetches."""
        self.polling.wake(keys)

    def notify_append(self) -> None:
        """Wake the slaves' parked fetches (each waits on its own group's event loop)
        and the POP receives waiting for news."""
        for loop, event in list(self.fetching):
            loop.call_soon_threadsafe(event.set)
        self.pop_waits.notify()

    def count_pull(self, req: Pull, reply: Reply) -> None:
        """Tally the messages and bytes a pull answered, per topic."""
        pulls = self.tallies.pulls
        if isinstance(req, h.PullRequest):
            assert isinstance(reply, h.PullResponse)
            if reply.count:
                pulls.count((req.topic,), reply.count, len(reply.buffer))
            return
        assert isinstance(reply, h.PullManyResponse)
        for item, got in zip(req.items, reply.results, strict=False):
            if type(got) is h.PullResponse and got.count:
                pulls.count((item.topic,), got.count, len(got.buffer))

    async def _serve(self, method: Callable[[Any], R], req: object, cls: type) -> R:
        """Check ``req`` at the boundary, run ``method``; routes are re-registered at once
        when the topic table changed (a created, deleted or auto-created topic)."""
        version = self.server.tables.topics.data_version
        req = check(req, cls)
        self.server.authorize(method.__name__, req)
        result = method(req)
        if self.server.tables.topics.data_version != version:
            await self.register()
        return result

    # ------------------------------------------------------------ sends

    async def put(self, batch: EncodedBatch | bytes, *chunks: bytes) -> b.BatchSendResult | bytes:
        """Append one batch. Its records may come as ``chunks`` after it (each under
        Ray's inline limit), joined here: one call, so the batch is appended whole or not
        at all. A batch sent as ``to_wire`` bytes is answered in bytes too."""
        started = time.perf_counter()
        wire = type(batch) is bytes
        if wire:
            batch = check(batch, EncodedBatch)
        elif type(batch) is not EncodedBatch:
            raise InvalidRequestError(f"put takes an EncodedBatch, got {type(batch).__name__}")
        assert isinstance(batch, EncodedBatch)
        if chunks:
            if batch.records or any(type(c) is not bytes for c in chunks):
                raise InvalidRequestError(
                    "put takes the records either in the batch or as bytes chunks after a "
                    "batch whose records are empty, not both"
                )
            batch = msgspec.structs.replace(batch, records=b"".join(chunks))
        try:  # a batch that came as a Python object was never checked against its Struct
            check_shape(batch)
        except BatchRejected as exc:
            raise InvalidRequestError(f"malformed EncodedBatch: {exc}") from None
        self.server.authorize("put", batch)  # signed whole, before it was split
        result = await self._append(batch, started)
        return to_wire(result) if wire else result

    async def put_arrow(self, req: bytes, rows: bytes) -> bytes:
        """Rows from the JVM (Spark's rayq sink): the request as JSON (an
        ``b.ArrowPutRequest``), the rows as an Arrow IPC stream, encoded column-wise and
        appended as idempotent batches, each as ``put`` appends one. Answers
        ``{"rows": n}``. With ``rows_file``, the rows come from that slot of an executor
        on this node (server/shared_rows.py), all read before the first await; a slot
        this process cannot read answers ``{"rows": 0, "resend": true}``."""
        started = time.perf_counter()
        put = check_json(req, b.ArrowPutRequest)
        self.server.authorize_arrow_put(put)  # its grant (ACL): the JVM signs nothing
        stream = self.shared_rows.rows_of(put.rows_file, put.rows_length, rows)
        if stream is None:
            return b'{"rows": 0, "resend": true}'
        batches = self.server.arrow_batches(put, stream)  # copied out of a slot
        del stream
        for n, batch in enumerate(batches):
            if n == 0:
                await earlier_batches(self.server.sequences, batch)
            await self._append(batch, started, own=True)
        return b'{"rows": %d}' % sum(batch.count for batch in batches)

    async def put_arrow_stats(self) -> dict[str, int]:
        """``put_arrow`` calls so far, by how their rows came (``shared`` or ``inline``)."""
        return dict(self.shared_rows.puts)

    async def _append(
        self, batch: EncodedBatch, started: float, own: bool = False
    ) -> b.BatchSendResult:
        """Append an authorized batch (``own``: encoded here), wake the pulls parked on
        its queue, answer when it is as safe as the flush and replication modes say."""
        known = batch.topic in self.server.tables.topics
        result = self.server.put(batch, own=own)
        self.notify_append()
        if not known:  # auto-created: routes must show it now, not at the next heartbeat
            await self.register()
        key = (batch.topic, batch.queue_id)
        if not batch.scheduled and self.polling.parked.watched(key):
            asyncio.get_running_loop().call_soon(self.wake, (key,))  # after the reply
        result = await wait_safe(self.server, self.peers.flusher, result)
        self.tallies.puts.count((batch.topic,), batch.count, len(batch.records))
        self.tallies.puts.observe((batch.topic,), time.perf_counter() - started)
        return result

    async def put_half(self, req: b.HalfSendRequest | bytes) -> b.BatchSendResult:
        """A transactional send's half message(s): stored, in no queue yet; acknowledged
        as safe as a ``put`` is."""
        req = check(req, b.HalfSendRequest)
        self.server.authorize("put_half", req)
        result = self.server.put_half(req)
        self.notify_append()
        return await wait_safe(self.server, self.peers.flusher, result)

    async def end_transaction(self, req: b.EndTransactionRequest | bytes) -> b.EndTransactionReply:
        """Commit or roll back a transaction; a commit wakes the pulls parked on its queue."""
        req = check(req, b.EndTransactionRequest)
        self.server.authorize("end_transaction", req)
        reply = self.server.end_transaction(req)
        if reply.ended:
            self.notify_append()
        if reply.committed:
            asyncio.get_running_loop().call_soon(self.wake, ((req.topic, reply.queue_id),))
        return reply

    async def transaction_checks(self, req: b.TransactionChecksRequest) -> b.TransactionChecksReply:
        return await self._serve(self.server.transaction_checks, req, b.TransactionChecksRequest)

    async def send_back(self, req: b.SendBackRequest) -> b.SendBackResult:
        req = check(req, b.SendBackRequest)
        result = await self._serve(self.server.send_back, req, b.SendBackRequest)
        self.wake((t, 0) for t in set(result.topics))
        dead = sum(1 for t in result.topics if is_dlq_topic(t))
        self.tallies.send_backs.count((req.group,), len(result.topics) - dead, dead)
        return result

    async def resend_dead_letter(self, req: b.ResendDeadLetterRequest) -> b.ResendDeadLetterReply:
        req = check(req, b.ResendDeadLetterRequest)
        result = await self._serve(self.server.resend_dead_letter, req, b.ResendDeadLetterRequest)
        self.wake([(result.topic, result.queue_id)])
        self.notify_append()
        return result

    # ------------------------------------------------------------ pulls

    async def pull(
        self, req: h.PullRequest | bytes, park: h.Park | bytes | None = None
    ) -> h.PullResponse | bytes:
        """Read without waiting (answered in bytes if asked in bytes). With ``park`` (the
        hold service's waiting pull), a read that finds nothing new leaves the pull
        parked: the next append to its queue answers it through the hold service."""
        started = time.perf_counter()
        wire = type(req) is bytes
        req = check(req, h.PullRequest)
        self.server.authorize("pull", req)  # also the hold service's: the client's request
        if park is None:
            resp = self.server.pull(req)
        else:
            got, _, _ = self.polling.park_and_read(check(park, h.Park).token, req)
            assert isinstance(got, h.PullResponse)
            resp = got
        self.count_pull(req, resp)
        self.tallies.pulls.observe((), time.perf_counter() - started)
        return to_wire(resp) if wire else resp

    async def pull_many(
        self, req: h.PullManyRequest | bytes, park: h.Park | bytes | None = None
    ) -> h.PullManyResponse:
        """``pull`` for each queue of ``req``; a queue's error is its answer, not the call's.
        With ``park``: parked (on all its queues) if none of them has anything new."""
        started = time.perf_counter()
        req = check(req, h.PullManyRequest)
        self.server.authorize("pull_many", req)
        if req.commits:
            self.server.commit_pulled(req)
        if park is None:
            reply = self.server.pull_many(req)
        else:
            got, _, _ = self.polling.park_and_read(check(park, h.Park).token, req)
            assert isinstance(got, h.PullManyResponse)
            reply = got
        self.count_pull(req, reply)
        self.tallies.pulls.observe((), time.perf_counter() - started)
        return reply

    async def read_arrow(self, req: b.ReadArrowRequest) -> b.ArrowPage:
        return await self._serve(self.server.read_arrow, req, b.ReadArrowRequest)

    async def read_arrow_ipc(self, req: bytes) -> bytes:
        """``read_arrow`` for the JVM: the request as JSON; the page as bytes: the next
        offset and the row count (little-endian int64s), then an Arrow IPC stream of the
        asked columns (none when no columns were asked for: a count)."""
        page = await self._serve(
            self.server.read_arrow, check_json(req, b.ReadArrowRequest), b.ReadArrowRequest
        )
        return columnar.page_bytes(page.batch, page.next_offset)

    async def page_readers(self, req: b.PageReadersRequest) -> b.PageReadersReply:
        """This replica's page readers (Spark's JVM reads its pages from them), started
        on the first call; answered once they run."""
        reply = await self._serve(self.server.page_readers, req, b.PageReadersRequest)
        await self.peers.page_readers.start()
        return reply

    # ------------------------------------------------------------ admin, offsets, locks
    async def create_topic(self, req: b.CreateTopicRequest) -> b.Done:
        return await self._serve(self.server.create_topic, req, b.CreateTopicRequest)

    async def delete_topic(self, req: b.TopicRequest) -> b.Done:
        return await self._serve(self.server.delete_topic, req, b.TopicRequest)

    async def topic_stats(self, req: b.TopicRequest) -> b.TopicStatsReply:
        return await self._serve(self.server.topic_stats, req, b.TopicRequest)

    async def queue_bounds(self, req: b.TopicRequest) -> b.QueueBoundsReply:
        return await self._serve(self.server.queue_bounds, req, b.TopicRequest)

    async def max_offset(self, req: b.MaxOffsetRequest) -> b.OffsetReply:
        return await self._serve(self.server.max_offset, req, b.MaxOffsetRequest)

    async def get_group(self, req: b.GroupRequest) -> b.GroupConfigReply:
        return await self._serve(self.server.get_group, req, b.GroupRequest)

    async def update_group(self, req: b.UpdateGroupRequest) -> b.GroupConfigReply:
        return await self._serve(self.server.update_group, req, b.UpdateGroupRequest)

    async def delete_group(self, req: b.DeleteGroupRequest) -> b.Done:
        return await self._serve(self.server.delete_group, req, b.DeleteGroupRequest)

    async def groups(self, req: b.ListGroupsRequest) -> b.GroupsReply:
        return await self._serve(self.server.groups, req, b.ListGroupsRequest)

    async def ensure_retry_topic(self, req: b.GroupRequest) -> b.Done:
        return await self._serve(self.server.ensure_retry_topic, req, b.GroupRequest)

    async def query_offsets(self, req: b.QueryOffsetsRequest) -> b.OffsetsReply:
        return await self._serve(self.server.query_offsets, req, b.QueryOffsetsRequest)

    async def commit_offsets(self, req: b.CommitOffsetsRequest) -> b.CommitOffsetsReply:
        return await self._serve(self.server.commit_offsets, req, b.CommitOffsetsRequest)

    async def compare_and_set_offsets(self, req: b.CompareAndSetOffsetsRequest) -> b.Done:
        return await self._serve(
            self.server.compare_and_set_offsets, req, b.CompareAndSetOffsetsRequest
        )

    async def reset_offsets(self, req: b.ResetOffsetsRequest) -> b.OffsetsReply:
        return await self._serve(self.server.reset_offsets, req, b.ResetOffsetsRequest)

    async def offset_by_time(self, req: b.OffsetByTimeRequest) -> b.OffsetReply:
        return await self._serve(self.server.offset_by_time, req, b.OffsetByTimeRequest)

    async def lock_queues(self, req: b.LockQueuesRequest) -> b.LockQueuesReply:
        return await self._serve(self.server.lock_queues, req, b.LockQueuesRequest)

    async def unlock_queues(self, req: b.LockQueuesRequest) -> b.LockQueuesReply:
        return await self._serve(self.server.unlock_queues, req, b.LockQueuesRequest)

    async def query_message(self, req: b.QueryMessageRequest) -> b.MessagesReply:
        return await self._serve(self.server.query_message, req, b.QueryMessageRequest)

    async def view_message(self, req: b.ViewMessageRequest) -> b.MessagesReply:
        return await self._serve(self.server.view_message, req, b.ViewMessageRequest)

    async def get_message(self, req: b.GetMessageRequest) -> b.MessagesReply:
        return await self._serve(self.server.get_message, req, b.GetMessageRequest)

    async def schedule_stats(self, req: b.ScheduleStatsRequest) -> b.ScheduleStats:
        return await self._serve(self.server.schedule_stats, req, b.ScheduleStatsRequest)

    async def replication(self, req: b.ReplicationRequest) -> b.ReplicationStats:
        return await self._serve(self.server.replication, req, b.ReplicationRequest)

    async def broker_status(self, req: b.BrokerStatusRequest) -> b.BrokerStatus:
        """This replica's state, with how far its flusher has made the log durable and
        whether its flusher and hold service answer (within STATUS_PEER_TIMEOUT_S)."""
        status = await self._serve(self.server.broker_status, req, b.BrokerStatusRequest)
        flushed, flusher_error = await _ask(self.peers.flusher.name, self.peers.flusher.durable)
        _, hold_error = await _ask(self.peers.hold.name, self.peers.hold.ready)
        return msgspec.structs.replace(
            status,
            flushed_offset=flushed if isinstance(flushed, int) else -1,
            flusher_error=flusher_error,
            hold_error=hold_error,
        )

    # ------------------------------------------------------------ replication, internal

    async def ha_fetch(self, req: i.HaFetch | bytes, proof: ServerProof | None = None) -> i.HaChunk:
        """A slave's fetch: the commit-log bytes from its offset, as soon as there are some
        (or empty after its ``wait_ms``). Its offset acknowledges everything below."""
        self.guard.check("ha_fetch", proof, req)
        req = check(req, i.HaFetch)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + req.wait_ms / 1000
        waiting = (loop, asyncio.Event())
        self.fetching.add(waiting)  # before reading: an append either is read or wakes it
        try:
            while True:
                waiting[1].clear()
                chunk = self.server.ha_fetch(req)
                if chunk is not None:
                    return chunk
                left = deadline - loop.time()
                if left <= 0:
                    return i.HaChunk(
                        offset=req.offset,
                        master_offset=self.server.store.written_offset,
                        topics_version=self.server.tables.topics.data_version,
                        acked_offset=self.server.acked_offset,
                    )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(waiting[1].wait(), left)
        finally:
            self.fetching.discard(waiting)

    async def ha_metadata(
        self, req: i.MetadataRequest | bytes, proof: ServerProof | None = None
    ) -> i.MetadataReply:
        """A slave's metadata sync: its committed offsets in, this master's tables out."""
        self.guard.check("ha_metadata", proof, req)
        return self.server.ha_metadata(check(req, i.MetadataRequest))

    async def sync_metadata(self, proof: ServerProof | None = None) -> bool:
        """One metadata sync now (a slave). False if the master is not reachable."""
        self.guard.check("sync_metadata", proof)
        return await self.sync_metadata_now()

    async def sync_metadata_now(self) -> bool:
        """``sync_metadata`` from within (the slave's runtime runs it every interval)."""
        if self.server.slave is None:
            return False
        req = self.server.metadata_request()
        try:
            reply = await self.peers.master.ha_metadata(req)
        except PeerLostError:
            return False
        version = self.server.tables.topics.data_version
        self.server.apply_metadata(req, reply)
        if self.server.tables.topics.data_version != version:
            await self.register()
        return True

    async def broker_info(self, proof: ServerProof | None = None) -> i.BrokerInfo:
        """For the coordinator (and operators): this broker's topics, node and store."""
        self.guard.check("broker_info", proof)
        return self.server.info()

    async def broker_config(self, proof: ServerProof | None = None) -> BrokerConfig:
        """For the coordinator's failover: this replica's settings."""
        self.guard.check("broker_config", proof)
        return self.server.config

    async def flush_targets(self, proof: ServerProof | None = None) -> i.FlushTargets:
        """For the flusher: how far the files are written."""
        self.guard.check("flush_targets", proof)
        return self.server.flush_targets()

    async def ready(self) -> str:
        return self.server.name


async def _ask(name: str, call: Callable[[], Any]) -> tuple[Any, str]:
    """A peer's answer to ``call()``, and "" or why it did not answer."""
    try:
        return await asyncio.wait_for(call(), STATUS_PEER_TIMEOUT_S), ""
    except PeerLostError as exc:
        return None, str(exc)
    except TimeoutError:
        return None, f"actor {name} did not answer in {STATUS_PEER_TIMEOUT_S:.0f} s"
