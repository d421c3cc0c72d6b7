"""Health verdicts (rayq/admin/health.py), the put rate, and the admin calls behind ``rayq
message get`` / ``broker status`` over the in-process fake cluster (no Ray)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

import rayq
from rayq.actors.protocol import BrokerEntry, BrokerInfo, BrokerStatus, ReplicaStatus
from rayq.actors.server.put_rate import PutRate
from rayq.admin.admin import Admin
from rayq.admin.health import HealthLevel, HealthLimits, coordinator_health, replica_health, worst
from rayq.testing import FakeCluster, FakeTransport

NOW = 1_700_000_000_000
GiB = 1 << 30


def entry(broker_id: int = 0, seen_ms: int = NOW - 1000, lost: bool = False) -> BrokerEntry:
    return BrokerEntry(
        broker_name="b",
        broker_id=broker_id,
        role="ASYNC_MASTER",
        node_id="n",
        last_heartbeat_ms=seen_ms,
        lost=lost,
    )


def status(**info_fields: object) -> BrokerStatus:
    flushed = info_fields.pop("flushed_offset", 100)
    info_fields.setdefault("written_offset", 100)
    info = BrokerInfo(broker_name="b", node_id="n", store_dir="/s", topics={}, **info_fields)  # type: ignore[arg-type]
    return BrokerStatus(info=info, flushed_offset=flushed)  # type: ignore[arg-type]


def checks(records: list, kind: str = "broker") -> dict[str, HealthLevel]:
    record = next(r for r in records if r.kind == kind)
    return {c.name: c.level for c in record.checks}


def test_a_healthy_replica_is_ok_in_every_check_and_actor() -> None:
    """Recent heartbeat, low disk, flushed, no slaves: broker, flusher and hold are OK."""
    records = replica_health(entry(), status(disk_ratio=0.1), NOW, HealthLimits())
    assert [(r.actor, r.level) for r in records] == [
        ("broker b", HealthLevel.OK),
        ("flusher b", HealthLevel.OK),
        ("hold b", HealthLevel.OK),
    ]
    assert set(checks(records)) == {
        "state",
        "heartbeat",
        "disk_ratio",
        "flush_lag",
        "replication_lag",
    }


@pytest.mark.parametrize(
    ("ratio", "level"), [(0.5, HealthLevel.OK), (0.8, HealthLevel.WARN), (0.95, HealthLevel.FAIL)]
)
def test_disk_ratio_warns_past_the_clean_ratio_and_fails_past_the_full_ratio(
    ratio: float, level: HealthLevel
) -> None:
    """The broker's own limits (0.75 clean, 0.90 full) by default."""
    records = replica_health(entry(), status(disk_ratio=ratio), NOW, HealthLimits())
    assert checks(records)["disk_ratio"] is level


def test_limits_override_the_broker_disk_settings() -> None:
    records = replica_health(
        entry(), status(disk_ratio=0.2), NOW, HealthLimits(disk_fail_ratio=0.1)
    )
    assert checks(records)["disk_ratio"] is HealthLevel.FAIL


def test_old_heartbeats_warn_then_fail() -> None:
    limits = HealthLimits()
    assert (
        checks(replica_health(entry(seen_ms=NOW - 90_000), status(), NOW, limits))["heartbeat"]
        is HealthLevel.WARN
    )
    assert (
        checks(replica_health(entry(seen_ms=NOW - 200_000), status(), NOW, limits))["heartbeat"]
        is HealthLevel.FAIL
    )


def test_flush_lag_and_a_silent_flusher() -> None:
    """Bytes written but not flushed warn past the limit; a flusher that did not answer
    is FAIL for the flusher and the broker's flush lag."""
    lagging = status(written_offset=2 * GiB, flushed_offset=0)
    assert checks(replica_health(entry(), lagging, NOW, HealthLimits()))["flush_lag"] is (
        HealthLevel.FAIL
    )
    silent = msgspec.structs.replace(status(), flushed_offset=-1, flusher_error="gone")
    records = replica_health(entry(), silent, NOW, HealthLimits())
    assert checks(records, "flusher") == {"state": HealthLevel.FAIL, "flush_lag": HealthLevel.FAIL}


