"""ACL (RocketMQ's plain ACL) against ``rayq.testing``'s in-process fake: signed requests,
per-topic and per-group perms, admin operations, the whitelist, replay protection, the
file's reload, and secrets kept out of reprs, logs and errors. No Ray."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest

import rayq
from rayq.actors.protocol import (
    ArrowPutRequest,
    ClientRequest,
    CommitOffsetsRequest,
    ConsumeFromWhere,
    CreateTopicRequest,
    DeleteGroupRequest,
    FinishStreamPlanRequest,
    GroupRequest,
    GroupShareRequest,
    JoinGroupRequest,
    ListGroupsRequest,
    LockQueuesRequest,
    LostBrokersRequest,
    MaxOffsetRequest,
    MemberRequest,
    PullItem,
    PullManyRequest,
    PullRequest,
    QueryOffsetsRequest,
    QueueRef,
    ReadReplicaRequest,
    RecordStreamPlanRequest,
    ResetOffsetsRequest,
    RouteRequest,
    RoutesRequest,
    StreamPlanRequest,
    TopicRequest,
    WriteGrant,
    check,
    check_json,
    to_wire,
)
from rayq.actors.protocol.auth import Credentials, Signer
from rayq.actors.protocol.config import BrokerConfig, ClientConfig
from rayq.actors.protocol.coordinator import MemberSpec
from rayq.actors.protocol.registry import Access, Caller, operations
from rayq.actors.server import acl as acl_mod
from rayq.actors.server.acl import AclService, parse_acl
from rayq.consumer.pull import PullConsumer
from rayq.store import EncodedBatch, InnerMessage, StoreConfig
from rayq.store.batch import RequestAuth, encode_batch
from rayq.store.errors import PermissionDeniedError
from rayq.testing import FakeCluster, FakeTransport
from rayq.transport.base import BrokerClient, CoordinatorClient
from rayq.transport.context import ClientContext

ADMIN = Credentials(access_key="root", secret_key="root-secret-0000")
PUB_ONLY = Credentials(access_key="writer", secret_key="writer-secret-1111")
SUB_ONLY = Credentials(access_key="reader", secret_key="reader-secret-2222")
BOTH = Credentials(access_key="app", secret_key="app-secret-3333")
SECRETS = [c.secret_key for c in (ADMIN, PUB_ONLY, SUB_ONLY, BOTH)]

RULES = """
global_white_remote_addresses = ["10.9.8.*", "192.168.7.7"]

[[accounts]]
access_key = "root"
secret_key = "root-secret-0000"
admin = true

[[accounts]]
access_key = "writer"
secret_key = "writer-secret-1111"
default_topic_perm = "DENY"
default_group_perm = "DENY"
topic_perms = ["orders=PUB"]

[[accounts]]
access_key = "reader"
secret_key = "reader-secret-2222"
default_topic_perm = "DENY"
default_group_perm = "DENY"
topic_perms = ["orders=SUB"]
group_perms = ["cg=SUB"]

