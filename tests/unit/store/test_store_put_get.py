"""MessageStore appends and reads: offsets, round trips, statuses, pull caps, filters, lookups."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from rayq.store import (
    FakeClock,
    GetStatus,
    InnerMessage,
    MessageExt,
    MessageStore,
    PutResult,
    StoreConfig,
    TagFilter,
    codec,
    decode_records,
)

KiB = 1024
T0 = 1_700_000_000_000
CONFIG = StoreConfig.for_tests()
SEGMENT = CONFIG.commitlog_segment_size_bytes
STORE_HOST = "127.0.0.1:10911"


def msg(
    topic: str = "T", queue_id: int = 0, body: bytes = b"payload", **fields: object
) -> InnerMessage:
    return InnerMessage(topic=topic, queue_id=queue_id, body=body, **fields)  # type: ignore[arg-type]


def put_ok(store: MessageStore, msgs: list[InnerMessage]) -> PutResult:
    result = store.put_messages(msgs)
    assert result.ok, result.error
    return result


def open_store(
    root: Path, config: StoreConfig = CONFIG, clock: FakeClock | None = None, ratio: float = 0.1
) -> MessageStore:
    return MessageStore(
        root,
        config,
        clock=clock or FakeClock(T0),
        store_host=STORE_HOST,
        disk_usage=lambda _path: ratio,
    )


def read_queue(store: MessageStore, topic: str, queue_id: int, start: int = 0) -> list[MessageExt]:
    """Every message of a queue from ``start``, pulled 32 at a time."""
    out: list[MessageExt] = []
    offset = start
    while True:
        r = store.get_messages("g", topic, queue_id, offset, 32)
        if r.status is GetStatus.OFFSET_OVERFLOW_ONE:
            return out
        assert r.status is GetStatus.FOUND, r.status
        batch = decode_records(r.buffer)
        assert len(batch) == r.count
        assert r.next_begin_offset == offset + r.count
        out += batch
        offset = r.next_begin_offset


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MessageStore]:
    s = open_store(tmp_path)
    yield s
    s.close()


# ------------------------------------------------------------------------------ append


def test_mixed_batch_gets_consecutive_queue_offsets_per_topic_and_queue(
    store: MessageStore,
) -> None:
    """Each topic/queue of a mixed batch counts from its own next offset, across batches too."""
    keys = [("T", 0), ("T", 1), ("T", 0), ("U", 0), ("T", 1), ("T", 0), ("U", 7)]
    batch = [msg(t, q, f"first-{i}".encode()) for i, (t, q) in enumerate(keys)]
    first = put_ok(store, batch)
    assert len(first.results) == len(batch)
    for m, r in zip(batch, first.results, strict=True):  # result i describes message i
        stored = store.lookup_message(r.commitlog_offset)
        assert stored is not None
        assert (stored.body, stored.topic, stored.queue_id) == (m.body, m.topic, m.queue_id)
        assert stored.queue_offset == r.queue_offset
    assert [r.queue_offset for r in first.results] == [0, 0, 1, 0, 1, 2, 0]
    second = put_ok(store, [msg(t, q) for t, q in keys])
    assert [r.queue_offset for r in second.results] == [3, 2, 4, 1, 3, 5, 1]
    assert store.max_offset("T", 0) == 6
    assert store.max_offset("T", 1) == 4
    assert store.max_offset("U", 0) == 2
    assert store.max_offset("U", 7) == 2
    got = read_queue(store, "T", 1)
    assert [m.queue_offset for m in got] == [0, 1, 2, 3]
    assert all((m.topic, m.queue_id) == ("T", 1) for m in got)


def test_put_results_carry_uniq_key_or_offset_msg_id(store: MessageStore) -> None:
    """msg_id is the UNIQ_KEY when given, else the offset msg id (store host + commitlog offset)."""
    result = put_ok(
        store, [msg(uniq_key="AC11000100002A9F0000000000000001"), msg(), msg(uniq_key="U-2")]
    )
    with_uniq, without, second_uniq = result.results
    assert with_uniq.msg_id == "AC11000100002A9F0000000000000001"
    assert second_uniq.msg_id == "U-2"
    assert without.msg_id == without.offset_msg_id
    for r in result.results:
        assert r.offset_msg_id == codec.offset_msg_id(
            codec.encode_host(STORE_HOST), r.commitlog_offset
        )
        assert codec.decode_offset_msg_id(r.offset_msg_id) == (STORE_HOST, r.commitlog_offset)
    assert result.store_timestamp == T0


def test_put_results_commitlog_offsets_increase_by_store_size(store: MessageStore) -> None:
    """In a segment each record starts where the previous ended; store_size is the record size."""
    bodies = [b"a", b"bb" * 50, b"c" * 1000]
    result = put_ok(store, [msg("Topic", 0, b, tags="TagA", keys="k1 k2") for b in bodies])
    props = len("TAGS\x01TagA\x02KEYS\x01k1 k2\x02")
    rs = result.results
    assert [r.store_size for r in rs] == [91 + len(b) + len("Topic") + props for b in bodies]
    assert rs[0].commitlog_offset == 0
    for a, b in itertools.pairwise(rs):
        assert b.commitlog_offset == a.commitlog_offset + a.store_size
    nxt = put_ok(store, [msg()]).results[0]
    assert nxt.commitlog_offset == rs[-1].commitlog_offset + rs[-1].store_size
    assert store.written_offset == nxt.commitlog_offset + nxt.store_size


def test_records_across_many_segment_rolls_read_back_identical(tmp_path: Path) -> None:
    """Random batches over several segments read back with every field as sent."""
    clock = FakeClock(T0)
    store = open_store(tmp_path, clock=clock)
    rng = random.Random(7)
    sent: dict[tuple[str, int, int], tuple[InnerMessage, int, int]] = {}
    for n in range(120):
        batch = []
        for _ in range(rng.randint(1, 12)):
            i = len(sent) + len(batch)
            others = {"color": rng.choice(["red", "grün", "青"]), "n": str(i)} if i % 3 else {}
            batch.append(
                msg(
                    rng.choice(["Orders", "Audit"]),
                    rng.randint(0, 3),
                    rng.randbytes(rng.randint(1, 3000)),
                    tags=rng.choice([None, "TagA", "TagB"]),
                    keys=rng.choice(["", f"k{i}", f"k{i} shared"]),
                    uniq_key=rng.choice(["", f"UNIQ{i:06d}"]),
                    properties=others,
                    flag=rng.randint(-(2**31), 2**31 - 1),
                    born_timestamp=T0 - rng.randint(0, 10**6),
                    born_host=f"10.0.{n % 256}.{i % 256}:{1000 + i}",
                    reconsume_times=rng.randint(0, 16),
                )
            )
        result = put_ok(store, batch)
        for m, r in zip(batch, result.results, strict=True):
            assert store.lookup_message(r.commitlog_offset).body == m.body, "results out of order"  # type: ignore[union-attr]
            assert (
                r.commitlog_offset // SEGMENT == (r.commitlog_offset + r.store_size - 1) // SEGMENT
            )
            sent[(m.topic, m.queue_id, r.queue_offset)] = (m, clock.now_ms(), r.commitlog_offset)
        clock.advance(rng.randint(1, 5000))
    segments = sorted((tmp_path / "commitlog").iterdir())
    assert len(segments) >= 8

    got = [m for t in ("Orders", "Audit") for q in range(4) for m in read_queue(store, t, q)]
    assert len(got) == len(sent)
    for m in got:
        inner, stored_at, phys = sent[(m.topic, m.queue_id, m.queue_offset)]
        assert m.body == inner.body
        assert m.tags == inner.tags
        assert m.keys == inner.keys.split()
        expected_props = {
            **({"TAGS": inner.tags} if inner.tags else {}),
            **({"KEYS": inner.keys} if inner.keys else {}),
            **({"UNIQ_KEY": inner.uniq_key} if inner.uniq_key else {}),
            **inner.properties,
        }
        assert m.properties == expected_props
        assert m.user_properties() == inner.properties
        assert m.msg_id == (inner.uniq_key or m.offset_msg_id)
        assert m.born_timestamp == inner.born_timestamp
        assert m.store_timestamp == stored_at
        assert m.born_host == inner.born_host
        assert m.store_host == STORE_HOST
        assert m.reconsume_times == inner.reconsume_times
        assert m.flag == inner.flag
        assert m.commitlog_offset == phys
    store.close()


def test_records_read_back_identical_after_reopen(tmp_path: Path) -> None:
    """Closing and reopening keeps offsets and contents."""
    store = open_store(tmp_path)
    for i in range(200):
        put_ok(store, [msg("T", i % 2, bytes([i]) * 900, keys=f"k{i}")])
    store.close()
    store = open_store(tmp_path)
    assert store.max_offset("T", 0) == 100
    got = read_queue(store, "T", 1)
    assert [m.body for m in got] == [bytes([i]) * 900 for i in range(1, 200, 2)]
    assert put_ok(store, [msg("T", 1)]).results[0].queue_offset == 100
    store.close()


# ------------------------------------------------------------------------ get statuses


def test_get_from_unknown_queue_is_no_matched_logic_queue(store: MessageStore) -> None:
    """A queue never written (other queue id or other topic) is NO_MATCHED_LOGIC_QUEUE."""
    put_ok(store, [msg("T", 0)])
    for topic, qid in [("T", 5), ("Other", 0)]:
        r = store.get_messages("g", topic, qid, 0)
        assert r.status is GetStatus.NO_MATCHED_LOGIC_QUEUE
        assert r.count == 0
        assert r.buffer == b""


def test_get_from_existing_empty_queue_is_no_message_in_queue(tmp_path: Path) -> None:
    """A consume queue that exists on disk but holds nothing is NO_MESSAGE_IN_QUEUE, next 0."""
    (tmp_path / "consumequeue" / "T" / "3").mkdir(parents=True)
    store = open_store(tmp_path)
    assert store.queue_ids("T") == [3]
    r = store.get_messages("g", "T", 3, 0)
    assert r.status is GetStatus.NO_MESSAGE_IN_QUEUE
    assert r.next_begin_offset == 0
    assert (r.min_offset, r.max_offset) == (0, 0)
    store.close()


def test_get_below_min_offset_is_offset_too_small_with_next_at_min(tmp_path: Path) -> None:
    """After retention removed a queue's head, old offsets are OFFSET_TOO_SMALL with next = min."""
    holder = [0.1]
    store = MessageStore(tmp_path, CONFIG, clock=FakeClock(T0), disk_usage=lambda _p: holder[0])
    for _ in range(4):
        put_ok(store, [msg("T", 0, b"x" * 1000) for _ in range(50)])
    holder[0] = 0.87  # past disk_clean_forcibly_ratio: old segments go even if young
    assert store.retention_tick().segments_to_delete > 0
    lo = store.min_offset("T", 0)
    assert lo > 0
    for offset in (0, lo - 1):
        r = store.get_messages("g", "T", 0, offset)
        assert r.status is GetStatus.OFFSET_TOO_SMALL
        assert r.next_begin_offset == lo
        assert r.min_offset == lo
        assert r.count == 0
    r = store.get_messages("g", "T", 0, lo, 1)
    assert r.status is GetStatus.FOUND
    assert decode_records(r.buffer)[0].queue_offset == lo
    store.close()


