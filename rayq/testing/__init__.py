"""Testing rayq clients without Ray: an in-process cluster over the real server
objects (``fake``) and test helpers. See ``rayq.testing.fake`` for what it covers."""

from rayq.testing.fake import (
    FakeCluster,
    FakeReply,
    FakeTransport,
    consume_service,
    fill_topic,
    poll_until,
    pulled,
    until,
    wait_until,
)

__all__ = [
    "FakeCluster",
    "FakeReply",
    "FakeTransport",
    "consume_service",
    "fill_topic",
    "poll_until",
    "pulled",
    "until",
    "wait_until",
]
