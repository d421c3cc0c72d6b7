"""Starting a broker replica as a Ray actor: named, detached, restartable, pinned.

The actor class and its operations are in actors/broker.py; this module only places it.
"""

from __future__ import annotations

import os
from typing import Any

import ray

from rayq.actors.broker import BrokerActor
from rayq.actors.handles import deployment_key
from rayq.actors.placement import server_actor_options
from rayq.actors.protocol.config import BrokerConfig
from rayq.actors.protocol.registry import concurrency_groups
from rayq.actors.protocol.server_key import ServerKey

# Threads per concurrency group. "watch": the coordinator's never-returning park calls
# (one per coordinator life), so they cannot use up the admin slots.
GROUP_SIZES = {"send": 64, "pull": 256, "admin": 16, "watch": 1024, "ha": 16}


def spawn_broker(
    config: BrokerConfig,
    store_dir: str,
    namespace: str,
    node_id: str,
    epoch: int = 0,
    *,
    server_key: ServerKey | None = None,
) -> Any:
    """Start (or get) the named broker actor pinned to ``node_id`` (named after its
    replica: the master under the broker name, a slave under ``<name>#<id>``), holding
    ``server_key`` (default: this process's, ``deployment_key()``: the coordinator's)."""
    from rayq.actors.protocol import broker_actor_name

    os.makedirs(store_dir, exist_ok=True)
    groups = {g: GROUP_SIZES[g] for g in concurrency_groups("broker")}
    cls = ray.remote(concurrency_groups=groups)(BrokerActor)  # type: ignore[call-overload]
    name = broker_actor_name(config.replica_name)
    return cls.options(**server_actor_options(name, namespace, node_id, max_task_retries=0)).remote(
        config, store_dir, namespace, epoch, server_key=server_key or deployment_key()
    )