def test_replication_lag_of_a_master_and_a_stopped_slave() -> None:
    slow = ReplicaStatus(broker_id=1, acked_offset=0, lag_bytes=10, lag_ms=120_000, connected=True)
    master = replica_health(entry(), status(replicas=[slow]), NOW, HealthLimits())
    assert checks(master)["replication_lag"] is HealthLevel.FAIL
    gone = msgspec.structs.replace(slow, lag_ms=0, connected=False)
    master = replica_health(entry(), status(replicas=[gone]), NOW, HealthLimits())
    assert checks(master)["replication_lag"] is HealthLevel.WARN
    stopped = msgspec.structs.replace(status(broker_id=1), replication_error="master gone")
    slave = replica_health(entry(broker_id=1), stopped, NOW, HealthLimits())
    assert slave[0].actor == "slave b#1" and checks(slave, "slave")["replication_lag"] is (
        HealthLevel.FAIL
    )


def test_a_lost_or_unreachable_replica_fails_and_its_peers_are_unknown() -> None:
    lost = replica_health(entry(lost=True), "lost", NOW, HealthLimits())
    assert [r.level for r in lost] == [HealthLevel.FAIL, HealthLevel.WARN, HealthLevel.WARN]
    assert lost[0].checks[0].value == "LOST"
    down = replica_health(entry(), "actor rayq-broker-b is not running", NOW, HealthLimits())
    assert "not running" in down[0].checks[0].reason


def test_coordinator_and_worst() -> None:
    assert coordinator_health().level is HealthLevel.OK
    assert coordinator_health("no answer").level is HealthLevel.FAIL
    assert worst([HealthLevel.OK, HealthLevel.FAIL, HealthLevel.WARN]) is HealthLevel.FAIL
    assert worst([]) is HealthLevel.OK


def test_put_rate_counts_the_last_full_seconds() -> None:
    rate = PutRate(window_s=10)
    for second in range(20):
        rate.add(5, second * 1000 + 10)
    assert rate.per_second(20_000) == 5.0  # seconds 10..19
    assert rate.per_second(40_000) == 0.0  # all older than the window


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeCluster]:
    with FakeCluster(tmp_path, brokers=("broker-a",)) as c:
        yield c


def test_get_message_reads_one_queue_offset_and_refuses_a_missing_one(
    fake: FakeCluster,
) -> None:
    admin = Admin(transport=FakeTransport(fake))
    admin.create_topic("T", queues=1)
    with rayq.Producer("pg", transport=FakeTransport(fake)) as producer:
        sent = [producer.send(rayq.Message("T", f"m{i}".encode())) for i in range(3)]
    got = admin.get_message("T", 0, 1)
    assert (got.body, got.msg_id, got.queue_offset) == (b"m1", sent[1].msg_id, 1)
    with pytest.raises(rayq.InvalidOffsetError, match="no message at offset 3"):
        admin.get_message("T", 0, 3)
    with pytest.raises(rayq.InvalidOffsetError, match="queue 5"):
        admin.get_message("T", 5, 0)
    with pytest.raises(rayq.TopicNotFoundError):
        admin.get_message("T", 0, 0, broker_name="broker-z")


def test_broker_status_reports_info_limits_and_settings(fake: FakeCluster) -> None:
    status = Admin(transport=FakeTransport(fake)).broker_status("broker-a")
    assert status.info.broker_name == "broker-a"
    assert status.config["broker_name"] == "broker-a"
    assert 0.0 <= status.info.disk_ratio <= 1.0


def test_admin_health_marks_a_stopped_broker_lost_and_an_unnoticed_one_unreachable(
    tmp_path: Path,
) -> None:
    """Over the fake cluster: a broker the coordinator dropped is LOST, one it still routes
    but that does not answer is UNREACHABLE; both FAIL, the coordinator is OK."""
    with FakeCluster(tmp_path, brokers=("broker-a", "broker-b", "broker-c")) as c:
        c.stop("broker-b")
        c.stop("broker-c", keep_route=True)
        records = {r.actor: r for r in Admin(transport=FakeTransport(c)).health()}
    assert records["coordinator"].level is HealthLevel.OK
    states = {
        a: records[f"broker {a}"].checks[0].value for a in ("broker-a", "broker-b", "broker-c")
    }
    assert states == {"broker-a": "ALIVE", "broker-b": "LOST", "broker-c": "UNREACHABLE"}
    assert records["broker broker-b"].level is HealthLevel.FAIL
    assert records["broker broker-c"].level is HealthLevel.FAIL
    assert [c.name for c in records["broker broker-a"].checks][2] == "disk_ratio"
