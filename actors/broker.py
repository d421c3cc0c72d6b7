"""The Broker actor: a Ray shell over ``BrokerEndpoint`` (actors/server/endpoint.py).

``spawn_broker`` (actors/broker_spawn.py) makes it a named, restartable async Ray
actor pinned to a node. Its methods are exactly the broker's operations in the registry
(actors/protocol/registry.py), each a one-liner into the endpoint (or, for its
lifecycle, the runtime), run in the concurrency group the registry names: sends in
``send``, pulls in ``pull``, admin calls in ``admin``, replication in ``ha``, the
coordinator's watch in ``watch``, so held pulls and slow admin calls cannot starve
sends. Operations for other server actors (``Caller.SERVER``) are not in the client
transport. Restarted by Ray, ``__init__`` reopens (and so recovers) the store from
disk, starts the timers (actors/server/broker_runtime.py) and registers again; its
peers are found by name (actors/broker_peers.py).
"""

from __future__ import annotations

import asyncio
import logging

import ray

from rayq.actors.broker_peers import ray_peers
from rayq.actors.data_plane import data_plane
from rayq.actors.malloc import keep_freed_memory
from rayq.actors.metrics import REPORT_INTERVAL_S, BrokerMetrics
from rayq.actors.protocol import broker as b
from rayq.actors.protocol import hold as h
from rayq.actors.protocol import internal as i
from rayq.actors.protocol import pop as p
from rayq.actors.protocol.config import BrokerConfig
from rayq.actors.protocol.frames import DataEndpoint, DataEndpointRequest
from rayq.actors.protocol.registry import operations
from rayq.actors.protocol.server_key import ServerKey, ServerProof
from rayq.actors.server.broker_runtime import BrokerRuntime, open_server
from rayq.actors.server.endpoint import BrokerEndpoint
from rayq.store import EncodedBatch

logger = logging.getLogger(__name__)