def test_get_at_max_offset_is_overflow_one(store: MessageStore) -> None:
    """Reading exactly at the end is OFFSET_OVERFLOW_ONE with next = max."""
    put_ok(store, [msg() for _ in range(5)])
    r = store.get_messages("g", "T", 0, 5)
    assert r.status is GetStatus.OFFSET_OVERFLOW_ONE
    assert r.next_begin_offset == 5
    assert (r.min_offset, r.max_offset) == (0, 5)
    assert r.count == 0


@pytest.mark.parametrize("offset", [6, 100, 2**62])
def test_get_past_max_offset_of_a_whole_queue_is_overflow_badly_with_next_at_min(
    store: MessageStore, offset: int
) -> None:
    """Past the end of a queue whose min offset is 0: OFFSET_OVERFLOW_BADLY, next = 0
    (RocketMQ's getMessage: read a queue that never lost a message again from its start)."""
    put_ok(store, [msg() for _ in range(5)])
    r = store.get_messages("g", "T", 0, offset)
    assert r.status is GetStatus.OFFSET_OVERFLOW_BADLY
    assert r.next_begin_offset == 0
    assert (r.min_offset, r.max_offset) == (0, 5)
    assert r.count == 0


def test_get_past_max_offset_of_a_trimmed_queue_is_overflow_badly_with_next_at_max(
    tmp_path: Path,
) -> None:
    """Past the end of a queue whose head retention removed (min > 0): next = max."""
    holder = [0.1]
    store = MessageStore(tmp_path, CONFIG, clock=FakeClock(T0), disk_usage=lambda _p: holder[0])
    for _ in range(4):
        put_ok(store, [msg("T", 0, b"x" * 1000) for _ in range(50)])
    holder[0] = 0.87  # past disk_clean_forcibly_ratio: old segments go even if young
    assert store.retention_tick().segments_to_delete > 0
    lo, hi = store.min_offset("T", 0), store.max_offset("T", 0)
    assert 0 < lo < hi
    r = store.get_messages("g", "T", 0, hi + 10)
    assert r.status is GetStatus.OFFSET_OVERFLOW_BADLY
    assert r.next_begin_offset == hi
    store.close()


