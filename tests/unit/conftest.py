"""Unit tests never start Ray: ``ray.init`` raises for every test in tests/unit/.

The fake cluster the client and server tests share: ``make_cluster`` (opens any number,
closes them after the test) and ``cluster`` (one, as the module's ``cluster_options`` say).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from rayq.actors.protocol.config import ClientConfig
    from rayq.testing import FakeCluster


def _refuse_ray_init(*args: object, **kwargs: object) -> None:
    raise RuntimeError("unit tests must not start Ray")


@pytest.fixture(autouse=True)
def _forbid_ray_init(monkeypatch: pytest.MonkeyPatch) -> None:
    # Look Ray up without importing it: if nothing has imported Ray yet, there is
    # nothing to patch, and importing it here would defeat "store/ never imports Ray".
    ray = sys.modules.get("ray")
    if ray is not None and hasattr(ray, "init"):
        monkeypatch.setattr(ray, "init", _refuse_ray_init)


@pytest.fixture
def make_cluster(tmp_path: Path) -> Iterator[Callable[..., FakeCluster]]:
    """Opens in-process fake clusters (``rayq.testing.FakeCluster``) and closes them after
    the test. ``make_cluster(under="", topics={}, admin_config=None, setup=None, **kwargs)``:
    the stores go to ``tmp_path / under``, ``kwargs`` go to ``FakeCluster`` (``brokers``,
    ``config``), ``topics`` ({name: queue count}) are created through an ``Admin`` (with
    ``admin_config``), then ``setup(cluster)`` runs."""
    # Imported here: store tests that never ask for a cluster import no client code.
    from rayq.admin.admin import Admin
    from rayq.testing import FakeCluster, FakeTransport

    opened: list[FakeCluster] = []

    def make(
        *,
        under: str = "",
        topics: Mapping[str, int] | None = None,
        admin_config: ClientConfig | None = None,
        setup: Callable[[FakeCluster], object] | None = None,
        **kwargs: Any,
    ) -> FakeCluster:
        cluster = FakeCluster(tmp_path / under, **kwargs)
        opened.append(cluster)
        if topics:
            admin = Admin(transport=FakeTransport(cluster), config=admin_config)
            for topic, queues in topics.items():
                admin.create_topic(topic, queues=queues)
        if setup is not None:
            setup(cluster)
        return cluster

    yield make
    for cluster in reversed(opened):
        cluster.close()


@pytest.fixture
def cluster_options() -> dict[str, Any]:
    """``make_cluster``'s keywords for ``cluster``; a module overrides this fixture."""
    return {}


@pytest.fixture
def cluster(
    make_cluster: Callable[..., FakeCluster], cluster_options: dict[str, Any]
) -> FakeCluster:
    """A fake cluster over ``tmp_path`` as the module's ``cluster_options`` describe it."""
    return make_cluster(**cluster_options)