class BrokerActor:
    """Ray shell: ``__init__`` and the registry's broker operations, nothing else."""

    def __init__(
        self,
        config: BrokerConfig,
        store_dir: str,
        namespace: str,
        epoch: int = 0,
        *,
        server_key: ServerKey,
    ) -> None:
        keep_freed_memory()  # pages and put batches reuse freed buffers (malloc.py)
        node_id = ray.get_runtime_context().get_node_id()
        server = open_server(config, store_dir, node_id, epoch)
        metrics = BrokerMetrics(config.replica_name)
        peers = ray_peers(config, store_dir, namespace, node_id, server_key)
        self.endpoint = BrokerEndpoint(server, peers, metrics, server_key)
        self.runtime = BrokerRuntime(self.endpoint, metrics, int(REPORT_INTERVAL_S * 1000))
        # An async actor's __init__ runs on its event loop: start serving now.
        self.startup = asyncio.get_running_loop().create_task(self.runtime.start_services())
        self.wire = data_plane(self.endpoint, config, node_id, ray.util.get_node_ip_address())
        self.wire.start()

    async def data_endpoint(self, req: DataEndpointRequest | bytes) -> DataEndpoint:
        """Where this replica's socket data plane listens, and its key."""
        return await self.wire.answer(req)

    # ------------------------------------------------ client and JVM operations

    async def put(self, batch: EncodedBatch | bytes, *chunks: bytes) -> b.BatchSendResult | bytes:
        return await self.endpoint.put(batch, *chunks)

    async def put_arrow(self, req: bytes, rows: bytes) -> bytes:
        return await self.endpoint.put_arrow(req, rows)

    async def pull(
        self, req: h.PullRequest | bytes, park: h.Park | bytes | None = None
    ) -> h.PullResponse | bytes:
        return await self.endpoint.pull(req, park)

    async def pull_many(
        self, req: h.PullManyRequest | bytes, park: h.Park | bytes | None = None
    ) -> h.PullManyResponse:
        return await self.endpoint.pull_many(req, park)

    async def pop(self, req: p.PopRequest | bytes) -> p.PopResponse:
        return await self.endpoint.pop(req)

    async def ack(self, req: p.AckRequest | bytes) -> b.Done:
        return await self.endpoint.ack(req)

    async def change_invisibility(
        self, req: p.ChangeInvisibilityRequest | bytes
    ) -> p.ChangeInvisibilityReply:
        return await self.endpoint.change_invisibility(req)

    async def put_half(self, req: b.HalfSendRequest | bytes) -> b.BatchSendResult:
        return await self.endpoint.put_half(req)

    async def end_transaction(self, req: b.EndTransactionRequest | bytes) -> b.EndTransactionReply:
        return await self.endpoint.end_transaction(req)

    async def transaction_checks(self, req: b.TransactionChecksRequest) -> b.TransactionChecksReply:
        return await self.endpoint.transaction_checks(req)

    async def create_topic(self, req: b.CreateTopicRequest) -> b.Done:
        return await self.endpoint.create_topic(req)

    async def delete_topic(self, req: b.TopicRequest) -> b.Done:
        return await self.endpoint.delete_topic(req)

    async def topic_stats(self, req: b.TopicRequest) -> b.TopicStatsReply:
        return await self.endpoint.topic_stats(req)

    async def queue_bounds(self, req: b.TopicRequest) -> b.QueueBoundsReply:
        return await self.endpoint.queue_bounds(req)

    async def max_offset(self, req: b.MaxOffsetRequest) -> b.OffsetReply:
        return await self.endpoint.max_offset(req)

    async def get_group(self, req: b.GroupRequest) -> b.GroupConfigReply:
        return await self.endpoint.get_group(req)

    async def update_group(self, req: b.UpdateGroupRequest) -> b.GroupConfigReply:
        return await self.endpoint.update_group(req)

    async def delete_group(self, req: b.DeleteGroupRequest) -> b.Done:
        return await self.endpoint.delete_group(req)

    async def groups(self, req: b.ListGroupsRequest) -> b.GroupsReply:
        return await self.endpoint.groups(req)

    async def ensure_retry_topic(self, req: b.GroupRequest) -> b.Done:
        return await self.endpoint.ensure_retry_topic(req)

    async def query_offsets(self, req: b.QueryOffsetsRequest) -> b.OffsetsReply:
        return await self.endpoint.query_offsets(req)

    async def commit_offsets(self, req: b.CommitOffsetsRequest) -> b.CommitOffsetsReply:
        return await self.endpoint.commit_offsets(req)

    async def compare_and_set_offsets(self, req: b.CompareAndSetOffsetsRequest) -> b.Done:
        return await self.endpoint.compare_and_set_offsets(req)

    async def reset_offsets(self, req: b.ResetOffsetsRequest) -> b.OffsetsReply:
        return await self.endpoint.reset_offsets(req)

    async def offset_by_time(self, req: b.OffsetByTimeRequest) -> b.OffsetReply:
        return await self.endpoint.offset_by_time(req)

    async def lock_queues(self, req: b.LockQueuesRequest) -> b.LockQueuesReply:
        return await self.endpoint.lock_queues(req)

    async def unlock_queues(self, req: b.LockQueuesRequest) -> b.LockQueuesReply:
        return await self.endpoint.unlock_queues(req)

    async def query_message(self, req: b.QueryMessageRequest) -> b.MessagesReply:
        return await self.endpoint.query_message(req)

    async def view_message(self, req: b.ViewMessageRequest) -> b.MessagesReply:
        return await self.endpoint.view_message(req)

    async def get_message(self, req: b.GetMessageRequest) -> b.MessagesReply:
        return await self.endpoint.get_message(req)

    async def broker_status(self, req: b.BrokerStatusRequest) -> b.BrokerStatus:
        return await self.endpoint.broker_status(req)

    async def page_readers(self, req: b.PageReadersRequest) -> b.PageReadersReply:
        return await self.endpoint.page_readers(req)

    async def schedule_stats(self, req: b.ScheduleStatsRequest) -> b.ScheduleStats:
        return await self.endpoint.schedule_stats(req)

    async def replication(self, req: b.ReplicationRequest) -> b.ReplicationStats:
        return await self.endpoint.replication(req)

    async def read_arrow(self, req: b.ReadArrowRequest) -> b.ArrowPage:
        return await self.endpoint.read_arrow(req)

    async def read_arrow_ipc(self, req: bytes) -> bytes:
        return await self.endpoint.read_arrow_ipc(req)

    async def send_back(self, req: b.SendBackRequest) -> b.SendBackResult:
        return await self.endpoint.send_back(req)

    async def resend_dead_letter(self, req: b.ResendDeadLetterRequest) -> b.ResendDeadLetterReply:
        return await self.endpoint.resend_dead_letter(req)

    # ------------------------------------------------ server operations

    # Each with Access SERVER_KEY in the registry takes the caller's ``proof`` of the
    # deployment's server key (protocol/server_key.py) and refuses a call without one.

    async def ha_fetch(self, req: i.HaFetch | bytes, proof: ServerProof | None = None) -> i.HaChunk:
        return await self.endpoint.ha_fetch(req, proof)

    async def ha_metadata(
        self, req: i.MetadataRequest | bytes, proof: ServerProof | None = None
    ) -> i.MetadataReply:
        return await self.endpoint.ha_metadata(req, proof)

    async def sync_metadata(self, proof: ServerProof | None = None) -> bool:
        return await self.endpoint.sync_metadata(proof)

    async def broker_info(self, proof: ServerProof | None = None) -> i.BrokerInfo:
        return await self.endpoint.broker_info(proof)

    async def broker_config(self, proof: ServerProof | None = None) -> BrokerConfig:
        return await self.endpoint.broker_config(proof)

    async def flush_targets(self, proof: ServerProof | None = None) -> i.FlushTargets:
        return await self.endpoint.flush_targets(proof)

    async def put_arrow_stats(self) -> dict[str, int]:
        return await self.endpoint.put_arrow_stats()

    async def ready(self) -> str:
        return await self.endpoint.ready()

    async def start_services(self, proof: ServerProof | None = None) -> bool:
        """Start the timers (once) and register with the coordinator now (also run by
        ``rayq.start`` and the coordinator, to register at once)."""
        self.endpoint.guard.check("start_services", proof)
        return await self.runtime.start_services()

    async def park(self, proof: ServerProof | None = None) -> None:
        """Never returns while the broker lives: the coordinator watches it for death.
        Raises ClosedError at ``shutdown`` (a parked call would hold the actor's exit)."""
        self.endpoint.guard.check("park", proof)
        await self.runtime.park()

    async def shutdown(self, proof: ServerProof | None = None) -> None:
        """Close the store cleanly, then end this actor for good (Ray does not restart
        it): a broker is never left alive with a closed store."""
        self.endpoint.guard.check("shutdown", proof)
        await self.wire.server.close()
        self.runtime.close([self.startup])
        ray.actor.exit_actor()


def _schedule(cls: type) -> None:
    """Put each operation in the concurrency group the registry names for it."""
    for name, op in operations("broker").items():
        if op.group:
            ray.method(concurrency_group=op.group)(vars(cls)[name])


_schedule(BrokerActor)