def test_get_found_returns_records_and_next_begin_offset(store: MessageStore) -> None:
    """FOUND returns max_nums records from the offset and next = offset + count."""
    put_ok(store, [msg(body=f"m{i}".encode()) for i in range(20)])
    r = store.get_messages("g", "T", 0, 3, 5)
    assert r.status is GetStatus.FOUND
    assert r.count == 5
    assert r.next_begin_offset == 8
    assert (r.min_offset, r.max_offset) == (0, 20)
    got = decode_records(r.buffer)
    assert [m.body for m in got] == [f"m{i}".encode() for i in range(3, 8)]
    assert [m.queue_offset for m in got] == [3, 4, 5, 6, 7]


# -------------------------------------------------------------------------- pull caps

BIG_CONFIG = StoreConfig.for_tests(max_message_size_bytes=24 * KiB)
COLD_RATIO = 1e-9  # of physical RAM: a few bytes, so every record counts as "on disk"


def _expected_by_bytes(sizes: list[int], cap_bytes: int) -> int:
    n = total = 0
    for size in sizes:
        if n and total + size > cap_bytes:
            break
        total += size
        n += 1
    return n


def test_hot_pull_returns_at_most_32_messages(store: MessageStore) -> None:
    """In memory, one pull returns at most max_transfer_count_in_memory (32) messages."""
    put_ok(store, [msg() for _ in range(60)])
    r = store.get_messages("g", "T", 0, 0, 60)
    assert r.status is GetStatus.FOUND
    assert r.count == 32
    assert r.next_begin_offset == 32
    assert store.get_messages("g", "T", 0, 0, 10).count == 10


