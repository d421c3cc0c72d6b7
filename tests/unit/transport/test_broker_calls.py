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
