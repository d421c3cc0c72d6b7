"""Record codec, properties, tag hashes and message ids: golden bytes and round trips."""

from __future__ import annotations

import string
from typing import Any

import pytest
from crc32c import crc32c
from hypothesis import example, given, settings
from hypothesis import strategies as st

from rayq.store import UniqIdGenerator, codec, java_string_hash
from rayq.store import properties as P
from rayq.store.codec import Check
from rayq.store.errors import InvalidMessageError
from rayq.store.message import COMPRESSED_FLAG

GOLDEN_FIELDS: dict[str, Any] = {
    "topic": "T",
    "queue_id": 1,
    "flag": 2,
    "queue_offset": 3,
    "commitlog_offset": 4,
    "sys_flag": 0,
    "born_timestamp": 1_700_000_000_000,
    "born_host": codec.encode_host("10.0.0.1:1234"),
    "store_timestamp": 1_700_000_000_500,
    "store_host": codec.encode_host("10.0.0.2:10911"),
    "reconsume_times": 5,
    "prepared_transaction_offset": 6,
    "body": b"hello",
    "properties": b"TAGS\x01A\x02",
}
# Computed once from encode_record(**GOLDEN_FIELDS); changing it must be a deliberate format change.
GOLDEN_HEX = (
    "00000068"  # total_size 104
    "52415951"  # magic "RAYQ"
    "df5b6ff0"  # crc: CRC-32C of bytes [44, 104) followed by [12, 44)
    "0000000000000003"  # queue_offset      \
    "0000000000000004"  # commitlog_offset   | store block (filled by the store)
    "0000018bcfe569f4"  # store_timestamp    |
    "0a00000200002a9f"  # store_host        /  10.0.0.2:10911
    "00000001"  # queue_id
    "00000002"  # flag
    "00000000"  # sys_flag
    "0000018bcfe56800"  # born_timestamp
    "0a000001000004d2"  # born_host 10.0.0.1:1234
    "00000005"  # reconsume_times
    "0000000000000006"  # prepared_transaction_offset
    "00000005"  # body_length
    "68656c6c6f"  # body "hello"
    "01"  # topic_length
    "54"  # topic "T"
    "0007"  # properties_length
    "54414753014102"  # properties "TAGS\x01A\x02"
)
CRC_START = 44  # the CRC covers [44, total_size), then the store block [12, 44)
STORE_BLOCK = range(12, 44)


def golden_record() -> bytes:
    return codec.encode_record(**GOLDEN_FIELDS)


# --------------------------------------------------------------------------- golden bytes


def test_encode_record_matches_golden_bytes() -> None:
    """The fixed record encodes to exactly the pinned bytes."""
    assert golden_record().hex() == GOLDEN_HEX


def test_golden_record_crc_covers_producer_bytes_then_the_store_block() -> None:
    """The CRC field (bytes 8..12) is CRC-32C of bytes [44, total_size) then [12, 44)."""
    raw = golden_record()
    assert int.from_bytes(raw[8:12], "big") == crc32c(raw[CRC_START:] + raw[12:CRC_START])
    assert codec.CRC_START == CRC_START
    assert int.from_bytes(raw[0:4], "big") == len(raw) == 91 + 5 + 1 + 7


def test_decode_record_returns_every_golden_field() -> None:
    """decode_record reads back each field, tags from properties and both message ids."""
    m = codec.decode_record(golden_record())
    assert m.topic == "T"
    assert m.body == b"hello"
    assert m.queue_id == 1
    assert m.flag == 2
    assert m.queue_offset == 3
    assert m.commitlog_offset == 4
    assert m.sys_flag == 0
    assert m.born_timestamp == 1_700_000_000_000
    assert m.born_host == "10.0.0.1:1234"
    assert m.store_timestamp == 1_700_000_000_500
    assert m.store_host == "10.0.0.2:10911"
    assert m.reconsume_times == 5
    assert m.prepared_transaction_offset == 6
    assert m.tags == "A"
    assert m.keys == []
    assert m.properties == {"TAGS": "A"}
    assert m.store_size == 104
    assert m.body_crc == 0xDF5B6FF0
    assert m.offset_msg_id == "0A00000200002A9F0000000000000004"
    assert m.msg_id == m.offset_msg_id  # no UNIQ_KEY


