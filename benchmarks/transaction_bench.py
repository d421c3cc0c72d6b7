"""Transactional send throughput against plain sends, in the same run.

Run: ``.venv/bin/python benchmarks/transaction_bench.py [--messages N] [--rounds R]``

Both sides send 1 KiB messages one at a time and wait for each: ``Producer.send``
(one broker call) against ``TransactionProducer.send_in_transaction`` with a
listener that commits at once (two broker calls: the half message, then the end,
and two records appended: the half and the committed message). Measured twice: on
a local Ray deployment (``rayq.start``, the real actors) and in one process over the
fake transport (``rayq.testing``: the broker's work without Ray). Rounds alternate;
the best round of each is printed with the ratio transactional / plain.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import rayq
from rayq.actors.protocol import CreateTopicRequest
from rayq.store import StoreConfig
from rayq.testing import FakeCluster, FakeTransport

BODY = b"x" * 1024
TOPIC = "TxBench"


class Commit:
    def execute_local_transaction(self, msg: rayq.Message, arg: Any) -> rayq.TransactionStatus:
        return rayq.TransactionStatus.COMMIT

    def check_local_transaction(self, msg: rayq.MessageExt) -> rayq.TransactionStatus:
        return rayq.TransactionStatus.COMMIT


def rate(send: Any, count: int) -> float:
    msg = rayq.Message(TOPIC, BODY)
    for _ in range(50):  # warm up
        send(msg)
    t0 = time.perf_counter()
    for _ in range(count):
        send(msg)
    return count / (time.perf_counter() - t0)


def rounds(make: Any, count: int, n: int, label: str) -> tuple[float, float]:
    best = [0.0, 0.0]
    for r in range(n):
        for i, tx in enumerate((False, True)):
            producer = make(tx)
            try:
                send = producer.send_in_transaction if tx else producer.send
                got = rate(send, count)
            finally:
                producer.shutdown()
            best[i] = max(best[i], got)
            kind = "transactional" if tx else "plain        "
            print(f"{label} round {r + 1}: {kind} {got:8,.0f} msg/s")
    return best[0], best[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    poll = rayq.ClientConfig(check_request_poll_ms=3_600_000)
    with tempfile.TemporaryDirectory(prefix="rayq-tx-bench-") as tmp:
        cfg = rayq.BrokerConfig(store=StoreConfig())
        with FakeCluster(Path(tmp) / "fake", config=cfg) as fake:
            fake.server().create_topic(
                CreateTopicRequest(topic=TOPIC, read_queue_nums=1, write_queue_nums=1, perm=6)
            )

            def make_fake(tx: bool) -> Any:
                if tx:
                    return rayq.TransactionProducer(
                        "txb", Commit(), config=poll, transport=FakeTransport(fake)
                    )
                return rayq.Producer("pb", transport=FakeTransport(fake))

            fake_plain, fake_tx = rounds(make_fake, args.messages, args.rounds, "in-process")
        cluster = rayq.start(Path(tmp) / "ray", namespace="rayq-tx-bench", config=cfg)
        try:
            rayq.Admin().create_topic(TOPIC, queues=1)

            def make_ray(tx: bool) -> Any:
                if tx:
                    return rayq.TransactionProducer("txb", Commit(), config=poll)
                return rayq.Producer("pb")

            ray_plain, ray_tx = rounds(make_ray, args.messages, args.rounds, "ray")
        finally:
            cluster.shutdown()
    print(f"sync sends of 1 KiB, {args.messages} per round, best of {args.rounds}:")
    print(
        f"  ray deployment  plain {ray_plain:8,.0f} msg/s  transactional {ray_tx:8,.0f} msg/s"
        f"  ratio {ray_tx / ray_plain:.2f}x"
    )
    print(
        f"  in-process      plain {fake_plain:8,.0f} msg/s  transactional {fake_tx:8,.0f} "
        f"msg/s  ratio {fake_tx / fake_plain:.2f}x"
    )


if __name__ == "__main__":
    main()
