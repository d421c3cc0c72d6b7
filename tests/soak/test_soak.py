"""The soak in CI: one Ray cluster (a head and two broker nodes) for two short soaks,
one with a fixed seed and one with a random seed (printed, so a failure replays with
``make soak SEED=<seed>``). Each fails on any violation the checker finds."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest
import ray

from soak.deployment import Deployment
from soak.runner import Settings, run

pytestmark = [
    pytest.mark.slow,
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]
NAMESPACE = "rayq-test-soak"
FIXED_SEED = 20270027
DURATION_S = 15.0  # each; with start-up and draining, the module takes about 2 minutes
MEAN_GAP_S = 7.0


@pytest.fixture(scope="module")
def dep(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    if ray.is_initialized():
        pytest.skip("Ray is already initialized in this process; this module starts its own")
    deployment = Deployment(NAMESPACE, Path(tmp_path_factory.mktemp("soak")))
    try:
        yield deployment
    finally:
        deployment.close()


def soak(dep: Deployment, seed: int, run_id: str) -> None:
    settings = Settings(seed, DURATION_S, MEAN_GAP_S, drain_s=25.0)
    report = run(settings, dep, run_id)
    assert report.sent > 0 and report.delivered > 0
    assert report.ok, f"seed {seed}:\n{report.format()}"


def test_soak_with_a_fixed_seed(dep: Deployment) -> None:
    soak(dep, FIXED_SEED, "fixed")


def test_soak_with_a_random_seed(dep: Deployment) -> None:
    seed = random.SystemRandom().randrange(1 << 31)
    print(f"random soak seed: {seed}")
    soak(dep, seed, "random")
