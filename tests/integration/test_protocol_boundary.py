"""A hostile driver calls the broker's actors directly (raw Ray handles): every malformed
request gets a RayqError, no actor dies, nothing is written, and internal operations
cannot leave a broker alive but closed."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import pytest
import ray

import rayq
from rayq.actors.protocol import (
    CommitOffsetsRequest,
    CreateTopicRequest,
    PullItem,
    PullManyRequest,
    PullRequest,
    QueryOffsetsRequest,
    SendBackRequest,
    TopicRequest,
    broker_actor_name,
    hold_actor_name,
)
from rayq.cluster import Cluster, server_actor
from rayq.store.errors import BrokerUnavailableError, InvalidRequestError, PermissionDeniedError
from rayq.transport.context import ClientContext
from rayq.transport.ray_actors import unwrap

T = TypeVar("T")

pytestmark = pytest.mark.integration
NAMESPACE = "rayq-test-protocol"
BROKER = "broker-a"
BROKER_OVERRIDES = {"persist_offset_interval_ms": 100}


@pytest.fixture(scope="module")
def ctx(cluster: Cluster) -> ClientContext:
    admin = rayq.Admin(namespace=NAMESPACE)
    admin.create_topic("bt", queues=2)
    with rayq.Producer(group="pg", namespace=NAMESPACE) as producer:
        for i in range(6):
            producer.send(rayq.Message("bt", f"m{i}".encode()))
    c = ClientContext(namespace=NAMESPACE)
    req = CommitOffsetsRequest(group="keep", topic="bt", offsets={0: 1, 1: 2})
    c.broker(BROKER).commit_offsets(req).result(30)
    return c


def raw(name: str) -> Any:
    return ray.get_actor(name, namespace=NAMESPACE)


def raised(ref: Any) -> BaseException:
    try:
        ray.get(ref, timeout=30)
    except Exception as exc:
        return unwrap(exc)
    raise AssertionError("the call was accepted")


def state(ctx: ClientContext) -> tuple[Any, ...]:
    stats = ctx.broker(BROKER).topic_stats(TopicRequest(topic="bt")).result(30)
    offsets = ctx.broker(BROKER).query_offsets(QueryOffsetsRequest(group="keep", topic="bt"))
    return [(s.min_offset, s.max_offset) for s in stats.queues], offsets.result(30).offsets


BROKER_CALLS: list[tuple[str, str, Callable[[], Any]]] = [
    (
        "float offset",
        "commit_offsets",
        lambda: CommitOffsetsRequest(group="keep", topic="bt", offsets={0: 1.5}),
    ),
    (
        "offset too big",
        "commit_offsets",
        lambda: CommitOffsetsRequest(group="keep", topic="bt", offsets={0: 2**63}),
    ),
    (
        "dict instead of a request",
        "commit_offsets",
        lambda: {"group": "keep", "topic": "bt", "offsets": {0: 0}},
    ),
    (
        "unknown field (a dict)",
        "create_topic",
        lambda: {"topic": "x", "read_queue_nums": 1, "write_queue_nums": 1, "perm": 6, "evil": 1},
    ),
    (
        "queue count as str",
        "create_topic",
        lambda: CreateTopicRequest(topic="x", read_queue_nums="4", write_queue_nums=4, perm=6),
    ),
    (
        "perm out of range",
        "create_topic",
        lambda: CreateTopicRequest(topic="x", read_queue_nums=1, write_queue_nums=1, perm=99),
    ),
    (
        "pull offset negative",
        "pull",
        lambda: PullRequest(group="g", topic="bt", queue_id=0, queue_offset=-5),
    ),
    ("pull_many empty", "pull_many", lambda: PullManyRequest(group="g", items=[])),
    ("send-back items as tuples", "send_back", lambda: SendBackRequest(group="g", items=[(0, 0)])),
    ("put a list", "put", lambda: [b"x"]),
]


@pytest.mark.parametrize(
    ("case", "method", "build"), BROKER_CALLS, ids=[c[0] for c in BROKER_CALLS]
)
def test_malformed_requests_to_the_broker_get_a_rayq_error_and_change_nothing(
    ctx: ClientContext, case: str, method: str, build: Callable[[], Any]
) -> None:
    before = state(ctx)
    err = raised(getattr(raw(broker_actor_name(BROKER)), method).remote(build()))
    assert isinstance(err, InvalidRequestError), repr(err)
    assert state(ctx) == before
    assert "x" not in rayq.Admin(namespace=NAMESPACE).topics()


@pytest.mark.parametrize("method", ["pull", "pull_many"])
def test_malformed_requests_to_the_hold_service_get_a_rayq_error(
    ctx: ClientContext, method: str
) -> None:
    bad = (
        PullRequest(group="g", topic="bt", queue_id=0, queue_offset=1.5)
        if method == "pull"
        else PullManyRequest(group="g", items=[PullItem("bt", 0, -1)])
    )
    err = raised(getattr(raw(hold_actor_name(BROKER)), method).remote(bad))
    assert isinstance(err, InvalidRequestError)
    good = PullRequest(group="g", topic="bt", queue_id=0, queue_offset=0, suspend_ms=0)
    assert ctx.hold(BROKER).pull(good).result(30).count > 0  # still serving


def test_a_bad_commit_never_erases_offsets_across_a_restart(
    ctx: ClientContext, retried: Callable[[Callable[[], T]], T], restart: Callable[[Any], None]
) -> None:
    """The landed bug: a float offset was persisted, and the next start lost every
    group's offsets. Now it is refused at the boundary and the table reloads whole."""
    raised(
        raw(broker_actor_name(BROKER)).commit_offsets.remote(
            CommitOffsetsRequest(group="other", topic="bt", offsets={0: 1.5})
        )
    )
    time.sleep(1)  # the offset table is persisted every 100 ms here
    restart(raw(broker_actor_name(BROKER)))
    req = QueryOffsetsRequest(group="keep", topic="bt")
    got = retried(
        lambda: ClientContext(namespace=NAMESPACE).broker(BROKER).query_offsets(req).result(30)
    )
    assert got.offsets == {0: 1, 1: 2}


def test_no_client_call_can_close_a_running_broker(ctx: ClientContext) -> None:
    """The broker has no close/persist/info in its client protocol; the transport offers
    none, and a raw handle has no such method either."""
    handle = raw(broker_actor_name(BROKER))
    for name in ("call", "close", "persist", "info"):
        with pytest.raises(AttributeError):
            getattr(handle, name)
    for name in ("close", "persist", "info", "shutdown", "flush_targets"):
        assert not hasattr(ctx.broker(BROKER), name)


def test_a_shutdown_broker_is_gone_not_alive_and_closed(ctx: ClientContext) -> None:
    """Last in the module: ``shutdown`` (an operator's call) closes the store and ends the
    actor; Ray does not restart it, and nothing answers with a closed store."""
    refusal = raised(raw(broker_actor_name(BROKER)).shutdown.remote())  # no server proof
    assert isinstance(refusal, PermissionDeniedError), repr(refusal)
    handle = server_actor(broker_actor_name(BROKER), NAMESPACE)  # the deployment's proof
    err = raised(handle.shutdown.remote())
    assert isinstance(err, BrokerUnavailableError), repr(err)  # the actor exited
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            raw(broker_actor_name(BROKER))
        except ValueError:
            return
        time.sleep(0.2)
    pytest.fail("the broker actor still exists after shutdown")
