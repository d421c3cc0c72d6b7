"""The socket data plane through the real actors: clients with
``ClientConfig(transport="direct")`` (the default) send, pull and administer over each
broker's socket, as clients with ``transport="ray"`` do over actor calls, a push
consumer's actor does too, and a broker killed and restarted by Ray is found again (a
new endpoint and key) with nothing acknowledged lost."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
import time
import uuid

import pytest
import ray

import rayq
from rayq.actors.protocol import DataEndpointRequest, broker_actor_name
from rayq.transport.choice import make_transport
from rayq.transport.context import ClientContext
from rayq.transport.direct import DirectTransport
from rayq.transport.ray_actors import RayTransport

pytestmark = pytest.mark.integration

NAMESPACE = "test-direct"
DIRECT = rayq.ClientConfig(transport="direct")


@ray.remote(num_cpus=0)
class Box:
    """What the push consumer's listener (in its Consumer actor) got."""

    def __init__(self) -> None:
        self.ids: set[str] = set()

    def add(self, ids: list[str]) -> None:
        self.ids.update(ids)

    def get(self) -> set[str]:
        return self.ids


class Listener:
    def __init__(self, box: object) -> None:
        self.box = box

    def __call__(self, msgs: list[rayq.MessageExt]) -> rayq.ConsumeStatus:
        ray.get(self.box.add.remote([m.msg_id for m in msgs]))  # type: ignore[attr-defined]
        return rayq.ConsumeStatus.CONSUME_SUCCESS


