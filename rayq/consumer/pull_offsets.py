"""Where a pull consumer's committed offsets live (RocketMQ's ``OffsetStore`` of its
lite pull consumer).

Clustering: the group's, on the brokers (``query_offsets``; one ``commit_offsets`` call
per broker and topic). Broadcasting: this consumer's own, in the local file the push
consumer uses too (``rayq.consumer.offset_store.LocalOffsetStore``:
``<offset_store_dir>/<instance_name>/<group>/offsets.json``), opened on first use.
"""

from __future__ import annotations

import asyncio
from typing import Any

from rayq.actors.protocol import CommitOffsetsRequest, MessageQueue
from rayq.consumer.offset_store import LocalOffsetStore
from rayq.consumer.start_offsets import committed_offsets
from rayq.store.errors import BrokenError, BrokerUnavailableError, RayqError
from rayq.transport.base import Reply
from rayq.transport.context import ClientContext

CALL_TIMEOUT_S = 30.0


class PullOffsets:
    def __init__(self, ctx: ClientContext, group: str, *, broadcasting: bool) -> None:
        self._ctx = ctx
        self.group = group
        self.broadcasting = broadcasting
        self._local: LocalOffsetStore | None = None

    def read(self, mqs: list[MessageQueue]) -> dict[MessageQueue, int]:
        """The committed offsets of ``mqs`` (queues without one are left out)."""
        if self.broadcasting:
            return self._local_store().saved(mqs)
        return committed_offsets(self._ctx, self.group, mqs)

    def commit(
        self, offsets: dict[MessageQueue, int]
    ) -> tuple[list[MessageQueue], RayqError | None]:
        """Commit ``offsets``: the queues committed, and the first error (if any)."""
        if not offsets or self.broadcasting:
            return self._commit_local(offsets) if offsets else ([], None)
        sent = self._send(offsets)
        outcomes: dict[tuple[str, str], BaseException | None] = {}
        for key, (_, reply) in sent.items():
            try:
                reply.result(CALL_TIMEOUT_S)
                outcomes[key] = None
            except RayqError as exc:
                outcomes[key] = exc
        return _outcome(sent, outcomes)

    async def commit_async(
        self, offsets: dict[MessageQueue, int]
    ) -> tuple[list[MessageQueue], RayqError | None]:
        """``commit``, awaiting the brokers' answers (for ``rayq.aio.PullConsumer``)."""
        if not offsets or self.broadcasting:
            return self._commit_local(offsets) if offsets else ([], None)
        sent = self._send(offsets)
        got = await asyncio.gather(
            *(asyncio.wait_for(reply.wait(), CALL_TIMEOUT_S) for _, reply in sent.values()),
            return_exceptions=True,
        )
        outcomes = {
            key: value if isinstance(value, BaseException) else None
            for key, value in zip(sent, got, strict=True)
        }
        return _outcome(sent, outcomes)

    def _send(
        self, offsets: dict[MessageQueue, int]
    ) -> dict[tuple[str, str], tuple[list[int], Reply[Any]]]:
        """One commit call per broker and topic, sent: its queue ids and its reply."""
        todo: dict[tuple[str, str], dict[int, int]] = {}
        for mq, offset in offsets.items():
            todo.setdefault((mq.broker_name, mq.topic), {})[mq.queue_id] = offset
        ctx = self._ctx
        return {
            (broker, topic): (
                list(offs),
                ctx.broker(broker).commit_offsets(
                    CommitOffsetsRequest(
                        group=self.group, topic=topic, offsets=offs, client_id=ctx.client_id
                    )
                ),
            )
            for (broker, topic), offs in todo.items()
        }

    def _commit_local(
        self, offsets: dict[MessageQueue, int]
    ) -> tuple[list[MessageQueue], RayqError | None]:
        local = self._local_store()
        for mq, offset in offsets.items():
            local.update(mq, offset)
        try:
            local.save()
        except OSError as exc:
            error = BrokenError(
                f"writing the offsets file {local.file.path} failed: {exc}",
                path=str(local.file.path),
            )
            return [], error
        return list(offsets), None

    def _local_store(self) -> LocalOffsetStore:
        if self._local is None:
            cfg = self._ctx.config
            self._local = LocalOffsetStore(cfg.offset_store_dir, cfg.instance_name, self.group)
        return self._local


def _outcome(
    sent: dict[tuple[str, str], tuple[list[int], Any]],
    outcomes: dict[tuple[str, str], BaseException | None],
) -> tuple[list[MessageQueue], RayqError | None]:
    """The queues whose commit the broker took, and the first error."""
    done: list[MessageQueue] = []
    first_error: RayqError | None = None
    for (broker, topic), (queue_ids, _) in sent.items():
        error = outcomes[(broker, topic)]
        if error is None:
            done += [MessageQueue(topic, broker, qid) for qid in queue_ids]
        elif isinstance(error, RayqError):
            first_error = first_error or error
        elif isinstance(error, TimeoutError):
            first_error = first_error or BrokerUnavailableError(
                f"broker {broker} did not answer a commit of {topic} in {CALL_TIMEOUT_S:.0f} s",
                broker=broker,
            )
        else:
            raise error
    return done, first_error