def test_hot_pull_returns_at_most_about_256_kib(tmp_path: Path) -> None:
    """In memory, 20 KiB records stop at max_transfer_bytes_in_memory (256 KiB)."""
    store = open_store(tmp_path, BIG_CONFIG)
    sizes = [
        r.store_size for r in put_ok(store, [msg(body=b"h" * 20 * KiB) for _ in range(20)]).results
    ]
    r = store.get_messages("g", "T", 0, 0, 32)
    expected = _expected_by_bytes(sizes, 256 * KiB)
    assert expected == 12
    assert r.count == expected
    assert len(r.buffer) <= 256 * KiB
    assert r.next_begin_offset == expected
    store.close()


def test_cold_pull_returns_at_most_8_messages(tmp_path: Path) -> None:
    """On disk, one pull returns at most max_transfer_count_on_disk (8) messages."""
    config = StoreConfig.for_tests(access_message_in_memory_max_ratio=COLD_RATIO)
    store = open_store(tmp_path, config)
    put_ok(store, [msg() for _ in range(40)])
    r = store.get_messages("g", "T", 0, 0, 32)
    assert r.count == 8
    assert r.next_begin_offset == 8
    store.close()


def test_cold_pull_returns_at_most_about_64_kib(tmp_path: Path) -> None:
    """On disk, 20 KiB records stop at max_transfer_bytes_on_disk (64 KiB)."""
    config = BIG_CONFIG.replace(access_message_in_memory_max_ratio=COLD_RATIO)
    store = open_store(tmp_path, config)
    sizes = [
        r.store_size for r in put_ok(store, [msg(body=b"c" * 20 * KiB) for _ in range(10)]).results
    ]
    r = store.get_messages("g", "T", 0, 0, 32)
    assert r.count == _expected_by_bytes(sizes, 64 * KiB) == 3
    assert len(r.buffer) <= 64 * KiB
    store.close()


