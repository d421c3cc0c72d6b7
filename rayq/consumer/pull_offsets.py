"""Where a pull consumer's committed offsets live (RocketMQ's ``OffsetStore`` of its
lite pull consumer).

Clustering: the group's, on the brokers (``query_offsets``; one ``commit_offsets`` call
per broker and topic). Broadcasting: this consumer's own, in the local file the push
consumer uses too (``rayq.consumer.offset_store.LocalOffsetStore``:
``<offset_store_dir>/<instance_name>/<group>/offsets.json``), opened on first use.
"""

from __future__ import annotations

from rayq.actors.protocol import CommitOffsetsRequest, MessageQueue
from rayq.consumer.offset_store import LocalOffsetStore
from rayq.consumer.start_offsets import committed_offsets
from rayq.store.errors import BrokenError, RayqError
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
        if not offsets:
            return [], None
        if self.broadcasting:
            return self._commit_local(offsets)
        todo: dict[tuple[str, str], dict[int, int]] = {}
        for mq, offset in offsets.items():
            todo.setdefault((mq.broker_name, mq.topic), {})[mq.queue_id] = offset
        ctx = self._ctx
        replies = {
            (broker, topic): ctx.broker(broker).commit_offsets(
                CommitOffsetsRequest(
                    group=self.group, topic=topic, offsets=offs, client_id=ctx.client_id
                )
            )
            for (broker, topic), offs in todo.items()
        }
        done: list[MessageQueue] = []
        first_error: RayqError | None = None
        for (broker, topic), reply in replies.items():
            try:
                reply.result(CALL_TIMEOUT_S)
            except RayqError as exc:
                first_error = first_error or exc
                continue
            done += [MessageQueue(topic, broker, qid) for qid in todo[(broker, topic)]]
        return done, first_error

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
