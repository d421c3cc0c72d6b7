"""The bulk scanner (scanner.py) agrees with the careful one-record path.

Chunks are made tiny so that every code path of the bulk walk runs: full chunks
that continue, a damaged record in the middle of a chunk, a segment end.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rayq.store import (
    FakeClock,
    InnerMessage,
    MessageStore,
    StoreConfig,
    UniqIdGenerator,
    decode_records,
    scanner,
)
from rayq.store.codec import Check, parse_record


def _fill(root: Path, count: int) -> list[int]:
    ids = UniqIdGenerator()
    with MessageStore(root, StoreConfig.for_tests(), clock=FakeClock()) as store:
        offsets: list[int] = []
        for start in range(0, count, 7):
            batch = [
                InnerMessage(
                    topic=f"T{i % 2}",
                    queue_id=i % 3,
                    body=bytes([i % 251]) * (50 + i),
                    tags=f"t{i % 4}",
                    keys=f"k{i} j{i}",
                    uniq_key=ids.next_id(),
                )
                for i in range(start, min(start + 7, count))
            ]
            result = store.put_messages(batch)
            assert result.ok, result.error
            offsets += result.commitlog_offsets
    return offsets


def _careful(store: MessageStore) -> list[tuple[Check, int, int]]:
    """Every verdict of the one-record path, segment by segment."""
    out = []
    for seg in store.commitlog.file.segments:
        local = 0
        while True:
            verdict, size, _ = parse_record(seg.mv, local, seg.size, seg.start)
            out.append((verdict, seg.start + local, size))
            if verdict is not Check.OK:
                break
            local += size
    return out


@pytest.mark.parametrize("chunk", [1, 3, 64])
def test_bulk_scan_yields_the_same_records_as_the_careful_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    """Good runs plus single verdicts cover exactly the records the careful path sees."""
    monkeypatch.setattr(scanner, "CHUNK_RECORDS", chunk)
    offsets = _fill(tmp_path / "s", 150)
    store = MessageStore(tmp_path / "s", StoreConfig.for_tests())
    bulk = []
    for item in scanner.scan(store.commitlog, 0):
        if isinstance(item, scanner.GoodRun):
            bulk += [(Check.OK, o, z) for o, z in zip(item.offsets, item.sizes, strict=True)]
        else:
            bulk.append(item[:3])
    careful = _careful(store)
    assert [b for b in bulk if b[0] is Check.OK] == [c for c in careful if c[0] is Check.OK]
    assert [o for v, o, _ in bulk if v is Check.OK] == sorted(offsets)
    store.close()


@pytest.mark.parametrize("chunk", [1, 4, 16384])
def test_flip_in_the_middle_of_a_chunk_is_quarantined_and_the_rest_recovered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    """A damaged record mid-chunk ends the good run; recovery resumes right after it."""
    monkeypatch.setattr(scanner, "CHUNK_RECORDS", chunk)
    root = tmp_path / "s"
    offsets = _fill(root, 120)
    (root / "checkpoint").unlink()
    victim = offsets[40]
    segment_size = StoreConfig.for_tests().commitlog_segment_size_bytes
    path = root / "commitlog" / f"{victim - victim % segment_size:020d}"
    raw = bytearray(path.read_bytes())
    raw[victim % segment_size + 100] ^= 0xFF  # a body byte
    path.write_bytes(bytes(raw))

    store = MessageStore(root, StoreConfig.for_tests())
    assert store.recovery.records_quarantined == [victim]
    assert store.recovery.records_validated == 119
    got = []
    for topic in ("T0", "T1"):
        for queue in range(3):
            offset = 0
            while (result := store.get_messages("g", topic, queue, offset)).count:
                got += [m.commitlog_offset for m in decode_records(result.buffer)]
                offset = result.next_begin_offset
    assert sorted(got) == sorted(o for o in offsets if o != victim)
    store.close()
