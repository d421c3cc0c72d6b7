"""The registry of operations: every operation of every server actor, written once.

Each ``Operation`` names the actor kind that serves it (``service``), its method name,
its request and reply types, the actor's concurrency group it runs in, what access
it needs (``Access``) and who calls it (``caller``):

- ``Caller.CLIENT``: a rayq client through the transport (``BrokerClient``,
  ``HoldClient``, ``CoordinatorClient`` mirror these, one typed method each);
- ``Caller.JVM``: Spark's JVM through a Ray cross-language call: bytes in and out,
  the request as the JSON of its Struct (``check_json``);
- ``Caller.SERVER``: another rayq server actor or ``rayq.start`` only (replication,
  registration, flush targets, lifecycle); never part of the client transport.

Everything else that lists operations derives from this table or is checked against
it by a test: the transport's typed clients and the actor classes' methods
(tests/unit/protocol/test_registry.py), the ACL's admin operations
(``admin_operations``), the actors' concurrency groups (``concurrency_groups``) and
the operations table of docs/ARCHITECTURE.md.
"""

from __future__ import annotations

import enum
from typing import Final

import msgspec

from rayq.actors.protocol import broker as b
from rayq.actors.protocol import coordinator as c
from rayq.actors.protocol import frames as f
from rayq.actors.protocol import hold as h
from rayq.actors.protocol import internal as i
from rayq.actors.protocol import pop as p
from rayq.actors.protocol.config import BrokerConfig
from rayq.store.batch import EncodedBatch


class Caller(enum.Enum):
    CLIENT = "client"  # a rayq client through the transport
    JVM = "jvm"  # Spark's JVM (Ray cross-language call; JSON request, bytes reply)
    SERVER = "server"  # another server actor or rayq.start only


class Access(enum.Enum):
    """What the ACL asks of a signed request (``rayq.actors.server.acl``)."""

    PUB = "PUB"  # PUB on the topic it writes
    SUB = "SUB"  # SUB on the topics it reads and the group it reads for
    PUB_OR_SUB = "PUB_OR_SUB"  # PUB or SUB (either) on the topics it names: a route
    ADMIN = "ADMIN"  # an admin account
    ACCOUNT = "ACCOUNT"  # any valid, signed account
    NONE = "NONE"  # not checked by the ACL
    SERVER_KEY = "SERVER_KEY"  # a server operation that needs the server proof (server_key.py)


class Operation(msgspec.Struct, frozen=True, kw_only=True):
    service: str  # "broker", "hold", "coordinator", "flusher", "page_reader", "consumer"
    name: str
    request: type | None  # None: the method takes no request
    reply: type | None  # None: the method answers nothing
    group: str  # the actor's concurrency group ("" : the default group)
    access: Access
    caller: Caller = Caller.CLIENT

    @property
    def key(self) -> str:
        return f"{self.service}.{self.name}"


def _op(
    service: str,
    name: str,
    request: type | None,
    reply: type | None,
    group: str,
    access: Access,
    caller: Caller = Caller.CLIENT,
) -> Operation:
    return Operation(
        service=service,
        name=name,
        request=request,
        reply=reply,
        group=group,
        access=access,
        caller=caller,
    )


