"""ACL through real actors: a producer, a PullConsumer and a PushConsumer with credentials
work (sends, pulls through the broker and its hold service, commits, the coordinator's
routes, shares and group membership, signed); a wrong secret is refused; a client without
credentials is refused by the coordinator too."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

import rayq
from rayq.actors.protocol.config import ClientConfig
from rayq.bootstrap import KEY_FILE, parse_url, read_key
from rayq.transport.remote import RemoteTransport

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
    # the coordinator's: config/plain_acl.toml under the store dir given to rayq.start
    assert cluster.store_dir is not None
    (cluster.store_dir / "config").mkdir(exist_ok=True)
    (cluster.store_dir / "config" / "plain_acl.toml").write_text(RULES)
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


def test_push_consumer_with_credentials_joins_and_consumes(deployment: rayq.Cluster) -> None:
    """Its Consumer actor signs the coordinator's join, heartbeats and leave."""
    config = ClientConfig(credentials=APP)
    with rayq.Producer("acl-pg", namespace=NAMESPACE, config=config) as producer:
        for i in range(6):
            producer.send(rayq.Message(topic=TOPIC, body=f"p{i}".encode()))
    consumer = rayq.PushConsumer(
        "acl-cg",
        consume_from=rayq.ConsumeFromWhere.FIRST_OFFSET,
        namespace=NAMESPACE,
        config=config,
    )
    consumer.subscribe(TOPIC)
    consumer.register_listener(lambda msgs: rayq.ConsumeStatus.CONSUME_SUCCESS)
    try:
        consumer.start()  # joined: the coordinator took its signed join_group
        assert {q.topic for q in consumer.assignment()} >= {TOPIC}
        deadline = time.monotonic() + 60
        while consumer.stats()["consumed"] < 6 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert consumer.stats()["consumed"] >= 6
    finally:
        consumer.shutdown()
    admin = rayq.Admin(namespace=NAMESPACE, config=ClientConfig(credentials=ADMIN))
    assert consumer.client_id not in admin.group_connections("acl-cg")  # its signed leave


def test_a_client_without_credentials_is_refused_by_the_coordinator(
    deployment: rayq.Cluster,
) -> None:
    with pytest.raises(rayq.PermissionDeniedError, match=r"coordinator\.topics: .*no credentials"):
        rayq.Admin(namespace=NAMESPACE).topics()
    with pytest.raises(rayq.PermissionDeniedError, match=r"coordinator\.route: .*no credentials"):
        rayq.Admin(namespace=NAMESPACE).topic_stats(TOPIC)
    anonymous = rayq.PushConsumer("acl-cg", namespace=NAMESPACE)
    anonymous.subscribe(TOPIC)
    anonymous.register_listener(lambda msgs: rayq.ConsumeStatus.CONSUME_SUCCESS)
    try:
        # its Consumer actor asks the coordinator for the brokers, then joins: refused
        with pytest.raises(rayq.PermissionDeniedError, match=r"coordinator\.\w+: .*no cred"):
            anonymous.start()
    finally:
        anonymous.shutdown()
    # with credentials, an account still needs the perm: no SUB on group "acl-other-cg"
    app = rayq.Admin(namespace=NAMESPACE, config=ClientConfig(credentials=APP))
    assert TOPIC in app.topics()
    with pytest.raises(rayq.PermissionDeniedError, match="group 'acl-other-cg'"):
        app.group_connections("acl-other-cg")


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


def test_outside_ray_the_key_opens_the_sockets_and_the_acl_still_decides(
    deployment: rayq.Cluster,
) -> None:
    """A client with the deployment key but no credentials reads and changes nothing;
    an account reaches what its rules allow, as inside Ray."""
    assert deployment.store_dir is not None
    host, port = parse_url(deployment.url)
    key = read_key(deployment.store_dir / KEY_FILE)
    transport = RemoteTransport(deployment.url, host, port, key)
    try:
        nobody = rayq.Admin(transport=transport)
        with pytest.raises(rayq.PermissionDeniedError):
            nobody.topics()
        with pytest.raises(rayq.PermissionDeniedError):
            nobody.create_topic("acl-outside", queues=1)
        with pytest.raises(rayq.PermissionDeniedError):
            nobody.reset_offsets("acl-cg", TOPIC, "earliest", execute=True)
        app = rayq.Admin(config=ClientConfig(credentials=APP), transport=transport)
        with pytest.raises(rayq.PermissionDeniedError):
            app.create_topic("acl-outside", queues=1)  # no admin account
        ops = rayq.Admin(config=ClientConfig(credentials=ADMIN), transport=transport)
        assert TOPIC in ops.topics() and "acl-outside" not in ops.topics()
        config = ClientConfig(credentials=APP)
        with rayq.Producer("acl-pg", config=config, transport=transport) as producer:
            assert producer.send(rayq.Message(TOPIC, b"outside")).status is rayq.SendStatus.SEND_OK
    finally:
        transport.close()
