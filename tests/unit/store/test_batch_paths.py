"""encode_batch's fast path (shared properties) writes exactly what the general path writes."""

from __future__ import annotations

from rayq.store import InnerMessage, UniqIdGenerator, decode_records, encode_batch
from rayq.store.batch import _shared_property_texts

IDS = UniqIdGenerator().next_ids(21)


def _msgs(odd_one_out: bool) -> list[InnerMessage]:
    shared = {"PGROUP": "pg", "color": "blue"}
    msgs = [
        InnerMessage(
            topic="T",
            queue_id=0,
            body=bytes([i]) * (10 + i),
            tags=("A" if i % 3 else None),
            keys=("" if i % 4 == 0 else f"k{i}"),
            uniq_key=IDS[i],
            properties=dict(shared),
        )
        for i in range(20)
    ]
    if odd_one_out:  # a different property dict sends the whole batch down the general path
        msgs.append(
            InnerMessage(
                topic="T", queue_id=0, body=b"z", uniq_key=IDS[20], properties={"PGROUP": "other"}
            )
        )
    return msgs


def test_fast_and_general_paths_encode_identical_records() -> None:
    """Same messages, once through each path: the records and index columns agree."""
    fast_msgs = _msgs(odd_one_out=False)
    general_msgs = _msgs(odd_one_out=True)[:-1]
    assert _shared_property_texts(fast_msgs) is not None
    assert _shared_property_texts([*general_msgs, _msgs(True)[-1]]) is None
    limits = {"max_body_bytes": 1 << 20, "max_properties_bytes": 32767}
    fast = encode_batch(fast_msgs, **limits)
    general = encode_batch([*general_msgs, _msgs(True)[-1]], **limits)
    n = len(fast_msgs)
    assert general.records[: len(fast.records)] == fast.records
    assert general.tags_codes[: 8 * n] == fast.tags_codes
    got = decode_records(fast.records)
    assert [m.properties["color"] for m in got] == ["blue"] * n
    assert [m.keys for m in got] == [[] if i % 4 == 0 else [f"k{i}"] for i in range(n)]
    assert [m.tags for m in got] == [("A" if i % 3 else None) for i in range(n)]
