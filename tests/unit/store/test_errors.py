"""The exception tree: every class is a RayqError and pickles intact (as Ray ships them)."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from types import ModuleType

import pytest

from rayq.store import errors
from rayq.store.errors import (
    BrokerBusyError,
    BrokerUnavailableError,
    ClientError,
    RayqError,
    all_error_classes,
)

ALL_CLASSES = all_error_classes()


def _cloudpickle() -> ModuleType | None:
    # Only the standalone package: importing ray.cloudpickle would import Ray.
    try:
        import cloudpickle
    except ImportError:
        return None
    return cloudpickle


def _picklers() -> list[tuple[str, Callable[[object], object]]]:
    out: list[tuple[str, Callable[[object], object]]] = [
        ("pickle", lambda obj: pickle.loads(pickle.dumps(obj))),
        ("pickle-protocol-2", lambda obj: pickle.loads(pickle.dumps(obj, protocol=2))),
    ]
    cp = _cloudpickle()
    if cp is not None:
        out.append(("cloudpickle", lambda obj: pickle.loads(cp.dumps(obj))))
    return out


PICKLERS = _picklers()


def test_all_error_classes_lists_the_whole_tree() -> None:
    """all_error_classes() starts at the root and holds every RayqError subclass in the module."""
    in_module = {
        obj for obj in vars(errors).values() if isinstance(obj, type) and issubclass(obj, RayqError)
    }
    assert ALL_CLASSES[0] is RayqError
    assert set(ALL_CLASSES) == in_module
    assert len(ALL_CLASSES) == len(set(ALL_CLASSES))


@pytest.mark.parametrize("cls", ALL_CLASSES, ids=lambda c: c.__name__)
def test_every_error_class_is_a_rayq_error(cls: type[RayqError]) -> None:
    """Each class of the tree derives from RayqError (and so from Exception)."""
    assert issubclass(cls, RayqError)
    assert issubclass(cls, Exception)


@pytest.mark.parametrize(("pickler_name", "roundtrip"), PICKLERS, ids=[p[0] for p in PICKLERS])
@pytest.mark.parametrize("cls", ALL_CLASSES, ids=lambda c: c.__name__)
def test_error_survives_pickling_with_message_and_details(
    cls: type[RayqError], pickler_name: str, roundtrip: Callable[[object], object]
) -> None:
    """An instance with a message and keyword details comes back with the same type and fields."""
    original = cls("topic 'a/b' is bad; use letters", value="a/b", limit=127, nested={"k": [1]})
    copy = roundtrip(original)
    assert type(copy) is cls, pickler_name
    assert isinstance(copy, RayqError)
    assert copy.message == original.message
    assert copy.details == {"value": "a/b", "limit": 127, "nested": {"k": [1]}}
    assert str(copy) == "topic 'a/b' is bad; use letters"
    assert copy.args == original.args
    assert copy.retriable is cls.retriable


@pytest.mark.parametrize("cls", ALL_CLASSES, ids=lambda c: c.__name__)
def test_error_without_arguments_survives_pickling(cls: type[RayqError]) -> None:
    """The no-argument form round-trips too (empty message, no details)."""
    copy = pickle.loads(pickle.dumps(cls()))
    assert type(copy) is cls
    assert copy.message == ""
    assert copy.details == {}


@pytest.mark.parametrize("cls", [BrokerUnavailableError, BrokerBusyError])
def test_broker_availability_errors_are_retriable(cls: type[RayqError]) -> None:
    """Retrying may succeed when the broker was unreachable or busy."""
    assert cls.retriable is True
    assert cls("x").retriable is True


@pytest.mark.parametrize(
    "cls", [c for c in ALL_CLASSES if issubclass(c, ClientError)], ids=lambda c: c.__name__
)
def test_client_errors_are_not_retriable(cls: type[RayqError]) -> None:
    """Bad input stays bad: the same call can never succeed by retrying it."""
    assert cls.retriable is False
