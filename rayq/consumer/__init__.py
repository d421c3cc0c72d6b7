"""Consumers: ``PushConsumer`` (a Consumer actor per instance; the coordinator assigns
queues) ``PullConsumer`` (the caller polls; shares computed by the coordinator) and
``SimpleConsumer`` (POP: messages leased one by one, acknowledged each; ``simple``).

Modules: ``push`` and ``pull`` (the public classes); ``service`` (the push consumer's
engine: pull loops, flow control, commits); ``pull_loop`` (one queue's pulls through
the hold service); ``process_queue`` (in-flight messages, the ack index); ``listener``
and ``orderly`` (concurrent and orderly listeners, queue locks); ``offset_store``,
``pull_offsets`` and ``start_offsets`` (where a group starts and what it commits);
``shares`` (a pull consumer's queues); ``selector`` (tag and SQL92 selectors).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rayq.consumer.pull import PullConsumer
    from rayq.consumer.push import PushConsumer
    from rayq.consumer.simple import ReceivedMessage, SimpleConsumer

# Imported on first use: the push consumer needs Ray, a process outside Ray
# (``rayq.connect(url)``) uses the others without importing it.
_WHERE = {
    "PullConsumer": "rayq.consumer.pull",
    "PushConsumer": "rayq.consumer.push",
    "ReceivedMessage": "rayq.consumer.simple",
    "SimpleConsumer": "rayq.consumer.simple",
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_WHERE[name]), name)


__all__ = ["PullConsumer", "PushConsumer", "ReceivedMessage", "SimpleConsumer"]
