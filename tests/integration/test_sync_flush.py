"""SYNC_FLUSH: a send is acknowledged only once the flusher made it durable."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
import ray

from rayq.actors.protocol import SendStatus, flusher_actor_name
from rayq.cluster import Cluster
from rayq.store import FlushDiskType, InnerMessage, UniqIdGenerator, encode_batch
from rayq.transport.context import ClientContext

pytestmark = pytest.mark.integration
NAMESPACE = "rayq-test-sync-flush"
BROKER_OVERRIDES = {"flush_disk_type": FlushDiskType.SYNC_FLUSH}
IDS = UniqIdGenerator()


def test_concurrent_sync_sends_are_durable_when_acknowledged(cluster: Cluster) -> None:
    """Every acknowledged batch lies below the flusher's durable offset (group commit)."""
    ctx = ClientContext(namespace=NAMESPACE)
    broker = ctx.broker("broker-a")

    def send(q: int) -> tuple[SendStatus, int]:
        msgs = [
            InnerMessage(topic="durable", queue_id=q % 4, body=b"x" * 1024, uniq_key=IDS.next_id())
            for _ in range(100)
        ]
        batch = encode_batch(msgs, max_body_bytes=4 << 20, max_properties_bytes=32767)
        result = broker.put(batch).result(30)
        offset_ids = result.offset_msg_ids[-1]
        return result.status, int(offset_ids[16:], 16) + 1

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(send, range(16)))
    assert {status for status, _ in results} == {SendStatus.SEND_OK}
    flusher = ray.get_actor(flusher_actor_name("broker-a"), namespace=NAMESPACE)
    assert max(end for _, end in results) <= ray.get(flusher.durable.remote())
