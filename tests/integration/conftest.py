"""Shared fixtures for the integration tests: one small rayq deployment per module.

A module sets ``NAMESPACE`` (each module its own Ray namespace) and may set
``BROKER_OVERRIDES`` (extra ``BrokerConfig`` fields) and ``SLAVES`` (slaves per broker);
the ``cluster`` fixture starts rayq on a fresh local Ray with small store files and no
disk-usage limits (tests must not depend on how full the machine's disk is) and always
shuts it down.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest
import ray

import rayq
from rayq.store import StoreConfig

T = TypeVar("T")
SMALL_STORE = StoreConfig.for_tests(
    commitlog_segment_size_bytes=256 * 1024,
    cq_entries_per_file=1024,
    index_hash_slots=1024,
    index_entries_max=8192,
    disk_max_used_space_ratio=1.0,
    disk_clean_forcibly_ratio=1.0,
    disk_warning_ratio=1.0,
)


@pytest.fixture(scope="module")
def cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[rayq.Cluster]:
    if ray.is_initialized():
        pytest.skip("Ray is already initialized in this process; this module starts its own")
    namespace = request.module.NAMESPACE
    overrides = getattr(request.module, "BROKER_OVERRIDES", {})
    slaves = getattr(request.module, "SLAVES", 0)
    config = rayq.BrokerConfig(store=SMALL_STORE, **overrides)
    started = rayq.start(
        tmp_path_factory.mktemp("store"), namespace=namespace, config=config, slaves=slaves
    )
    try:
        yield started
    finally:
        started.shutdown()


def retrying(fn: Callable[[], T], error: type[Exception], *, timeout_s: float, pause_s: float) -> T:
    """``fn()``, called again after ``pause_s`` while it raises ``error``, for up to
    ``timeout_s`` (then the error goes up): the loop of ``retried`` and ``eventually``."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return fn()
        except error:
            if time.monotonic() > deadline:
                raise
            time.sleep(pause_s)


@pytest.fixture
def retried() -> Callable[[Callable[[], T]], T]:
    """Call ``fn`` until it stops raising BrokerUnavailableError (a broker restarting),
    for up to 60 s, as clients retry."""

    def run(fn: Callable[[], T]) -> T:
        return retrying(fn, rayq.BrokerUnavailableError, timeout_s=60.0, pause_s=0.5)

    return run


@pytest.fixture(scope="session")
def restart() -> Callable[[Any], None]:
    """``restart(actor)``: ``kill_actor`` with Ray restarting it."""
    return kill_actor


@pytest.fixture(scope="session")
def kill_for_good() -> Callable[[Any], None]:
    """``kill_for_good(actor)``: ``kill_actor`` with no restart."""
    return lambda actor: kill_actor(actor, no_restart=True)


def kill_actor(actor: Any, *, no_restart: bool = False, timeout_s: float = 30.0) -> None:
    """``ray.kill(actor, no_restart=...)``, back once its old process is gone. Ray
    sends calls made after that to the restarted actor; until then the old process may
    still answer on its data-plane socket (Ray's own calls wait for the restart)."""
    pid = ray.get(actor.__ray_call__.remote(lambda _self: os.getpid()), timeout=30)
    ray.kill(actor, no_restart=no_restart)
    deadline = time.monotonic() + timeout_s
    while _alive(pid):
        assert time.monotonic() < deadline, f"the killed actor's process {pid} is still alive"
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture(scope="session")
def eventually() -> Callable[..., Any]:
    """``eventually(fn, timeout_s=60)``: ``fn()`` once the brokers have (re)loaded their
    ACL file (they look at it once a second): retried while it raises PermissionDeniedError."""

    def run(fn: Callable[[], T], timeout_s: float = 60.0) -> T:
        return retrying(fn, rayq.PermissionDeniedError, timeout_s=timeout_s, pause_s=0.2)

    return run


@pytest.fixture(scope="module")
def replication_kit():
    """tests/integration/replication_kit.py as a module (the replication tests' helpers)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).with_name("replication_kit.py")
    spec = importlib.util.spec_from_file_location("rayq_tests_replication_kit", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def dep(request: pytest.FixtureRequest, replication_kit, tmp_path_factory: pytest.TempPathFactory):
    """A replicated deployment on three Ray nodes for one module: its ``NAMESPACE``,
    ``ROLE`` (the master's), ``AUTO_FAILOVER`` (default on) and ``SLAVE_READ``
    (slave_read_enable with "far behind" at ~50 KB; default off); always shut down."""
    if ray.is_initialized():
        pytest.skip("Ray is already initialized in this process; this module starts its own")
    module = request.module
    deployment = replication_kit.Deployment(
        module.NAMESPACE,
        tmp_path_factory.mktemp("stores"),
        module.ROLE,
        getattr(module, "AUTO_FAILOVER", True),
        getattr(module, "SLAVE_READ", False),
    )
    try:
        yield deployment
    finally:
        deployment.close()