def test_decode_records_splits_back_to_back_records() -> None:
    """Several records laid end to end decode in order."""
    first = golden_record()
    second = codec.encode_record(**{**GOLDEN_FIELDS, "body": b"world!", "queue_offset": 4})
    msgs = codec.decode_records(first + second)
    assert [m.body for m in msgs] == [b"hello", b"world!"]
    assert [m.queue_offset for m in msgs] == [3, 4]


def test_compressed_record_body_is_inflated_on_decode() -> None:
    """A body stored with COMPRESSED_FLAG is zlib-decompressed unless decompress=False."""
    import zlib

    packed = zlib.compress(b"x" * 1000)
    raw = codec.encode_record(**{**GOLDEN_FIELDS, "body": packed, "sys_flag": COMPRESSED_FLAG})
    assert codec.decode_record(raw).body == b"x" * 1000
    assert codec.decode_record(raw, decompress=False).body == packed


# ------------------------------------------------------------------------ round trips

ascii_topics = st.text(
    alphabet=string.ascii_letters + string.digits + "%|_-", min_size=1, max_size=255
)
prop_text = st.text(
    alphabet=st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
    max_size=30,
)
prop_names = prop_text.filter(bool)
prop_dicts = st.dictionaries(prop_names, prop_text, max_size=6)
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
ipv4 = st.tuples(*[st.integers(0, 255)] * 4).map(lambda t: ".".join(map(str, t)))
hosts = st.builds(lambda ip, port: f"{ip}:{port}", ipv4, st.integers(0, 65535))


@settings(max_examples=200, deadline=None)
@given(
    topic=ascii_topics,
    body=st.binary(max_size=2048),
    props=prop_dicts,
    queue_id=int32,
    flag=int32,
    queue_offset=int64,
    commitlog_offset=int64,
    sys_flag=int32.map(lambda v: v & ~COMPRESSED_FLAG),
    born_timestamp=int64,
    store_timestamp=int64,
    born_host=hosts,
    store_host=hosts,
    reconsume_times=int32,
    prepared=int64,
)
def test_any_record_round_trips_and_checks_ok(
    topic: str,
    body: bytes,
    props: dict[str, str],
    queue_id: int,
    flag: int,
    queue_offset: int,
    commitlog_offset: int,
    sys_flag: int,
    born_timestamp: int,
    store_timestamp: int,
    born_host: str,
    store_host: str,
    reconsume_times: int,
    prepared: int,
) -> None:
    """encode_record -> check_record is OK -> decode_record gives back every field."""
    raw = codec.encode_record(
        topic=topic,
        body=body,
        properties=P.encode_properties(props).encode("utf-8"),
        queue_id=queue_id,
        flag=flag,
        queue_offset=queue_offset,
        commitlog_offset=commitlog_offset,
        sys_flag=sys_flag,
        born_timestamp=born_timestamp,
        store_timestamp=store_timestamp,
        born_host=codec.encode_host(born_host),
        store_host=codec.encode_host(store_host),
        reconsume_times=reconsume_times,
        prepared_transaction_offset=prepared,
    )
    assert codec.check_record(memoryview(raw), 0, len(raw)) == (Check.OK, len(raw))
    m = codec.decode_record(raw)
    assert (m.topic, m.body, m.properties) == (topic, body, props)
    assert (m.queue_id, m.flag, m.sys_flag, m.reconsume_times) == (
        queue_id,
        flag,
        sys_flag,
        reconsume_times,
    )
    assert (m.queue_offset, m.commitlog_offset, m.prepared_transaction_offset) == (
        queue_offset,
        commitlog_offset,
        prepared,
    )
    assert (m.born_timestamp, m.store_timestamp) == (born_timestamp, store_timestamp)
    assert (m.born_host, m.store_host) == (born_host, store_host)
    assert (
        m.store_size
        == len(raw)
        == codec.record_size(len(body), len(topic), len(raw) - 91 - len(body) - len(topic))
    )


