"""The coordinator's client protocol (routes, brokers, group membership, stream plans)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from rayq.actors.protocol.enums import AllocateStrategy, MessageModel, MessageQueue
from rayq.actors.protocol.routes import TopicRoute
from rayq.actors.protocol.wire import Text, _Request


class MemberSpec(msgspec.Struct, frozen=True):
    """What a push consumer declares when it joins its group."""

    subscriptions: tuple[tuple[Text, Text], ...]  # sorted (topic, expression)
    model: MessageModel = MessageModel.CLUSTERING
    strategy: AllocateStrategy = AllocateStrategy.AVERAGELY
    allocation: tuple[MessageQueue, ...] = ()  # this member's queues, for CONFIG

    @property
    def topics(self) -> list[str]:
        return [t for t, _ in self.subscriptions]

    def same_group_settings(self, other: MemberSpec) -> bool:
        return (self.subscriptions, self.model, self.strategy) == (
            other.subscriptions,
            other.model,
            other.strategy,
        )


class ClientRequest(_Request, frozen=True, kw_only=True):
    """Just the caller: ``topics``, ``brokers``, ``leave_shares``."""


class RouteRequest(_Request, frozen=True, kw_only=True):
    topic: Text


class RoutesRequest(_Request, frozen=True, kw_only=True):
    topics: Annotated[list[Text], Meta(max_length=1 << 20)]


class ReadReplicaRequest(_Request, frozen=True, kw_only=True):
    """Which replica of ``broker_name`` serves calls now."""

    broker_name: Text


class EndpointRequest(_Request, frozen=True, kw_only=True):
    """Where ``replica``'s ``service`` listens: asked of a deployment's bootstrap endpoint
    (actors/server/gateway.py) by a client outside Ray, answered with a
    ``DataEndpoint``."""

    replica: Text
    service: Literal["broker", "hold"] = "broker"


class ReadReplicaReply(msgspec.Struct, frozen=True, kw_only=True):
    """The replica to call: the broker name while its master serves, a slave's
    ``<name>#<id>`` while the master is lost and that slave serves reads."""

    replica: str


class LostBrokersRequest(_Request, frozen=True, kw_only=True):
    """Brokers that died or went silent (holding ``topic``, if given)."""

    topic: Text | None = None


class GroupShareRequest(_Request, frozen=True, kw_only=True):
    """A pull consumer's share of ``topic`` among its group's live members, allocated
    with ``strategy`` (every live member must use the same one); ``allocation``: the
    caller's queues, for CONFIG."""

    group: Text
    topic: Text
    expiry_ms: Annotated[int, Meta(ge=1, le=2**31 - 1)]
    strategy: AllocateStrategy = AllocateStrategy.AVERAGELY
    allocation: Annotated[list[MessageQueue], Meta(max_length=1 << 16)] = []


class JoinGroupRequest(_Request, frozen=True, kw_only=True):
    """A push consumer (the Consumer actor named after ``client_id``) joins ``group``."""

    group: Text
    spec: MemberSpec


class MemberRequest(_Request, frozen=True, kw_only=True):
    """The caller as a member of ``group``: ``leave_group``, ``member_alive``,
    ``group_members``."""

    group: Text


class StreamPlanRequest(_Request, frozen=True, kw_only=True):
    group: Text
    topic: Text


class RecordStreamPlanRequest(_Request, frozen=True, kw_only=True):
    """A streaming batch's offset ranges, recorded before it runs (opaque to the
    coordinator: ``rayq.connectors.ranges.OffsetRange`` fields)."""

    group: Text
    topic: Text
    ranges: Annotated[list[Any], Meta(max_length=1 << 20)]


class FinishStreamPlanRequest(_Request, frozen=True, kw_only=True):
    group: Text
    topic: Text
    batch_id: Annotated[int, Meta(ge=0)]


class RouteReply(msgspec.Struct, frozen=True, kw_only=True):
    route: TopicRoute | None


class RoutesReply(msgspec.Struct, frozen=True, kw_only=True):
    routes: dict[str, TopicRoute | None]


class NamesReply(msgspec.Struct, frozen=True, kw_only=True):
    """Topic or broker names, sorted."""

    names: list[str]


class ShareReply(msgspec.Struct, frozen=True, kw_only=True):
    """The caller's queues (None: no such topic)."""

    queues: list[MessageQueue] | None


class MembersReply(msgspec.Struct, frozen=True, kw_only=True):
    """Each member of a push-consumer group and the queues it owns now."""

    members: dict[str, list[MessageQueue]]


class BrokerEntry(msgspec.Struct, frozen=True, kw_only=True):
    """A broker replica the coordinator knows: its last registration or heartbeat, and
    whether it is lost (died or went silent, not back yet)."""

    broker_name: str
    broker_id: int
    role: str
    node_id: str
    last_heartbeat_ms: int
    lost: bool = False


class BrokerTableReply(msgspec.Struct, frozen=True, kw_only=True):
    brokers: list[BrokerEntry]


class CountReply(msgspec.Struct, frozen=True, kw_only=True):
    count: int


class StreamPlanReply(msgspec.Struct, frozen=True, kw_only=True):
    """The unfinished plan of (group, topic): its batch id and ranges (-1: none)."""

    batch_id: int = -1
    ranges: list[Any] = []