def test_pull_always_returns_one_message_even_if_larger_than_the_byte_cap(tmp_path: Path) -> None:
    """A single record above the byte cap is still delivered (one per pull)."""
    config = BIG_CONFIG.replace(
        access_message_in_memory_max_ratio=COLD_RATIO, max_transfer_bytes_on_disk=1 * KiB
    )
    store = open_store(tmp_path, config)
    put_ok(store, [msg(body=b"c" * 20 * KiB) for _ in range(3)])
    r = store.get_messages("g", "T", 0, 0, 32)
    assert r.count == 1
    assert r.next_begin_offset == 1
    store.close()


# ---------------------------------------------------------------------- tag filtering


def test_tag_filter_returns_only_matching_records(store: MessageStore) -> None:
    """'TagA || TagB' skips TagC and untagged records; next_begin_offset covers what was scanned."""
    tags = ["TagA", "TagB", "TagC", None] * 10
    put_ok(store, [msg(body=f"{i}".encode(), tags=t) for i, t in enumerate(tags)])
    r = store.get_messages("g", "T", 0, 0, 32, TagFilter.parse("TagA || TagB"))
    assert r.status is GetStatus.FOUND
    got = decode_records(r.buffer)
    assert [m.tags for m in got] == ["TagA", "TagB"] * 10
    assert [m.queue_offset for m in got] == [i for i, t in enumerate(tags) if t in ("TagA", "TagB")]
    assert r.next_begin_offset == 40


def test_tag_filter_star_returns_everything(store: MessageStore) -> None:
    """'*' filters nothing, untagged records included."""
    put_ok(store, [msg(tags=t) for t in ["TagA", None, "TagC"]])
    r = store.get_messages("g", "T", 0, 0, 32, TagFilter.parse("*"))
    assert r.count == 3


def test_tag_filter_without_match_is_no_matched_message_and_advances(store: MessageStore) -> None:
    """Nothing matching: NO_MATCHED_MESSAGE, no records, next_begin_offset past what was scanned."""
    put_ok(store, [msg(tags="TagC") for _ in range(10)])
    r = store.get_messages("g", "T", 0, 2, 32, TagFilter.parse("TagA"))
    assert r.status is GetStatus.NO_MATCHED_MESSAGE
    assert r.count == 0
    assert r.buffer == b""
    assert r.next_begin_offset == 10


# ---------------------------------------------------------------------------- lookups