# ----------------------------------------------------------------------- check_record


def _in_segment(raw: bytes, pad: int = 64) -> memoryview:
    """The record followed by unwritten (zero) space, as in a segment."""
    return memoryview(bytearray(raw + bytes(pad)))


def test_check_record_ok_for_a_valid_record() -> None:
    """A valid record followed by zeros is OK with its size."""
    raw = golden_record()
    assert codec.check_record(_in_segment(raw), 0, len(raw) + 64) == (Check.OK, len(raw))


def test_check_record_end_on_zeros() -> None:
    """Unwritten space (all zeros) is END."""
    assert codec.check_record(memoryview(bytes(256)), 0, 256) == (Check.END, 0)


def test_check_record_end_when_less_than_a_blank_record_is_left() -> None:
    """Fewer than 8 bytes before the limit is END."""
    assert codec.check_record(memoryview(bytes(256)), 250, 256)[0] is Check.END


def test_check_record_blank_filler_reaching_the_segment_end() -> None:
    """A blank record whose size reaches exactly the limit is BLANK."""
    buf = bytearray(200)
    codec.PREFIX.pack_into(buf, 120, 80, codec.BLANK_MAGIC)
    assert codec.check_record(memoryview(buf), 120, 200) == (Check.BLANK, 80)


def test_check_record_blank_filler_of_the_wrong_size_is_bad_framing() -> None:
    """A blank record that does not reach the limit is BAD_FRAMING."""
    buf = bytearray(200)
    codec.PREFIX.pack_into(buf, 120, 40, codec.BLANK_MAGIC)
    assert codec.check_record(memoryview(buf), 120, 200)[0] is Check.BAD_FRAMING


@pytest.mark.parametrize("delta", [-1, 1, 50])
def test_check_record_wrong_total_size_is_bad_framing(delta: int) -> None:
    """A total_size that disagrees with the three lengths is BAD_FRAMING."""
    buf = _in_segment(golden_record())
    size = len(golden_record())
    codec.PREFIX.pack_into(buf, 0, size + delta, codec.MAGIC)
    assert codec.check_record(buf, 0, len(buf))[0] is Check.BAD_FRAMING


def test_check_record_wrong_magic_is_bad_framing() -> None:
    """An unknown magic is BAD_FRAMING."""
    buf = _in_segment(golden_record())
    buf[4] ^= 0xFF
    assert codec.check_record(buf, 0, len(buf))[0] is Check.BAD_FRAMING


def test_check_record_cut_short_is_bad_framing() -> None:
    """A record running past the limit is BAD_FRAMING."""
    raw = golden_record()
    assert codec.check_record(memoryview(raw), 0, len(raw) - 1)[0] is Check.BAD_FRAMING


@pytest.mark.parametrize("position", [44, 48, 52, 60, 72, 76, 88, 92, 97, 103])
def test_check_record_flipped_byte_in_crc_range_is_bad_crc(position: int) -> None:
    """A flipped byte in the CRC-covered part that keeps framing intact is BAD_CRC."""
    buf = _in_segment(golden_record())
    buf[position] ^= 0x01
    assert codec.check_record(buf, 0, len(buf)) == (Check.BAD_CRC, len(golden_record()))


@pytest.mark.parametrize("position", [12, 20, 28, 36, 43])
def test_check_record_detects_a_flipped_store_block_byte(position: int) -> None:
    """The store block (queue/commit-log offsets, store time and host) is inside the CRC."""
    assert position in STORE_BLOCK
    buf = _in_segment(golden_record())
    buf[position] ^= 0x01
    assert codec.check_record(buf, 0, len(buf)) == (Check.BAD_CRC, len(golden_record()))


def test_check_record_quarantined_record() -> None:
    """A record whose magic recovery rewrote to QUARANTINE_MAGIC is QUARANTINED."""
    buf = _in_segment(golden_record())
    codec.PREFIX.pack_into(buf, 0, len(golden_record()), codec.QUARANTINE_MAGIC)
    assert codec.check_record(buf, 0, len(buf))[0] is Check.QUARANTINED


# ------------------------------------------------------------------------- properties


