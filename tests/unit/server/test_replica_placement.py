"""Which replica goes where (no Ray): node resources ``rayq_broker:<name>`` (a master)
and ``rayq_broker:<name>#<id>`` (its slave), and what is refused at start."""

from __future__ import annotations

import asyncio
import types

import pytest

import rayq.cluster
from rayq.actors import failover
from rayq.actors.failover import current_node, replica_nodes
from rayq.actors.protocol import BrokerInfo
from rayq.actors.protocol.config import BrokerConfig
from rayq.cluster import resource_plan
from rayq.store import StoreConfig
from rayq.store.errors import ConfigError


def test_masters_first_then_slaves_each_on_its_node() -> None:
    plan = resource_plan({"broker-b": "n2", "broker-a#1": "n3", "broker-a": "n1"}, 10911)
    assert plan == [
        ("broker-a", 0, 10911, "n1"),
        ("broker-b", 0, 10912, "n2"),
        ("broker-a", 1, 10911, "n3"),
    ]


@pytest.mark.parametrize(
    ("pinned", "message"),
    [
        ({"broker-a#1": "n1"}, "have no master"),
        ({"broker-a": "n1", "broker-a#x": "n2"}, "must be an int > 0"),
        ({"broker-a": "n1", "broker-a#0": "n2"}, "must be an int > 0"),
    ],
)
def test_a_slave_without_master_or_a_bad_id_is_refused(pinned: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        resource_plan(pinned, 10911)


def test_two_masters_for_one_broker_name_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    nodes = [
        {"Alive": True, "NodeID": n, "Resources": {"rayq_broker:broker-a": 1.0}}
        for n in ("n1", "n2")
    ]
    monkeypatch.setattr(rayq.cluster.ray, "nodes", lambda: nodes)
    with pytest.raises(ConfigError, match="two nodes carry resource 'rayq_broker:broker-a'"):
        rayq.cluster.broker_nodes()


def test_replica_nodes_reads_live_nodes_only() -> None:
    nodes = [
        {"Alive": True, "NodeID": "n1", "Resources": {"rayq_broker:broker-a": 1.0, "CPU": 2}},
        {"Alive": False, "NodeID": "n2", "Resources": {"rayq_broker:broker-a#1": 1.0}},
        {"Alive": True, "NodeID": "n3", "Resources": {"rayq_broker:broker-a#1": 1.0}},
    ]
    assert replica_nodes(nodes) == {"broker-a": "n1", "broker-a#1": "n3"}


def test_a_replica_starts_on_the_node_that_carries_its_store_now() -> None:
    """A node removed and added back has a new id: the live one carrying the store's
    resource is used, never a node id seen before; none if only dead nodes carry it;
    the given node if no node carries it (not placed by resource)."""
    gone = {"Alive": False, "NodeID": "old", "Resources": {"rayq_broker:broker-a#1": 1.0}}
    back = {"Alive": True, "NodeID": "new", "Resources": {"rayq_broker:broker-a#1": 1.0}}
    assert current_node([gone, back], "/stores/broker-a#1", "old") == "new"
    assert current_node([gone], "/stores/broker-a#1", "old") is None
    assert current_node([back], "/stores/broker-b", "here") == "here"


class _Started:
    """What ``start_replica`` was given, and the info it answers."""

    def __init__(self) -> None:
        self.config: BrokerConfig | None = None

    async def start(self, config: BrokerConfig, *args: object, **kwargs: object) -> object:
        self.config = config
        info = asyncio.get_running_loop().create_future()
        info.set_result("info")
        return types.SimpleNamespace(broker_info=types.SimpleNamespace(remote=lambda: info))


@pytest.mark.parametrize("known", [True, False])
def test_a_master_restarted_with_no_slave_gets_its_own_settings(
    monkeypatch: pytest.MonkeyPatch, known: bool
) -> None:
    """The coordinator's copy of the master's settings (here: 1 MiB segments) wins; only
    without it are the defaults used (whose 1 GiB segments its store's files refuse)."""
    own = BrokerConfig(store=StoreConfig.for_tests(commitlog_segment_size_bytes=1 << 20))
    started = _Started()

    async def nothing(*args: object) -> None:
        return None

    async def node(store_dir: str) -> str:
        return "n1"

    monkeypatch.setattr(failover, "store_node", node)
    monkeypatch.setattr(failover, "kill_replica", nothing)
    monkeypatch.setattr(failover, "start_replica", started.start)
    lost = BrokerInfo(broker_name="broker-a", node_id="n0", store_dir="/s", topics={})
    got = asyncio.run(failover.restart_master("broker-a", lost, {}, "ns", own if known else None))
    assert got == "info" and started.config is not None
    segment = started.config.store.commitlog_segment_size_bytes
    assert segment == (1 << 20 if known else BrokerConfig().store.commitlog_segment_size_bytes)
    assert started.config.broker_id == 0 and started.config.broker_role.value == lost.role
