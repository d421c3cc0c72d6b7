"""``rayq.ConsumerPool`` on a real deployment: workers added while a backlog grows and
stopped when idle, each message handled (a killed worker's again, nothing lost),
failing handlers redelivered, async handlers, and bad options."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
import ray

import rayq
import rayq.cluster

pytestmark = pytest.mark.integration

NAMESPACE = "rayq-test-consumer-pool"


@ray.remote(num_cpus=0)
class Seen:
    """What the handlers saw: each body with how many times."""

    def __init__(self) -> None:
        self.bodies: dict[bytes, int] = {}

    def add(self, body: bytes) -> None:
        self.bodies[body] = self.bodies.get(body, 0) + 1

    def get(self) -> dict[bytes, int]:
        return dict(self.bodies)


class SlowHandler:
    def __init__(self, seen: object, sleep_s: float) -> None:
        self.seen, self.sleep_s = seen, sleep_s

    def __call__(self, msg: rayq.ReceivedMessage) -> None:
        time.sleep(self.sleep_s)
        ray.get(self.seen.add.remote(msg.body))  # type: ignore[attr-defined]


class FlakyAsyncHandler:
    """Raises on each message's first delivery; async."""

    def __init__(self, seen: object) -> None:
        self.seen = seen

    async def __call__(self, msg: rayq.ReceivedMessage) -> None:
        await asyncio.sleep(0.001)
        if msg.delivery_count == 1:
            raise RuntimeError("first try fails")
        await self.seen.add.remote(msg.body)  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def admin(cluster: rayq.cluster.Cluster) -> rayq.Admin:
    return rayq.Admin(namespace=cluster.namespace)


def new_topic(admin: rayq.Admin, queues: int = 2) -> str:
    topic = f"pool-{uuid.uuid4().hex[:8]}"
    admin.create_topic(topic, queues=queues)
    return topic


def send(topic: str, n: int) -> set[bytes]:
    bodies = [f"job-{i}".encode() for i in range(n)]
    with rayq.Producer("pool-pg", namespace=NAMESPACE) as producer:
        for at in range(0, n, 50):
            producer.send_batch([rayq.Message(topic, b) for b in bodies[at : at + 50]])
    return set(bodies)


def wait_for(check: object, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_the_pool_grows_with_the_backlog_survives_a_kill_and_shrinks_when_idle(
    admin: rayq.Admin,
) -> None:
    topic = new_topic(admin)
    seen = Seen.remote()  # type: ignore[attr-defined]
    pool = rayq.ConsumerPool(
        group=f"pool-{uuid.uuid4().hex[:6]}",
        topic=topic,
        handler=SlowHandler(seen, 0.05),
        min_workers=1,
        max_workers=3,
        concurrency=2,
        num_cpus=0.1,
        interval_s=0.5,
        idle_s=2.0,
        backlog_per_slot=4,
        invisible_duration=5.0,
        namespace=NAMESPACE,
    )
    pool.start()
    try:
        sent = send(topic, 300)
        most = 0
        killed = False
        deadline = time.monotonic() + 120
        while set(ray.get(seen.get.remote())) != sent:
            assert time.monotonic() < deadline, "the pool did not handle every message"
            status = pool.status()
            most = max(most, len([w for w in status.workers if w.state == "running"]))
            if most >= 2 and not killed:  # a worker dies with messages in flight
                victim = next(iter(pool._workers.values()))
                ray.kill(victim)
                killed = True
            time.sleep(0.2)
        assert most >= 2, "the pool never grew past one worker"
        assert killed
        wait_for(lambda: pool.status().replaced >= 1, 30, "the dead worker to be replaced")
        wait_for(
            lambda: len(pool.status().workers) == 1 and pool.status().backlog == 0,
            60,
            "the pool to shrink back to min_workers",
        )
        counts = ray.get(seen.get.remote())
        assert set(counts) == sent  # nothing lost
        # only what the killed worker held came twice (at most its slots and buffer)
        assert sum(n - 1 for n in counts.values()) <= 2 + 32
    finally:
        pool.shutdown(grace_s=5)
    assert pool.status().decision


def test_failed_handlers_redeliver_and_async_handlers_run(admin: rayq.Admin) -> None:
    topic = new_topic(admin, queues=1)
    seen = Seen.remote()  # type: ignore[attr-defined]
    with rayq.ConsumerPool(
        group=f"flaky-{uuid.uuid4().hex[:6]}",
        topic=topic,
        handler=FlakyAsyncHandler(seen),
        min_workers=1,
        max_workers=1,
        concurrency=4,
        num_cpus=0.1,
        interval_s=0.5,
        namespace=NAMESPACE,
    ) as pool:
        sent = send(topic, 20)
        wait_for(lambda: set(ray.get(seen.get.remote())) == sent, 60, "every message handled")
        wait_for(lambda: pool.status().failed >= 20, 10, "the failures counted")


def test_bad_options_are_refused(admin: rayq.Admin) -> None:
    topic = new_topic(admin)
    with pytest.raises(rayq.ConfigError):
        rayq.ConsumerPool("g", topic, print, min_workers=3, max_workers=1)
    with pytest.raises(rayq.ClientError, match="callable"):
        rayq.ConsumerPool("g", topic, 42)  # type: ignore[arg-type]
    with pytest.raises(rayq.TopicNotFoundError):
        rayq.ConsumerPool("g", "no-such-topic", print, namespace=NAMESPACE).start()
