"""The sender's one retry policy (rayq/producer/sender.py), against fake brokers, no Ray.

The fake broker's ``put`` returns its answer (or the error it ends in) as a completed
transport ``Reply`` (``rayq.testing.FakeReply``), so the whole retry loop runs in one
process.
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from rayq.actors.protocol import BatchSendResult, MessageQueue, SendStatus
from rayq.producer.accumulator import Put
from rayq.producer.routes import QueueSelector
from rayq.producer.sender import RetryPolicy, Sender
from rayq.store import InnerMessage, UniqIdGenerator
from rayq.store.errors import (
    BrokerBusyError,
    BrokerUnavailableError,
    InvalidOffsetError,
    MessageTooLargeError,
    NotMasterError,
    RayqError,
    TopicNotFoundError,
)
from rayq.testing import FakeReply

IDS = UniqIdGenerator()
QUEUES = [MessageQueue("t", b, q) for b in ("a", "b") for q in range(2)]


class FakeBrokers:
    """Broker handles whose puts answer from ``script`` (per broker: errors, then OK)."""

    def __init__(self, script: dict[str, list[RayqError]]) -> None:
        self.script = script
        self.puts: list[tuple[str, int, int]] = []  # (broker, queue id, first sequence)
        self.forgotten: list[str] = []

    def broker(self, name: str) -> Any:
        def put(batch: Any) -> FakeReply[BatchSendResult]:
            self.puts.append((name, batch.queue_id, batch.first_sequence))
            errors = self.script.get(name, [])
            if errors:
                return FakeReply.failed(errors.pop(0))
            n = batch.count
            return FakeReply.of(
                BatchSendResult(
                    status=SendStatus.SEND_OK,
                    msg_ids=batch.msg_ids,
                    offset_msg_ids=[""] * n,
                    queue_offsets=list(range(n)),
                )
            )

        return SimpleNamespace(put=put)

    def forget(self, name: str) -> None:
        self.forgotten.append(name)


class FakeRoutes:
    """The coordinator's answer: always QUEUES (counts the fetches)."""

    fetches = 0

    def write_queues(self, topic: str, *, refresh: bool = False) -> list[MessageQueue]:
        FakeRoutes.fetches += 1
        return list(QUEUES)

    def route(self, topic: str, *, refresh: bool = False) -> None:
        return None


def make(script: dict[str, list[RayqError]], attempts: int = 3) -> tuple[Sender, FakeBrokers]:
    brokers = FakeBrokers(script)
    selector = QueueSelector(FakeRoutes, 30_000, 30_000)
    selector.queues["t"] = (QUEUES, float("inf"))
    FakeRoutes.fetches = 0
    policy = RetryPolicy(attempts=attempts, timeout_s=1.0, backoff_s=0.001)
    sender = Sender(
        "test",
        policy,
        lambda: brokers,
        selector,
        max_body_bytes=1 << 20,
        max_properties_bytes=4096,
        batch_max_bytes=1 << 20,
    )
    return sender, brokers


def msgs(n: int = 1) -> list[InnerMessage]:
    return [
        InnerMessage(topic="t", queue_id=0, body=b"x", uniq_key=IDS.next_id()) for _ in range(n)
    ]


def unavailable() -> BrokerUnavailableError:
    return BrokerUnavailableError("a broker actor is not reachable")


def test_a_movable_batch_moves_to_another_broker_and_avoids_the_failed_one() -> None:
    sender, brokers = make({"a": [unavailable()]})
    put = Put(QUEUES[0], msgs(2))
    sender.send(put)
    assert [b for b, _, _ in brokers.puts] == ["a", "b"]
    assert put.queue.broker_name == "b" and brokers.forgotten == ["a"]
    assert not sender.selector.faults.ok("a")  # type: ignore[union-attr]
    assert {sender.selector.pick("t").broker_name for _ in range(4)} == {"b"}  # type: ignore[union-attr]


def test_an_ordered_or_idempotent_batch_is_retried_on_its_own_queue() -> None:
    sender, brokers = make({"a": [unavailable(), BrokerBusyError("busy")]})
    put = Put(QUEUES[1], msgs(), fixed="ordered messages never move to another queue")
    sender.send(put)
    assert brokers.puts == [("a", 1, 0)] * 3 and put.queue == QUEUES[1]


