"""``rayq.SimpleConsumer`` (POP) against a real one-broker deployment over both client
transports: more consumers than queues, redelivery of what a worker left unsettled
(the broker's revive timer), bad handles, and leases kept while the broker actor is
killed and restarted by Ray; the asyncio clients (``rayq.aio``) end to end."""

from __future__ import annotations

import asyncio
import os
import time
import uuid

import pytest
import ray

import rayq
import rayq.aio
import rayq.cluster
from rayq.actors.protocol.names import broker_actor_name

pytestmark = pytest.mark.integration

BROKER = "broker-a"
NAMESPACE = "rayq-test-simple-consumer"


@pytest.fixture(scope="module")
def admin(cluster: rayq.cluster.Cluster) -> rayq.Admin:
    return rayq.Admin(namespace=cluster.namespace)


def new_topic(admin: rayq.Admin, queues: int = 2) -> str:
    topic = f"pop-{uuid.uuid4().hex[:8]}"
    admin.create_topic(topic, queues=queues)
    return topic


def send(topic: str, n: int) -> set[bytes]:
    bodies = {f"job-{i}".encode() for i in range(n)}
    with rayq.Producer("pop-pg", namespace=NAMESPACE) as producer:
        producer.send_batch([rayq.Message(topic, b) for b in sorted(bodies)])
    return bodies


def simple(topic: str, group: str, transport: str = "direct") -> rayq.SimpleConsumer:
    c = rayq.SimpleConsumer(
        group,
        await_duration=1.0,
        namespace=NAMESPACE,
        config=rayq.ClientConfig(transport=transport),
    )
    c.subscribe(topic)
    c.start()
    return c


def receive_until(
    consumers: list[rayq.SimpleConsumer], n: int, invisible: float = 30.0, limit_s: float = 30.0
) -> list[rayq.ReceivedMessage]:
    out: list[rayq.ReceivedMessage] = []
    deadline = time.monotonic() + limit_s
    while len(out) < n and time.monotonic() < deadline:
        for c in consumers:
            out += c.receive(max_messages=4, invisible_duration=invisible)
    return out


def restart_broker_actor(timeout_s: float = 60.0) -> None:
    """Kill the broker actor, let Ray restart it and return once the new process
    answers (``ray.kill`` returns at once: calls just after it may still reach the old
    process)."""
    broker = ray.get_actor(broker_actor_name(BROKER), namespace=NAMESPACE)

    def pid() -> int:
        return int(ray.get(broker.__ray_call__.remote(lambda _self: os.getpid()), timeout=10))

    old = pid()
    ray.kill(broker, no_restart=False)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if pid() != old:
                return
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
            pass
        assert time.monotonic() < deadline, "Ray did not restart the broker actor"
        time.sleep(0.2)


@pytest.mark.parametrize("transport", ["direct", "ray"])
def test_many_consumers_on_two_queues_each_get_other_messages(
    admin: rayq.Admin, transport: str
) -> None:
    topic = new_topic(admin)
    sent = send(topic, 40)
    workers = [simple(topic, f"g-{transport}", transport) for _ in range(4)]
    got = receive_until(workers, 40)
    assert sorted(m.body for m in got) == sorted(sent)  # each once, none twice
    for m in got:
        assert m.delivery_count == 1 and m.topic == topic
        workers[0].ack(m)  # any consumer of the group may settle any message
    progress = admin.consumer_progress(f"g-{transport}")
    assert sum(p.lag for p in progress if p.queue.topic == topic) == 0
    for w in workers:
        w.shutdown()


def test_what_a_dead_worker_held_comes_again_after_its_lease(admin: rayq.Admin) -> None:
    topic = new_topic(admin)
    send(topic, 6)
    dying, alive = simple(topic, "lease"), simple(topic, "lease")
    held = dying.receive(max_messages=3, invisible_duration=2.0)
    assert len(held) == 3
    dying.shutdown()  # never settles what it holds
    rest = receive_until([alive], 3)
    for m in rest:
        alive.ack(m)
    again = receive_until([alive], 3, limit_s=20.0)  # the broker's revive timer, ~1 s
    assert sorted(m.body for m in again) == sorted(m.body for m in held)
    assert {m.delivery_count for m in again} == {2}
    with pytest.raises(rayq.InvalidReceiptHandleError):
        alive.ack(held[0])  # the dead worker's lease ended: its handle is void
    for m in again:
        alive.ack(m)
    assert alive.receive(invisible_duration=1.0) == []
    alive.shutdown()


def test_leases_survive_the_broker_actor_restarting(admin: rayq.Admin) -> None:
    topic = new_topic(admin, queues=1)
    send(topic, 4)
    c = simple(topic, "restart")
    got = receive_until([c], 4, invisible=60.0)
    c.ack(got[0])
    restart_broker_actor()
    deadline = time.monotonic() + 60
    while True:  # the restarted broker replays its POP log
        try:
            c.ack(got[1])
            break
        except rayq.BrokerUnavailableError:
            assert time.monotonic() < deadline, "the broker did not come back"
            time.sleep(0.5)
    assert c.receive(invisible_duration=1.0) == []  # got[2], got[3] still leased
    c.nack(got[2])
    (again,) = receive_until([c], 1, limit_s=20.0)
    assert again.body == got[2].body and again.delivery_count == 2
    c.shutdown()


@pytest.mark.parametrize("transport", ["direct", "ray"])
def test_the_asyncio_clients_send_pull_and_pop_through_ray(
    admin: rayq.Admin, transport: str
) -> None:
    """``rayq.aio``: the Producer sends, a PullConsumer (``async for``) and a
    SimpleConsumer (``async for`` with ``await msg.ack()``) in two groups each get every
    message once, over a real deployment."""
    topic = new_topic(admin)
    cfg = rayq.ClientConfig(transport=transport)
    sent = {f"aio-{i}".encode() for i in range(20)}

    async def main() -> tuple[list[bytes], list[bytes]]:
        async with rayq.aio.Producer("aio-pg", namespace=NAMESPACE, config=cfg) as producer:
            await producer.send_batch([rayq.Message(topic, b) for b in sorted(sent)[:10]])
            for body in sorted(sent)[10:]:
                await producer.send(rayq.Message(topic, body))
        pulled: list[bytes] = []
        puller = rayq.aio.PullConsumer(
            f"aio-pull-{transport}",
            consume_from=rayq.ConsumeFromWhere.FIRST_OFFSET,
            namespace=NAMESPACE,
            config=cfg,
        )
        puller.subscribe(topic)
        async with puller:
            async for msg in puller:
                pulled.append(msg.body)
                if len(pulled) == len(sent):
                    break
        popped: list[bytes] = []
        popper = rayq.aio.SimpleConsumer(
            f"aio-pop-{transport}", namespace=NAMESPACE, config=cfg, await_duration=1.0
        )
        popper.subscribe(topic)
        async with popper:
            async for got in popper:
                popped.append(got.body)
                await got.ack()
                if len(popped) == len(sent):
                    break
        return pulled, popped

    pulled, popped = asyncio.run(asyncio.wait_for(main(), 120))
    assert sorted(pulled) == sorted(sent) and sorted(popped) == sorted(sent)
    progress = admin.consumer_progress(f"aio-pop-{transport}")
    assert sum(p.lag for p in progress if p.queue.topic == topic) == 0
