"""The broker's protocol: typed methods only, mirrored by the client transport, and the
boundary check that every request passes before anything is done (no Ray started)."""

from __future__ import annotations

import inspect
import pickle
import typing

import msgspec
import pytest

from rayq.actors import protocol
from rayq.actors.broker import BrokerActor
from rayq.actors.coordinator import CoordinatorActor
from rayq.actors.protocol import (
    CommitOffsetsRequest,
    CreateTopicRequest,
    LockQueuesRequest,
    PullItem,
    PullManyRequest,
    PullRequest,
    QueryMessageRequest,
    QueueRef,
    SendBackItem,
    SendBackRequest,
    check,
    registry,
)
from rayq.actors.protocol.registry import Caller
from rayq.store import EncodedBatch
from rayq.store.errors import InvalidRequestError
from rayq.transport.base import BrokerClient, CoordinatorClient

# Methods for the other rayq actors and rayq.start only: not in the client transport.
INTERNAL = set(registry.operations("broker", Caller.SERVER))
# brokers, rayq.start: the coordinator's server operations, from the registry
COORDINATOR_INTERNAL = set(registry.operations("coordinator", Caller.SERVER))
# Called from the JVM (rayq/connectors/jvm, Ray cross-language calls): bytes in and out, the request
# as the JSON of a protocol Struct (checked by check_json).
JVM = {n: op.request for n, op in registry.operations("broker", Caller.JVM).items()}


def _without_bytes(hint: object) -> type:
    """``X | bytes`` -> ``X``; ``X`` as it is."""
    args = [a for a in typing.get_args(hint) if a is not bytes]
    return args[0] if len(args) == 1 else hint  # type: ignore[return-value]


def _public(cls: type) -> dict[str, object]:
    return {n: f for n, f in vars(cls).items() if callable(f) and not n.startswith("_")}


@pytest.mark.parametrize("actor", [BrokerActor, CoordinatorActor])
def test_no_actor_has_a_generic_dispatch(actor: type) -> None:
    assert "call" not in _public(actor)
    for name, fn in _public(actor).items():
        params = list(inspect.signature(fn).parameters)[1:]  # type: ignore[arg-type]
        assert "args" not in params and "kwargs" not in params, name


@pytest.mark.parametrize(
    ("actor", "client", "internal"),
    [
        (BrokerActor, BrokerClient, INTERNAL | set(JVM)),
        (CoordinatorActor, CoordinatorClient, COORDINATOR_INTERNAL),
    ],
    ids=["broker", "coordinator"],
)
def test_every_client_method_takes_one_protocol_struct_and_the_transport_mirrors_it(
    actor: type, client: type, internal: set[str]
) -> None:
    served = {n: f for n, f in _public(actor).items() if n not in internal}
    assert set(served) == set(_public(client))
    for name, fn in served.items():
        hints = inspect.get_annotations(fn, eval_str=True)  # type: ignore[arg-type]
        # besides the request: a put's records in chunks (under Ray's inline limit) and
        # the hold service's Park mark on a waiting pull
        args = [v for k, v in hints.items() if k not in ("return", "chunks", "park")]
        assert len(args) == 1, name
        # the hot paths also take (and then answer with) the request's to_wire bytes
        request = _without_bytes(args[0])
        assert request is EncodedBatch or getattr(protocol, request.__name__) is request, name
        assert issubclass(request, msgspec.Struct), name
        reply = _without_bytes(hints["return"])
        assert issubclass(reply, msgspec.Struct), f"{name} must reply with a Struct"
        assert reply.__module__.startswith(protocol.__name__ + "."), (
            f"{name}: {reply} is not a protocol Struct"
        )


def test_jvm_methods_take_and_answer_bytes() -> None:
    """The JVM's methods take bytes only (the request as JSON, a put's rows as Arrow IPC)
    and answer bytes, which Ray hands to Java as ``byte[]``; their requests are protocol
    Structs that forbid unknown fields."""
    for name, request in JVM.items():
        hints = inspect.get_annotations(getattr(BrokerActor, name), eval_str=True)
        assert hints.pop("return") is bytes and set(hints.values()) == {bytes}, name
        assert request.__struct_config__.forbid_unknown_fields, name
    with pytest.raises(InvalidRequestError, match="malformed ReadArrowRequest"):
        protocol.check_json(
            b'{"topic": "t", "queue_id": 0, "start": 0, "end": 1, "max_bytes": 1, "nope": 1}',
            protocol.ReadArrowRequest,
        )
    with pytest.raises(InvalidRequestError, match="expected a ArrowPutRequest as JSON"):
        protocol.check_json("{}", protocol.ArrowPutRequest)


