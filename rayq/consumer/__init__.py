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

from rayq.consumer.pull import PullConsumer
from rayq.consumer.push import PushConsumer
from rayq.consumer.simple import ReceivedMessage, SimpleConsumer

__all__ = ["PullConsumer", "PushConsumer", "ReceivedMessage", "SimpleConsumer"]
