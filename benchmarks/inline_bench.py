"""How to carry a batch over Ray's 100 KiB inline limit: measured on a plain actor.

Run: ``.venv/bin/python benchmarks/inline_bench.py [--rounds 400]`` (starts and stops
its own local Ray). One process calls one async actor whose method only adds up the
sizes of its arguments, sequentially (each call waited for), and prints msgs/s for a
batch of 100 x 1 KiB and of 1,000 x 1 KiB sent as:

- one bytes object (over the limit: Ray moves it through the object store);
- two calls in flight, each with half of it (pipelined calls, ordered per queue);
- one call whose arguments are the halves (each under the limit, so inlined);
- for 1,000 messages: eight calls in flight, and one call of eleven ~93 KiB arguments.

rayq's ``put`` takes the third shape (``rayq/transport/ray_actors.py inline_args``) up to six
chunks: faster than pipelined calls here, and still one call, so the broker appends the
batch whole or not at all without tying calls together. Beyond that one object-store
transfer (about 2 ms whatever the size) wins, and the records go as one bytes object
beside the batch's other fields (not inside their msgpack: two copies fewer).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import ray

LIMIT = 100 * 1024 - 2048


@ray.remote(num_cpus=0)
class Sink:
    async def put(self, *parts: bytes) -> int:
        return sum(len(p) for p in parts)


def chunks(blob: bytes, parts: int) -> list[bytes]:
    size = -(-len(blob) // parts)
    return [blob[i : i + size] for i in range(0, len(blob), size)]


def rate(fn: Callable[[], object], messages: int, rounds: int) -> float:
    for _ in range(max(rounds // 10, 5)):
        fn()
    started = time.perf_counter()
    for _ in range(rounds):
        fn()
    return rounds * messages / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=400)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        sink = Sink.remote()
        ray.get(sink.put.remote(b"x"))
        small, large = os.urandom(100 * 1024 + 3000), os.urandom(1000 * 1024 + 30_000)
        halves = chunks(small, 2)
        eighths, elevenths = chunks(large, 8), chunks(large, -(-len(large) // LIMIT))
        shapes: list[tuple[str, int, Callable[[], object]]] = [
            ("100 x 1 KiB as one ~103 KiB object", 100, lambda: ray.get(sink.put.remote(small))),
            (
                "100 x 1 KiB as two calls in flight",
                100,
                lambda: ray.get([sink.put.remote(h) for h in halves]),
            ),
            (
                "100 x 1 KiB as one call of two ~51 KiB args",
                100,
                lambda: ray.get(sink.put.remote(*halves)),
            ),
            ("1000 x 1 KiB as one ~1 MiB object", 1000, lambda: ray.get(sink.put.remote(large))),
            (
                "1000 x 1 KiB as eight calls in flight",
                1000,
                lambda: ray.get([sink.put.remote(p) for p in eighths]),
            ),
            (
                f"1000 x 1 KiB as one call of {len(elevenths)} args",
                1000,
                lambda: ray.get(sink.put.remote(*elevenths)),
            ),
        ]
        for name, messages, fn in shapes:
            runs = [
                rate(fn, messages, args.rounds if messages == 100 else args.rounds // 4)
                for _ in range(args.repeat)
            ]
            print(f"{name:<46} {statistics.median(runs):>10,.0f} msgs/s (median of {args.repeat})")
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