[[accounts]]
access_key = "app"
secret_key = "app-secret-3333"
default_topic_perm = "PUB|SUB"
default_group_perm = "SUB"
topic_perms = ["vault=DENY"]
group_perms = ["blocked=DENY"]
"""


@pytest.fixture
def acl_file(tmp_path: Path) -> Path:
    path = tmp_path / "plain_acl.toml"
    path.write_text(RULES)
    return path


@pytest.fixture
def cluster_options(acl_file: Path) -> dict[str, Any]:
    cfg = BrokerConfig(store=StoreConfig.for_tests(), acl_enable=True, acl_file=str(acl_file))
    return {
        "under": "stores",
        "config": cfg,
        "topics": dict.fromkeys(("orders", "vault", "other"), 1),
        "admin_config": ClientConfig(credentials=ADMIN),
    }


def broker(cluster: FakeCluster, creds: Credentials | None, **signer: Any) -> BrokerClient:
    """A broker client signing with ``creds`` (None: unsigned; ``signer``: Signer options)."""
    client = FakeTransport(cluster).broker("broker-a")
    if creds is None:
        return client
    return BrokerClient(Signer(creds, **signer).wrap(client._invoke))


def send(cluster: FakeCluster, creds: Credentials, topic: str = "orders") -> rayq.SendResult:
    producer = rayq.Producer(
        "pg", transport=FakeTransport(cluster), config=ClientConfig(credentials=creds)
    )
    try:
        return producer.send(rayq.Message(topic=topic, body=b"hello"))
    finally:
        producer.shutdown()


def pull(topic: str = "orders", group: str = "cg") -> PullRequest:
    return PullRequest(group=group, topic=topic, queue_id=0, queue_offset=0, suspend_ms=0)


def denied(reply: Any) -> str:
    with pytest.raises(PermissionDeniedError) as exc:
        reply.result(5)
    return str(exc.value)


def rewrite(path: Path, text: str) -> None:
    """New contents with an mtime surely different from the old one."""
    old = path.stat().st_mtime_ns
    path.write_text(text)
    os.utime(path, ns=(old + 2_000_000_000, old + 2_000_000_000))


# ------------------------------------------------------------------ perms per operation
def test_pub_only_account_sends_but_cannot_pull_or_commit(cluster: FakeCluster) -> None:
    assert send(cluster, PUB_ONLY).status is rayq.SendStatus.SEND_OK
    client = broker(cluster, PUB_ONLY)
    msg = denied(client.pull(pull()))
    assert "'writer'" in msg and "group 'cg'" in msg and "SUB" in msg
    commit = CommitOffsetsRequest(group="cg", topic="orders", offsets={0: 1})
    assert "SUB" in denied(client.commit_offsets(commit))
    # not listed: the default perm (DENY); the coordinator refuses the route already
    with pytest.raises(
        PermissionDeniedError, match=r"route.*PUB or SUB permission on topic 'other'"
    ):
        send(cluster, PUB_ONLY, topic="other")


def test_sub_only_account_pulls_and_commits_but_cannot_send(cluster: FakeCluster) -> None:
    send(cluster, BOTH)
    client = broker(cluster, SUB_ONLY)
    assert client.pull(pull()).result(5).status is rayq.PullStatus.FOUND
    many = PullManyRequest(group="cg", items=[PullItem("orders", 0, 0)], suspend_ms=0)
    assert client.pull_many(many).result(5).results[0].status is rayq.PullStatus.FOUND
    commit = CommitOffsetsRequest(group="cg", topic="orders", offsets={0: 1})
    client.commit_offsets(commit).result(5)
    query = QueryOffsetsRequest(group="cg", topic="orders")
    assert client.query_offsets(query).result(5).offsets == {0: 1}
    locks = LockQueuesRequest(group="cg", queues=[QueueRef("orders", 0)], client_id="c1")
    client.lock_queues(locks).result(5)
    client.max_offset(MaxOffsetRequest(topic="orders", queue_id=0)).result(5)
    with pytest.raises(PermissionDeniedError) as exc:
        send(cluster, SUB_ONLY)
    assert "'reader'" in str(exc.value) and "PUB permission on topic 'orders'" in str(exc.value)
    assert exc.value.details["perm"] == "PUB" and exc.value.details["resource"] == "orders"
    # the group is checked too: another group is DENY by default
    assert "group 'other-group'" in denied(client.pull(pull(group="other-group")))


def test_deny_on_a_topic_and_a_group_and_default_perms(cluster: FakeCluster) -> None:
    assert send(cluster, BOTH, topic="other").status is rayq.SendStatus.SEND_OK  # default
    with pytest.raises(PermissionDeniedError, match=r"topic 'vault'.*DENY"):
        send(cluster, BOTH, topic="vault")
    client = broker(cluster, BOTH)
    assert "topic 'vault'" in denied(client.pull(pull(topic="vault")))
    assert "group 'blocked'" in denied(client.pull(pull(group="blocked")))
    many = PullManyRequest(
        group="cg", items=[PullItem("other", 0, 0), PullItem("vault", 0, 0)], suspend_ms=0
    )
    assert "topic 'vault'" in denied(client.pull_many(many))
    assert client.pull(pull(topic="other")).result(5).status is rayq.PullStatus.FOUND


def test_hold_pulls_are_checked(cluster: FakeCluster) -> None:
    send(cluster, BOTH)
    transport = FakeTransport(cluster)
    denied_hold = transport.hold("broker-a")
    assert "no credentials" in denied(denied_hold.pull(pull()))
    signed = Signer(SUB_ONLY).wrap(transport.hold("broker-a")._invoke)
    assert signed("pull", pull()).result(5).status is rayq.PullStatus.FOUND
    many = PullManyRequest(group="cg", items=[PullItem("vault", 0, 0)], suspend_ms=0)
    assert "topic 'vault'" in denied(signed("pull_many", many))


def test_admin_operations_need_an_admin_account(cluster: FakeCluster) -> None:
    create = CreateTopicRequest(topic="fresh", read_queue_nums=1, write_queue_nums=1, perm=6)
    ops = [
        ("create_topic", create),
        ("delete_topic", TopicRequest(topic="other")),
        ("groups", ListGroupsRequest()),
        ("delete_group", DeleteGroupRequest(group="cg")),
        ("reset_offsets", ResetOffsetsRequest(group="cg", topic="orders", timestamp_ms=0)),
    ]
    user = broker(cluster, BOTH)
    for method, req in ops:
        msg = denied(getattr(user, method)(req))
        assert method in msg and "'app'" in msg and "not admin" in msg
    root = broker(cluster, ADMIN)
    for method, req in ops:
        getattr(root, method)(req).result(5)
    assert "fresh" in cluster.server().tables.topics
    # an admin passes the topic and group checks too
    assert root.pull(pull(topic="vault")).result(5) is not None
    # a consumer-side read of a group: SUB on the group
    assert user.get_group(GroupRequest(group="cg")).result(5) is not None
    assert "group 'blocked'" in denied(user.get_group(GroupRequest(group="blocked")))


def test_producer_and_pull_consumer_end_to_end(cluster: FakeCluster) -> None:
    for _ in range(3):
        send(cluster, BOTH)
    consumer = PullConsumer(
        "cg",
        consume_from=ConsumeFromWhere.FIRST_OFFSET,
        transport=FakeTransport(cluster),
        config=ClientConfig(credentials=SUB_ONLY, rebalance_interval_ms=1),
    )
    try:
        consumer.subscribe("orders")
        consumer.start()
        got: list[Any] = []
        deadline = time.monotonic() + 10
        while len(got) < 3 and time.monotonic() < deadline:
            got.extend(consumer.poll(0.05))
        assert [m.body for m in got] == [b"hello"] * 3
        consumer.commit()
    finally:
        consumer.shutdown()
    query = QueryOffsetsRequest(group="cg", topic="orders")
    assert broker(cluster, SUB_ONLY).query_offsets(query).result(5).offsets == {0: 3}


def test_transactions_need_pub_on_their_topic(cluster: FakeCluster) -> None:
    """Half sends and ends are checked as sends (PUB on the topic); the checks poll needs
    a valid account only."""

    class Commit:
        def execute_local_transaction(self, msg: Any, arg: Any) -> Any:
            return rayq.TransactionStatus.COMMIT

        def check_local_transaction(self, msg: Any) -> Any:
            return rayq.TransactionStatus.COMMIT

    def tx(creds: Credentials) -> rayq.TransactionProducer:
        return rayq.TransactionProducer(
            "txg",
            Commit(),
            transport=FakeTransport(cluster),
            config=ClientConfig(credentials=creds, check_request_poll_ms=3_600_000),
        )

    with tx(PUB_ONLY) as producer:
        result = producer.send_in_transaction(rayq.Message("orders", b"tx"))
        assert result.local_state is rayq.TransactionStatus.COMMIT
        assert producer.check_now() == 0
        with pytest.raises(PermissionDeniedError, match="PUB or SUB permission on topic 'other'"):
            producer.send_in_transaction(rayq.Message("other", b"tx"))  # its route
    with tx(SUB_ONLY) as producer, pytest.raises(PermissionDeniedError, match="PUB"):
        producer.send_in_transaction(rayq.Message("orders", b"tx"))
    got = broker(cluster, SUB_ONLY).pull(pull()).result(5)
    assert got.count == 1  # the committed one, once


# ------------------------------------------------------------------ signatures
def test_a_signed_batch_split_into_chunks_verifies_once_joined(acl_file: Path) -> None:
    """As the Ray transport sends a large put (the records in chunks after a batch
    without them) and the broker actor joins them before the check."""
    msgs = [
        InnerMessage(topic="orders", queue_id=0, body=bytes([i % 256]) * 1024) for i in range(300)
    ]
    batch = encode_batch(msgs, max_body_bytes=1 << 20, max_properties_bytes=4096)
    signed = Signer(BOTH).sign("put", batch)
    head = check(to_wire(msgspec.structs.replace(signed, records=b"")), EncodedBatch)
    size = len(batch.records) // 3 + 1
    chunks = [batch.records[i : i + size] for i in range(0, len(batch.records), size)]
    joined = msgspec.structs.replace(head, records=b"".join(chunks))
    service = AclService(str(acl_file))
    service.check("put", joined)
    swapped = msgspec.structs.replace(joined, records=b"".join(reversed(chunks)))
    with pytest.raises(PermissionDeniedError, match="bad signature"):
        service.check("put", swapped)


def test_jvm_puts_need_a_write_grant_for_their_queue_and_producer(cluster: FakeCluster) -> None:
    """``put_arrow`` (Spark's JVM tasks, which do not sign) carries a WriteGrant the driver
    signed: it passes for its topic, queue and producer (or an epoch of it) when its
    signer has PUB on the topic, and is refused without a grant, for another queue,
    topic or producer, when changed after signing, signed by a SUB-only account or with
    a wrong secret, or old."""
    server = cluster.server()

    def put(grant: WriteGrant | None, **fields: Any) -> ArrowPutRequest:
        req = {"topic": "orders", "queue_id": 0, "producer_id": "spark-q-3~7", **fields}
        return ArrowPutRequest(first_sequence=0, group="g", body="body", grant=grant, **req)

    def grant(creds: Credentials, **fields: Any) -> WriteGrant:
        req = {"topic": "orders", "queue_id": 0, "producer_id": "spark-q-3", **fields}
        return Signer(creds).sign("write_grant", WriteGrant(**req))

    ok = grant(PUB_ONLY)
    server.authorize_arrow_put(put(ok))
    server.authorize_arrow_put(put(ok, producer_id="spark-q-3~8"))  # any epoch of it
    server.authorize_arrow_put(put(ok, producer_id="spark-q-3"))
    wire = check(to_wire(put(ok)), ArrowPutRequest)  # as the JVM sends it: JSON
    server.authorize_arrow_put(check_json(msgspec.json.encode(wire), ArrowPutRequest))
    for refused, why in [
        (put(None), "no write grant"),
        (put(ok, queue_id=1), "grant covers"),
        (put(ok, topic="other"), "grant covers"),
        (put(ok, producer_id="spark-q-4~7"), "grant covers"),
        (put(ok, producer_id="spark-q-3x"), "grant covers"),
        (put(msgspec.structs.replace(ok, queue_id=1), queue_id=1), "bad signature"),
        (put(grant(SUB_ONLY)), "no PUB permission on topic 'orders'"),
        (put(grant(Credentials(access_key="writer", secret_key="wrong-0000"))), "bad signature"),
        (put(Signer(PUB_ONLY, clock=lambda: time.time() - 600).sign("write_grant", ok)), "time"),
    ]:
        with pytest.raises(PermissionDeniedError, match=why):
            server.authorize_arrow_put(refused)


def test_unsigned_request_is_refused(cluster: FakeCluster) -> None:
    msg = denied(broker(cluster, None).pull(pull()))
    assert "no credentials" in msg and "pull" in msg


def test_unknown_account_and_wrong_secret(cluster: FakeCluster) -> None:
    ghost = Credentials(access_key="ghost", secret_key="whatever-secret")
    assert "unknown access key 'ghost'" in denied(broker(cluster, ghost).pull(pull()))
    wrong = Credentials(access_key="app", secret_key="not-the-secret-9999")
    msg = denied(broker(cluster, wrong).pull(pull()))
    assert "bad signature" in msg and "'app'" in msg
    assert "not-the-secret-9999" not in msg and BOTH.secret_key not in msg
    with pytest.raises(PermissionDeniedError, match="bad signature"):
        send(cluster, wrong)


def test_a_request_changed_after_signing_is_refused(cluster: FakeCluster) -> None:
    signed = Signer(BOTH).sign("pull", pull(topic="other"))
    tampered = msgspec.structs.replace(signed, topic="orders")
    assert "bad signature" in denied(FakeTransport(cluster).broker("broker-a").pull(tampered))
    # a signature is for one method: the same request sent to another one is refused
    query = Signer(BOTH).sign("query_offsets", QueryOffsetsRequest(group="cg", topic="orders"))
    client = FakeTransport(cluster).broker("broker-a")
    client.query_offsets(query).result(5)
    commit = CommitOffsetsRequest(group="cg", topic="orders", offsets={0: 0}, auth=query.auth)
    assert "bad signature" in denied(client.commit_offsets(commit))


def test_replayed_request_outside_its_window_is_refused(cluster: FakeCluster) -> None:
    old = Signer(BOTH, clock=lambda: time.time() - 600).sign("pull", pull())
    msg = denied(FakeTransport(cluster).broker("broker-a").pull(old))
    assert "timestamp" in msg and "'app'" in msg
    future = broker(cluster, BOTH, clock=lambda: time.time() + 600)
    assert "timestamp" in denied(future.pull(pull()))
    fresh = broker(cluster, BOTH, clock=lambda: time.time() - 60)  # inside the 5 minutes
    assert fresh.pull(pull()).result(5) is not None


def test_a_declared_whitelisted_address_is_not_trusted(cluster: FakeCluster) -> None:
    """Issue 27: a request declaring a whitelisted host's address deleted a topic. The
    address a client declares is its word: refused without a signature, nothing deleted."""
    anonymous = Credentials()  # no keys: only the address is declared
    for address in ("10.9.8.1", "192.168.7.7"):
        client = broker(cluster, anonymous, address=address)
        assert "no credentials" in denied(client.pull(pull(topic="vault")))
        assert "no credentials" in denied(client.delete_topic(TopicRequest(topic="orders")))
    assert "orders" in cluster.server().tables.topics


def test_only_the_observed_peer_address_is_whitelisted(acl_file: Path) -> None:
    """The whitelist matches the address the transport observed (``peer``), never the
    declared one; None (Ray actor calls observe none) matches nothing."""
    service = AclService(str(acl_file))
    req = PullRequest(
        group="cg", topic="vault", queue_id=0, queue_offset=0, auth=RequestAuth(address="10.9.8.1")
    )
    for peer in ("10.9.8.1", "10.9.8.200", "192.168.7.7"):
        service.check("pull", req, peer)  # observed and whitelisted: no signature needed
    for peer in (None, "10.9.9.1", "192.168.7.70", ""):
        with pytest.raises(PermissionDeniedError, match="no credentials"):
            service.check("pull", req, peer)


def test_a_whitelist_under_ray_is_warned_about(
    acl_file: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="rayq.actors.server.acl"):
        AclService(str(acl_file))
    assert any("admit nobody" in r.getMessage() for r in caplog.records)


# ------------------------------------------------------------------ the file
def test_file_reload_changes_permissions(
    cluster: FakeCluster, acl_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(acl_mod, "RELOAD_CHECK_S", 0.0)  # look at the file on every request
    with pytest.raises(PermissionDeniedError):
        send(cluster, PUB_ONLY, topic="other")
    rewrite(
        acl_file,
        RULES.replace('topic_perms = ["orders=PUB"]', 'topic_perms = ["orders=PUB", "other=PUB"]'),
    )
    assert send(cluster, PUB_ONLY, topic="other").status is rayq.SendStatus.SEND_OK
    rewrite(acl_file, RULES.replace('topic_perms = ["orders=PUB"]', "topic_perms = []"))
    with pytest.raises(PermissionDeniedError):
        send(cluster, PUB_ONLY)


def test_broken_file_keeps_the_old_rules(
    cluster: FakeCluster,
    acl_file: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(acl_mod, "RELOAD_CHECK_S", 0.0)
    with caplog.at_level(logging.ERROR, logger="rayq.actors.server.acl"):
        rewrite(acl_file, RULES + "\n[[accounts]\nthis is not toml = = \n")
        assert send(cluster, PUB_ONLY).status is rayq.SendStatus.SEND_OK
        rewrite(acl_file, RULES.replace('"orders=PUB"', '"orders=WRITE"'))  # a bad perm
        assert send(cluster, PUB_ONLY).status is rayq.SendStatus.SEND_OK
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    # each rewrite logged once by the broker's ACL and once by the coordinator's
    assert len(errors) == 4 and all(str(acl_file) in e for e in errors)
    assert "WRITE" not in errors[1] and "WRITE" in errors[2] and "WRITE" in errors[3]
    assert not any(s in e for e in errors for s in SECRETS)


def test_reload_is_looked_at_most_once_a_second(tmp_path: Path) -> None:
    path = tmp_path / "acl.toml"
    path.write_text(RULES)
    now = [100.0]
    service = AclService(str(path), monotonic=lambda: now[0])
    assert "writer" in service.rules.accounts
    rewrite(path, "")
    with pytest.raises(PermissionDeniedError, match="unknown access key"):
        service.check("pull", Signer(ADMIN).sign("pull", pull()))  # looked at: no accounts
    assert service.rules.accounts == {}
    rewrite(path, RULES)
    now[0] += 0.5
    with pytest.raises(PermissionDeniedError, match="unknown access key"):
        service.check("pull", Signer(ADMIN).sign("pull", pull()))  # not looked at again yet
    now[0] += 0.6
    service.check("pull", Signer(ADMIN).sign("pull", pull()))
    assert "root" in service.rules.accounts


def test_default_acl_file_is_in_the_store_config_dir(tmp_path: Path) -> None:
    cfg = BrokerConfig(store=StoreConfig.for_tests(), acl_enable=True)
    with FakeCluster(tmp_path, config=cfg) as c:
        acl = c.server().acl
        assert acl is not None
        assert Path(acl.path) == tmp_path / "broker-a" / "config" / "plain_acl.toml"
        assert acl.rules.accounts == {}  # missing: nobody but whitelisted hosts
        assert "no credentials" in denied(broker(c, None).pull(pull()))


def test_acl_off_needs_nothing(tmp_path: Path) -> None:
    with FakeCluster(tmp_path) as c:
        assert c.server().acl is None
        assert send(c, Credentials(access_key="x", secret_key="y")).status.value == "SEND_OK"
        assert broker(c, None).pull(pull()).result(5) is not None


def test_parse_acl_errors_name_the_problem() -> None:
    with pytest.raises(acl_mod.AclFileError, match="perm 'ALL'"):
        parse_acl('[[accounts]]\naccess_key="a"\nsecret_key="s"\ndefault_topic_perm="ALL"\n')
    with pytest.raises(acl_mod.AclFileError, match="appears twice"):
        parse_acl('[[accounts]]\naccess_key="a"\nsecret_key="s"\n' * 2)
    with pytest.raises(acl_mod.AclFileError, match="unknown keys"):
        parse_acl('[[accounts]]\naccess_key="a"\nsecret_key="s"\nadmn=true\n')
    rules = parse_acl(
        '[[accounts]]\naccess_key="a"\nsecret_key="s"\ntopic_perms = {t1 = "PUB", t2 = "sub"}\n'
    )
    assert rules.accounts["a"].topic_perms == {"t1": 1, "t2": 2}


# ------------------------------------------------------------------ secrets
def test_secret_is_absent_from_reprs_logs_and_errors(
    cluster: FakeCluster, caplog: pytest.LogCaptureFixture
) -> None:
    creds = Credentials(access_key="app", secret_key="app-secret-3333")
    assert "app-secret-3333" not in repr(creds) and "app-secret-3333" not in str(creds)
    assert "'app'" in repr(creds)
    config = ClientConfig(credentials=creds)
    assert "app-secret-3333" not in repr(config) and "app-secret-3333" not in str(config)
    assert "app-secret-3333" not in repr(
        rayq.Credentials(access_key="a", secret_key="app-secret-3333")
    )
    assert "app-secret-3333" not in repr(Signer(creds))
    acl = cluster.server().acl
    assert acl is not None
    assert not any(s in repr(acl) or s in repr(acl.rules) for s in SECRETS)
    with caplog.at_level(logging.DEBUG):
        ctx = ClientContext(config, transport=FakeTransport(cluster))
        assert "topic 'vault'" in denied(ctx.broker("broker-a").pull(pull(topic="vault")))
        for creds_ in (Credentials(access_key="app", secret_key="wrong-wrong"), creds):
            client = broker(cluster, creds_)
            for reply in (client.pull(pull(topic="vault")), client.pull(pull())):
                try:
                    reply.result(5)
                except PermissionDeniedError as exc:
                    assert not any(s in str(exc) or s in repr(exc) for s in SECRETS)
                    assert "wrong-wrong" not in str(exc)
    assert not any(s in caplog.text for s in [*SECRETS, "wrong-wrong"])


# ------------------------------------------------------------------ the coordinator
# One request of every coordinator client operation, naming topic "orders" and group "cg".
COORDINATOR_REQUESTS: dict[str, Any] = {
    "route": RouteRequest(topic="orders", client_id="c1"),
    "routes": RoutesRequest(topics=["orders"], client_id="c1"),
    "topics": ClientRequest(client_id="c1"),
    "brokers": ClientRequest(client_id="c1"),
    "broker_table": ClientRequest(client_id="c1"),
    "lost_brokers": LostBrokersRequest(topic="orders", client_id="c1"),
    "read_replica": ReadReplicaRequest(broker_name="broker-a", client_id="c1"),
    "group_share": GroupShareRequest(group="cg", topic="orders", expiry_ms=30_000, client_id="c1"),
    "leave_shares": ClientRequest(client_id="c1"),
    "join_group": JoinGroupRequest(
        group="cg", spec=MemberSpec(subscriptions=(("orders", "*"),)), client_id="c1"
    ),
    "leave_group": MemberRequest(group="cg", client_id="c1"),
    "member_alive": MemberRequest(group="cg", client_id="c1"),
    "group_members": MemberRequest(group="cg", client_id="c1"),
    "stream_plan": StreamPlanRequest(group="cg", topic="orders", client_id="c1"),
    "record_stream_plan": RecordStreamPlanRequest(
        group="cg", topic="orders", ranges=[], client_id="c1"
    ),
    "finish_stream_plan": FinishStreamPlanRequest(
        group="cg", topic="orders", batch_id=0, client_id="c1"
    ),
}
# every one the registry gives an Access to check (all but read_replica)
CHECKED = sorted(
    name
    for name, op in operations("coordinator", Caller.CLIENT).items()
    if op.access is not Access.NONE
)
NO_CONSUMER = "only a running push consumer can join"  # the fake has no Consumer actors


def test_every_coordinator_client_operation_has_a_request_here() -> None:
    assert set(COORDINATOR_REQUESTS) == set(CoordinatorClient.request_types())


def coordinator(cluster: FakeCluster, creds: Credentials | None) -> CoordinatorClient:
    """The fake's coordinator client signing with ``creds`` (None: unsigned)."""
    client = FakeTransport(cluster).coordinator()
    if creds is None:
        return client
    return CoordinatorClient(Signer(creds).wrap(client._invoke))


def ask(client: CoordinatorClient, method: str, req: Any | None = None) -> Any:
    """``method`` with its request here (or ``req``): the reply, or the error raised."""
    try:
        return getattr(client, method)(req or COORDINATOR_REQUESTS[method]).result(5)
    except rayq.RayqError as exc:
        return exc


def allowed(answer: Any) -> bool:
    """Past the ACL: a reply, or the fake's refusal of a join (no Consumer actor)."""
    if isinstance(answer, PermissionDeniedError):
        return False
    return not isinstance(answer, rayq.RayqError) or NO_CONSUMER in str(answer)


@pytest.mark.parametrize("method", CHECKED)
def test_coordinator_refuses_a_request_without_credentials(
    cluster: FakeCluster, method: str
) -> None:
    answer = ask(coordinator(cluster, None), method)
    assert isinstance(answer, PermissionDeniedError), answer
    assert f"coordinator.{method}: ACL is on" in str(answer) and "no credentials" in str(answer)
    anonymous = coordinator(cluster, Credentials())  # only a declared address
    assert "no credentials" in str(ask(anonymous, method))


def test_coordinator_refuses_a_wrong_signature(cluster: FakeCluster) -> None:
    wrong = coordinator(cluster, Credentials(access_key="root", secret_key="not-the-secret"))
    ghost = coordinator(cluster, Credentials(access_key="ghost", secret_key="whatever-it-is"))
    for method in CHECKED:
        msg = str(ask(wrong, method))
        assert "bad signature" in msg and "'root'" in msg, (method, msg)
        assert "not-the-secret" not in msg and ADMIN.secret_key not in msg
        assert "unknown access key 'ghost'" in str(ask(ghost, method))
    # changed after signing: another topic under the signature of "orders"
    signed = Signer(ADMIN).sign("route", RouteRequest(topic="orders"))
    tampered = msgspec.structs.replace(signed, topic="vault")
    assert "bad signature" in str(ask(coordinator(cluster, None), "route", tampered))
    # signed for one operation, sent to another
    stolen = Signer(ADMIN).sign("topics", ClientRequest(client_id="c1"))
    assert "bad signature" in str(ask(coordinator(cluster, None), "brokers", stolen))
    old = Signer(ADMIN, clock=lambda: time.time() - 600).sign("topics", ClientRequest())
    assert "coordinator's clock" in str(ask(coordinator(cluster, None), "topics", old))


def test_coordinator_allows_every_operation_to_an_admin_and_the_signing_client(
    cluster: FakeCluster,
) -> None:
    root = coordinator(cluster, ADMIN)
    for method in COORDINATOR_REQUESTS:
        assert allowed(ask(root, method)), method
    assert ask(root, "route").route is not None
    assert "orders" in ask(root, "topics").names
    # a client context signs its coordinator calls with its credentials, as its broker calls
    ctx = ClientContext(ClientConfig(credentials=SUB_ONLY), transport=FakeTransport(cluster))
    assert ctx.route("orders") is not None and ctx.brokers() == ["broker-a"]
    assert (
        "orders"
        in rayq.Admin(
            transport=FakeTransport(cluster), config=ClientConfig(credentials=BOTH)
        ).topics()
    )
    with pytest.raises(PermissionDeniedError, match=r"coordinator\.topics: .*no credentials"):
        rayq.Admin(transport=FakeTransport(cluster)).topics()


def test_coordinator_operations_need_the_perms_of_their_topics_and_groups(
    cluster: FakeCluster,
) -> None:
    writer, reader, app = (coordinator(cluster, c) for c in (PUB_ONLY, SUB_ONLY, BOTH))
    # a route: PUB or SUB on the topic (either will do); every topic of a routes request
    assert ask(writer, "route").route is not None and ask(reader, "route").route is not None
    vault = RouteRequest(topic="vault")
    msg = str(ask(app, "route", vault))
    assert "coordinator.route by 'app': no PUB or SUB permission on topic 'vault'" in msg
    assert "topic 'other'" in str(ask(reader, "routes", RoutesRequest(topics=["orders", "other"])))
    assert allowed(ask(app, "routes", RoutesRequest(topics=["orders", "other"])))
    # the listings and leave_shares: any valid account, whatever its perms
    for method in ("topics", "brokers", "broker_table", "lost_brokers", "leave_shares"):
        assert allowed(ask(writer, method)), method
    # shares, membership and stream plans: SUB on the group and the topics named
    sub_ops = [m for m in CHECKED if m not in ("route", "routes", "topics", "brokers")]
    sub_ops = [m for m in sub_ops if m not in ("broker_table", "lost_brokers", "leave_shares")]
    assert sub_ops == sorted(
        (
            "finish_stream_plan",
            "group_members",
            "group_share",
            "join_group",
            "leave_group",
            "member_alive",
            "record_stream_plan",
            "stream_plan",
        )
    )
    for method in sub_ops:
        assert allowed(ask(reader, method)), method
        msg = str(ask(writer, method))  # PUB on orders, DENY on every group
        assert f"coordinator.{method} by 'writer': no SUB permission on group 'cg'" in msg
        blocked = msgspec.structs.replace(COORDINATOR_REQUESTS[method], group="blocked")
        assert "group 'blocked'" in str(ask(app, method, blocked)), method
    for method in ("group_share", "stream_plan", "record_stream_plan", "finish_stream_plan"):
        vault_req = msgspec.structs.replace(COORDINATOR_REQUESTS[method], topic="vault")
        assert "SUB permission on topic 'vault'" in str(ask(app, method, vault_req)), method
    # a join needs SUB on every topic it subscribes to (a retry topic counts as its group)
    spec = MemberSpec(subscriptions=(("%RETRY%cg", "*"), ("orders", "*"), ("vault", "*")))
    join = JoinGroupRequest(group="cg", spec=spec, client_id="c1")
    assert "topic 'vault'" in str(ask(app, "join_group", join))
    spec = MemberSpec(subscriptions=(("%RETRY%cg", "*"), ("orders", "*")))
    assert allowed(ask(reader, "join_group", JoinGroupRequest(group="cg", spec=spec)))


def test_read_replica_is_not_checked(cluster: FakeCluster) -> None:
    """The transport's own lookup of a broker it was told of: no credentials there."""
    assert sorted(set(COORDINATOR_REQUESTS) - {"read_replica"}) == CHECKED
    assert ask(coordinator(cluster, None), "read_replica").replica == "broker-a"


def test_the_coordinator_reads_acl_file_or_the_store_dir_default(
    cluster: FakeCluster, acl_file: Path, tmp_path: Path
) -> None:
    acl = cluster.coordinator.service.acl
    assert acl is not None and acl.path == str(acl_file) and acl.service == "coordinator"
    cfg = BrokerConfig(store=StoreConfig.for_tests(), acl_enable=True)
    with FakeCluster(tmp_path / "default", config=cfg) as c:
        acl = c.coordinator.service.acl
        assert acl is not None
        assert Path(acl.path) == tmp_path / "default" / "config" / "plain_acl.toml"
        assert "no credentials" in str(ask(coordinator(c, None), "topics"))
        assert "unknown access key" in str(ask(coordinator(c, ADMIN), "topics"))  # missing
        (tmp_path / "default" / "config").mkdir(parents=True, exist_ok=True)
        (tmp_path / "default" / "config" / "plain_acl.toml").write_text(RULES)
        acl._last_look = -acl_mod.RELOAD_CHECK_S  # look again now
        assert ask(coordinator(c, ADMIN), "topics").names == []


def test_coordinator_with_acl_off_checks_nothing(tmp_path: Path) -> None:
    with FakeCluster(tmp_path) as c:
        assert c.coordinator.service.acl is None
        c.server().create_topic(
            CreateTopicRequest(topic="orders", read_queue_nums=1, write_queue_nums=1, perm=6)
        )
        for creds in (None, Credentials(access_key="nobody", secret_key="any-secret-at-all")):
            client = coordinator(c, creds)
            for method in COORDINATOR_REQUESTS:
                assert allowed(ask(client, method)), (method, creds)
            assert ask(client, "route").route is not None
