"""The client transport: the one seam between rayq's clients and its server actors.

Every client (``Producer``, ``PullConsumer``, the push consumer's service, ``Admin``,
the Spark and Ray Data readers and writers, streaming queries) reaches the
server only through a ``Transport``:

* ``broker(name)`` -> ``BrokerClient``: the broker's client protocol, one typed
  method per operation (actors/protocol/), each returning a ``Reply``;
* ``hold(name)`` -> ``HoldClient``: pulls that may wait (long polling);
* ``coordinator()`` -> ``CoordinatorClient``: routes, brokers, group membership;
* ``wait(replies, timeout_s)``: the replies that are ready (the pull consumer's poll).

A ``Reply`` is the answer to come: ``result(timeout_s)`` blocks, ``await reply``
suspends, and both raise rayq errors (a RayqError the server raised comes back as
itself; a lost or silent actor as ``BrokerUnavailableError``).

``RayTransport`` talks to named Ray actors; ``rayq.testing.FakeTransport`` serves
the same protocol in-process over real ``BrokerServer`` objects, for client tests
without Ray.
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Generator, Sequence
from typing import Any, Generic, Protocol, TypeVar

from rayq.actors.protocol import (
    ArrowPage,
    BatchSendResult,
    BrokerStatus,
    BrokerStatusRequest,
    BrokerTableReply,
    ClientRequest,
    CommitOffsetsReply,
    CommitOffsetsRequest,
    CompareAndSetOffsetsRequest,
    CountReply,
    CreateTopicRequest,
    DataEndpoint,
    DataEndpointRequest,
    DeleteGroupRequest,
    Done,
    EndTransactionReply,
    EndTransactionRequest,
    FinishStreamPlanRequest,
    GetMessageRequest,
    GroupConfigReply,
    GroupRequest,
    GroupShareRequest,
    GroupsReply,
    HalfSendRequest,
    JoinGroupRequest,
    ListGroupsRequest,
    LockQueuesReply,
    LockQueuesRequest,
    LostBrokersRequest,
    MaxOffsetRequest,
    MemberRequest,
    MembersReply,
    MessagesReply,
    NamesReply,
    OffsetByTimeRequest,
    OffsetReply,
    OffsetsReply,
    PageReadersReply,
    PageReadersRequest,
    PullManyRequest,
    PullManyResponse,
    PullRequest,
    PullResponse,
    QueryMessageRequest,
    QueryOffsetsRequest,
    QueueBoundsReply,
    ReadArrowRequest,
    ReadReplicaReply,
    ReadReplicaRequest,
    RecordStreamPlanRequest,
    ReplicationRequest,
    ReplicationStats,
    ResendDeadLetterReply,
    ResendDeadLetterRequest,
    ResetOffsetsRequest,
    RouteReply,
    RouteRequest,
    RoutesReply,
    RoutesRequest,
    ScheduleStats,
    ScheduleStatsRequest,
    SendBackRequest,
    SendBackResult,
    ShareReply,
    StreamPlanReply,
    StreamPlanRequest,
    TopicRequest,
    TopicStatsReply,
    TransactionChecksReply,
    TransactionChecksRequest,
    UpdateGroupRequest,
    ViewMessageRequest,
)
from rayq.actors.protocol.pop import (
    AckRequest,
    ChangeInvisibilityReply,
    ChangeInvisibilityRequest,
    PopRequest,
    PopResponse,
)
from rayq.store import EncodedBatch

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class Reply(Generic[T]):
    """An answer to come from a server actor."""

    def result(self, timeout_s: float | None = None) -> T:
        """Wait for the answer; raises the rayq error the call ended in."""
        raise NotImplementedError

    def done(self) -> bool:
        raise NotImplementedError

    def cancel(self) -> None:
        """Give up on the answer (best effort)."""

    async def wait(self) -> T:
        raise NotImplementedError

    def add_done_callback(self, callback: Callable[[Reply[T]], None]) -> None:
        """Call ``callback(self)`` once the answer is there (on some other thread)."""
        raise NotImplementedError

    def __await__(self) -> Generator[Any, None, T]:
        return self.wait().__await__()


Invoke = Callable[..., Reply[Any]]


class _Client:
    """Typed methods over ``invoke(method_name, *args) -> Reply`` (the transport's)."""

    def __init__(self, invoke: Invoke) -> None:
        self._invoke = invoke

    @classmethod
    def request_types(cls) -> dict[str, type[Any]]:
        """Each method's name and the request type it takes, read from its annotation
        (an in-process server checks what it serves against this one list)."""
        out = {}
        for name, fn in vars(cls).items():
            if callable(fn) and not name.startswith("_"):
                hints = typing.get_type_hints(fn)
                [arg] = [t for k, t in hints.items() if k != "return"]
                out[name] = arg
        return out

    @classmethod
    def reply_types(cls) -> dict[str, type[Any]]:
        """Each method's name and the reply type its ``Reply`` carries."""
        out = {}
        for name, fn in vars(cls).items():
            if callable(fn) and not name.startswith("_"):
                out[name] = typing.get_args(typing.get_type_hints(fn)["return"])[0]
        return out


class BrokerClient(_Client):
    """One broker's client protocol (``BrokerActor`` / ``BrokerServer``)."""

    def put(self, batch: EncodedBatch) -> Reply[BatchSendResult]:
        return self._invoke("put", batch)

    def pull(self, req: PullRequest) -> Reply[PullResponse]:
        return self._invoke("pull", req)

    def pull_many(self, req: PullManyRequest) -> Reply[PullManyResponse]:
        return self._invoke("pull_many", req)

    def create_topic(self, req: CreateTopicRequest) -> Reply[Done]:
        return self._invoke("create_topic", req)

    def delete_topic(self, req: TopicRequest) -> Reply[Done]:
        return self._invoke("delete_topic", req)

    def topic_stats(self, req: TopicRequest) -> Reply[TopicStatsReply]:
        return self._invoke("topic_stats", req)

    def queue_bounds(self, req: TopicRequest) -> Reply[QueueBoundsReply]:
        return self._invoke("queue_bounds", req)

    def max_offset(self, req: MaxOffsetRequest) -> Reply[OffsetReply]:
        return self._invoke("max_offset", req)

    def get_group(self, req: GroupRequest) -> Reply[GroupConfigReply]:
        return self._invoke("get_group", req)

    def update_group(self, req: UpdateGroupRequest) -> Reply[GroupConfigReply]:
        return self._invoke("update_group", req)

    def delete_group(self, req: DeleteGroupRequest) -> Reply[Done]:
        return self._invoke("delete_group", req)

    def groups(self, req: ListGroupsRequest) -> Reply[GroupsReply]:
        return self._invoke("groups", req)

    def ensure_retry_topic(self, req: GroupRequest) -> Reply[Done]:
        return self._invoke("ensure_retry_topic", req)

    def query_offsets(self, req: QueryOffsetsRequest) -> Reply[OffsetsReply]:
        return self._invoke("query_offsets", req)

    def commit_offsets(self, req: CommitOffsetsRequest) -> Reply[CommitOffsetsReply]:
        return self._invoke("commit_offsets", req)

    def compare_and_set_offsets(self, req: CompareAndSetOffsetsRequest) -> Reply[Done]:
        return self._invoke("compare_and_set_offsets", req)

    def reset_offsets(self, req: ResetOffsetsRequest) -> Reply[OffsetsReply]:
        return self._invoke("reset_offsets", req)

    def offset_by_time(self, req: OffsetByTimeRequest) -> Reply[OffsetReply]:
        return self._invoke("offset_by_time", req)

    def lock_queues(self, req: LockQueuesRequest) -> Reply[LockQueuesReply]:
        return self._invoke("lock_queues", req)

    def unlock_queues(self, req: LockQueuesRequest) -> Reply[LockQueuesReply]:
        return self._invoke("unlock_queues", req)

    def query_message(self, req: QueryMessageRequest) -> Reply[MessagesReply]:
        return self._invoke("query_message", req)

    def view_message(self, req: ViewMessageRequest) -> Reply[MessagesReply]:
        return self._invoke("view_message", req)

    def get_message(self, req: GetMessageRequest) -> Reply[MessagesReply]:
        return self._invoke("get_message", req)

    def broker_status(self, req: BrokerStatusRequest) -> Reply[BrokerStatus]:
        return self._invoke("broker_status", req)

    def page_readers(self, req: PageReadersRequest) -> Reply[PageReadersReply]:
        return self._invoke("page_readers", req)

    def schedule_stats(self, req: ScheduleStatsRequest) -> Reply[ScheduleStats]:
        return self._invoke("schedule_stats", req)

    def replication(self, req: ReplicationRequest) -> Reply[ReplicationStats]:
        return self._invoke("replication", req)

    def read_arrow(self, req: ReadArrowRequest) -> Reply[ArrowPage]:
        return self._invoke("read_arrow", req)

    def send_back(self, req: SendBackRequest) -> Reply[SendBackResult]:
        return self._invoke("send_back", req)

    def resend_dead_letter(self, req: ResendDeadLetterRequest) -> Reply[ResendDeadLetterReply]:
        return self._invoke("resend_dead_letter", req)

    def pop(self, req: PopRequest) -> Reply[PopResponse]:
        return self._invoke("pop", req)

    def ack(self, req: AckRequest) -> Reply[Done]:
        return self._invoke("ack", req)

    def change_invisibility(self, req: ChangeInvisibilityRequest) -> Reply[ChangeInvisibilityReply]:
        return self._invoke("change_invisibility", req)

    def put_half(self, req: HalfSendRequest) -> Reply[BatchSendResult]:
        return self._invoke("put_half", req)

    def end_transaction(self, req: EndTransactionRequest) -> Reply[EndTransactionReply]:
        return self._invoke("end_transaction", req)

    def transaction_checks(self, req: TransactionChecksRequest) -> Reply[TransactionChecksReply]:
        return self._invoke("transaction_checks", req)

    def data_endpoint(self, req: DataEndpointRequest) -> Reply[DataEndpoint]:
        return self._invoke("data_endpoint", req)


class HoldClient(_Client):
    """A broker's long-polling service: pulls that wait up to ``suspend_ms`` for news."""

    def pull(self, req: PullRequest) -> Reply[PullResponse]:
        return self._invoke("pull", req)

    def pull_many(self, req: PullManyRequest) -> Reply[PullManyResponse]:
        return self._invoke("pull_many", req)

    def data_endpoint(self, req: DataEndpointRequest) -> Reply[DataEndpoint]:
        return self._invoke("data_endpoint", req)


class CoordinatorClient(_Client):
    """The coordinator's client protocol: routes, live brokers, group membership and
    streaming plans (``CoordinatorActor``)."""

    def route(self, req: RouteRequest) -> Reply[RouteReply]:
        return self._invoke("route", req)

    def routes(self, req: RoutesRequest) -> Reply[RoutesReply]:
        return self._invoke("routes", req)

    def topics(self, req: ClientRequest) -> Reply[NamesReply]:
        return self._invoke("topics", req)

    def brokers(self, req: ClientRequest) -> Reply[NamesReply]:
        return self._invoke("brokers", req)

    def broker_table(self, req: ClientRequest) -> Reply[BrokerTableReply]:
        return self._invoke("broker_table", req)

    def lost_brokers(self, req: LostBrokersRequest) -> Reply[NamesReply]:
        return self._invoke("lost_brokers", req)

    def read_replica(self, req: ReadReplicaRequest) -> Reply[ReadReplicaReply]:
        return self._invoke("read_replica", req)

    def group_share(self, req: GroupShareRequest) -> Reply[ShareReply]:
        return self._invoke("group_share", req)

    def leave_shares(self, req: ClientRequest) -> Reply[Done]:
        return self._invoke("leave_shares", req)

    def join_group(self, req: JoinGroupRequest) -> Reply[CountReply]:
        return self._invoke("join_group", req)

    def leave_group(self, req: MemberRequest) -> Reply[Done]:
        return self._invoke("leave_group", req)

    def member_alive(self, req: MemberRequest) -> Reply[Done]:
        return self._invoke("member_alive", req)

    def group_members(self, req: MemberRequest) -> Reply[MembersReply]:
        return self._invoke("group_members", req)

    def stream_plan(self, req: StreamPlanRequest) -> Reply[StreamPlanReply]:
        return self._invoke("stream_plan", req)

    def record_stream_plan(self, req: RecordStreamPlanRequest) -> Reply[StreamPlanReply]:
        return self._invoke("record_stream_plan", req)

    def finish_stream_plan(self, req: FinishStreamPlanRequest) -> Reply[Done]:
        return self._invoke("finish_stream_plan", req)


class Transport(Protocol):
    """How a client reaches the deployment in one namespace."""

    namespace: str

    def broker(self, broker_name: str) -> BrokerClient: ...
    def hold(self, broker_name: str) -> HoldClient: ...
    def coordinator(self) -> CoordinatorClient: ...
    def forget(self, broker_name: str) -> None: ...
    def wait(self, replies: Sequence[Reply[Any]], timeout_s: float) -> list[Reply[Any]]: ...


__all__ = [
    "BrokerClient",
    "CoordinatorClient",
    "HoldClient",
    "Reply",
    "Transport",
]
