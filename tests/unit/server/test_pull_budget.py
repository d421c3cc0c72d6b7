"""``BrokerServer.pull`` with a byte budget (what answers through the hold service
carry, under Ray's inline limit): whole records only, at least one, the right next
offset with and without tag filtering. BrokerServer runs here without Ray."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rayq.actors.protocol import (
    HOLD_REPLY_BYTES,
    CreateTopicRequest,
    PullItem,
    PullManyRequest,
    PullRequest,
    PullStatus,
    follow_up,
)
from rayq.actors.protocol.config import BrokerConfig
from rayq.actors.server.broker_server import BrokerServer
from rayq.store import InnerMessage, StoreConfig
from rayq.store.batch import encode_batch
from rayq.store.codec import decode_records

BODY = 1000


@pytest.fixture
def server(tmp_path: Path) -> Iterator[BrokerServer]:
    srv = BrokerServer(BrokerConfig(store=StoreConfig.for_tests()), str(tmp_path))
    srv.create_topic(CreateTopicRequest(topic="t", read_queue_nums=2, write_queue_nums=2, perm=6))
    for q in (0, 1):
        msgs = [
            InnerMessage(
                topic="t",
                queue_id=q,
                body=bytes([i]) * BODY,
                uniq_key=f"{q}-{i:04d}",
                tags="odd" if i % 2 else "even",
            )
            for i in range(200)
        ]
        srv.put(encode_batch(msgs, max_body_bytes=1 << 20, max_properties_bytes=4096))
    yield srv
    srv.close()


def pull(server: BrokerServer, offset: int, max_bytes: int | None, expression: str = "*"):  # type: ignore[no-untyped-def]
    req = PullRequest(
        group="g",
        topic="t",
        queue_id=0,
        queue_offset=offset,
        max_nums=1000,
        expression=expression,
        suspend_ms=0,
    )
    return server.pull(req, max_bytes)


def test_a_budget_cuts_at_whole_records_and_the_next_pull_starts_after_them(
    server: BrokerServer,
) -> None:
    whole = pull(server, 0, None)
    sizes = [m.store_size for m in decode_records(whole.buffer)]
    size = max(sizes)
    cut = pull(server, 0, sum(sizes[:5]) + sizes[5] // 2)
    assert cut.status is PullStatus.FOUND and cut.count == 5 and cut.next_offset == 5
    assert cut.buffer == whole.buffer[: sum(sizes[:5])]
    assert pull(server, 0, 10).count == 1  # smaller than one record: still one
    capped = pull(server, 0, HOLD_REPLY_BYTES)
    assert len(capped.buffer) <= HOLD_REPLY_BYTES < len(capped.buffer) + size
    assert follow_up(PullRequest(group="g", topic="t", queue_id=0, queue_offset=0), capped) is None
    rest, offset = [], capped.next_offset
    while offset < 200:
        more = pull(server, offset, HOLD_REPLY_BYTES)
        rest.append(more.buffer)
        offset = more.next_offset
    assert capped.buffer + b"".join(rest) == pull(server, 0, None).buffer


def test_a_budget_with_a_tag_filter_moves_past_the_records_it_skipped(server: BrokerServer) -> None:
    odd = pull(server, 0, 3 * 1200, expression="odd")
    got = decode_records(odd.buffer)
    assert [m.queue_offset for m in got] == [1, 3, 5][: len(got)] and len(got) >= 2
    assert odd.next_offset == got[-1].queue_offset + 2  # the next odd one
    again = pull(server, odd.next_offset, 3 * 1200, expression="odd")
    assert decode_records(again.buffer)[0].queue_offset == odd.next_offset


def test_a_budget_spans_the_queues_of_a_pull_many(server: BrokerServer) -> None:
    req = PullManyRequest(
        group="g", items=[PullItem("t", 0, 0), PullItem("t", 1, 0)], max_nums=1000, suspend_ms=0
    )
    first, second = server.pull_many(req, HOLD_REPLY_BYTES).results
    assert len(first.buffer) + len(second.buffer) <= HOLD_REPLY_BYTES + len(second.buffer)
    assert first.count >= 1 and second.count == 1  # the first filled it; the second has one
    unbounded = server.pull_many(req).results
    assert unbounded[0].count == unbounded[1].count == 200