BAD = [
    ("float offset", lambda: CommitOffsetsRequest(group="g", topic="t", offsets={0: 1.5})),
    ("bool offset", lambda: CommitOffsetsRequest(group="g", topic="t", offsets={0: True})),
    ("str queue id", lambda: CommitOffsetsRequest(group="g", topic="t", offsets={"0": 1})),
    ("negative offset", lambda: CommitOffsetsRequest(group="g", topic="t", offsets={0: -1})),
    ("offset past 2**63", lambda: CommitOffsetsRequest(group="g", topic="t", offsets={0: 2**63})),
    ("group not a str", lambda: CommitOffsetsRequest(group=5, topic="t", offsets={})),
    (
        "queue count 0",
        lambda: CreateTopicRequest(topic="t", read_queue_nums=0, write_queue_nums=1, perm=6),
    ),
    (
        "perm 8",
        lambda: CreateTopicRequest(topic="t", read_queue_nums=1, write_queue_nums=1, perm=8),
    ),
    (
        "pull max_nums 0",
        lambda: PullRequest(group="g", topic="t", queue_id=0, queue_offset=0, max_nums=0),
    ),
    (
        "pull negative offset",
        lambda: PullRequest(group="g", topic="t", queue_id=0, queue_offset=-1),
    ),
    ("pull_many no items", lambda: PullManyRequest(group="g", items=[])),
    ("pull item offset str", lambda: PullManyRequest(group="g", items=[PullItem("t", 0, "1")])),
    ("send-back no items", lambda: SendBackRequest(group="g", items=[])),
    ("send-back tuple items", lambda: SendBackRequest(group="g", items=[(1, 0)])),
    ("lock queue id -1", lambda: LockQueuesRequest(group="g", queues=[QueueRef("t", -1)])),
    ("query max_num 0", lambda: QueryMessageRequest(topic="t", key="k", max_num=0)),
    ("client id too long", lambda: QueryMessageRequest(topic="t", key="k", client_id="x" * 5000)),
]


@pytest.mark.parametrize(("case", "build"), BAD, ids=[c[0] for c in BAD])
def test_malformed_requests_get_an_invalid_request_error(case: str, build) -> None:  # type: ignore[no-untyped-def]
    req = build()
    with pytest.raises(InvalidRequestError) as info:
        check(req, type(req))
    assert type(req).__name__ in str(info.value)
    assert pickle.loads(pickle.dumps(info.value)).message == info.value.message


@pytest.mark.parametrize("value", [{"group": "g"}, None, 5, "commit", [1, 2]])
def test_a_request_of_the_wrong_type_is_named(value: object) -> None:
    with pytest.raises(InvalidRequestError, match="expected a CommitOffsetsRequest"):
        check(value, CommitOffsetsRequest)


def test_a_good_request_passes_unchanged() -> None:
    req = CommitOffsetsRequest(group="g", topic="t", offsets={0: 5, 3: 2**63 - 1}, generation=7)
    assert check(req, CommitOffsetsRequest) == req
    item = SendBackItem(10, -1)
    assert check(SendBackRequest(group="g", items=[item]), SendBackRequest).items == [item]


def test_every_reply_of_the_socket_can_be_encoded_and_read_back() -> None:
    """The socket data plane carries replies as msgpack (``to_wire``): each reply type of
    the broker's and hold service's client operations must encode, read-back messages
    (``MessageExt``, not a Struct) included."""
    from rayq.actors.protocol import MessagesReply, from_wire, to_wire
    from rayq.store.message import MessageExt
    from rayq.transport.base import HoldClient

    message = MessageExt(
        topic="t",
        body=b"\x00body",
        tags="a",
        keys=["k1", "k2"],
        properties={"KEYS": "k1 k2", "x": "y"},
        msg_id="ID",
        offset_msg_id="OFF",
        queue_id=1,
        queue_offset=2,
        commitlog_offset=3,
        store_size=4,
        born_timestamp=5,
        store_timestamp=6,
        born_host="10.0.0.1:1",
        store_host="10.0.0.2:2",
        reconsume_times=7,
        broker_name="broker-a",
    )
    reply = MessagesReply(messages=[message, message])
    assert from_wire(to_wire(reply), MessagesReply) == reply
    with pytest.raises(msgspec.ValidationError, match="MessageExt"):
        from_wire(msgspec.msgpack.encode({"messages": [[1, 2]]}), MessagesReply)
    for client in (BrokerClient, HoldClient):
        for op, reply_type in client.reply_types().items():
            if reply_type in (None, bytes):
                continue
            info = msgspec.inspect.multi_type_info([reply_type])
            custom = [t for t in _custom_types(info[0]) if t is not MessageExt]
            assert not custom, f"{op} answers {custom}, which msgpack cannot carry"


def _custom_types(info: object, seen: set[type] | None = None) -> list[type]:
    """The types msgspec does not know, anywhere in a reply type."""
    import msgspec.inspect as mi

    seen = set() if seen is None else seen
    if isinstance(info, mi.CustomType):
        return [info.cls]
    found: list[type] = []
    if isinstance(info, mi.StructType):
        if info.cls in seen:
            return []
        seen.add(info.cls)
        for field in info.fields:
            found += _custom_types(field.type, seen)
    for attr in ("item_type", "key_type", "value_type"):
        if hasattr(info, attr):
            found += _custom_types(getattr(info, attr), seen)
    for attr in ("types", "item_types"):
        for sub in getattr(info, attr, ()):
            found += _custom_types(sub, seen)
    return found
