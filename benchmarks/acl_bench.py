"""Produce throughput with ACL on against off, in one process (no Ray).

Run: ``.venv/bin/python benchmarks/acl_bench.py [--batches N] [--rounds R] [--ray]``
(``--ray`` first measures produce throughput through two local deployments, one
with ACL on: the ratio a producer sees.)

Each put goes the way the broker actor takes it, minus Ray: with ACL on the client
signs the batch (``Signer.sign``: msgpack of the batch + keyed BLAKE3), the batch is
encoded (``to_wire``), checked at the boundary (``protocol.check``), authorized
(``BrokerServer.authorize``: the account, the timestamp, the MAC recomputed, the
topic's PUB perm) and appended (``BrokerServer.put``). Batches of 100 messages of
1 KiB. Rounds alternate off/on on fresh brokers; the best round of each is printed,
and the ratios on/off: with the client's signing counted (one process does both),
and on the broker's side alone (a producer signs in its own process).
Both sides hash the whole batch with keyed BLAKE3 (~20 us per 100 KiB here; SHA-256: ~55 us),
which is what the ratio pays for.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from rayq.actors.protocol import CreateTopicRequest, check, to_wire
from rayq.actors.protocol.auth import Credentials, Signer
from rayq.actors.protocol.config import BrokerConfig
from rayq.actors.server.broker_server import BrokerServer
from rayq.store import EncodedBatch, InnerMessage, StoreConfig
from rayq.store.batch import encode_batch

BODY = b"x" * 1024
PER_BATCH = 100
CREDS = Credentials(access_key="bench", secret_key="bench-secret-0123456789")
RULES = """
[[accounts]]
access_key = "bench"
secret_key = "bench-secret-0123456789"
default_topic_perm = "DENY"
topic_perms = ["B=PUB"]
"""


def batches(count: int) -> list[EncodedBatch]:
    msgs = [InnerMessage(topic="B", queue_id=0, body=BODY) for _ in range(PER_BATCH)]
    one = encode_batch(msgs, max_body_bytes=1 << 20, max_properties_bytes=4096)
    return [one] * count


def run(root: Path, acl: bool, work: list[EncodedBatch]) -> tuple[float, float]:
    """Messages per second for ``work`` through one fresh broker: in all, and on the
    broker's side alone (without the client's signing)."""
    acl_file = root / "plain_acl.toml"
    acl_file.write_text(RULES)
    config = BrokerConfig(store=StoreConfig(), acl_enable=acl, acl_file=str(acl_file))
    server = BrokerServer(config, str(root / "store"), node_id="bench")
    try:
        server.create_topic(
            CreateTopicRequest(topic="B", read_queue_nums=1, write_queue_nums=1, perm=6)
        )
        signer = Signer(CREDS) if acl else None
        signing = 0.0
        t0 = time.perf_counter()
        for batch in work:
            if signer is not None:  # the client's part
                t1 = time.perf_counter()
                batch = signer.sign("put", batch)
                signing += time.perf_counter() - t1
            got = check(to_wire(batch), EncodedBatch)  # the actor's boundary
            server.authorize("put", got)
            server.put(got)
        elapsed = time.perf_counter() - t0
    finally:
        server.close()
    count = len(work) * PER_BATCH
    return count / elapsed, count / (elapsed - signing)


def through_ray(batches_n: int, rounds: int) -> None:
    """Produce throughput as a user sees it: ``Producer.send_batch`` of 100 x 1 KiB
    through two deployments in one Ray session (namespaces ``acl-off`` and ``acl-on``),
    rounds alternating; best round of each and the ratio."""
    import rayq

    with tempfile.TemporaryDirectory(prefix="rayq-acl-ray-") as tmp:
        acl_file = Path(tmp) / "plain_acl.toml"
        acl_file.write_text(RULES)
        clusters = {
            acl: rayq.start(
                Path(tmp) / ("on" if acl else "off"),
                namespace="acl-on" if acl else "acl-off",
                config=rayq.BrokerConfig(acl_enable=acl, acl_file=str(acl_file)),
            )
            for acl in (False, True)
        }
        try:
            producers = {}
            for acl in (False, True):
                cfg = rayq.ClientConfig(credentials=CREDS) if acl else rayq.ClientConfig()
                producers[acl] = rayq.Producer(
                    "pb", namespace="acl-on" if acl else "acl-off", config=cfg
                )
                producers[acl].send_batch([rayq.Message("B", BODY)] * PER_BATCH)  # warm up
            best = {False: 0.0, True: 0.0}
            msgs = [rayq.Message("B", BODY)] * PER_BATCH
            for r in range(rounds):
                for acl in (False, True):
                    t0 = time.perf_counter()
                    for _ in range(batches_n):
                        producers[acl].send_batch(msgs)
                    rate = batches_n * PER_BATCH / (time.perf_counter() - t0)
                    best[acl] = max(best[acl], rate)
                    print(f"ray round {r + 1}: ACL {'on ' if acl else 'off'} {rate:10,.0f} msg/s")
            for p in producers.values():
                p.shutdown()
        finally:
            clusters[True].shutdown()
            clusters[False].shutdown()
    print(f"produce through Ray (Producer.send_batch, {PER_BATCH} x 1 KiB), best of {rounds}:")
    print(
        f"  ACL off {best[False]:10,.0f} msg/s   ACL on {best[True]:10,.0f} msg/s   ratio "
        f"{best[True] / best[False]:.2f}x (target >= 0.9x)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--ray", action="store_true", help="also produce through a Ray deployment (the user's view)"
    )
    args = parser.parse_args()
    if args.ray:
        through_ray(args.batches, args.rounds)
    work = batches(args.batches)
    best = {False: (0.0, 0.0), True: (0.0, 0.0)}
    for r in range(args.rounds):
        for acl in (False, True):
            with tempfile.TemporaryDirectory(prefix="rayq-acl-bench-") as tmp:
                rate, broker = run(Path(tmp), acl, work)
            best[acl] = max(best[acl], (rate, broker))
            print(
                f"round {r + 1}: ACL {'on ' if acl else 'off'} {rate:10,.0f} msg/s "
                f"({rate * len(BODY) / 2**20:6.1f} MiB/s), broker side "
                f"{broker:10,.0f} msg/s"
            )
    (off, _), (on, on_broker) = best[False], best[True]
    print(f"produce, {PER_BATCH} x 1 KiB per batch, {args.batches} batches, best of {args.rounds}:")
    print(f"  ACL off                          {off:10,.0f} msg/s")
    print(f"  ACL on, client signing included  {on:10,.0f} msg/s  ratio {on / off:.2f}x")
    print(
        f"  ACL on, broker side only         {on_broker:10,.0f} msg/s  ratio "
        f"{on_broker / off:.2f}x (target >= 0.9x)"
    )


if __name__ == "__main__":
    main()
