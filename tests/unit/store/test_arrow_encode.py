"""store/arrow_encode.py encodes Arrow columns exactly as ``encode_batch`` encodes the same
messages: the same bytes, columns and ids, records that decode alike and that the
broker's ``check_encoded`` accepts; bad columns raise before anything is encoded."""

from __future__ import annotations

import re
import subprocess
import sys
from itertools import pairwise
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rayq.store import InnerMessage, MessageStore, StoreConfig, decode_records, encode_batch
from rayq.store import properties as P
from rayq.store.arrow_encode import (
    ArrowRows,
    arrow_rows,
    cuts,
    encode_rows,
    properties_text,
    record_bounds,
    sequence_ids,
)
from rayq.store.batch import EncodedBatch, check_encoded, own_layout
from rayq.store.errors import InvalidMessageError, MessageTooLargeError

TOPIC = "arrow-t"
SHARED = {P.PRODUCER_GROUP: "g", "__PID": "p-1", "__PSEQ": "5-9"}
LIMITS = {"max_body_bytes": 4096, "max_properties_bytes": 32 * 1024}
BORN = 1_700_000_000_123
MAP = pa.map_(pa.string(), pa.string())
CHARS = st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",))  # UTF-8
VALUE = st.text(CHARS, max_size=5)
NAME = st.text(CHARS, min_size=1, max_size=6).filter(
    lambda name: name not in {*SHARED, P.TAGS, P.KEYS, P.UNIQ_KEY}
)


def _both(
    bodies: list[bytes],
    tags: list[str | None] | None = None,
    keys: list[str] | list[list[str] | None] | None = None,
    keys_type: pa.DataType | None = None,
    props: list[dict[str, str] | None] | None = None,
) -> tuple[EncodedBatch, EncodedBatch]:
    """(encode_rows of the columns, encode_batch of the same InnerMessages)."""
    n = len(bodies)
    ids = sequence_ids("p-1-", 5, n)
    rows = arrow_rows(
        pa.array(bodies, pa.binary()),
        None if tags is None else pa.array(tags, pa.string()),
        None if keys is None else pa.array(keys, keys_type or pa.string()),
    )
    if props is not None:
        maps = pa.array([None if p is None else list(p.items()) for p in props], MAP)
        rows = rows._replace(properties=properties_text(maps, frozenset(), {}))
    arrow = encode_rows(
        rows,
        topic=TOPIC,
        queue_id=3,
        uniq_keys=ids,
        properties=SHARED,
        born_timestamp=BORN,
        **LIMITS,
    )
    joined = [" ".join(k) if isinstance(k, list) else (k or "") for k in keys or [""] * n]
    own = props or [None] * n
    msgs = [
        InnerMessage(
            topic=TOPIC,
            queue_id=3,
            body=b,
            tags=(tags[i] or None) if tags else None,
            keys=joined[i],
            uniq_key=f"p-1-{5 + i}",
            properties={**(own[i] or {}), **SHARED},
            born_timestamp=BORN,
        )
        for i, b in enumerate(bodies)
    ]
    return arrow, encode_batch(msgs, **LIMITS)


def _assert_same(arrow: EncodedBatch, reference: EncodedBatch) -> None:
    for name in EncodedBatch.__struct_fields__:
        assert getattr(arrow, name) == getattr(reference, name), name
    starts, crcs = check_encoded(arrow, LIMITS["max_body_bytes"], LIMITS["max_properties_bytes"])
    own_starts, own_crcs = own_layout(arrow)  # what the broker's own batches skip checking
    assert own_starts.tolist() == starts.tolist() and own_crcs.tolist() == crcs.tolist()
    decoded = decode_records(arrow.records)
    expected = decode_records(reference.records)
    assert len(decoded) == arrow.count
    for got, want in zip(decoded, expected, strict=True):
        assert got == want


def test_store_module_imports_no_ray() -> None:
    code = "import sys, rayq.store.arrow_encode; print('ray' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    assert out.strip() == "False"


def test_bodies_alone_encode_as_encode_batch() -> None:
    _assert_same(*_both([b"a", b"bb" * 300, b"\x00\x01\x02"]))


