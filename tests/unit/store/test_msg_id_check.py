"""The store's check that a producer's msg_ids are its records' UNIQ_KEY properties,
one per record, in order (store/batch.py ``_check_msg_ids``), in each properties
layout: UNIQ_KEY first in every record, after TAGS/KEYS in every record, or mixed."""

from __future__ import annotations

import pytest

from rayq.store.batch import _check_msg_ids
from rayq.store.errors import InvalidMessageError


def regions(*texts: str) -> tuple[bytes, list[int], list[int]]:
    """Records that are only their properties text, behind a few bytes of other fields."""
    records, starts, ends = b"", [], []
    for text in texts:
        records += b"\x00\x01UNIQ_KEY\x01" + b"body"  # a body may hold anything
        starts.append(len(records))
        records += text.encode()
        ends.append(len(records))
    return records, starts, ends


FIRST = ("UNIQ_KEY\x01A1\x02", "UNIQ_KEY\x01B2\x02PGROUP\x01g\x02")
LATER = ("TAGS\x01t\x02UNIQ_KEY\x01A1\x02", "KEYS\x01k\x02UNIQ_KEY\x01B2\x02")
MIXED = ("UNIQ_KEY\x01A1\x02", "TAGS\x01t\x02UNIQ_KEY\x01B2\x02")


@pytest.mark.parametrize("texts", [FIRST, LATER, MIXED], ids=["first", "later", "mixed"])
def test_ids_that_are_the_records_unique_keys_pass_in_every_layout(texts: tuple[str, ...]) -> None:
    _check_msg_ids(["A1", "B2"], *regions(*texts))


@pytest.mark.parametrize("texts", [FIRST, LATER, MIXED], ids=["first", "later", "mixed"])
@pytest.mark.parametrize(
    "ids",
    [["B2", "A1"], ["A1", "B"], ["A", "B2"], ["A1", "A1"], ["A1", "B2\x00"]],
    ids=["swapped", "prefix", "prefix-first", "repeated", "nul"],
)
def test_ids_that_name_other_records_are_refused(texts: tuple[str, ...], ids: list[str]) -> None:
    with pytest.raises(InvalidMessageError, match="msg_ids are not its records"):
        _check_msg_ids(ids, *regions(*texts))


@pytest.mark.parametrize(
    "second",
    [
        "UNIQ_KEY\x01B2\x02UNIQ_KEY\x01B2\x02",  # two UNIQ_KEYs
        "TAGS\x01t\x02UNIQ_KEY\x01B2\x02UNIQ_KEY\x01X\x02",
        "XUNIQ_KEY\x01B2\x02",  # another property whose name ends like it
        "TAGS\x01t\x02XUNIQ_KEY\x01B2\x02",
        "TAGS\x01UNIQ_KEY\x01B2\x02",  # in a value, not a name
        "PGROUP\x01g\x02",  # none
    ],
)
@pytest.mark.parametrize("first", ["UNIQ_KEY\x01A1\x02", "TAGS\x01t\x02UNIQ_KEY\x01A1\x02"])
def test_a_record_without_exactly_one_unique_key_entry_is_refused(first: str, second: str) -> None:
    with pytest.raises(InvalidMessageError, match="msg_ids are not its records"):
        _check_msg_ids(["A1", "B2"], *regions(first, second))


def test_an_id_holding_a_nul_is_checked_record_by_record() -> None:
    _check_msg_ids(["A\x001", "B2"], *regions("UNIQ_KEY\x01A\x001\x02", "UNIQ_KEY\x01B2\x02"))
    with pytest.raises(InvalidMessageError):
        _check_msg_ids(["A\x001", "B2"], *regions("UNIQ_KEY\x01A\x002\x02", "UNIQ_KEY\x01B2\x02"))
