"""The broker's actors through Ray: long polling, restart with recovery, death detection."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import pytest
import ray

import rayq.cluster
from rayq.actors.broker_spawn import spawn_broker
from rayq.actors.data_plane import data_plane
from rayq.actors.protocol import (
    ClientRequest,
    Park,
    PullRequest,
    PullResponse,
    PullStatus,
    broker_actor_name,
    from_wire,
    hold_actor_name,
)
from rayq.actors.protocol.config import BrokerConfig
from rayq.actors.protocol.frames import DataEndpoint, DataEndpointRequest
from rayq.actors.protocol.server_key import Guard, ServerKey, Signed
from rayq.cluster import Cluster, server_actor
from rayq.store import (
    InnerMessage,
    StoreConfig,
    UniqIdGenerator,
    codec,
    decode_records,
    encode_batch,
)
from rayq.store.errors import InvalidOffsetError, TopicNotFoundError
from rayq.store.message import MessageExt
from rayq.transport.context import ClientContext

T = TypeVar("T")

pytestmark = pytest.mark.integration
NAMESPACE = "rayq-test-broker-actors"
IDS = UniqIdGenerator()


@pytest.fixture(scope="module")
def ctx(cluster: Cluster) -> ClientContext:
    return ClientContext(namespace=NAMESPACE)


def put(ctx: ClientContext, topic: str, queue: int, n: int, size: int = 200) -> list[int]:
    msgs = [
        InnerMessage(
            topic=topic,
            queue_id=queue,
            body=bytes([i % 251]) * size,
            tags="T",
            keys=f"k{i}",
            uniq_key=IDS.next_id(),
        )
        for i in range(n)
    ]
    batch = encode_batch(msgs, max_body_bytes=4 << 20, max_properties_bytes=32767)
    return ctx.broker("broker-a").put(batch).result(30).queue_offsets


def pull(ctx: ClientContext, topic: str, queue: int, offset: int, suspend_ms: int = 0):  # type: ignore[no-untyped-def]
    req = PullRequest(
        group="g",
        topic=topic,
        queue_id=queue,
        queue_offset=offset,
        max_nums=1000,
        suspend_ms=suspend_ms,
    )
    return ctx.hold("broker-a").pull(req).result(60)


def test_a_held_pull_is_answered_by_the_next_send(ctx: ClientContext) -> None:
    """A pull at the end of a queue waits (long polling) and returns the next message."""
    put(ctx, "held", 0, 3)
    ref = ctx.hold("broker-a").pull(
        PullRequest(group="g", topic="held", queue_id=0, queue_offset=3, suspend_ms=30_000)
    )
    assert not ctx.transport.wait([ref], 0.5)  # parked, not answered with NO_NEW_MSG
    put(ctx, "held", 0, 2)
    resp = ref.result(20)  # long before the 30 s suspend time
    assert resp.status is PullStatus.FOUND
    assert [m.queue_offset for m in decode_records(resp.buffer)] == [3, 4]


def wait_for(fn: Callable[[], T | None], timeout_s: float) -> T:
    deadline = time.monotonic() + timeout_s
    while (got := fn()) is None:
        assert time.monotonic() < deadline, "not within the time limit"
        time.sleep(0.05)
    return got


@ray.remote(num_cpus=0)
class RecordingHold:
    """Stands in for a broker's hold service: keeps what the broker delivers on its
    socket (only with the broker's proof of the server key)."""

    def __init__(self, key: ServerKey, config: BrokerConfig) -> None:
        self.guard = Guard(key, "hold", hold_actor_name("broker-z"))
        self.delivered: list[tuple[str, object]] = []
        node = ray.get_runtime_context().get_node_id()
        self.wire = data_plane(self, config, node, ray.util.get_node_ip_address(), "hold")
        self.wire.start()

    async def data_endpoint(self, req: DataEndpointRequest) -> DataEndpoint:
        return await self.wire.answer(req)

    async def deliver(self, token: str, answer: object, proof: object = None) -> bool:
        self.guard.check("deliver", proof, token, answer)
        self.delivered.append((token, answer))
        return False  # nobody waits here: the broker parks no follow-up

    async def pull(self, req: bytes) -> bytes:
        raise NotImplementedError("only the broker's answers are recorded")

    async def pull_many(self, req: bytes) -> bytes:
        raise NotImplementedError("only the broker's answers are recorded")

    async def got(self) -> list[tuple[str, object]]:
        return self.delivered


def test_the_broker_hands_a_parked_pull_the_records_it_appends(
    ctx: ClientContext, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Two hops: the put's append answers the parked pull by calling the hold service's
    ``deliver`` with the records on its socket (broker -> hold), no re-pull by the hold
    service."""
    name = "broker-z"
    key = rayq.cluster._KEYS[NAMESPACE]  # the deployment's (this driver started it)
    config = BrokerConfig(broker_name=name, store=StoreConfig.for_tests())
    hold = RecordingHold.options(name=hold_actor_name(name), namespace=NAMESPACE).remote(
        key, config
    )
    node = ray.get_runtime_context().get_node_id()
    broker = Signed(
        spawn_broker(config, str(tmp_path_factory.mktemp("z")), NAMESPACE, node, server_key=key),
        key,
        "broker",
        broker_actor_name(name),
    )
    try:
        ray.get(broker.ready.remote())
        msgs = [
            InnerMessage(topic="parked", queue_id=0, body=b"m%d" % i, uniq_key=IDS.next_id())
            for i in range(3)
        ]
        batch = encode_batch(msgs, max_body_bytes=4 << 20, max_properties_bytes=32767)
        ray.get(broker.put.remote(batch))
        req = PullRequest(group="g", topic="parked", queue_id=0, queue_offset=3, suspend_ms=30_000)
        first = ray.get(broker.pull.remote(req, Park(token="t-1", hold_ms=30_000)))
        assert first.status is PullStatus.NO_NEW_MSG  # parked at the broker
        from_start = msgspec.structs.replace(req, queue_offset=0)
        found = ray.get(broker.pull.remote(from_start, Park(token="t-0", hold_ms=30_000)))
        assert found.status is PullStatus.FOUND  # found at once: not parked
        assert ray.get(hold.got.remote()) == []
        ray.get(
            broker.put.remote(
                encode_batch(
                    [InnerMessage(topic="parked", queue_id=0, body=b"new", uniq_key=IDS.next_id())],
                    max_body_bytes=4 << 20,
                    max_properties_bytes=32767,
                )
            )
        )
        got = wait_for(lambda: ray.get(hold.got.remote()) or None, 20)
        assert [token for token, _ in got] == ["t-1"]
        answer = from_wire(got[0][1], PullResponse)  # sent as to_wire bytes
        assert answer.status is PullStatus.FOUND and answer.next_offset == 4
        assert [m.body for m in decode_records(answer.buffer)] == [b"new"]
        ray.get(broker.put.remote(batch))  # answered once: no second delivery
        time.sleep(0.5)
        assert len(ray.get(hold.got.remote())) == 1
    finally:
        with contextlib.suppress(Exception):
            ray.get(broker.shutdown.remote())
        ray.kill(hold)


def test_a_held_pull_times_out_with_no_new_msg(ctx: ClientContext) -> None:
    """With nothing sent, the held pull ends at its suspend time with NO_NEW_MSG."""
    put(ctx, "quiet", 0, 1)
    resp = pull(ctx, "quiet", 0, 1, suspend_ms=300)
    assert resp.status is PullStatus.NO_NEW_MSG
    assert resp.next_offset == 1


def test_a_held_pull_over_damaged_records_is_answered_at_once(ctx: ClientContext) -> None:
    """The last records of a queue damaged on disk: a waiting pull from them is answered
    by the broker's first read (NO_MATCHED_MSG, the offset past them), not held for its
    suspend time; the pull from there waits for news as usual. The damage is undone at
    the end: the module's later tests restart this broker, and recovery would meet it."""
    put(ctx, "damaged", 0, 5)
    broker = server_actor(broker_actor_name("broker-a"), NAMESPACE)
    root = Path(ray.get(broker.broker_info.remote()).store_dir) / "commitlog"
    damaged = decode_records(pull(ctx, "damaged", 0, 2).buffer)
    for m in damaged:
        flip_body_byte(root, m)
    try:
        req = PullRequest(group="g", topic="damaged", queue_id=0, queue_offset=2, suspend_ms=60_000)
        resp = ctx.hold("broker-a").pull(req).result(10)  # held, it would take 15 s
        assert (resp.status, resp.count, resp.next_offset) == (PullStatus.NO_MATCHED_MSG, 0, 5)
        waiting = ctx.hold("broker-a").pull(msgspec.structs.replace(req, queue_offset=5))
        assert not ctx.transport.wait([waiting], 0.5)  # nothing new at 5: parked
        put(ctx, "damaged", 0, 1)
        assert [m.queue_offset for m in decode_records(waiting.result(20).buffer)] == [5]
    finally:
        for m in damaged:
            flip_body_byte(root, m)  # back as it was


def flip_body_byte(commitlog_dir: Path, m: MessageExt) -> None:
    """Flip a body byte of record ``m`` in its segment file (the broker's mapping sees it);
    flipping it again restores it."""
    files = [int(p.name) for p in commitlog_dir.iterdir() if p.name.isdigit()]
    start = max(f for f in files if f <= m.commitlog_offset)
    position = m.commitlog_offset - start + codec.HEADER_SIZE + len(m.body) // 2
    fd = os.open(commitlog_dir / f"{start:020d}", os.O_RDWR)
    try:
        os.pwrite(fd, bytes([os.pread(fd, 1, position)[0] ^ 0x01]), position)
    finally:
        os.close(fd)


def test_bad_requests_raise_rayq_errors_and_the_broker_keeps_serving(ctx: ClientContext) -> None:
    """Unknown topics and queues raise the matching RayqError; the actor survives."""
    with pytest.raises(TopicNotFoundError):
        pull(ctx, "never-created", 0, 0)
    put(ctx, "small", 0, 1)
    with pytest.raises(InvalidOffsetError):
        pull(ctx, "small", 99, 0)
    assert pull(ctx, "small", 0, 0).count == 1


def test_a_killed_broker_restarts_recovers_and_serves_again(
    ctx: ClientContext, retried: Callable[[Callable[[], T]], T], restart: Callable[[Any], None]
) -> None:
    """SIGKILL-like ray.kill with restart: the store recovers; acknowledged data is there."""
    acked = put(ctx, "survive", 1, 50)
    restart(ray.get_actor(broker_actor_name("broker-a"), namespace=NAMESPACE))
    resp = retried(lambda: pull(ctx, "survive", 1, 0))
    assert [m.queue_offset for m in decode_records(resp.buffer)] == acked
    assert retried(lambda: put(ctx, "survive", 1, 5)) == list(range(50, 55))
    deadline = time.monotonic() + 30
    while "survive" not in ctx.coordinator.topics(ClientRequest()).result(10).names:  # back
        assert time.monotonic() < deadline, "the restarted broker never re-registered"
        time.sleep(0.2)
