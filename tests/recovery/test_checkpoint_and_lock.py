"""The checkpoint file and the directory lock.

A damaged checkpoint counts as all zeros: everything is re-validated and nothing
is lost. One directory holds one open store at a time.
"""

from __future__ import annotations

import logging
import random
from pathlib import Path

import pytest

from rayq.store import StoreLockedError

QUEUES = [("Ckpt", 0), ("Ckpt", 1), ("Other", 0)]

DAMAGE = {
    "random bytes": lambda raw, rng: rng.randbytes(len(raw)),
    "one flipped bit": lambda raw, rng: bytes([raw[0] ^ 0x01]) + raw[1:],
    "truncated": lambda raw, rng: raw[: len(raw) // 2],
    "empty": lambda raw, rng: b"",
    "longer": lambda raw, rng: raw + rng.randbytes(8),
}


@pytest.mark.parametrize("how", ["close", "crash"])
@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_damaged_checkpoint_forces_full_revalidation_and_loses_nothing(
    kit, tmp_path: Path, caplog: pytest.LogCaptureFixture, how: str, damage: str
) -> None:
    """A checkpoint that does not decode makes recovery re-validate from offset 0."""
    root = tmp_path / "store"
    rng = random.Random(8)
    store = kit.open(root)
    sent = kit.write(store, rng, 60, QUEUES, body_sizes=(200, 3000), batch_max=3)
    store.flush()
    sent += kit.write(store, rng, 5, QUEUES, body_sizes=(200, 3000))
    store.close() if how == "close" else store.crash()
    checkpoint = root / "checkpoint"
    checkpoint.write_bytes(DAMAGE[damage](checkpoint.read_bytes(), rng))

    with caplog.at_level(logging.WARNING, logger="rayq.store"):
        store = kit.open(root)

    assert store.recovery.start_offset == 0
    assert store.recovery.records_validated == len(sent)
    assert store.recovery.truncated_at is None
    assert store.recovery.records_quarantined == []
    assert "checkpoint" in caplog.text
    kit.assert_consistent(store, sent)
    kit.assert_keys_found(store, sent[::7])


def test_second_store_on_one_directory_raises_store_locked_error_naming_it(
    kit, tmp_path: Path
) -> None:
    """A second MessageStore on an open directory fails; the first keeps working."""
    root = tmp_path / "store"
    first = kit.open(root)
    before = kit.put(first, [kit.message("Lock", 0, 100)])

    with pytest.raises(StoreLockedError) as excinfo:
        kit.open(root)

    assert str(root) in str(excinfo.value)
    after = kit.put(first, [kit.message("Lock", 0, 100)])
    first.flush()
    kit.assert_consistent(first, [*before, *after])
    assert (root / "abort").exists()  # the failed open did not clean up the first's marker


@pytest.mark.parametrize("how", ["close", "crash"])
def test_directory_opens_again_once_the_first_store_is_gone(kit, tmp_path: Path, how: str) -> None:
    """After the first store closes (or its process dies) a new store opens the directory."""
    root = tmp_path / "store"
    first = kit.open(root)
    sent = kit.put(first, [kit.message("Lock", 0, 100)])
    with pytest.raises(StoreLockedError):
        kit.open(root)
    first.close() if how == "close" else first.crash()

    second = kit.open(root)

    kit.assert_consistent(second, sent)
