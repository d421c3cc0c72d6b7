"""The public surface: ``rayq.__all__`` lists every public name the package exports."""

from __future__ import annotations

import rayq
import rayq.errors


def test_all_lists_every_public_name_once() -> None:
    """Every public non-module attribute is in ``rayq.__all__`` (ruff keeps it sorted)."""
    public = {
        name
        for name, value in vars(rayq).items()
        if not name.startswith("_") and type(value).__name__ != "module"
    }
    assert public == set(rayq.__all__)
    assert len(rayq.__all__) == len(set(rayq.__all__))


def test_every_error_class_is_exported_from_rayq() -> None:
    """The whole exception tree is reachable as ``rayq.<Name>``."""
    for cls in rayq.errors.all_error_classes():
        assert getattr(rayq, cls.__name__) is cls