@settings(max_examples=300, deadline=None)
@given(props=prop_dicts)
def test_properties_round_trip(props: dict[str, str]) -> None:
    """decode_properties(encode_properties(d)) == d for names/values without \\x01/\\x02."""
    P.check_properties(props)
    assert P.decode_properties(P.encode_properties(props)) == props


def test_properties_encoding_is_rocketmq_format() -> None:
    """NAME\\x01VALUE\\x02 per property, in insertion order; empty dict is empty string."""
    assert P.encode_properties({"TAGS": "A", "KEYS": "k1 k2"}) == "TAGS\x01A\x02KEYS\x01k1 k2\x02"
    assert P.encode_properties({}) == ""
    assert P.decode_properties("TAGS\x01A") == {"TAGS": "A"}  # missing final separator


@pytest.mark.parametrize(
    "props",
    [
        {"A\x01": "v"},
        {"A": "v\x01w"},
        {"A\x02": "v"},
        {"A": "x\x02TAGS\x01Y"},
        {"": "v"},
        {"A": 1},
        {1: "v"},
    ],
    ids=[
        "sep1-name",
        "sep1-value",
        "sep2-name",
        "injection",
        "empty-name",
        "int-value",
        "int-name",
    ],
)
def test_check_properties_rejects_unencodable_properties(props: dict[Any, Any]) -> None:
    """Separators, empty names and non-str names/values raise InvalidMessageError."""
    with pytest.raises(InvalidMessageError):
        P.check_properties(props)


def test_split_keys_splits_on_spaces_and_drops_empties() -> None:
    """'k1  k2 ' -> ['k1', 'k2']; None -> []."""
    assert P.split_keys("k1  k2 ") == ["k1", "k2"]
    assert P.split_keys(None) == []


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["TAGS", "T", "A", "\x01", "\x02", "x", "é"]), max_size=30))
@example(["TAGS", "\x01", "A", "\x02", "TAGS", "\x01", "é", "\x02"])  # TAGS twice: the last wins
@example(["TAGS", "\x01", "A", "\x02", "TAGS", "\x02"])  # a later TAGS with no value separator
@example(["TAGS", "\x01", "A", "\x01", "x"])  # a value with a name separator, no final one
def test_find_tags_agrees_with_a_full_decode(pieces: list[str]) -> None:
    """The tags fast path gives what decoding every property gives, for any text."""
    text = "".join(pieces)
    assert P.find_tags(text.encode("utf-8")) == P.decode_properties(text).get(P.TAGS)


# ------------------------------------------------------------------ java_string_hash


def independent_java_hash(text: str) -> int:
    """Java's String.hashCode written out: h = 31*h + c over UTF-16 code units, int32 wrap."""
    units: list[int] = []
    for ch in text:
        cp = ord(ch)
        if cp > 0xFFFF:
            cp -= 0x10000
            units += [0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF)]
        else:
            units.append(cp)
    h = 0
    for unit in units:
        h = (31 * h + unit) % 2**32
    return h - 2**32 if h >= 2**31 else h


@pytest.mark.parametrize(
    ("text", "expected"),
    [("", 0), ("a", 97), ("TagA", 2598919), ("hello", 99162322), ("Hello, World!", 1498789909)],
)
def test_java_string_hash_equals_java_for_known_values(text: str, expected: int) -> None:
    """Values match java.lang.String.hashCode (checked against an independent implementation)."""
    assert independent_java_hash(text) == expected
    assert java_string_hash(text) == expected


@pytest.mark.parametrize("text", ["😀", "a😀b", "𝄞𝄞𝄞", "ünïcödé", "x" * 1000])
def test_java_string_hash_counts_utf16_code_units(text: str) -> None:
    """Non-BMP characters hash as their surrogate pair, long strings wrap to int32."""
    assert java_string_hash(text) == independent_java_hash(text)
    assert -(2**31) <= java_string_hash(text) < 2**31


def test_java_string_hash_of_surrogate_pair_value() -> None:
    """'😀' is \\uD83D\\uDE00: 31 * 0xD83D + 0xDE00."""
    assert java_string_hash("😀") == 31 * 0xD83D + 0xDE00 == 1772899


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=50))
def test_java_string_hash_agrees_with_independent_implementation(text: str) -> None:
    """Any string hashes like the written-out Java algorithm."""
    assert java_string_hash(text) == independent_java_hash(text)


