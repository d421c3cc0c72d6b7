"""asyncio clients over the same transport as the sync ones: ``rayq.aio.Producer``
(``await send``, ``await send_batch``), ``rayq.aio.PullConsumer`` (``await poll``,
``async for msg in consumer``, ``await commit``) and ``rayq.aio.SimpleConsumer``
(``async for msg in consumer``, ``await msg.ack()``).

They share the sync clients' code: the same validation, routes, encoding and retry
policy (``Sender.send_awaited``), the pull consumer's queues and positions (a subclass
of ``rayq.PullConsumer``), the same POP receive plan (``PopConsumerCore``). Only
the waiting differs: an answer is awaited on the transport's reply (the socket's reader
settles it, or Ray's object ref), so no thread waits per call. Control-plane lookups
(finding the deployment, a topic's routes when they are not cached) run in a thread.
"""

from rayq.aio.producer import Producer
from rayq.aio.pull import PullConsumer
from rayq.aio.simple import ReceivedMessage, SimpleConsumer

__all__ = ["Producer", "PullConsumer", "ReceivedMessage", "SimpleConsumer"]