def test_tags_and_keys_encode_as_encode_batch() -> None:
    arrow, ref = _both(
        [b"x", b"y", b"z", b"w"],
        tags=["TagA", None, "", "TagB"],
        keys=["k1", "", None, "k2 k3  k4"],
    )
    _assert_same(arrow, ref)
    assert np.frombuffer(arrow.tags_codes, "<i8")[1:3].tolist() == [0, 0]


def test_list_keys_are_joined_by_a_space() -> None:
    arrow, ref = _both(
        [b"x", b"y", b"z"], keys=[["a", "b"], None, []], keys_type=pa.list_(pa.string())
    )
    _assert_same(arrow, ref)


def test_own_batches_are_stored_as_checked_ones(tmp_path: Path) -> None:
    """A batch the broker encoded itself (``put_encoded(own=True)``: records not checked
    again) is stored exactly as the same batch checked record by record."""
    arrow, _ = _both([b"a", b"bb" * 300, b"c"], tags=["T", None, "U"], keys=["k", "", None])
    config = StoreConfig.for_tests()
    stored = []
    for own in (True, False):
        with MessageStore(tmp_path / str(own), config, broker_name="b") as store:
            assert store.put_encoded(arrow, own=own).ok
            got = decode_records(store.get_messages("g", TOPIC, 3, 0, 32).buffer)
            stored.append([(m.body, m.tags, m.keys, m.properties, m.queue_offset) for m in got])
    assert stored[0] == stored[1] and len(stored[0]) == 3


def test_string_bodies_are_their_utf8_bytes() -> None:
    rows = arrow_rows(pa.array(["héllo", "x"]))
    assert rows.bodies.to_pylist() == ["héllo".encode(), b"x"]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.binary(min_size=1, max_size=300),
            st.one_of(st.none(), st.text(CHARS, max_size=8)),
            st.one_of(st.none(), st.text(CHARS, max_size=12)),
            st.one_of(st.none(), st.dictionaries(NAME, VALUE, max_size=3)),
        ),
        min_size=1,
        max_size=30,
    ),
    st.booleans(),
)
def test_any_rows_encode_as_encode_batch(
    rows: list[tuple[bytes, str | None, str | None, dict[str, str] | None]], with_props: bool
) -> None:
    bodies, tags, keys, props = (list(c) for c in zip(*rows, strict=True))
    _assert_same(*_both(bodies, tags=tags, keys=keys, props=props if with_props else None))


def test_own_properties_come_between_the_id_and_the_shared_ones() -> None:
    props = [{"color": "red", "n": ""}, None, {}, {"x": "1"}]
    arrow, ref = _both([b"a", b"b", b"c", b"d"], tags=["T", None, "T", None], props=props)
    _assert_same(arrow, ref)
    first = decode_records(arrow.records)[0].properties
    assert list(first) == ["TAGS", "UNIQ_KEY", "color", "n", *SHARED]


def test_properties_text_drops_and_refuses_names() -> None:
    maps = pa.array([[("PGROUP", "old"), ("k", "v")], [("k", "w")]], MAP)
    assert properties_text(maps, frozenset({"PGROUP"}), {}).to_pylist() == [
        "k\x01v\x02",
        "k\x01w\x02",
    ]
    assert properties_text(maps.slice(1), frozenset(), {}).to_pylist() == ["k\x01w\x02"]
    for bad, text in (
        ([("DELAY", "1")], "row 1: property name 'DELAY' is reserved: no delays"),
        ([("a", "1"), ("a", "2")], "row 1: property 'a' is given twice"),
        ([("a\x02", "1")], "row 1: property names must not be empty"),
        ([("a", None)], "row 1: property names must not be empty, values not null"),
        ([("", "x")], "row 1: property names must not be empty"),
    ):
        with pytest.raises(InvalidMessageError, match=re.escape(text)):
            properties_text(pa.array([[("z", "z")], bad], MAP), frozenset(), {"DELAY": "no delays"})


def test_a_null_body_is_refused_naming_the_row() -> None:
    with pytest.raises(InvalidMessageError, match="row 1: the body is null"):
        arrow_rows(pa.array([b"a", None, b"c"], pa.binary()))


