"""Which slave a failover may promote, without Ray (actors/failover.py asks the slaves).

A SYNC_MASTER acknowledges a send once ``min_in_sync_replicas`` (k) slaves have fetched
past it, and tells every slave with each chunk how far its sends are acknowledged
(``HaChunk.acked_offset``); each slave keeps the highest it was told and reports it in
its ``BrokerInfo`` (as the master does in its heartbeats). ``elect`` takes the highest
acknowledged offset any of them knows and promotes only a slave whose log reaches it:
the live slave furthest ahead among those. If none does, it promotes nobody (the
broker stays read-only) rather than lose acknowledged messages.

Why this keeps every acknowledged send when at most k-1 slaves are lost with the
master (docs/REPLICATION.md, "Invariants"): each acknowledged send is on k slaves, so
one of them is alive; a slave's log is a prefix of the master's, so the live slave
furthest ahead has that send too, and its log also reaches every acknowledged offset
it or another slave was told. ``proven`` says whether enough slaves answered for that
argument (N - k + 1 of the N known); with fewer, the offset check is the only guard
and an acknowledgement no survivor had heard of yet cannot be checked (logged).
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from rayq.actors.protocol import BrokerInfo


class Election(msgspec.Struct, frozen=True, kw_only=True):
    """The outcome of ``elect``: the slave to promote (None: nobody) and why."""

    chosen: int | None  # the broker id of the slave to promote
    acked_offset: int  # the highest acknowledged offset known (-1: none)
    eligible: list[int]  # live slaves whose log reaches acked_offset
    proven: bool  # enough slaves answered that every acknowledged send is on one of them
    reason: str  # a sentence for the log


def elect(
    lost: BrokerInfo,
    answers: Mapping[int, BrokerInfo],
    known_slaves: int,
    min_in_sync_replicas: int,
) -> Election:
    """Choose among the live slaves that answered (``answers``: broker id -> info) the
    one to promote after ``lost`` (the master's last info) died; ``known_slaves``: how
    many slaves the broker has (dead ones included)."""
    acked = max([lost.acked_offset, *(a.acked_offset for a in answers.values())])
    eligible = sorted(i for i, a in answers.items() if a.written_offset >= acked)
    known = max(known_slaves, len(answers))
    proven = len(answers) >= known - min_in_sync_replicas + 1
    if not answers:
        return Election(
            chosen=None,
            acked_offset=acked,
            eligible=[],
            proven=False,
            reason="no live slave to promote",
        )
    if not eligible:
        behind = ", ".join(
            f"slave {i} ends at {a.written_offset}" for i, a in sorted(answers.items())
        )
        return Election(
            chosen=None,
            acked_offset=acked,
            eligible=[],
            proven=proven,
            reason=(
                f"no live slave holds every acknowledged message: sends are acknowledged "
                f"up to commit-log offset {acked}, but {behind}; promoting one would lose "
                "acknowledged messages"
            ),
        )
    chosen = max(eligible, key=lambda i: (answers[i].written_offset, i))
    if lost.role != "SYNC_MASTER":
        why = "an ASYNC_MASTER acknowledges without its slaves: what it had not sent is lost"
    elif proven:
        why = (
            f"{len(answers)} of {known} slaves answered (at least {known} - "
            f"{min_in_sync_replicas} + 1), so every acknowledged send is on one of them"
        )
    else:
        why = (
            f"only {len(answers)} of {known} slaves answered (fewer than {known} - "
            f"{min_in_sync_replicas} + 1): sends acknowledged past offset {acked} that no "
            "answering slave had heard of may be lost"
        )
    return Election(
        chosen=chosen,
        acked_offset=acked,
        eligible=eligible,
        proven=proven,
        reason=f"slave {chosen} ends at {answers[chosen].written_offset}, at or past the "
        f"acknowledged offset {acked}; {why}",
    )
