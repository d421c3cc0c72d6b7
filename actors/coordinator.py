"""The Coordinator actor (RocketMQ's NameServer role): brokers, routes and groups.

A thin Ray shell: every operation (``registry.operations("coordinator")``) is one
call into ``CoordinatorService`` (actors/server/coordinator_service.py), which holds
the logic without Ray; ``RayPeers`` (actors/coordinator_ray.py) is how that service
finds, watches and calls other actors. The class defines nothing but ``__init__`` and
those operations, since Ray lets any driver call any method of an actor class.

(Re)started, the coordinator rebuilds its soft state by asking the running brokers
and push consumers (``CoordinatorService.rebuild``), in the background.

With the brokers' ``acl_enable`` its client operations are checked by the same ACL
rules (``coordinator_acl``: the brokers' ``acl_file``, else
``<store dir>/config/plain_acl.toml`` of the store dir given to ``rayq.start``).
"""

from __future__ import annotations

from typing import Any

import ray

from rayq.actors.coordinator_ray import RayPeers, serve_gateway
from rayq.actors.handles import use_deployment_key
from rayq.actors.placement import server_actor_options
from rayq.actors.protocol import (
    BrokerInfo,
    BrokerTableReply,
    ClientRequest,
    CountReply,
    Done,
    FinishStreamPlanRequest,
    GroupShareRequest,
    JoinGroupRequest,
    LostBrokersRequest,
    MemberRequest,
    MembersReply,
    NamesReply,
    ReadReplicaReply,
    ReadReplicaRequest,
    RecordStreamPlanRequest,
    RouteReply,
    RouteRequest,
    RoutesReply,
    RoutesRequest,
    ShareReply,
    StreamPlanReply,
    StreamPlanRequest,
)
from rayq.actors.protocol.config import BrokerConfig
from rayq.actors.protocol.server_key import ServerKey, ServerProof
from rayq.actors.server.acl import coordinator_acl
from rayq.actors.server.coordinator_service import CoordinatorService


class CoordinatorActor:
    def __init__(
        self,
        namespace: str,
        *,
        server_key: ServerKey,
        config: BrokerConfig | None = None,
        store_dir: str = "",
        access_key: bytes = b"",
    ) -> None:
        # the deployment's key: it signs the coordinator's calls to brokers and goes to
        # the replicas it starts (failover, rejoin)
        use_deployment_key(server_key)
        peers = RayPeers(namespace, server_key.fingerprint())
        self.service = CoordinatorService(
            peers, server_key=server_key, acl=coordinator_acl(config, store_dir)
        )
        # An async actor's __init__ runs on its event loop: rebuild in the background.
        self.service.start_rebuild()
        # the bootstrap endpoint for clients outside Ray (actors/server/gateway.py)
        self.gateway = serve_gateway(self.service, peers, access_key, config or BrokerConfig())

    # ------------------------------------------------ server operations
    async def register_broker(self, info: BrokerInfo, proof: ServerProof | None = None) -> bool:
        return await self.service.register_broker(info, proof)

    async def unregister_broker(self, broker_name: str, proof: ServerProof | None = None) -> None:
        await self.service.unregister_broker(broker_name, proof)

    async def ready(self) -> bool:
        return await self.service.ready()

    async def bootstrap(self) -> str:
        return await self.gateway.url() if self.gateway is not None else ""

    # ------------------------------------------------ client operations
    async def route(self, req: RouteRequest) -> RouteReply:
        return await self.service.route(req)

    async def routes(self, req: RoutesRequest) -> RoutesReply:
        return await self.service.routes(req)

    async def topics(self, req: ClientRequest) -> NamesReply:
        return await self.service.topics(req)

    async def brokers(self, req: ClientRequest) -> NamesReply:
        return await self.service.brokers(req)

    async def broker_table(self, req: ClientRequest) -> BrokerTableReply:
        return await self.service.broker_table(req)

    async def lost_brokers(self, req: LostBrokersRequest) -> NamesReply:
        return await self.service.lost_brokers(req)

    async def read_replica(self, req: ReadReplicaRequest) -> ReadReplicaReply:
        return await self.service.read_replica(req)

    async def group_share(self, req: GroupShareRequest) -> ShareReply:
        return await self.service.group_share(req)

    async def leave_shares(self, req: ClientRequest) -> Done:
        return await self.service.leave_shares(req)

    async def join_group(self, req: JoinGroupRequest) -> CountReply:
        return await self.service.join_group(req)

    async def leave_group(self, req: MemberRequest) -> Done:
        return await self.service.leave_group(req)

    async def member_alive(self, req: MemberRequest) -> Done:
        return await self.service.member_alive(req)

    async def group_members(self, req: MemberRequest) -> MembersReply:
        return await self.service.group_members(req)

    async def stream_plan(self, req: StreamPlanRequest) -> StreamPlanReply:
        return await self.service.stream_plan(req)

    async def record_stream_plan(self, req: RecordStreamPlanRequest) -> StreamPlanReply:
        return await self.service.record_stream_plan(req)

    async def finish_stream_plan(self, req: FinishStreamPlanRequest) -> Done:
        return await self.service.finish_stream_plan(req)


def spawn_coordinator(
    namespace: str,
    node_id: str | None,
    server_key: ServerKey,
    config: BrokerConfig | None = None,
    store_dir: str = "",
    access_key: bytes = b"",
) -> Any:
    """Start (or get) the coordinator, holding ``server_key``; pinned to ``node_id`` (the
    head) when given. ``config``: the brokers' (its ACL settings: ``coordinator_acl``;
    its bootstrap endpoint's host and port), ``store_dir``: the one given to
    ``rayq.start``, ``access_key``: the deployment key its bootstrap endpoint asks of
    clients outside Ray (empty: no bootstrap endpoint)."""
    from rayq.actors.protocol import COORDINATOR_NAME

    options = server_actor_options(COORDINATOR_NAME, namespace, node_id or "", max_concurrency=1000)
    return (
        ray.remote(CoordinatorActor)
        .options(**options)
        .remote(
            namespace,
            server_key=server_key,
            config=config,
            store_dir=store_dir,
            access_key=access_key,
        )
    )
