"""Reading a consumer group's dead letters (``%DLQ%<group>``) for ``Admin.dead_letters``.

Each read queue of the DLQ topic is pulled from its min offset, without committing and
without waiting, until ``max_num`` messages are read or the queues end; the messages
come back oldest first (by store time) across brokers.
"""

from __future__ import annotations

from rayq.actors.protocol import MessageQueue, PullRequest, PullStatus, TopicRequest
from rayq.store.codec import decode_records
from rayq.store.message import MessageExt
from rayq.transport.context import ClientContext

PULL_MAX = 1024  # messages asked per pull
CALL_TIMEOUT_S = 30.0


def read_dead_letters(
    ctx: ClientContext, group: str, queues: list[MessageQueue], max_num: int
) -> list[MessageExt]:
    """Up to ``max_num`` messages of ``queues`` (the DLQ topic's), oldest first."""
    if not queues:
        return []
    topic = queues[0].topic
    brokers = sorted({q.broker_name for q in queues})
    bounds = ctx.broker_calls(
        {
            b: lambda c: c.queue_bounds(TopicRequest(topic=topic, client_id=ctx.client_id))
            for b in brokers
        },
        CALL_TIMEOUT_S,
    )
    out: list[MessageExt] = []
    for q in queues:
        offset, end = bounds[q.broker_name].bounds.get(q.queue_id, (0, 0))
        while offset < end and len(out) < max_num:
            req = PullRequest(
                group=group,
                topic=topic,
                queue_id=q.queue_id,
                queue_offset=offset,
                max_nums=min(max_num - len(out), PULL_MAX),
                suspend_ms=0,
                client_id=ctx.client_id,
            )
            resp = ctx.broker(q.broker_name).pull(req).result(CALL_TIMEOUT_S)
            if resp.status is PullStatus.FOUND:
                out += decode_records(resp.buffer, broker_name=q.broker_name)
            if resp.next_offset <= offset:
                break  # nothing more can be read here (a gap, or the end moved back)
            offset = resp.next_offset
    out.sort(key=lambda m: (m.store_timestamp, m.broker_name, m.commitlog_offset))
    return out[:max_num]


__all__ = ["read_dead_letters"]
