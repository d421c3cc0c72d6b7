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
    assert public | set(rayq._LAZY) == set(rayq.__all__)
    assert len(rayq.__all__) == len(set(rayq.__all__))


def test_every_error_class_is_exported_from_rayq() -> None:
    """The whole exception tree is reachable as ``rayq.<Name>``."""
    for cls in rayq.errors.all_error_classes():
        assert getattr(rayq, cls.__name__) is cls


def test_lazy_names_resolve_without_importing_ray_for_the_store() -> None:
    """Every lazily exported name resolves; ``import rayq`` alone does not import Ray."""
    import subprocess
    import sys

    code = "import sys, rayq; assert 'ray' not in sys.modules; print('ok')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ok"