A = Access
_BROKER_CLIENT: Final = (
    _op("broker", "put", EncodedBatch, b.BatchSendResult, "send", A.PUB),
    _op("broker", "put_half", b.HalfSendRequest, b.BatchSendResult, "send", A.PUB),
    _op("broker", "end_transaction", b.EndTransactionRequest, b.EndTransactionReply, "send", A.PUB),
    _op(
        "broker",
        "transaction_checks",
        b.TransactionChecksRequest,
        b.TransactionChecksReply,
        "admin",
        A.ACCOUNT,
    ),
    _op("broker", "pull", h.PullRequest, h.PullResponse, "pull", A.SUB),
    _op("broker", "pull_many", h.PullManyRequest, h.PullManyResponse, "pull", A.SUB),
    # POP consumption (pop.py): receive with a lease, settle, move or end a lease
    _op("broker", "pop", p.PopRequest, p.PopResponse, "pull", A.SUB),
    _op("broker", "ack", p.AckRequest, b.Done, "pull", A.SUB),
    _op(
        "broker",
        "change_invisibility",
        p.ChangeInvisibilityRequest,
        p.ChangeInvisibilityReply,
        "pull",
        A.SUB,
    ),
    _op("broker", "create_topic", b.CreateTopicRequest, b.Done, "admin", A.ADMIN),
    _op("broker", "delete_topic", b.TopicRequest, b.Done, "admin", A.ADMIN),
    _op("broker", "topic_stats", b.TopicRequest, b.TopicStatsReply, "admin", A.SUB),
    _op("broker", "queue_bounds", b.TopicRequest, b.QueueBoundsReply, "admin", A.SUB),
    _op("broker", "max_offset", b.MaxOffsetRequest, b.OffsetReply, "admin", A.SUB),
    _op("broker", "get_group", b.GroupRequest, b.GroupConfigReply, "admin", A.SUB),
    _op("broker", "update_group", b.UpdateGroupRequest, b.GroupConfigReply, "admin", A.ADMIN),
    _op("broker", "delete_group", b.DeleteGroupRequest, b.Done, "admin", A.ADMIN),
    _op("broker", "groups", b.ListGroupsRequest, b.GroupsReply, "admin", A.ADMIN),
    _op("broker", "ensure_retry_topic", b.GroupRequest, b.Done, "admin", A.SUB),
    _op("broker", "query_offsets", b.QueryOffsetsRequest, b.OffsetsReply, "admin", A.SUB),
    _op("broker", "commit_offsets", b.CommitOffsetsRequest, b.CommitOffsetsReply, "admin", A.SUB),
    _op("broker", "compare_and_set_offsets", b.CompareAndSetOffsetsRequest, b.Done, "admin", A.SUB),
    _op("broker", "reset_offsets", b.ResetOffsetsRequest, b.OffsetsReply, "admin", A.ADMIN),
    _op("broker", "offset_by_time", b.OffsetByTimeRequest, b.OffsetReply, "admin", A.SUB),
    _op("broker", "lock_queues", b.LockQueuesRequest, b.LockQueuesReply, "admin", A.SUB),
    _op("broker", "unlock_queues", b.LockQueuesRequest, b.LockQueuesReply, "admin", A.SUB),
    _op("broker", "query_message", b.QueryMessageRequest, b.MessagesReply, "admin", A.SUB),
    _op("broker", "view_message", b.ViewMessageRequest, b.MessagesReply, "admin", A.ADMIN),
    _op("broker", "get_message", b.GetMessageRequest, b.MessagesReply, "admin", A.ADMIN),
    _op("broker", "broker_status", b.BrokerStatusRequest, b.BrokerStatus, "admin", A.ADMIN),
    _op("broker", "page_readers", b.PageReadersRequest, b.PageReadersReply, "admin", A.SUB),
    _op("broker", "schedule_stats", b.ScheduleStatsRequest, b.ScheduleStats, "admin", A.ADMIN),
    _op("broker", "replication", b.ReplicationRequest, b.ReplicationStats, "admin", A.ADMIN),
    _op("broker", "read_arrow", b.ReadArrowRequest, b.ArrowPage, "admin", A.SUB),
    _op("broker", "send_back", b.SendBackRequest, b.SendBackResult, "admin", A.SUB),
    _op(
        "broker",
        "resend_dead_letter",
        b.ResendDeadLetterRequest,
        b.ResendDeadLetterReply,
        "admin",
        A.ADMIN,
    ),
    # the socket data plane's addresses and key (frames.py): one Ray call, open to any
    # member of the Ray cluster as the actor itself is; the ACL checks each request on it
    _op("broker", "data_endpoint", f.DataEndpointRequest, f.DataEndpoint, "admin", A.NONE),
)
_BROKER_JVM: Final = (
    _op("broker", "put_arrow", b.ArrowPutRequest, bytes, "send", A.PUB, Caller.JVM),
    _op("broker", "read_arrow_ipc", b.ReadArrowRequest, bytes, "admin", A.SUB, Caller.JVM),
)
_HOLD_CLIENT: Final = (
    _op("hold", "pull", h.PullRequest, h.PullResponse, "", A.SUB),
    _op("hold", "pull_many", h.PullManyRequest, h.PullManyResponse, "", A.SUB),
    _op("hold", "data_endpoint", f.DataEndpointRequest, f.DataEndpoint, "", A.NONE),
)
# The coordinator's: checked by its ACL (acl.py, ``service="coordinator"``) when the
# deployment's brokers have ``acl_enable``. Nothing here changes cluster-wide state (the
# brokers' registrations are server operations), so nothing needs an admin account;
# ``read_replica`` is the transport's own lookup of a broker it was told of (no
# credentials; it names a replica, as Ray's list of named actors does to any driver).
_COORDINATOR_CLIENT: Final = (
    _op("coordinator", "route", c.RouteRequest, c.RouteReply, "", A.PUB_OR_SUB),
    _op("coordinator", "routes", c.RoutesRequest, c.RoutesReply, "", A.PUB_OR_SUB),
    _op("coordinator", "topics", c.ClientRequest, c.NamesReply, "", A.ACCOUNT),
    _op("coordinator", "brokers", c.ClientRequest, c.NamesReply, "", A.ACCOUNT),
    _op("coordinator", "broker_table", c.ClientRequest, c.BrokerTableReply, "", A.ACCOUNT),
    _op("coordinator", "lost_brokers", c.LostBrokersRequest, c.NamesReply, "", A.ACCOUNT),
    _op("coordinator", "read_replica", c.ReadReplicaRequest, c.ReadReplicaReply, "", A.NONE),
    _op("coordinator", "group_share", c.GroupShareRequest, c.ShareReply, "", A.SUB),
    # the caller's shares in every group (the request names none): a valid account
    _op("coordinator", "leave_shares", c.ClientRequest, b.Done, "", A.ACCOUNT),
    _op("coordinator", "join_group", c.JoinGroupRequest, c.CountReply, "", A.SUB),
    _op("coordinator", "leave_group", c.MemberRequest, b.Done, "", A.SUB),
    _op("coordinator", "member_alive", c.MemberRequest, b.Done, "", A.SUB),
    _op("coordinator", "group_members", c.MemberRequest, c.MembersReply, "", A.SUB),
    _op("coordinator", "stream_plan", c.StreamPlanRequest, c.StreamPlanReply, "", A.SUB),
    _op(
        "coordinator",
        "record_stream_plan",
        c.RecordStreamPlanRequest,
        c.StreamPlanReply,
        "",
        A.SUB,
    ),
    _op("coordinator", "finish_stream_plan", c.FinishStreamPlanRequest, b.Done, "", A.SUB),
)
# Operations between server actors (and rayq.start): each is a method of that actor
# class and nothing else is. Access SERVER_KEY: the call carries a ``ServerProof`` of the
# deployment's server key (server_key.py) and is refused without; NONE: open, as it
# changes nothing and reveals nothing a client cannot learn (``ready``, counters).
S = Caller.SERVER
K = Access.SERVER_KEY
_COORDINATOR_SERVER: Final = (
    # brokers register and heartbeat; rayq.start waits for ``ready``
    _op("coordinator", "register_broker", i.BrokerInfo, bool, "", K, S),
    _op("coordinator", "unregister_broker", str, None, "", K, S),
    _op("coordinator", "ready", None, bool, "", A.NONE, S),
    _op("coordinator", "bootstrap", None, str, "", A.NONE, S),
    # a push consumer's Consumer actor: its own driver (start, stats, shutdown) and the
    # coordinator (rejoin after a restart; park to learn of its death; assign and revoke,
    # which take (generation, queues) as two arguments, so no one request type). The
    # actor is a client's, which holds no server key (docs/guide/acl.md, 'The server key')
    _op("consumer", "start", None, bool, "", A.NONE, S),
    _op("consumer", "rejoin", None, bool, "", A.NONE, S),
    _op("consumer", "assign", None, None, "", A.NONE, S),
    _op("consumer", "revoke", None, None, "", A.NONE, S),
    _op("consumer", "park", None, None, "", A.NONE, S),
    _op("consumer", "stats", None, dict, "", A.NONE, S),
    _op("consumer", "shutdown", None, dict, "", A.NONE, S),
)
# The broker's, its hold service's, its flusher's and its page readers' (actors/broker.py,
# pull_hold.py, flusher.py, page_reader.py): lifecycle, the coordinator's registration and
# watch, replication (slave -> master), flush targets, answers to parked pulls, diagnosis.
_BROKER_SERVER: Final = (
    _op("broker", "start_services", None, bool, "", K, S),
    _op("broker", "broker_info", None, i.BrokerInfo, "admin", K, S),
    _op("broker", "broker_config", None, BrokerConfig, "admin", K, S),
    _op("broker", "flush_targets", None, i.FlushTargets, "admin", K, S),
    _op("broker", "park", None, None, "watch", K, S),
    _op("broker", "ready", None, str, "", A.NONE, S),
    _op("broker", "shutdown", None, None, "", K, S),
    _op("broker", "ha_fetch", i.HaFetch, i.HaChunk, "ha", K, S),
    _op("broker", "ha_metadata", i.MetadataRequest, i.MetadataReply, "ha", K, S),
    _op("broker", "sync_metadata", None, bool, "admin", K, S),
    _op("broker", "put_arrow_stats", None, dict, "", A.NONE, S),
    # deliver(token, answer): the answer (a PullResponse, or a PullManyResponse for a
    # pull_many) to the parked pull ``token``; True if a caller waited for it
    _op("hold", "deliver", h.PullResponse, bool, "", K, S),
    _op("hold", "ready", None, bool, "", A.NONE, S),
    _op("flusher", "sync", int, int, "", K, S),  # a commit-log offset
    _op("flusher", "durable", None, int, "", A.NONE, S),
    _op("flusher", "ready", None, bool, "", A.NONE, S),
    # the JVM's too: checked by the ACL as the broker's read_arrow_ipc
    _op("page_reader", "read_arrow_ipc", bytes, bytes, "", A.SUB, S),
    _op("page_reader", "stats", None, dict, "", A.NONE, S),
    _op("page_reader", "ready", None, bool, "", A.NONE, S),
)
_SERVER: Final[tuple[Operation, ...]] = (*_BROKER_SERVER, *_COORDINATOR_SERVER)

