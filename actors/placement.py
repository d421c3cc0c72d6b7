"""How every server actor of a deployment is started: by name in the deployment's
namespace (got if it already runs), detached from the process that asked, restarted by
Ray without end, with no CPU reserved, and pinned to its node (the store is on that
node's disk). The spawn functions beside each shell add what is theirs."""

from __future__ import annotations

from typing import Any


def server_actor_options(name: str, namespace: str, node_id: str, **extra: Any) -> dict[str, Any]:
    """Ray actor options for the server actor ``name`` on ``node_id`` (hard affinity;
    "" for Ray's default placement), with ``extra`` options of its own."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    where: Any = NodeAffinitySchedulingStrategy(node_id, soft=False) if node_id else "DEFAULT"
    return {
        "name": name,
        "namespace": namespace,
        "get_if_exists": True,
        "lifetime": "detached",
        "max_restarts": -1,
        "num_cpus": 0,
        "scheduling_strategy": where,
        **extra,
    }
