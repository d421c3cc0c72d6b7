"""Which replica goes where (no Ray): node resources ``rayq_broker:<name>`` (a master)
and ``rayq_broker:<name>#<id>`` (its slave), and what is refused at start."""

from __future__ import annotations

import pytest

import rayq.cluster
from rayq.actors.failover import current_node, replica_nodes
from rayq.cluster import resource_plan
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
