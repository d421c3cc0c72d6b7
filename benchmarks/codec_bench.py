"""Client work per message, without Ray: what a producer does to send a batch and what a
consumer does to hand out a pulled one.

Run: ``.venv/bin/python benchmarks/codec_bench.py [--rounds N]``.

Prints µs per message (median of ``--rounds`` rounds, each timing many batches):

- ``encode``: a batch of 100 ``rayq.Message`` made ready to send as ``send_batch``
  does: ``produce_batch.prepare_batch`` (the checks of ``produce_validation.prepare``
  in bulk, properties, ids) and one ``encode_batch`` (the bytes one ``Broker.put``
  carries); once for 1 KiB bodies with tags and one key, once for 128 B bodies with no
  tags or keys (the shape of the bare-Ray-call comparison in ``../shared/anchors``);
- ``decode``: a pulled batch of 100 (the raw commit-log records a ``PullResponse``
  carries, read from a real store) turned into the ``MessageExt`` a consumer hands
  out: ``decode_records`` and the exact tag check. A decoded message leaves its
  properties, keys, msg ids and hosts raw until first used, so this is what a
  consumer pays before it looks at them;
- ``decode + msg_id``: the same, then ``msg_id`` read once per message, which decodes
  those fields (what a listener that reads ids or properties pays in all).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from rayq.actors.protocol.config import ClientConfig
from rayq.producer.batch import prepare_batch
from rayq.producer.validation import MAX_PROPERTIES_BYTES
from rayq.store import InnerMessage, Message, MessageStore, StoreConfig, UniqIdGenerator
from rayq.store.batch import encode_batch
from rayq.store.codec import decode_records
from rayq.store.filters import TagFilter

try:
    from results import record
except ImportError:  # run as a module
    from benchmarks.results import record


BATCH = 100
BODY = 1024
BATCHES_PER_ROUND = 200


SMALL_BODY = 128


def tagged_batch() -> list[Message]:
    return [
        Message("bench", bytes([i % 251]) * BODY, tags="TagA", keys=[f"k{i}"]) for i in range(BATCH)
    ]


def plain_batch() -> list[Message]:
    return [Message("bench", bytes([i % 251]) * SMALL_BODY) for i in range(BATCH)]


def encode_round(msgs: list[Message], config: ClientConfig, ids: UniqIdGenerator) -> float:
    """µs per message to prepare and encode ``msgs`` ``BATCHES_PER_ROUND`` times."""
    started = time.perf_counter()
    for _ in range(BATCHES_PER_ROUND):
        inners = prepare_batch(msgs, "pg", config, ids)
        encode_batch(
            inners,
            max_body_bytes=config.max_message_size_bytes,
            max_properties_bytes=MAX_PROPERTIES_BYTES,
        )
    return (time.perf_counter() - started) * 1e6 / (BATCHES_PER_ROUND * len(msgs))


def pulled_buffer(root: Path, ids: UniqIdGenerator) -> bytes:
    """The records of one pull of 100 messages, as a broker returns them."""
    store = MessageStore(root, StoreConfig.for_tests(), store_host="127.0.0.1:10911")
    try:
        inners = [
            InnerMessage(
                topic="bench",
                queue_id=0,
                body=bytes([i % 251]) * BODY,
                tags="TagA",
                keys=f"k{i}",
                uniq_key=ids.next_id(),
                properties={"PGROUP": "pg"},
            )
            for i in range(BATCH)
        ]
        batch = encode_batch(inners, max_body_bytes=4 << 20, max_properties_bytes=32767)
        store.put_encoded(batch)
        parts, offset = [], 0
        while offset < BATCH:  # the store hands out at most 32 per read, as the broker loops
            got = store.get_messages("cg", "bench", 0, offset, BATCH - offset)
            parts.append(got.buffer)
            offset = got.next_begin_offset
        return b"".join(parts)
    finally:
        store.close()


def decode_round(buffer: bytes, tag_filter: TagFilter, read_msg_ids: bool = False) -> float:
    """µs per message to decode ``BATCHES_PER_ROUND`` pulled batches and check tags
    (and read each ``msg_id``)."""
    started = time.perf_counter()
    for _ in range(BATCHES_PER_ROUND):
        msgs = decode_records(buffer, broker_name="broker-a")
        kept = [m for m in msgs if tag_filter.matches_tags(m.tags)]
        if read_msg_ids:
            [m.msg_id for m in kept]
    return (time.perf_counter() - started) * 1e6 / (BATCHES_PER_ROUND * BATCH)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    ids = UniqIdGenerator()
    config = ClientConfig()
    tagged, plain = tagged_batch(), plain_batch()
    encode = [encode_round(tagged, config, ids) for _ in range(args.rounds)]
    encode_plain = [encode_round(plain, config, ids) for _ in range(args.rounds)]
    with tempfile.TemporaryDirectory() as tmp:
        buffer = pulled_buffer(Path(tmp), ids)
    tag_filter = TagFilter.parse("TagA || TagB")
    decode = [decode_round(buffer, tag_filter) for _ in range(args.rounds)]
    decode_ids = [decode_round(buffer, tag_filter, read_msg_ids=True) for _ in range(args.rounds)]
    print(
        f"encode {BATCH} x {BODY} B, tags and a key (prepare_batch + encode_batch): "
        f"{statistics.median(encode):.2f} us/msg (min {min(encode):.2f})   target <= 8"
    )
    print(
        f"encode {BATCH} x {SMALL_BODY} B, no tags or keys (prepare_batch + encode_batch): "
        f"{statistics.median(encode_plain):.2f} us/msg (min {min(encode_plain):.2f})"
        "   (no target of its own: it bounds the 128 B produce figure)"
    )
    print(
        f"decode a pulled batch of {BATCH} (decode_records + tag check): "
        f"{statistics.median(decode):.2f} us/msg (min {min(decode):.2f})   target <= 2"
    )
    print(
        f"decode a pulled batch of {BATCH} + read each msg_id (decodes properties, hosts): "
        f"{statistics.median(decode_ids):.2f} us/msg (min {min(decode_ids):.2f})"
    )
    for metric, rounds, size in (
        ("encode_tagged", encode, BODY),
        ("encode_plain", encode_plain, SMALL_BODY),
        ("decode", decode, BODY),
        ("decode_msg_ids", decode_ids, BODY),
    ):
        record("codec_bench", metric, statistics.median(rounds), "us/msg", size=size, batch=BATCH)


if __name__ == "__main__":
    main()
