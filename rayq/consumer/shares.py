"""Which queues a pull consumer reads, and who hears when that changes.

Clustering: the coordinator splits each subscribed topic's queues among the group's
live pull consumers with the group's ``AllocateStrategy`` (the push consumer's
strategies: AVERAGELY, AVERAGELY_BY_CIRCLE, CONSISTENT_HASH, or CONFIG with each
consumer's ``allocate_queues``). Broadcasting: every consumer reads every queue.

A ``MessageQueueListener`` (RocketMQ's ``messageQueueChanged(topic, mqAll, mqDivided)``)
given to ``subscribe`` is told each time the consumer's queues of that topic change,
the first assignment included::

    class Log(rayq.MessageQueueListener):
        def message_queue_changed(self, topic, all_queues, assigned):
            print(topic, "now", assigned, "of", len(all_queues))

    consumer.subscribe("orders", listener=Log())   # or any fn(topic, all_queues, assigned)

It runs in the thread that calls ``subscribe`` or ``poll``, after the consumer took its
new queues (and committed the ones it gave up); what it raises is logged.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol, runtime_checkable

from rayq.actors.protocol import MessageModel, MessageQueue
from rayq.actors.protocol.enums import AllocateStrategy
from rayq.store.errors import ConfigError

logger = logging.getLogger(__name__)

QueueListener = Callable[[str, list[MessageQueue], list[MessageQueue]], None]


@runtime_checkable
class MessageQueueListener(Protocol):
    """Told when a pull consumer's queues of a subscribed topic change."""

    def message_queue_changed(
        self, topic: str, all_queues: list[MessageQueue], assigned: list[MessageQueue]
    ) -> None:
        """``all_queues``: the topic's readable queues; ``assigned``: this consumer's now."""


def check_share_options(model: object, strategy: object, queues: object) -> list[MessageQueue]:
    """ConfigError for a bad model, strategy or ``allocate_queues``; those queues."""
    if not isinstance(model, MessageModel):
        raise ConfigError(f"model must be a rayq.MessageModel, got {model!r}")
    if not isinstance(strategy, AllocateStrategy):
        raise ConfigError(f"allocate_strategy must be a rayq.AllocateStrategy, got {strategy!r}")
    if queues is not None and not isinstance(queues, list | tuple):
        raise ConfigError(f"allocate_queues must be a list of rayq.MessageQueue, got {queues!r}")
    wanted = list(queues or [])
    if not all(isinstance(q, MessageQueue) for q in wanted):
        raise ConfigError("allocate_queues must be a list of rayq.MessageQueue")
    if (strategy is AllocateStrategy.CONFIG) != bool(wanted):
        raise ConfigError(
            "allocate_queues goes with allocate_strategy=AllocateStrategy.CONFIG, and only with it"
        )
    if wanted and model is MessageModel.BROADCASTING:
        raise ConfigError(
            "a broadcasting consumer reads every queue: allocate_queues and "
            "AllocateStrategy.CONFIG go with MessageModel.CLUSTERING"
        )
    return wanted


def as_listener(listener: object) -> QueueListener | None:
    """``listener`` as a plain function (None stays None); ConfigError if it is neither a
    ``MessageQueueListener`` nor a callable."""
    if listener is None:
        return None
    if isinstance(listener, MessageQueueListener):
        return listener.message_queue_changed
    if callable(listener):
        return listener
    raise ConfigError(
        f"listener must be a rayq.MessageQueueListener or a function (topic, all_queues, "
        f"assigned), got {type(listener).__name__}"
    )


def tell(
    listener: QueueListener | None,
    topic: str,
    all_queues: list[MessageQueue],
    assigned: list[MessageQueue],
) -> None:
    """Call ``listener``; what it raises is logged, never raised."""
    if listener is None:
        return
    try:
        listener(topic, list(all_queues), list(assigned))
    except Exception:
        logger.exception("the message queue listener of %r raised; the assignment stands", topic)


__all__ = ["MessageQueueListener"]
