"""Broker-side Arrow page building, without Ray: what a broker does for one
``read_arrow`` call of Spark or Ray Data (rayq/actors/server/columnar.py).

Run: ``.venv/bin/python benchmarks/arrow_bench.py [--messages N] [--rounds R]``.

A store in a temp dir is filled with ``--messages`` messages of 1 KiB bodies (a tag,
one key, a unique id: what ``Producer.send`` writes) on one queue, then read back in
4 MiB pages, ``--rounds`` times. Prints msgs/s and body MB/s (median of the rounds,
best beside it) of:

- ``page``: ``read_columns``, the whole page build: consume-queue entries, record
  copy and checks (size, magic, CRC: store/bulk_reader.py), Arrow columns;
- ``read``: the store part alone (``MessageStore.read_page``);
- ``decode``: the columns alone (``decode_columns`` over pages already read);
- ``page + ipc``: ``page`` and an Arrow IPC stream of it as bytes (what the broker
  shipped before it returned the record batch itself);
- ``records``: for comparison, the consumer's record-by-record decode
  (``decode_records``) of the same pages.

Target (issue 16): ``page`` >= 1 M msgs/s at 1 KiB.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from rayq.actors.server import columnar
from rayq.store import InnerMessage, MessageStore, StoreConfig
from rayq.store.codec import decode_records

try:
    from results import record
except ImportError:  # run as a module
    from benchmarks.results import record

BODY = 1024
PAGE_BYTES = 4 * 1024 * 1024
PUT_BATCH = 1000
TARGET_MSGS_S = 1_000_000


def fill(store: MessageStore, messages: int) -> None:
    body = bytes(range(256)) * (BODY // 256)
    for first in range(0, messages, PUT_BATCH):
        batch = [
            InnerMessage(
                topic="T",
                queue_id=0,
                body=body,
                tags="TagA",
                keys=f"k{i}",
                uniq_key=f"7F00000100002A9F0000000000{i:06X}",
                born_timestamp=i,
            )
            for i in range(first, min(messages, first + PUT_BATCH))
        ]
        assert store.put_messages(batch).ok


def read_all(store: MessageStore, messages: int, ipc: bool = False) -> int:
    rows, offset = 0, 0
    while offset < messages:
        batch, offset = columnar.read_columns(store, "T", 0, offset, messages, PAGE_BYTES, "b")
        if ipc:
            columnar.to_ipc(batch)
        rows += batch.num_rows
    return rows


def pages(store: MessageStore, messages: int, keep: bool = True) -> list:
    """The store's pages (kept for ``decode``, or dropped as read: kept pages take fresh
    memory each round, as a broker that ships its pages does not)."""
    out, offset = [], 0
    while offset < messages:
        page = store.read_page("T", 0, offset, columnar.MAX_ENTRIES_PER_READ, PAGE_BYTES)
        if keep:
            out.append(page)
        offset = page.next_offset
    return out


def rate(fn: Callable[[], object], messages: int, rounds: int) -> tuple[float, float, float]:
    """Median and best msgs/s over ``rounds`` (one warm-up round first), and the median
    msgs per CPU-second of this process (less sensitive to other work on the machine)."""
    fn()
    rates, cpu_rates = [], []
    for _ in range(rounds):
        started, cpu = time.perf_counter(), time.process_time()
        fn()
        rates.append(messages / (time.perf_counter() - started))
        cpu_rates.append(messages / max(time.process_time() - cpu, 1e-9))
    return statistics.median(rates), max(rates), statistics.median(cpu_rates)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    n, rounds = args.messages, args.rounds
    config = StoreConfig.from_dict({"commitlog_segment_size_bytes": 1 << 30})
    with tempfile.TemporaryDirectory() as tmp, MessageStore(Path(tmp) / "s", config) as store:
        fill(store, n)
        assert read_all(store, n) == n
        read = pages(store, n)
        parts = {
            "page": lambda: read_all(store, n),
            "read": lambda: pages(store, n, keep=False),
            "decode": lambda: [columnar.decode_columns(p.buffer, p.starts, "T") for p in read],
            "page + ipc": lambda: read_all(store, n, ipc=True),
            "records": lambda: [decode_records(p.buffer) for p in read],
        }
        print(f"{n} messages of {BODY} B, {PAGE_BYTES >> 20} MiB pages, {rounds} rounds")
        medians = {}
        for name, fn in parts.items():
            median, best, cpu = medians[name] = rate(fn, n, rounds)
            mb_s = median * BODY / 1e6
            print(
                f"{name:>11}: {median:>12,.0f} msgs/s  {mb_s:>6,.0f} MB/s  (best {best:,.0f}; "
                f"{cpu:,.0f} msgs per CPU-second)"
            )
            params = {"size": BODY, "best": best, "cpu": cpu, "rounds": rounds}
            record("arrow_bench", name, median, "msgs/s", **params)
        page, _, page_cpu = medians["page"]
        print(
            f"page build: {page / TARGET_MSGS_S:.2f} x the 1 M msgs/s target "
            f"({page_cpu / TARGET_MSGS_S:.2f} x per CPU-second)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
