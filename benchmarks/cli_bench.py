"""Wall time per call of the ``rayq`` command against one Ray-joining call.

Starts one deployment (a local Ray, ``rayq.start`` into a temporary store, one
topic with a message in it), then times, each in a fresh process and ``--runs``
times (the median, and the best and worst):

- ``rayq topic list``, ``rayq send -t T -m x`` and ``rayq consume -t T -n 1``, which
  reach the deployment by its ``rayq://`` URL (the ``rayq.url`` file and the key,
  given as ``RAYQ_URL``/``RAYQ_KEY``);
- a Python process that joins Ray as the command did before: ``ray.init(address=...)``,
  ``rayq.connect(namespace)``, ``Admin().topics()``;
- ``python -c pass``, the floor of any process start.

Then it stops the deployment. Run it on an otherwise idle machine::

    .venv/bin/python benchmarks/cli_bench.py [--runs 7]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

NAMESPACE = "rayq-cli-bench"
TOPIC = "bench"
RAY_JOIN = """
import sys, ray, rayq
ray.init(address=sys.argv[1], namespace=sys.argv[2], log_to_driver=False,
         logging_level="ERROR")
rayq.connect(sys.argv[2])
assert sys.argv[3] in rayq.Admin().topics()
"""


def timed(argv: list[str], env: dict[str, str], runs: int) -> list[float]:
    """Seconds per run of ``argv`` (each must exit 0)."""
    seconds = []
    for _ in range(runs):
        began = time.perf_counter()
        done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
        seconds.append(time.perf_counter() - began)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(argv[:4])}... exited {done.returncode}: {done.stderr}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="runs per call (default 7)")
    runs = parser.parse_args().runs

    import ray

    import rayq

    store = Path(tempfile.mkdtemp(prefix="rayq-cli-bench-"))
    cluster = rayq.start(store, namespace=NAMESPACE)
    try:
        rayq.Admin(namespace=NAMESPACE).create_topic(TOPIC, queues=1)
        with rayq.Producer("bench", namespace=NAMESPACE) as producer:
            producer.send(rayq.Message(TOPIC, b"hello"))
        env = _client_env(store)
        program = shutil.which("rayq", path=str(Path(sys.executable).parent)) or "rayq"
        calls = {
            "python -c pass (process floor)": [sys.executable, "-c", "pass"],
            "rayq topic list": [program, "topic", "list"],
            "rayq send -t T -m x": [program, "send", "-t", TOPIC, "-m", "x"],
            "rayq consume -t T -n 1": [program, "consume", "-t", TOPIC, "-n", "1"],
            "ray.init + rayq.connect + Admin().topics()": [
                sys.executable,
                "-c",
                RAY_JOIN,
                ray.get_runtime_context().gcs_address,
                NAMESPACE,
                TOPIC,
            ],
        }
        results = {name: timed(argv, env, runs) for name, argv in calls.items()}
    finally:
        cluster.shutdown()
        shutil.rmtree(store, ignore_errors=True)
    _print(results, runs)


def _client_env(store: Path) -> dict[str, str]:
    """The environment of a client process: the deployment's URL and key."""
    url_file, key_file = store / "rayq.url", store / "rayq.key"
    if not url_file.is_file():
        raise SystemExit(f"rayq.start wrote no {url_file.name} into the store: no URL to use")
    env = dict(os.environ)
    env["RAYQ_URL"] = url_file.read_text(encoding="utf-8").strip()
    env["RAYQ_KEY"] = key_file.read_text(encoding="ascii").strip()
    return env


def _print(results: dict[str, list[float]], runs: int) -> None:
    join = statistics.median(results["ray.init + rayq.connect + Admin().topics()"])
    print(f"wall time per call, {runs} runs each, a fresh process per run")
    print(f"{'call':<46} {'median':>9} {'best':>9} {'worst':>9} {'vs Ray join':>12}")
    for name, seconds in results.items():
        median = statistics.median(seconds)
        print(
            f"{name:<46} {median * 1000:>7.0f}ms {min(seconds) * 1000:>7.0f}ms "
            f"{max(seconds) * 1000:>7.0f}ms {median / join:>11.2f}x"
        )


if __name__ == "__main__":
    main()
