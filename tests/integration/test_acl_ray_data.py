"""ACL on, through Ray Data: ``rayq.connectors.ray_data`` reads and writes signed with
``config=ClientConfig(credentials=...)`` (planning on the driver, reads and puts in Ray
tasks) work; without credentials, or without the perm, they raise PermissionDeniedError;
the secret shows in no repr, name or error."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest
import ray

import rayq
import rayq.connectors.ray_data

pytestmark = pytest.mark.integration
NAMESPACE = "rayq-test-acl-ray-data"
BROKER_OVERRIDES = {"acl_enable": True}
SOURCE, SINK = "acl-events", "acl-copy"

ADMIN = rayq.Credentials(access_key="ops", secret_key="ops-secret-123456")
APP = rayq.Credentials(access_key="app", secret_key="app-secret-123456")
READER = rayq.Credentials(access_key="reader", secret_key="reader-secret-123456")
SECRETS = ("ops-secret-123456", "app-secret-123456", "reader-secret-123456")
RULES = """
[[accounts]]
access_key = "ops"
secret_key = "ops-secret-123456"
admin = true

[[accounts]]
access_key = "app"
secret_key = "app-secret-123456"
default_topic_perm = "DENY"
topic_perms = ["acl-events=PUB|SUB", "acl-copy=PUB|SUB"]

[[accounts]]
access_key = "reader"
secret_key = "reader-secret-123456"
default_topic_perm = "DENY"
topic_perms = ["acl-events=SUB", "acl-copy=SUB"]
"""


def config(credentials: rayq.Credentials) -> rayq.ClientConfig:
    return rayq.ClientConfig(credentials=credentials)


def assert_no_secret(text: str) -> None:
    assert not any(secret in text for secret in SECRETS), text


@pytest.fixture(scope="module")
def deployment(cluster: rayq.Cluster, eventually: Callable[..., Any]) -> rayq.Cluster:
    for name in cluster.broker_names:  # the default place: <store dir>/config/plain_acl.toml
        (cluster.store_dir / name / "config" / "plain_acl.toml").write_text(RULES)
    assert cluster.store_dir is not None  # the coordinator's: under rayq.start's store dir
    (cluster.store_dir / "config").mkdir(exist_ok=True)
    (cluster.store_dir / "config" / "plain_acl.toml").write_text(RULES)
    admin = rayq.Admin(namespace=NAMESPACE, config=config(ADMIN))
    eventually(lambda: admin.create_topic(SOURCE, queues=2))
    admin.create_topic(SINK, queues=2)
    with rayq.Producer("acl-pg", namespace=NAMESPACE, config=config(APP)) as producer:
        producer.send_batch([rayq.Message(SOURCE, f"e{i}".encode()) for i in range(20)])
    return cluster


def test_read_and_write_with_credentials(deployment: rayq.Cluster) -> None:
    """Given ACL on, when a read and a write carry credentials, then every call is signed:
    the driver plans, the read tasks read and the write tasks put."""
    ds = rayq.connectors.ray_data.read_topic(SOURCE, namespace=NAMESPACE, config=config(APP))
    assert sorted(r["body"] for r in ds.take_all()) == sorted(f"e{i}".encode() for i in range(20))
    assert_no_secret(repr(ds))
    sink = rayq.connectors.ray_data.TopicDatasink(
        SINK, body_col="body", namespace=NAMESPACE, config=config(APP)
    )
    ds.select_columns(["body"]).write_datasink(sink)
    assert sink.rows_written == 20
    assert_no_secret(repr(sink) + sink.get_name())
    copy = rayq.connectors.ray_data.read_topic(SINK, namespace=NAMESPACE, config=config(READER))
    assert copy.count() == 20


def test_read_and_write_without_credentials_are_refused(deployment: rayq.Cluster) -> None:
    """Given ACL on, when a read or a write carries no credentials, then it raises
    PermissionDeniedError (a read while planning, a write from its task)."""
    with pytest.raises(rayq.PermissionDeniedError, match="no credentials"):
        rayq.connectors.ray_data.read_topic(SOURCE, namespace=NAMESPACE)
    rows = ray.data.from_arrow(pa.table({"body": [b"x", b"y"]}))
    with pytest.raises(rayq.PermissionDeniedError, match="no credentials"):
        rows.write_datasink(rayq.connectors.ray_data.TopicDatasink(SINK, namespace=NAMESPACE))


def test_page_readers_check_the_brokers_acl(deployment: rayq.Cluster) -> None:
    """A broker's page readers (what Spark's JVM reads call, unsigned) apply the broker's
    rules: with ACL on, an unsigned page request is refused, and they go on serving. Who
    may start them is the broker's to say too (``page_readers`` signed, or refused)."""
    import json

    from rayq.actors.protocol import PageReadersRequest, broker_actor_name
    from rayq.actors.protocol.auth import Signer
    from rayq.connectors import arrow_io

    broker = deployment.broker_names[0]
    with pytest.raises(rayq.PermissionDeniedError, match="no credentials"):
        arrow_io.page_readers(NAMESPACE, broker)
    actor = ray.get_actor(broker_actor_name(broker), namespace=NAMESPACE)
    signed = Signer(APP).sign("page_readers", PageReadersRequest())
    name = ray.get(actor.page_readers.remote(signed), timeout=60).names[0]
    reader = ray.get_actor(name, namespace=NAMESPACE)
    req = {"topic": SOURCE, "queue_id": 0, "start": 0, "end": 5, "max_bytes": 1 << 20}
    for _ in range(2):
        with pytest.raises(rayq.PermissionDeniedError, match="no credentials"):
            ray.get(reader.read_arrow_ipc.remote(json.dumps(req).encode()), timeout=30)


def test_the_tasks_sign_with_the_given_account(deployment: rayq.Cluster) -> None:
    """A write task signs with the credentials given (an account without PUB is refused,
    a wrong secret fails the signature), and the errors do not show the secret."""

    def stored() -> int:
        return rayq.connectors.ray_data.read_topic(
            SINK, namespace=NAMESPACE, config=config(APP)
        ).count()

    before = stored()
    rows = ray.data.from_arrow(pa.table({"body": [b"x", b"y"]}))
    sink = rayq.connectors.ray_data.TopicDatasink(SINK, namespace=NAMESPACE, config=config(READER))
    with pytest.raises(rayq.PermissionDeniedError, match=r"'reader'.*no PUB") as denied:
        rows.write_datasink(sink)
    assert_no_secret(str(denied.value))
    wrong = rayq.Credentials(access_key="app", secret_key="not-the-app-secret")
    with pytest.raises(rayq.PermissionDeniedError, match="bad signature") as bad:
        rayq.connectors.ray_data.read_topic(SOURCE, namespace=NAMESPACE, config=config(wrong))
    assert "not-the-app-secret" not in str(bad.value)
    assert stored() == before  # nothing refused was stored


def test_config_must_be_a_client_config(deployment: rayq.Cluster) -> None:
    with pytest.raises(rayq.ConfigError, match=r"config must be a rayq\.ClientConfig"):
        rayq.connectors.ray_data.read_topic(SOURCE, namespace=NAMESPACE, config=APP)  # type: ignore[arg-type]
