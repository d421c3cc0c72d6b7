"""Storage-engine figures on this machine: one process, no Ray.

Run: ``make bench`` or ``.venv/bin/python benchmarks/store_bench.py [--quick]``.

Prints, for 1 KiB and 128 B bodies in batches of 100 with async flush (a flusher
thread making the commit log durable every 500 ms, as the Flusher actor will):
append msgs/s of batches encoded by the producer (``put_encoded``, what the broker
does per batch), the producer's encoding rate (``encode_batch``), both in one
process (``put_messages``); sequential ``get_messages`` (32 per call) msgs/s; abnormal
recovery time of a ~1 GiB commit log (checkpoint, consume queues and index all
gone: every record re-validated and re-dispatched), undamaged and with one damaged
record in the middle (resynchronised past); and anonymous memory
(RssAnon, which leaves out mapped file pages) after 1 M and 5 M stored messages.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path

from rayq.store import DEFAULT_STORE_CONFIG as CFG
from rayq.store import (
    EncodedBatch,
    InnerMessage,
    MessageStore,
    UniqIdGenerator,
    decode_records,
    encode_batch,
)
from rayq.store.segment import segment_name

try:
    from results import progress, record
except ImportError:  # run as a module
    from benchmarks.results import progress, record


BATCH = 100
QUEUES = 8


def rss_anon_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1])
    return -1


def make_batches(body_size: int, count: int) -> list[list[InnerMessage]]:
    """Batches as the broker receives them: one topic/queue each, with ids and keys."""
    gen = UniqIdGenerator()
    body = b"x" * body_size
    batches = []
    for b in range(count // BATCH):
        ids = gen.next_ids(BATCH)
        batches.append(
            [
                InnerMessage(
                    topic="bench",
                    queue_id=b % QUEUES,
                    body=body,
                    tags="TagA",
                    keys=f"k{b}-{i}",
                    uniq_key=ids[i],
                    born_timestamp=1,
                    born_host="127.0.0.1:5000",
                )
                for i in range(BATCH)
            ]
        )
    return batches


class FlusherThread:
    """Async flush: make written bytes durable every 500 ms, off the append path."""

    def __init__(self, store: MessageStore) -> None:
        self.store = store
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        while not self.stop.wait(0.5):
            self.store.flusher.flush_commitlog(self.store.written_offset, least_pages=4)

    def __enter__(self) -> FlusherThread:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def encode(batches: list[list[InnerMessage]]) -> list[EncodedBatch]:
    return [
        encode_batch(
            b,
            max_body_bytes=CFG.max_message_size_bytes,
            max_properties_bytes=CFG.max_properties_size_bytes,
        )
        for b in batches
    ]


def append(store: MessageStore, batches: list[EncodedBatch]) -> float:
    t0 = time.perf_counter()
    with FlusherThread(store):
        for batch in batches:
            result = store.put_encoded(batch)
            assert result.ok, result.error
    return len(batches) * BATCH / (time.perf_counter() - t0)


def encode_and_append(store: MessageStore, batches: list[list[InnerMessage]]) -> float:
    t0 = time.perf_counter()
    with FlusherThread(store):
        for batch in batches:
            result = store.put_messages(batch)
            assert result.ok, result.error
    return len(batches) * BATCH / (time.perf_counter() - t0)


def read_all(store: MessageStore) -> tuple[float, int]:
    t0 = time.perf_counter()
    n = 0
    for qid in range(QUEUES):
        offset = 0
        while True:
            r = store.get_messages("g", "bench", qid, offset, 32)
            if not r.count:
                break
            n += r.count
            offset = r.next_begin_offset
    return n / (time.perf_counter() - t0), n


def bench_throughput(root: Path, body_size: int, count: int) -> None:
    batches = make_batches(body_size, count)
    t0 = time.perf_counter()
    encoded = encode(batches)
    encode_rate = count / (time.perf_counter() - t0)
    rates, both = [], []
    with progress(3, f"{body_size} B rounds") as advance:
        for rnd in range(3):
            shutil.rmtree(root, ignore_errors=True)
            store = MessageStore(root)
            rates.append(append(store, encoded))
            if rnd == 2:
                read_rate, n = read_all(store)
                assert n == count, (n, count)
            store.close()
            shutil.rmtree(root, ignore_errors=True)
            store = MessageStore(root)
            both.append(encode_and_append(store, batches))
            store.close()
            advance(1)
    runs = ", ".join(f"{r:,.0f}" for r in rates)
    print(
        f"append  {body_size:>5} B, batches of {BATCH} (broker: put_encoded): "
        f"{statistics.median(rates):>10,.0f} msgs/s  (median of 3: {runs})"
    )
    print(
        f"encode  {body_size:>5} B (producer: encode_batch):             "
        f"{encode_rate:>10,.0f} msgs/s"
    )
    print(
        f"both    {body_size:>5} B in one process (put_messages):         "
        f"{statistics.median(both):>10,.0f} msgs/s"
    )
    print(
        f"read    {body_size:>5} B, get_messages x32:                     "
        f"{read_rate:>10,.0f} msgs/s"
    )
    for metric, value in (
        ("append", statistics.median(rates)),
        ("encode", encode_rate),
        ("encode_and_append", statistics.median(both)),
        ("read", read_rate),
    ):
        record("store_bench", metric, value, "msgs/s", size=body_size, batch=BATCH)


def bench_recovery(root: Path, target_bytes: int) -> None:
    """Recovery of ~target_bytes with checkpoint, queues and index gone: undamaged, then
    with one record's size field flipped in the middle of the log (resync past it)."""
    shutil.rmtree(root, ignore_errors=True)
    store = MessageStore(root)
    per_batch = encode(make_batches(1024, 100_000))
    written = 0
    with progress(target_bytes, "writing the log to recover") as advance:
        while store.written_offset < target_bytes:
            before = store.written_offset
            store.put_encoded(per_batch[written % len(per_batch)])
            written += 1
            advance(store.written_offset - before)
    size = store.written_offset
    store.flush()
    store.crash()
    for damaged in (False, True):
        if damaged:
            store = MessageStore(root)
            topic = store.topics()[0]
            middle = store.get_messages("bench", topic, 0, store.max_offset(topic, 0) // 2, 1)
            offset = decode_records(middle.buffer)[0].commitlog_offset
            store.close()
            local = offset % CFG.commitlog_segment_size_bytes
            with (root / "commitlog" / segment_name(offset - local)).open("r+b") as f:
                f.seek(local + 1)
                f.write(b"\x7f")  # the size field's second byte: the record cannot be framed
        (root / "checkpoint").unlink(missing_ok=True)
        shutil.rmtree(root / "consumequeue")
        shutil.rmtree(root / "index")
        t0 = time.perf_counter()
        store = MessageStore(root)
        seconds = time.perf_counter() - t0
        rep = store.recovery
        store.close()
        what = "one damaged record in the middle" if damaged else "undamaged"
        record(
            "store_bench",
            "recovery",
            seconds / (size / 2**30),
            "s/GiB",
            damaged=damaged,
            size_bytes=size,
        )
        print(
            f"recovery (no checkpoint/queues/index), {what}: {size / 2**30:.2f} GiB, "
            f"{rep.records_validated:,} records: {seconds:.2f} s "
            f"({seconds / (size / 2**30):.2f} s/GiB); set aside {rep.spans_set_aside}, "
            f"truncated at {rep.truncated_at}"
        )


def bench_memory(root: Path, counts: list[int]) -> None:
    shutil.rmtree(root, ignore_errors=True)
    store = MessageStore(root)
    batches = encode(make_batches(1024, 100_000))
    stored = 0
    base = rss_anon_kib()
    print(f"RssAnon before writing: {base / 1024:.1f} MiB")
    for target in counts:
        while stored < target:
            store.put_encoded(batches[(stored // BATCH) % len(batches)])
            stored += BATCH
            if stored % 1_000_000 == 0:
                store.flush()
        print(f"RssAnon after {stored:>10,} messages: {rss_anon_kib() / 1024:.1f} MiB")
    store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (smoke run)")
    args = parser.parse_args()
    count = 50_000 if args.quick else 500_000
    with tempfile.TemporaryDirectory(prefix="rayq-bench-") as tmp:
        root = Path(tmp) / "store"
        print(f"store_bench: {count:,} messages per throughput run")
        bench_throughput(root, 1024, count)
        bench_throughput(root, 128, count)
        bench_recovery(root, (64 if args.quick else 1024) * 2**20)
        bench_memory(root, [100_000, 200_000] if args.quick else [1_000_000, 5_000_000])
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