OPERATIONS: Final[tuple[Operation, ...]] = (
    *_BROKER_CLIENT,
    *_BROKER_JVM,
    *_HOLD_CLIENT,
    *_COORDINATOR_CLIENT,
    *_SERVER,
)


def operations(service: str, caller: Caller | None = None) -> dict[str, Operation]:
    """``service``'s operations by name (those of ``caller`` only, if given)."""
    return {
        op.name: op
        for op in OPERATIONS
        if op.service == service and (caller is None or op.caller is caller)
    }


def server_key_operations() -> dict[str, Operation]:
    """The operations that need the server proof, by ``service.name``."""
    return {op.key: op for op in OPERATIONS if op.access is Access.SERVER_KEY}


def admin_operations(service: str = "broker") -> frozenset[str]:
    """The operations of ``service`` that need an admin account."""
    return frozenset(n for n, op in operations(service).items() if op.access is Access.ADMIN)


def concurrency_groups(service: str) -> set[str]:
    """The concurrency groups ``service``'s operations run in (the default one left out)."""
    return {op.group for op in operations(service).values() if op.group}


def _type_name(t: type | None) -> str:
    return "—" if t is None else f"`{t.__name__}`"


def markdown_table() -> str:
    """The operations as the markdown table of docs/ARCHITECTURE.md (a test checks
    that the page holds exactly this table)."""
    rows = [
        "| operation | caller | request | reply | concurrency group | access |",
        "|---|---|---|---|---|---|",
    ]
    for op in OPERATIONS:
        rows.append(
            f"| `{op.key}` | {op.caller.value} | {_type_name(op.request)} | "
            f"{_type_name(op.reply)} | {op.group or 'default'} | {op.access.value} |"
        )
    return "\n".join(rows) + "\n"


__all__ = [
    "OPERATIONS",
    "Access",
    "Caller",
    "Operation",
    "admin_operations",
    "concurrency_groups",
    "markdown_table",
    "operations",
    "server_key_operations",
]
