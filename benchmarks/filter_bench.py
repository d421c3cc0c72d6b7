"""Filtered pull throughput on one broker, in one process (no Ray): unfiltered, by tag,
and by an SQL92 property filter, each selecting half of the messages.

Run: ``.venv/bin/python benchmarks/filter_bench.py [--messages N]``

Prints messages scanned per second (the queue read from start to end in pulls of up to
1,024, as a pull consumer asks) and the ratio to the unfiltered pull.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from rayq.actors.protocol import CreateTopicRequest, PullRequest
from rayq.actors.protocol.config import BrokerConfig
from rayq.actors.server.broker_server import BrokerServer
from rayq.store import InnerMessage, StoreConfig
from rayq.store.batch import encode_batch

BODY = b"x" * 1024


def fill(server: BrokerServer, count: int) -> None:
    server.create_topic(
        CreateTopicRequest(topic="F", read_queue_nums=1, write_queue_nums=1, perm=6)
    )
    for start in range(0, count, 100):
        msgs = [
            InnerMessage(
                topic="F",
                queue_id=0,
                body=BODY,
                tags="even" if i % 2 else "odd",
                properties={"n": str(i), "region": "eu" if i % 2 else "us"},
            )
            for i in range(start, start + 100)
        ]
        server.put(encode_batch(msgs, max_body_bytes=1 << 20, max_properties_bytes=4096))


def drain(server: BrokerServer, expression: str, kind: str) -> tuple[float, int]:
    offset, got, t0 = 0, 0, time.perf_counter()
    end = server.store.max_offset("F", 0)
    while offset < end:
        resp = server.pull(
            PullRequest(
                group="g",
                topic="F",
                queue_id=0,
                queue_offset=offset,
                max_nums=1024,
                expression=expression,
                expression_type=kind,
            )
        )
        got += resp.count
        offset = resp.next_offset
    return end / (time.perf_counter() - t0), got


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=200_000)
    args = parser.parse_args()
    config = BrokerConfig(
        enable_property_filter=True,
        store=StoreConfig(
            disk_warning_ratio=1.0, disk_max_used_space_ratio=1.0, disk_clean_forcibly_ratio=1.0
        ),
    )
    with tempfile.TemporaryDirectory(prefix="rayq-filter-bench-") as tmp:
        server = BrokerServer(config, str(Path(tmp) / "b"))
        fill(server, args.messages)
        runs = [
            ("unfiltered", "*", "TAG"),
            ("tag 'even'", "even", "TAG"),
            ("SQL92 region = 'eu' AND n >= 0", "region = 'eu' AND n >= 0", "SQL92"),
        ]
        base = None
        for label, expression, kind in runs:
            drain(server, expression, kind)  # warm the page cache and the caches
            rate, got = drain(server, expression, kind)
            base = base or rate
            print(
                f"pull {label:<34} {rate:>10,.0f} msgs scanned/s ({got:,} delivered), "
                f"{rate / base:.2f}x unfiltered"
            )
        server.close()


if __name__ == "__main__":
    main()