def pull_consumer(prefix: str, topic: str, config: rayq.ClientConfig = DIRECT) -> rayq.PullConsumer:
    """A started pull consumer of ``topic`` (over the sockets), from the first offset."""
    consumer = rayq.PullConsumer(
        unique(prefix),
        namespace=NAMESPACE,
        consume_from=rayq.ConsumeFromWhere.FIRST_OFFSET,
        config=config,
    )
    consumer.subscribe(topic)
    consumer.start()
    return consumer


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_the_transport_is_chosen_by_config_then_environment(
    cluster: rayq.Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RAYQ_TRANSPORT", raising=False)
    assert isinstance(ClientContext(None, NAMESPACE).transport, DirectTransport)  # the default
    assert isinstance(ClientContext(DIRECT, NAMESPACE).transport, DirectTransport)
    monkeypatch.setenv("RAYQ_TRANSPORT", "ray")
    assert isinstance(ClientContext(None, NAMESPACE).transport, RayTransport)
    assert isinstance(ClientContext(DIRECT, NAMESPACE).transport, DirectTransport)  # config wins
    monkeypatch.setenv("RAYQ_TRANSPORT", "direct")
    assert isinstance(ClientContext(None, NAMESPACE).transport, DirectTransport)
    ray_config = rayq.ClientConfig(transport="ray")
    assert isinstance(ClientContext(ray_config, NAMESPACE).transport, RayTransport)
    monkeypatch.setenv("RAYQ_TRANSPORT", "carrier-pigeon")
    with pytest.raises(rayq.ConfigError, match="RAYQ_TRANSPORT"):
        make_transport("", NAMESPACE)
    with pytest.raises(rayq.ConfigError, match="transport"):
        rayq.ClientConfig(transport="udp")


OUTSIDE_RAY = """
import json, sys
import rayq
rayq.connect(sys.argv[1])  # the key: RAYQ_KEY
admin = rayq.Admin()
admin.create_topic("remote", queues=2)
with rayq.Producer("remote-pg") as producer:
    sent = [producer.send(rayq.Message("remote", b"s%d" % i)).msg_id for i in range(5)]
    batch = [rayq.Message("remote", b"b") for _ in range(20)]
    sent += [r.msg_id for r in producer.send_batch(batch)]
puller = rayq.PullConsumer("remote-cg", consume_from=rayq.ConsumeFromWhere.FIRST_OFFSET)
puller.subscribe("remote")
puller.start()
got = []
for _ in range(100):
    got += [m.msg_id for m in puller.poll(timeout=0.2)]
    if len(got) >= len(sent):
        break
puller.commit()
puller.shutdown()
simple = rayq.SimpleConsumer("remote-sg")
simple.subscribe("remote")
simple.start()
leased = []
for _ in range(100):
    batch = simple.receive(max_messages=32, invisible_duration=30.0)
    for m in batch:
        simple.ack(m)
    leased += batch
    if len(leased) >= len(sent):
        break
simple.shutdown()
lag = sum(p.lag for p in admin.consumer_progress("remote-cg"))
print(json.dumps({"sent": sorted(sent), "got": sorted(got), "leased": len(leased),
                  "lag": lag, "ray": "ray" in sys.modules}))
"""


def test_a_process_outside_ray_reaches_the_deployment_by_url_and_key(
    cluster: rayq.Cluster,
) -> None:
    """``rayq.connect(url)`` in a process that never imports Ray: admin, producer, pull
    and POP consumers over the bootstrap endpoint and the brokers' sockets."""
    assert cluster.store_dir is not None and cluster.url.startswith("rayq://")
    key_file = cluster.store_dir / "rayq.key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600  # its user's only
    assert (cluster.store_dir / "rayq.url").read_text().strip() == cluster.url
    env = {**os.environ, "RAYQ_KEY": key_file.read_text().strip(), "RAYQ_TRANSPORT": ""}
    run = subprocess.run(
        [sys.executable, "-c", OUTSIDE_RAY, cluster.url],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert out["got"] == out["sent"] and len(out["sent"]) == 25
    assert out["leased"] == 25 and out["lag"] == 0
    assert out["ray"] is False
    # seen from inside Ray too: the same deployment
    progress = rayq.Admin(namespace=NAMESPACE).consumer_progress("remote-cg")
    assert sum(p.committed_offset for p in progress) == 25


def test_a_wrong_key_at_the_bootstrap_endpoint_is_refused(cluster: rayq.Cluster) -> None:
    with pytest.raises(rayq.PermissionDeniedError, match="refused the key"):
        rayq.connect(cluster.url, key="00" * 32)
    assert rayq.Admin(namespace=NAMESPACE).topics() is not None  # this driver: still Ray's


@pytest.mark.parametrize("transport", ["direct", "ray"])
def test_send_pull_push_and_admin_over_each_transport(
    cluster: rayq.Cluster, transport: str
) -> None:
    """The same client calls over the sockets (the default) and over Ray's actor calls."""
    config = rayq.ClientConfig(transport=transport)
    topic = unique(transport)
    admin = rayq.Admin(namespace=NAMESPACE, config=config)
    admin.create_topic(topic, queues=2)
    with rayq.Producer("pg", namespace=NAMESPACE, config=config) as producer:
        acked = [producer.send(rayq.Message(topic, b"s%d" % i)).msg_id for i in range(20)]
        results = producer.send_batch([rayq.Message(topic, b"b%d" % i) for i in range(80)])
        acked += [r.msg_id for r in results]
    consumer = pull_consumer("pull", topic, config)
    got: set[str] = set()
    deadline = time.monotonic() + 60
    try:
        while len(got) < 100 and time.monotonic() < deadline:
            got |= {m.msg_id for m in consumer.poll(0.5)}
        assert consumer.poll(0.5) == []  # caught up: its pulls park at the hold service
        used = consumer._ctx.transport
        if transport == "direct":
            assert isinstance(used, DirectTransport)
            assert used._conns.keys() >= {("broker", "broker-a"), ("hold", "broker-a")}
        else:
            assert isinstance(used, RayTransport)
        with rayq.Producer("pg", namespace=NAMESPACE, config=config) as producer:
            late = producer.send(rayq.Message(topic, b"late")).msg_id
        woken: set[str] = set()
        while late not in woken and time.monotonic() < deadline:
            woken |= {m.msg_id for m in consumer.poll(0.5)}
        assert late in woken  # a parked pull on the hold service's socket, answered
    finally:
        consumer.shutdown()
    assert got == set(acked)
    acked.append(late)
    box = Box.remote()  # type: ignore[attr-defined]
    push = rayq.PushConsumer(
        unique("push"),
        namespace=NAMESPACE,
        consume_from=rayq.ConsumeFromWhere.FIRST_OFFSET,
        config=config,
    )
    push.subscribe(topic)
    push.register_listener(Listener(box))
    push.start()
    try:
        deadline = time.monotonic() + 60
        while len(ray.get(box.get.remote())) < 101 and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        push.shutdown()
    pushed = ray.get(box.get.remote())
    assert pushed == set(acked)
    assert sum(q.max_offset for q in admin.topic_stats(topic)) == 101


def test_a_restarted_broker_is_found_again_and_nothing_acknowledged_is_lost(
    cluster: rayq.Cluster,
) -> None:
    topic = unique("restart")
    rayq.Admin(namespace=NAMESPACE, config=DIRECT).create_topic(topic, queues=2)
    broker = ray.get_actor(broker_actor_name("broker-a"), namespace=NAMESPACE)
    before = ray.get(broker.data_endpoint.remote(DataEndpointRequest()))
    acked: list[str] = []
    stop = threading.Event()

    def produce() -> None:
        with rayq.Producer("pg", namespace=NAMESPACE, config=DIRECT) as producer:
            i = 0
            while not stop.is_set():
                try:
                    acked.append(producer.send(rayq.Message(topic, b"r%d" % i)).msg_id)
                except rayq.RayqError:
                    time.sleep(0.2)  # the broker restarts
                i += 1

    thread = threading.Thread(target=produce)
    thread.start()
    try:
        time.sleep(2)
        ray.kill(broker, no_restart=False)
        deadline = time.monotonic() + 60
        seen = len(acked)
        while len(acked) < seen + 20 and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        stop.set()
        thread.join(60)
    after = ray.get(broker.data_endpoint.remote(DataEndpointRequest()))
    assert after.key != before.key  # a new process, a new key: found again through Ray
    assert len(acked) >= seen + 20, "sends did not resume over the socket"
    consumer = pull_consumer("check", topic)
    got: set[str] = set()
    deadline = time.monotonic() + 60
    try:
        while not set(acked) <= got and time.monotonic() < deadline:
            got |= {m.msg_id for m in consumer.poll(0.5)}
    finally:
        consumer.shutdown()
    assert set(acked) <= got
