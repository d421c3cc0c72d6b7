"""A tour of rayq's storage engine: write, read back, crash, recover, query by key.

Run: ``make demo`` or ``.venv/bin/python examples/store_tour.py [--dir DIR] [--messages N]``.
No Ray needed: this is the store a broker actor holds.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path

from rayq.store import (
    GetStatus,
    InnerMessage,
    MessageStore,
    StoreConfig,
    TagFilter,
    UniqIdGenerator,
    decode_records,
)

TOPIC = "orders"
QUEUES = 4


def write(store: MessageStore, count: int, ids: UniqIdGenerator) -> list[str]:
    """Send ``count`` orders in batches of 100, one queue per batch; returns their ids."""
    sent: list[str] = []
    for start in range(0, count, 100):
        queue = (start // 100) % QUEUES
        batch = [
            InnerMessage(
                topic=TOPIC,
                queue_id=queue,
                body=f'{{"order": {i}, "qty": {i % 7}}}'.encode(),
                tags="paid" if i % 3 else "refund",
                keys=f"order-{i}",
                uniq_key=ids.next_id(),
            )
            for i in range(start, min(start + 100, count))
        ]
        result = store.put_messages(batch)
        assert result.ok, result.error
        sent += result.msg_ids
    return sent


def read_queue(store: MessageStore, queue: int, tags: str = "*") -> int:
    """Pull a whole queue, 32 at a time, like a consumer would; returns the count."""
    offset, count = 0, 0
    tag_filter = TagFilter.parse(tags)
    while True:
        got = store.get_messages("tour", TOPIC, queue, offset, 32, tag_filter)
        if got.status not in (GetStatus.FOUND, GetStatus.NO_MATCHED_MESSAGE):
            return count
        count += got.count
        offset = got.next_begin_offset


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, help="store directory (default: a temp dir)")
    parser.add_argument("--messages", type=int, default=20_000)
    args = parser.parse_args()
    logging.basicConfig(stream=sys.stdout, level=logging.WARNING, format="   (log) %(message)s")
    with tempfile.TemporaryDirectory(prefix="rayq-tour-") as tmp:
        root = args.dir or Path(tmp) / "store"
        tour(root, args.messages)


def tour(root: Path, count: int) -> None:
    config = StoreConfig.for_tests(commitlog_segment_size_bytes=1 << 20)
    ids = UniqIdGenerator()
    print(f"store directory: {root}")

    store = MessageStore(root, config)
    t0 = time.perf_counter()
    sent = write(store, count, ids)
    print(
        f"1. wrote {count:,} messages to {TOPIC} ({QUEUES} queues) in "
        f"{time.perf_counter() - t0:.2f} s; segments: {len(store.commitlog.file.segments)}"
    )
    t0 = time.perf_counter()
    total = sum(read_queue(store, q) for q in range(QUEUES))
    refunds = sum(read_queue(store, q, "refund") for q in range(QUEUES))
    print(
        f"2. read back {total:,} messages in {time.perf_counter() - t0:.2f} s "
        f"({refunds:,} tagged 'refund' via the tag filter)"
    )

    store.flush()  # durable up to here; the next writes are not flushed
    write(store, 500, ids)
    store.crash()  # the process dies: no flush, no clean close
    print("3. flushed, wrote 500 more, then crashed without closing")

    store = MessageStore(root, config)
    rep = store.recovery
    print(
        f"4. reopened: abnormal={rep.abnormal}, re-validated {rep.records_validated:,} "
        f"records from offset {rep.start_offset:,}; "
        f"queue max offsets {[store.max_offset(TOPIC, q) for q in range(QUEUES)]}"
    )

    found = store.query_message(TOPIC, "order-4242")
    print(f"5. query by key 'order-4242': {[m.body.decode() for m in found]}")
    by_id = store.view_message(sent[7])
    print(f"6. view by message id {sent[7]}: keys={by_id.keys if by_id else None}")
    first = decode_records(store.get_messages("tour", TOPIC, 0, 0, 1).buffer)[0]
    print(
        f"7. first message of queue 0: offset msg id {first.offset_msg_id}, "
        f"stored at {first.store_timestamp}, body {first.body.decode()}"
    )
    store.close()
    with MessageStore(root, config) as again:
        print(
            f"8. closed cleanly; a reopen re-validates {again.recovery.records_validated} records"
        )


if __name__ == "__main__":
    main()
