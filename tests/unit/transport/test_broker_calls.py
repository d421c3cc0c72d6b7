"""``ClientContext``'s calls to several brokers at once against the in-process fake (no
Ray): a broker that cannot even be looked up (it restarts, its node is gone) is that
broker's answer with ``return_exceptions``, as a failed call is, and the others answer."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from rayq.actors.protocol import MaxOffsetRequest
from rayq.store.errors import BrokerUnavailableError
from rayq.testing import FakeCluster, FakeTransport
from rayq.transport.context import ClientContext


@pytest.fixture
def cluster_options() -> dict[str, Any]:
    return {"brokers": ["broker-a", "broker-b"], "topics": {"t": 1}}


class HalfGone(FakeTransport):
    """broker-b cannot be looked up."""

    def broker(self, broker_name: str) -> Any:
        if broker_name == "broker-b":
            raise BrokerUnavailableError("actor rayq-broker-broker-b is not running")
        return super().broker(broker_name)


def test_a_broker_that_cannot_be_looked_up_is_its_answer_not_the_calls_error(
    cluster: FakeCluster,
) -> None:
    ctx = ClientContext(transport=HalfGone(cluster))
    req = MaxOffsetRequest(topic="t", queue_id=0)
    calls = {b: (lambda c: c.max_offset(req)) for b in ("broker-a", "broker-b")}

    got = asyncio.run(ctx.broker_calls_async(calls, return_exceptions=True))
    assert got["broker-a"].offset == 0
    assert isinstance(got["broker-b"], BrokerUnavailableError)
    with pytest.raises(BrokerUnavailableError, match="broker-b"):
        asyncio.run(ctx.broker_calls_async(calls))


class LosesConnections(FakeTransport):
    """broker-b's lookups fail ``failures`` times with the given error first."""

    def __init__(self, cluster: FakeCluster, failures: int, **details: Any) -> None:
        super().__init__(cluster)
        self.failures = failures
        self.details = details
        self.lookups = 0

    def broker(self, broker_name: str) -> Any:
        if broker_name == "broker-b":
            self.lookups += 1
            if self.lookups <= self.failures:
                raise BrokerUnavailableError("the connection failed", **self.details)
        return super().broker(broker_name)


@pytest.mark.parametrize(("failures", "answered"), [(1, True), (2, False)])
def test_a_call_whose_connection_was_lost_is_sent_once_more(
    cluster: FakeCluster, failures: int, answered: bool
) -> None:
    """A socket that broke under a call (the broker's process ended while the connection
    looked open) costs the caller one more attempt, not an error; twice is an error."""
    transport = LosesConnections(cluster, failures, connection_lost=True)
    ctx = ClientContext(transport=transport)
    req = MaxOffsetRequest(topic="t", queue_id=0)
    calls = {b: (lambda c: c.max_offset(req)) for b in ("broker-a", "broker-b")}
    if answered:
        assert {b: r.offset for b, r in ctx.broker_calls(calls).items()} == {
            "broker-a": 0,
            "broker-b": 0,
        }
    else:
        with pytest.raises(BrokerUnavailableError, match="broker-b") as raised:
            ctx.broker_calls(calls)
        assert raised.value.details["connection_lost"]
    assert transport.lookups == 2


def test_other_unavailable_brokers_are_not_asked_again(cluster: FakeCluster) -> None:
    transport = LosesConnections(cluster, 1)  # a broker that is down: not a lost connection
    with pytest.raises(BrokerUnavailableError, match="broker-b"):
        ClientContext(transport=transport).broker_calls(
            {"broker-b": lambda c: c.max_offset(MaxOffsetRequest(topic="t", queue_id=0))}
        )
    assert transport.lookups == 1
