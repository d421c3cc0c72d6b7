"""The rayq exception tree, defined here at the bottom layer and re-exported by ``rayq``.

The tree is drawn in ``rayq/errors.py``. Branches: ``ClientError`` (bad input; fix
the call), ``BrokerError`` (the server side could not serve), ``StoreError`` (the
files on disk), ``ClosedError`` (you closed it) and ``BrokenError`` (something else
broke it).

Every class takes one message plus keyword arguments with defaults, so instances
survive pickling through Ray (an actor's exception is pickled to its caller).
``retriable`` says whether the same call may succeed when simply retried.
"""

from __future__ import annotations

from typing import Any, ClassVar


class RayqError(Exception):
    """Root of every error rayq raises on purpose."""

    retriable: ClassVar[bool] = False

    def __init__(self, message: str = "", **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.message, self.details))

    def __str__(self) -> str:
        return self.message


def _rebuild(cls: type[RayqError], message: str, details: dict[str, Any]) -> RayqError:
    return cls(message, **details)


class ClientError(RayqError):
    """The caller passed something invalid; the message says how to fix it."""


class InvalidTopicError(ClientError):
    """A topic name breaks the naming rules."""


class InvalidGroupError(ClientError):
    """A producer or consumer group name breaks the naming rules."""


class InvalidMessageError(ClientError):
    """A message (body, properties, tags, keys) is not acceptable."""


class MessageTooLargeError(InvalidMessageError):
    """A body or the properties exceed their configured limit."""


class InvalidRequestError(ClientError):
    """A request reached an actor malformed (wrong types, unknown fields, out-of-range
    numbers); nothing was done."""


class InvalidReceiptHandleError(ClientError):
    """A POP receipt handle is malformed, forged, of another group or broker, or names a
    message that is no longer in flight (acknowledged, or its lease ended)."""


class InvalidFilterError(ClientError):
    """A subscription's filter expression is malformed, or the broker cannot apply it."""


class InvalidOffsetError(ClientError):
    """An offset or queue id is outside what the queue holds."""


class DataLossError(InvalidOffsetError):
    """Messages a reader still needed are gone: deleted by retention, cut off with a
    log's tail, or in a queue that no longer exists (Spark's ``failOnDataLoss``)."""


class TopicNotFoundError(ClientError):
    """The topic does not exist and may not be auto-created."""


class GroupNotFoundError(ClientError):
    """The consumer group does not exist and may not be auto-created."""


class PermissionDeniedError(ClientError):
    """The topic or broker does not allow this operation."""


class ConfigError(ClientError):
    """A configuration value is invalid."""


class BrokerError(RayqError):
    """The broker could not serve the request."""


class BrokerUnavailableError(BrokerError):
    """No broker could be reached for the request."""

    retriable = True


class NotMasterError(BrokerUnavailableError):
    """The replica asked is a slave: sends, send-backs and transaction ends go to its
    master. A client that asked it had a stale view of which replica serves the broker
    (a master just came back, or a failover is under way); it asks again and retries."""


class BrokerBusyError(BrokerError):
    """The broker is overloaded; retry later."""

    retriable = True


class DiskFullError(BrokerError):
    """The store's disk is past its warning ratio; writes are refused."""

    retriable = True


class ReplicationError(BrokerError):
    """A slave and its master disagree: missing master, histories that fencing cannot
    reconcile, bytes that fail their checks. The slave keeps its files and retries."""


class StoreError(RayqError):
    """Something is wrong with the files on disk."""


class CorruptRecordError(StoreError):
    """A record failed its magic, size or CRC check."""


class StoreLockedError(StoreError):
    """Another store already has this directory open."""


class ClosedError(RayqError):
    """The object was closed (by you) and cannot be used any more."""


class BrokenError(RayqError):
    """The object was broken by an earlier failure and cannot be used any more."""


def all_error_classes() -> list[type[RayqError]]:
    """Every class of the tree, root first (used by the pickling round-trip test)."""
    found: list[type[RayqError]] = []
    todo: list[type[RayqError]] = [RayqError]
    while todo:
        cls = todo.pop(0)
        found.append(cls)
        todo.extend(cls.__subclasses__())
    return found
