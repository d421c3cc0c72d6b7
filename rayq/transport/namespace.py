"""The Ray namespace that clients look server actors up in: the one ``rayq.start`` or
``rayq.connect`` last used in this process (default ``rayq``)."""

from rayq.actors.protocol.config import NAMESPACE

_current = NAMESPACE


def current_namespace() -> str:
    return _current


def set_current_namespace(namespace: str) -> None:
    global _current
    _current = namespace