def test_query_message_finds_a_message_by_each_of_its_keys(store: MessageStore) -> None:
    """KEYS 'k1 k2' indexes both keys; a key of another topic is not returned."""
    put_ok(
        store,
        [
            msg("T", 0, b"one", keys="k1 k2"),
            msg("T", 1, b"two", keys="k3"),
            msg("Other", 0, b"other", keys="k1"),
        ],
    )
    for key in ("k1", "k2"):
        found = store.query_message("T", key)
        assert [m.body for m in found] == [b"one"]
        assert found[0].keys == ["k1", "k2"]
    assert [m.body for m in store.query_message("T", "k3")] == [b"two"]
    assert store.query_message("T", "k4") == []
    assert [m.body for m in store.query_message("Other", "k1")] == [b"other"]


def test_query_message_finds_by_uniq_key(store: MessageStore) -> None:
    """The UNIQ_KEY is indexed like a key."""
    put_ok(store, [msg(body=b"a", uniq_key="UNIQ-A"), msg(body=b"b", uniq_key="UNIQ-B")])
    found = store.query_message("T", "UNIQ-B")
    assert [m.body for m in found] == [b"b"]
    assert found[0].msg_id == "UNIQ-B"


def test_query_message_filters_by_store_time_range(tmp_path: Path) -> None:
    """begin_ms/end_ms select messages by store timestamp."""
    clock = FakeClock(T0)
    store = open_store(tmp_path, clock=clock)
    put_ok(store, [msg(body=b"early", keys="tk") for _ in range(3)])
    clock.advance(600_000)
    put_ok(store, [msg(body=b"late", keys="tk") for _ in range(2)])
    late = store.query_message("T", "tk", begin_ms=T0 + 300_000)
    assert [m.body for m in late] == [b"late", b"late"]
    early = store.query_message("T", "tk", begin_ms=0, end_ms=T0 + 1000)
    assert [m.body for m in early] == [b"early"] * 3
    assert len(store.query_message("T", "tk")) == 5
    assert store.query_message("T", "tk", begin_ms=T0 + 700_000) == []
    store.close()


def test_query_message_returns_at_most_max_num_newest_first(store: MessageStore) -> None:
    """max_num caps the answer; the newest messages come first."""
    put_ok(store, [msg(body=f"{i}".encode(), keys="mk") for i in range(10)])
    found = store.query_message("T", "mk", max_num=3)
    assert [m.queue_offset for m in found] == [9, 8, 7]
    assert len(store.query_message("T", "mk", max_num=32)) == 10


def test_query_message_over_many_index_files(store: MessageStore) -> None:
    """A key indexed across several index files (256 entries each) is found in every one."""
    for i in range(300):
        put_ok(store, [msg(body=f"{i}".encode(), keys=f"own{i} common", uniq_key=f"U{i}")])
    assert len(store.query_message("T", "common", max_num=1000)) == 300
    assert len(list((store.root / "index").iterdir())) > 2
    assert [m.body for m in store.query_message("T", "own5")] == [b"5"]
    assert [m.body for m in store.query_message("T", "U299")] == [b"299"]


def test_view_message_by_uniq_key_and_by_offset_msg_id(store: MessageStore) -> None:
    """view_message accepts a unique id (any topic or a given one) or an offset msg id."""
    r = put_ok(store, [msg("A", 0, b"a", uniq_key="UNIQ-A"), msg("B", 0, b"b")]).results
    assert store.view_message("UNIQ-A").body == b"a"  # type: ignore[union-attr]
    assert store.view_message("UNIQ-A", topic="A").body == b"a"  # type: ignore[union-attr]
    assert store.view_message("UNIQ-A", topic="B") is None
    by_offset = store.view_message(r[1].offset_msg_id)
    assert by_offset is not None
    assert by_offset.body == b"b"
    assert by_offset.commitlog_offset == r[1].commitlog_offset
    assert store.view_message(r[1].offset_msg_id.lower()).body == b"b"  # type: ignore[union-attr]
    assert store.view_message(r[0].offset_msg_id).body == b"a"  # type: ignore[union-attr]
    assert store.view_message("NO-SUCH-ID") is None
    wrong = codec.offset_msg_id(codec.encode_host(STORE_HOST), r[1].commitlog_offset + 1)
    assert store.view_message(wrong) is None


