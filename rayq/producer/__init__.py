"""Producers: ``Producer`` (sync, async, oneway, batch, orderly, idempotent sends) and
``TransactionProducer`` (half messages, local transactions, the broker's checks).

Modules: ``producer`` and ``transaction`` (the public classes); ``validation`` and
``batch`` (checks and encoding of a send, once, on the caller's thread); ``routes``
(queue selection, fault avoidance); ``accumulator``, ``sender`` and ``async_sends``
(the background pipeline of ``send_async``: per-queue batches, requests in flight,
retries); ``idempotence`` (producer ids and sequence numbers).
"""

from rayq.producer.producer import Producer
from rayq.producer.transaction import TransactionListener, TransactionProducer

__all__ = ["Producer", "TransactionListener", "TransactionProducer"]