def test_separators_in_tags_or_keys_are_refused() -> None:
    with pytest.raises(InvalidMessageError, match="row 1: tags"):
        arrow_rows(pa.array([b"a", b"b"]), tags=pa.array(["ok", "x\x01y"]))
    with pytest.raises(InvalidMessageError, match="row 0: keys"):
        arrow_rows(pa.array([b"a"]), keys=pa.array(["k\x02"]))


def test_a_null_key_in_a_list_is_refused() -> None:
    with pytest.raises(InvalidMessageError, match="null key"):
        arrow_rows(pa.array([b"a"]), keys=pa.array([["k", None]]))


def test_empty_and_too_large_bodies_are_refused_as_encode_batch_does() -> None:
    ids = sequence_ids("i-", 0, 2)
    for bodies, error, text in (
        ([b"a", b""], InvalidMessageError, "message 1: body is empty"),
        ([b"a", b"x" * 5000], MessageTooLargeError, "message 1: body is 5000 bytes"),
    ):
        with pytest.raises(error, match=text):
            encode_rows(
                ArrowRows(pa.array(bodies, pa.binary())),
                topic=TOPIC,
                queue_id=0,
                uniq_keys=ids,
                properties={},
                **LIMITS,
            )


def test_too_long_properties_are_refused() -> None:
    rows = arrow_rows(pa.array([b"a"]), tags=pa.array(["t" * 40_000]))
    with pytest.raises(MessageTooLargeError, match="message 0: properties are"):
        encode_rows(
            rows,
            topic=TOPIC,
            queue_id=0,
            uniq_keys=sequence_ids("i-", 0, 1),
            properties={},
            **LIMITS,
        )


def test_a_slice_encodes_as_the_same_rows_alone() -> None:
    bodies = [bytes([i + 1]) * (i + 1) for i in range(10)]
    tags = [f"t{i % 3}" for i in range(10)]
    rows = arrow_rows(pa.array(bodies), tags=pa.array(tags)).slice(4, 7)
    ids = sequence_ids("s-", 4, 3)
    sliced = encode_rows(rows, topic=TOPIC, queue_id=0, uniq_keys=ids, properties={}, **LIMITS)
    alone = encode_rows(
        arrow_rows(pa.array(bodies[4:7]), tags=pa.array(tags[4:7])),
        topic=TOPIC,
        queue_id=0,
        uniq_keys=ids,
        properties={},
        **LIMITS,
    )
    assert sliced == alone
    assert sliced.msg_ids == ["s-4", "s-5", "s-6"]


def test_record_bounds_hold_and_cuts_stay_below_the_limit() -> None:
    bodies = [b"x" * (50 + 37 * i) for i in range(40)]
    tags = [None if i % 4 else f"tag{i}" for i in range(40)]
    keys = ["" if i % 3 else f"k{i} k{i + 1}" for i in range(40)]
    rows = arrow_rows(pa.array(bodies), tags=pa.array(tags), keys=pa.array(keys))
    other = len(f"UNIQ_KEY\x01{'9' * 12}\x02{P.encode_properties(SHARED)}".encode())
    bounds = record_bounds(rows, TOPIC, other)
    batch = encode_rows(
        rows,
        topic=TOPIC,
        queue_id=0,
        uniq_keys=sequence_ids("p-", 0, 40),
        properties=SHARED,
        **LIMITS,
    )
    sizes = np.frombuffer(batch.sizes, "<i4")
    assert (sizes <= bounds).all()
    pieces = cuts(bounds, 3000)
    assert pieces[0][0] == 0 and pieces[-1][1] == 40
    assert all(a[1] == b[0] for a, b in pairwise(pieces))
    assert all(bounds[s:e].sum() <= 3000 or e - s == 1 for s, e in pieces)
    assert all(bounds[s : e + 1].sum() > 3000 for s, e in pieces[:-1])


def test_ids_of_any_string_type_encode_alike() -> None:
    rows = arrow_rows(pa.array([b"a", b"b"]), keys=pa.array(["k1", "k2 k3"]))
    args = {"topic": TOPIC, "queue_id": 1, "properties": SHARED, **LIMITS}
    ids = ["id-0", "id-1"]
    plain = encode_rows(rows, uniq_keys=pa.array(ids, pa.string()), **args)
    large = encode_rows(rows, uniq_keys=pa.chunked_array([ids], pa.large_string()), **args)
    assert plain == large