# ---------------------------------------------------------------------------- msg ids


@pytest.mark.parametrize(
    ("host", "commitlog_offset"),
    [("127.0.0.1:10911", 0), ("10.1.2.3:65535", 2**40 + 7), ("255.255.255.255:1", 2**63 - 1)],
)
def test_offset_msg_id_round_trips(host: str, commitlog_offset: int) -> None:
    """An offset msg id is 32 upper-case hex digits and decodes to (host, offset)."""
    msg_id = codec.offset_msg_id(codec.encode_host(host), commitlog_offset)
    assert len(msg_id) == 32
    assert msg_id == msg_id.upper()
    assert codec.decode_offset_msg_id(msg_id) == (host, commitlog_offset)
    assert codec.decode_offset_msg_id(msg_id.lower()) == (host, commitlog_offset)


@pytest.mark.parametrize("bad", ["", "ABC", "Z" * 32, "0" * 31, "0" * 33])
def test_decode_offset_msg_id_rejects_non_ids(bad: str) -> None:
    """Anything but 32 hex digits decodes to None."""
    assert codec.decode_offset_msg_id(bad) is None


def test_offset_msg_id_format_is_host_then_offset() -> None:
    """IPv4, port (int32) and offset (int64), big-endian hex."""
    assert (
        codec.offset_msg_id(codec.encode_host("10.0.0.1:10911"), 255)
        == "0A00000100002A9F" + "00000000000000FF"
    )


def test_uniq_ids_from_single_calls_are_unique_across_two_generators() -> None:
    """200k next_id() calls, interleaved over two generators, give 200k distinct 32-hex ids."""
    a, b = UniqIdGenerator(), UniqIdGenerator()
    ids = []
    for _ in range(100_000):
        ids.append(a.next_id())
        ids.append(b.next_id())
    assert len(set(ids)) == 200_000
    assert all(len(i) == 32 for i in ids[:100])
    int(ids[0], 16)


def test_uniq_ids_from_batches_are_unique_across_two_generators() -> None:
    """next_ids(100_000) on each of two generators gives 200k distinct ids."""
    a, b = UniqIdGenerator(), UniqIdGenerator()
    ids = a.next_ids(100_000) + b.next_ids(100_000)
    assert len(ids) == 200_000
    assert len(set(ids)) == 200_000


def test_uniq_ids_from_mixed_calls_are_unique() -> None:
    """Batches and single calls on one generator never repeat an id."""
    g = UniqIdGenerator()
    ids = []
    for _ in range(50):
        ids += g.next_ids(1000)
        ids.append(g.next_id())
    assert len(set(ids)) == len(ids)


def test_uniq_ids_in_bulk_equal_single_calls_across_counter_boundaries() -> None:
    """Under a frozen clock the last 12 hex digits count 0, 1, 2, ... (the counter runs
    into the millisecond field at 2^16) whether ids come one by one or in bulk."""
    g = UniqIdGenerator(monotonic_ns=lambda: 7)
    ids = g.next_ids(250) + [g.next_id() for _ in range(20)] + g.next_ids(70_000)
    ids += [g.next_id(), *g.next_ids(1), *g.next_ids(0), *g.next_ids(3)]
    assert [i[20:] for i in ids] == [f"{p:012X}" for p in range(len(ids))]
    assert {i[:20] for i in ids} == {ids[0][:20]}


def test_uniq_ids_restart_the_counter_each_millisecond() -> None:
    now = [0]
    g = UniqIdGenerator(monotonic_ns=lambda: now[0])
    assert [i[20:] for i in g.next_ids(3)] == ["000000000000", "000000000001", "000000000002"]
    now[0] = 5_000_000  # 5 ms later
    assert [i[20:] for i in g.next_ids(2)] == ["000000050000", "000000050001"]
    assert g.next_id()[20:] == "000000050002"
    now[0] = 6_000_000
    assert g.next_id()[20:] == "000000060000"
