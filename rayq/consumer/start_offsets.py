"""Where a consumer starts on each queue: shared by pull and push consumers.

A queue with a committed offset starts there. A queue without one starts where
``ConsumeFromWhere`` says: its min offset (FIRST_OFFSET), its max offset
(LAST_OFFSET) or the first message stored at or after ``consume_timestamp_ms``
(TIMESTAMP; default: half an hour ago, RocketMQ's ``consumeTimestamp``).
"""

from __future__ import annotations

import time

from rayq.actors.protocol import (
    ConsumeFromWhere,
    MessageQueue,
    OffsetByTimeRequest,
    QueryOffsetsRequest,
    TopicRequest,
)
from rayq.actors.protocol.config import ClientConfig
from rayq.actors.protocol.limits import TIMESTAMP_MS_MAX
from rayq.store.errors import ConfigError
from rayq.transport.context import ClientContext, bind

DEFAULT_CONSUME_TIMESTAMP_AGO_MS = 30 * 60 * 1000  # RocketMQ's consumeTimestamp default


def check_start_options(
    consume_from: object, consume_timestamp_ms: object, config: object, namespace: object
) -> int:
    """Check what pull and push consumers share (ConfigError); the start timestamp that
    ``consume_timestamp_ms`` means (None: half an hour ago, RocketMQ's default)."""
    if not isinstance(consume_from, ConsumeFromWhere):
        raise ConfigError(f"consume_from must be a ConsumeFromWhere, got {consume_from!r}")
    if consume_timestamp_ms is not None and (
        not isinstance(consume_timestamp_ms, int)
        or isinstance(consume_timestamp_ms, bool)
        or not 0 <= consume_timestamp_ms <= TIMESTAMP_MS_MAX
    ):
        raise ConfigError(
            f"consume_timestamp_ms must be an int from 0 to {TIMESTAMP_MS_MAX} (ms since the "
            f"epoch), got {consume_timestamp_ms!r}"
        )
    if config is not None and not isinstance(config, ClientConfig):
        raise ConfigError(f"config must be a rayq ClientConfig, got {type(config).__name__}")
    if namespace is not None and (not isinstance(namespace, str) or not namespace):
        raise ConfigError(f"namespace must be a non-empty str, got {namespace!r}")
    if consume_timestamp_ms is None:
        return max(int(time.time() * 1000) - DEFAULT_CONSUME_TIMESTAMP_AGO_MS, 0)
    return consume_timestamp_ms


def committed_offsets(
    ctx: ClientContext, group: str, mqs: list[MessageQueue]
) -> dict[MessageQueue, int]:
    """The group's committed offsets of ``mqs`` (queues without one are left out)."""
    pairs = sorted({(mq.broker_name, mq.topic) for mq in mqs})
    found = ctx.broker_calls(
        {
            p: bind(
                lambda b, t: b.query_offsets(
                    QueryOffsetsRequest(group=group, topic=t, client_id=ctx.client_id)
                ),
                p[1],
            )
            for p in pairs
        }
    )
    return {
        mq: found[(mq.broker_name, mq.topic)].offsets[mq.queue_id]
        for mq in mqs
        if mq.queue_id in found[(mq.broker_name, mq.topic)].offsets
    }


def queue_ends(ctx: ClientContext, mqs: list[MessageQueue]) -> dict[MessageQueue, tuple[int, int]]:
    """(min offset, max offset) of each queue, from their brokers."""
    pairs = sorted({(mq.broker_name, mq.topic) for mq in mqs})
    stats = ctx.broker_calls(
        {p: bind(lambda b, t: b.topic_stats(TopicRequest(topic=t)), p[1]) for p in pairs}
    )
    ends = {q.queue: (q.min_offset, q.max_offset) for per in stats.values() for q in per.queues}
    return {mq: ends.get(mq, (0, 0)) for mq in mqs}


def fresh_start_offsets(
    ctx: ClientContext, mqs: list[MessageQueue], consume_from: ConsumeFromWhere, timestamp_ms: int
) -> dict[MessageQueue, int]:
    """Where each of ``mqs`` (queues without a committed offset) starts."""
    if not mqs:
        return {}
    if consume_from is ConsumeFromWhere.TIMESTAMP:
        found = ctx.broker_calls(
            {
                (mq.broker_name, mq): bind(
                    lambda b, q: b.offset_by_time(
                        OffsetByTimeRequest(
                            topic=q.topic, queue_id=q.queue_id, timestamp_ms=timestamp_ms
                        )
                    ),
                    mq,
                )
                for mq in mqs
            }
        )
        return {mq: reply.offset for (_, mq), reply in found.items()}
    side = 0 if consume_from is ConsumeFromWhere.FIRST_OFFSET else 1
    return {mq: ends[side] for mq, ends in queue_ends(ctx, mqs).items()}


__all__ = ["check_start_options", "committed_offsets", "fresh_start_offsets", "queue_ends"]
