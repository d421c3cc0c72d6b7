"""ACL through real actors: a producer and a PullConsumer with credentials work (sends,
pulls through the broker and its hold service, commits); a wrong secret is refused."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

import rayq
from rayq.actors.protocol.config import ClientConfig

NAMESPACE = "rayq-test-acl"
BROKER_OVERRIDES = {"acl_enable": True}
TOPIC = "acl-orders"

ADMIN = rayq.Credentials(access_key="ops", secret_key="ops-secret-123456")
APP = rayq.Credentials(access_key="app", secret_key="app-secret-123456")
RULES = """
[[accounts]]
access_key = "ops"
secret_key = "ops-secret-123456"
admin = true

[[accounts]]
access_key = "app"
secret_key = "app-secret-123456"
default_topic_perm = "DENY"
default_group_perm = "DENY"
topic_perms = ["acl-orders=PUB|SUB"]
group_perms = ["acl-cg=SUB"]
"""


@pytest.fixture(scope="module")
def deployment(cluster: rayq.Cluster, eventually: Callable[..., Any]) -> rayq.Cluster:
    for name in cluster.broker_names:  # the default place: <store dir>/config/plain_acl.toml
        (cluster.store_dir / name / "config" / "plain_acl.toml").write_text(RULES)
    admin = rayq.Admin(namespace=NAMESPACE, config=ClientConfig(credentials=ADMIN))
    eventually(lambda: admin.create_topic(TOPIC, queues=2))
    return cluster


def test_producer_and_pull_consumer_with_credentials(deployment: rayq.Cluster) -> None:
    config = ClientConfig(credentials=APP)
    with rayq.Producer("acl-pg", namespace=NAMESPACE, config=config) as producer:
        for i in range(10):
            result = producer.send(rayq.Message(topic=TOPIC, body=f"m{i}".encode()))
            assert result.status is rayq.SendStatus.SEND_OK
    consumer = rayq.PullConsumer(
        "acl-cg",
        consume_from=rayq.ConsumeFromWhere.FIRST_OFFSET,
        namespace=NAMESPACE,
        config=config,
    )
    try:
        consumer.subscribe(TOPIC)
        consumer.start()
        got: list[rayq.MessageExt] = []
        deadline = time.monotonic() + 60
        while len(got) < 10 and time.monotonic() < deadline:
            got.extend(consumer.poll(0.5))
        assert sorted(m.body for m in got) == sorted(f"m{i}".encode() for i in range(10))
        consumer.commit()
        assert sum(consumer.committed(mq) for mq in consumer.assignment()) == 10
    finally:
        consumer.shutdown()


def test_wrong_secret_and_missing_perms_are_refused(deployment: rayq.Cluster) -> None:
    wrong = rayq.Credentials(access_key="app", secret_key="not-the-app-secret")
    with rayq.Producer(
        "acl-pg", namespace=NAMESPACE, config=ClientConfig(credentials=wrong)
    ) as producer:
        with pytest.raises(rayq.PermissionDeniedError, match="bad signature") as exc:
            producer.send(rayq.Message(topic=TOPIC, body=b"x"))
        assert "not-the-app-secret" not in str(exc.value)
    with rayq.Producer(
        "acl-pg", namespace=NAMESPACE, config=ClientConfig(credentials=APP)
    ) as producer:
        with pytest.raises(rayq.PermissionDeniedError, match=r"'app'.*not admin"):
            rayq.Admin(namespace=NAMESPACE, config=ClientConfig(credentials=APP)).create_topic(
                "acl-other", queues=1
            )
        with pytest.raises(rayq.PermissionDeniedError, match="topic 'acl-denied'"):
            producer.send(rayq.Message(topic="acl-denied", body=b"x"))
    with (
        rayq.Producer("acl-pg", namespace=NAMESPACE) as anonymous,
        pytest.raises(rayq.PermissionDeniedError, match="no credentials"),
    ):
        anonymous.send(rayq.Message(topic=TOPIC, body=b"x"))


def test_a_hostile_driver_without_credentials_or_server_key_changes_nothing(
    deployment: rayq.Cluster,
) -> None:
    """Issue 27 through real actors (rayq.testing.hostile, the soak's hostile client):
    every attack of a driver without credentials or the server key is refused with a rayq
    error; routes, offsets, queue ends and the actors are as before, and sends go on."""
    from rayq.testing import hostile

    admin = ClientConfig(credentials=ADMIN)
    before = hostile.snapshot(NAMESPACE, [TOPIC], ["acl-cg"], config=admin)
    for name, attack in hostile.ATTACKS.items():
        seen = attack(NAMESPACE, TOPIC, "acl-cg")
        assert seen.refused and seen.attack == name, seen
    assert hostile.changed(before, hostile.snapshot(NAMESPACE, [TOPIC], ["acl-cg"], admin)) == []
    with rayq.Producer("acl-pg", namespace=NAMESPACE, config=ClientConfig(credentials=APP)) as p:
        assert p.send(rayq.Message(topic=TOPIC, body=b"after")).status is rayq.SendStatus.SEND_OK