def test_a_send_a_slave_refused_goes_again_once_the_serving_replica_is_asked_anew() -> None:
    """A master came back while the client still wrote to the slave that served reads:
    the slave's NotMasterError makes the client forget which replica serves the broker
    (the transport asks the coordinator again) and send again on the same queue."""
    refused = NotMasterError("broker a#1 is a SLAVE: it takes no sends; they go to its master a")
    sender, brokers = make({"a": [refused]})
    put = Put(QUEUES[1], msgs(), fixed="ordered messages never move to another queue")
    sender.send(put)
    assert brokers.puts == [("a", 1, 0)] * 2 and brokers.forgotten == ["a"]


def test_spent_attempts_raise_broker_unavailable_naming_topic_and_count() -> None:
    sender, _ = make({"a": [unavailable()] * 9, "b": [unavailable()] * 9})
    with pytest.raises(BrokerUnavailableError, match=r"topic 't' after 3 attempt\(s\)"):
        sender.send(Put(QUEUES[0], msgs()))
    sender, _ = make({"a": [unavailable()] * 9})
    with pytest.raises(BrokerUnavailableError, match=r"after 3 attempt\(s\) on that queue \(why"):
        sender.send(Put(QUEUES[0], msgs(), fixed="why"))


@pytest.mark.parametrize(
    ("error", "fixed", "puts"),
    [
        (TopicNotFoundError("gone"), "", 1),  # stale route: not retried
        (InvalidOffsetError("no such queue"), "", 2),  # stale route: another queue
        (InvalidOffsetError("no such queue"), "why", 1),  # ... but a fixed batch cannot move
        (MessageTooLargeError("big"), "", 1),  # not retriable
    ],
)
def test_stale_routes_and_bad_batches(error: RayqError, fixed: str, puts: int) -> None:
    sender, brokers = make({"a": [error]})
    call: Callable[[], Any] = lambda: sender.send(Put(QUEUES[0], msgs(), fixed=fixed))  # noqa: E731
    if puts == 1:
        with pytest.raises(type(error)):
            call()
    else:
        call()
    assert len(brokers.puts) == puts
    stale = not isinstance(error, MessageTooLargeError)
    assert FakeRoutes.fetches == (puts == 2) and ("t" not in sender.selector.queues) == (
        stale and puts == 1
    )  # type: ignore[union-attr]


def test_a_pipelined_retry_resends_the_batches_behind_it_in_order() -> None:
    """Arrow writes: 3 in flight to one queue; the first fails, so all go again in order."""
    sender, brokers = make({"a": [unavailable()]})
    puts = [
        Put(QUEUES[0], msgs(2), fixed="why", producer_id="p", first_sequence=2 * i)
        for i in range(3)
    ]
    done = [put.first_sequence for put, _ in sender.pipeline(puts, 3)]
    assert done == [0, 2, 4]
    assert [seq for _, _, seq in brokers.puts] == [0, 2, 4, 0, 2, 4]


def test_an_idempotent_queue_numbers_batches_and_restarts_after_a_failed_one() -> None:
    """Sequences count per queue without gaps; a batch that failed for good (perhaps
    stored) makes the queue go on under a new producer id from sequence 0."""
    from rayq.producer.idempotence import Idempotence

    idem = Idempotence("me")
    with idem.sequenced(QUEUES[1], msgs(3)) as first:
        pass
    with idem.sequenced(QUEUES[1], msgs(2)) as second:
        pass
    assert (first.producer_id, first.first_sequence, second.first_sequence) == ("me", 0, 3)
    assert {m.queue_id for m in second.msgs} == {1}
    assert {m.properties["__PSEQ"] for m in second.msgs} == {"3-4"}
    with pytest.raises(BrokerUnavailableError), idem.sequenced(QUEUES[1], msgs()):
        raise unavailable()
    with idem.sequenced(QUEUES[1], msgs()) as after:
        pass
    assert after.producer_id.startswith("me#") and after.first_sequence == 0
    with idem.sequenced(QUEUES[0], msgs()) as other:  # other queues are not affected
        pass
    assert (other.producer_id, other.first_sequence) == ("me", 0)