def test_lookup_message_by_commitlog_offset(store: MessageStore) -> None:
    """lookup_message returns the record starting at an offset, None elsewhere."""
    rs = put_ok(store, [msg(body=b"first"), msg(body=b"second", tags="TagA")]).results
    m = store.lookup_message(rs[1].commitlog_offset)
    assert m is not None
    assert (m.body, m.tags, m.queue_offset) == (b"second", "TagA", 1)
    assert store.lookup_message(rs[1].commitlog_offset + 1) is None
    assert store.lookup_message(store.written_offset) is None
    assert store.lookup_message(10 * SEGMENT) is None


def test_offset_by_time_finds_first_offset_stored_at_or_after(tmp_path: Path) -> None:
    """Binary search over store timestamps: first offset at/after the time, max if none."""
    clock = FakeClock(T0)
    store = open_store(tmp_path, clock=clock)
    for _ in range(3):  # 40 messages per second, crossing 64-entry consume-queue files
        put_ok(store, [msg() for _ in range(40)])
        clock.advance(1000)
    assert store.offset_by_time("T", 0, 0) == 0
    assert store.offset_by_time("T", 0, T0) == 0
    assert store.offset_by_time("T", 0, T0 + 1) == 40
    assert store.offset_by_time("T", 0, T0 + 1000) == 40
    assert store.offset_by_time("T", 0, T0 + 1999) == 80
    assert store.offset_by_time("T", 0, T0 + 2000) == 80
    assert store.offset_by_time("T", 0, T0 + 2001) == 120
    assert store.offset_by_time("T", 0, T0 + 10**9) == 120
    assert store.offset_by_time("Nope", 0, T0) == 0
    store.close()


def test_min_max_offsets_topics_and_queue_ids(store: MessageStore) -> None:
    """The store lists its topics and queue ids, and each queue's offset range."""
    assert store.topics() == []
    put_ok(store, [msg("B", 1), msg("A", 3), msg("A", 0), msg("A", 3)])
    assert store.topics() == ["A", "B"]
    assert store.queue_ids("A") == [0, 3]
    assert store.queue_ids("B") == [1]
    assert store.queue_ids("C") == []
    assert (store.min_offset("A", 3), store.max_offset("A", 3)) == (0, 2)
    assert (store.min_offset("A", 0), store.max_offset("A", 0)) == (0, 1)
    assert (store.min_offset("C", 0), store.max_offset("C", 0)) == (0, 0)


def test_delete_topic_drops_its_queues_only(store: MessageStore) -> None:
    """delete_topic removes the topic's consume queues; other topics are untouched."""
    put_ok(store, [msg("A", 0, b"a0"), msg("A", 1, b"a1"), msg("B", 0, b"b0")])
    assert store.delete_topic("A") == 2
    assert store.topics() == ["B"]
    assert store.queue_ids("A") == []
    assert not (store.root / "consumequeue" / "A").exists()
    assert store.get_messages("g", "A", 0, 0).status is GetStatus.NO_MATCHED_LOGIC_QUEUE
    assert [m.body for m in read_queue(store, "B", 0)] == [b"b0"]
    assert store.delete_topic("Never") == 0


def test_deleted_topic_starts_again_from_offset_zero_and_stays_deleted_after_reopen(
    tmp_path: Path,
) -> None:
    """Writing to a deleted topic recreates it from offset 0; a reopen does not resurrect it."""
    store = open_store(tmp_path)
    put_ok(store, [msg("A", 0, b"old"), msg("B", 0)])
    store.delete_topic("A")
    store.close()
    store = open_store(tmp_path)
    assert store.topics() == ["B"]
    assert put_ok(store, [msg("A", 0, b"new")]).results[0].queue_offset == 0
    assert [m.body for m in read_queue(store, "A", 0)] == [b"new"]
    store.close()
