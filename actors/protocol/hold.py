"""Pulls: what a consumer asks of a broker or its hold service (long polling), what
it gets back, and how a held pull is followed up."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from msgspec import Meta

from rayq.actors.protocol.enums import PullStatus
from rayq.actors.protocol.records import (
    AckedRanges,
)
from rayq.actors.protocol.wire import FilterType, QueueId, QueueOffset, Text, _Request


class PullRequest(_Request, frozen=True, kw_only=True):
    group: Text
    topic: Text
    queue_id: QueueId
    queue_offset: QueueOffset
    max_nums: Annotated[int, Meta(ge=1, le=1 << 20)] = 32
    expression: Text = "*"
    suspend_ms: Annotated[int, Meta(ge=0, le=3_600_000)] = 15_000
    expression_type: FilterType = "TAG"  # "SQL92": ``expression`` filters by properties
    # The broker epoch the consumer's position was last read in (PullResponse.epoch; -1:
    # unknown). A broker in a newer epoch checks the position against where that epoch
    # ended in its log: past it, the records there were cut by a failover and the pull
    # gets OFFSET_ILLEGAL with the offset to go on from (Kafka's KIP-320).
    epoch: Annotated[int, Meta(ge=-1)] = -1


class PullItem(msgspec.Struct, frozen=True, array_like=True):
    """One queue of a ``PullManyRequest``."""

    topic: Text
    queue_id: QueueId
    queue_offset: QueueOffset
    expression: Text = "*"
    expression_type: FilterType = "TAG"
    epoch: Annotated[int, Meta(ge=-1)] = -1  # as PullRequest.epoch


class QueueCommit(msgspec.Struct, frozen=True, array_like=True):
    """A queue's offset committed inside a pull (RocketMQ's commit-offset flag on
    PullRequest), with the ranges past it already consumed (``acked``)."""

    topic: Text
    queue_id: QueueId
    queue_offset: QueueOffset
    acked: AckedRanges = []


class PullManyRequest(_Request, frozen=True, kw_only=True):
    """Several queues of one broker in one call (a push consumer's pull per broker):
    up to ``max_nums`` messages from each; with ``suspend_ms`` > 0 the hold service
    waits until any of them has something new. ``commits``: offsets the broker commits
    (as ``CommitOffsetsRequest`` with ``generation``) when the pull arrives, so a push
    consumer needs a separate commit call only while no pull goes out."""

    group: Text
    items: Annotated[list[PullItem], Meta(min_length=1, max_length=4096)]
    max_nums: Annotated[int, Meta(ge=1, le=1 << 20)] = 32
    suspend_ms: Annotated[int, Meta(ge=0, le=3_600_000)] = 15_000
    commits: Annotated[list[QueueCommit], Meta(max_length=4096)] = []
    generation: Annotated[int, Meta(ge=-1)] = -1
    # a broadcasting consumer's pull: refused if the group has consume_broadcast_enable off
    broadcasting: bool = False

    def request(self, item: PullItem) -> PullRequest:
        return PullRequest(
            group=self.group,
            topic=item.topic,
            queue_id=item.queue_id,
            queue_offset=item.queue_offset,
            max_nums=self.max_nums,
            expression=item.expression,
            suspend_ms=self.suspend_ms,
            expression_type=item.expression_type,
            client_id=self.client_id,
            epoch=item.epoch,
        )


# What a pull answered through the hold service carries at most (whole records, at
# least one): with its framing it stays under Ray's 100 KiB inline limit, so the
# answer travels inside the call instead of through the object store. The rest is
# read from the broker directly (the answer shows records left).
HOLD_REPLY_BYTES = 100 * 1024 - 4096


class Park(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The hold service's mark on a pull that may wait (internal, hold -> broker): if the
    pull finds nothing new, the broker keeps it under ``token`` for ``hold_ms`` and, when
    it appends to one of its queues, sends the answer to the hold service
    (``PullHoldActor.deliver``) instead of waiting to be asked again."""

    token: Annotated[str, Meta(min_length=1, max_length=128)]
    hold_ms: Annotated[int, Meta(ge=0, le=3_600_000)]


class PullResponse(msgspec.Struct, frozen=True, kw_only=True):
    status: PullStatus
    next_offset: int
    min_offset: int
    max_offset: int
    buffer: bytes = b""
    count: int = 0
    # RocketMQ's suggestWhichBrokerId: the replica to pull this queue from next ("<name>#<id>"
    # for a slave, "" for the master): a consumer far behind reads from a slave when the
    # broker has slave_read_enable on.
    suggest_replica: str = ""
    # The answering broker's epoch: a consumer keeps it with its position when records
    # came or the offset was corrected (``epoch_after``) and sends it with its next pull.
    epoch: int = -1

    @property
    def records_left(self) -> bool:
        """The queue holds records past this answer: the consumer reads the broker
        directly next, not through the hold service."""
        return self.next_offset < self.max_offset


def nothing_new(results: list[Any]) -> bool:
    """No queue of a pull has news: every answer is NO_NEW_MSG (no records, no moved
    offset, no error) -- the pulls the hold service waits on."""
    return all(type(r) is PullResponse and r.status is PullStatus.NO_NEW_MSG for r in results)


def epoch_after(epoch: int, answer: PullResponse) -> int:
    """The epoch a consumer keeps with its position after ``answer`` to a pull sent with
    ``epoch``: the broker's when the answer read the log there (records, or a corrected
    offset), else the one it had."""
    if answer.status is PullStatus.FOUND or answer.status is PullStatus.OFFSET_ILLEGAL:
        return answer.epoch
    return epoch


def follow_up(req: Any, answer: Any) -> Any | None:
    """The pull a consumer sends after ``req`` got ``answer`` (a PullRequest or a
    PullManyRequest moved to the next offsets), or None if it cannot be told (an error
    answered) or the consumer reads the broker directly next (records were left). The
    broker parks it ahead of time for the hold service, which hands it the consumer's
    next pull if that is exactly this one (actors/pull_hold.py)."""
    if type(req) is PullRequest:
        if type(answer) is not PullResponse or answer.records_left:
            return None  # more is there: the consumer reads it from the broker directly
        return msgspec.structs.replace(
            req, queue_offset=answer.next_offset, epoch=epoch_after(req.epoch, answer)
        )
    # A follow-up commits nothing (a pull that commits always reaches the broker).
    results = answer.results if type(answer) is PullManyResponse else None
    if type(req) is not PullManyRequest or results is None:
        return None
    if any(type(r) is not PullResponse or r.records_left for r in results):
        return None
    if len(results) != len(req.items):
        return None
    items = [
        msgspec.structs.replace(i, queue_offset=r.next_offset, epoch=epoch_after(i.epoch, r))
        for i, r in zip(req.items, results, strict=True)
    ]
    return msgspec.structs.replace(req, items=items, commits=[])


def follow_up_token(token: str) -> str:
    """The token of the follow-up of the pull parked under ``token``: ``t`` -> ``t#1``
    -> ``t#2``... (both the broker and the hold service derive it)."""
    base, sep, n = token.rpartition("#")
    return f"{base}#{int(n) + 1}" if sep and n.isdigit() else f"{token}#1"


class PullManyResponse(msgspec.Struct, frozen=True, kw_only=True):
    """Per item of a ``PullManyRequest``, in order: its response or its RayqError."""

    results: list[Any]
