"""Planned streaming batches, kept by the coordinator (plain class, no Ray).

A streaming query (rayq/connectors/streaming.py) records each micro-batch's offset ranges
here *before* it runs the batch and removes them once the batch's offsets are
committed. A query that crashed in between finds its batch here and runs it again
with the same ranges and batch id. Soft state like the rest of the coordinator:
a restarted coordinator has no plans, and a query then plans from the committed
offsets (nothing is lost; the re-run batch may be larger).
"""

from __future__ import annotations

from typing import Any


class StreamPlans:
    """(group, topic) -> the batch in flight (id, ranges) and the next batch id."""

    def __init__(self) -> None:
        self.plans: dict[tuple[str, str], tuple[int, Any]] = {}
        self.next_ids: dict[tuple[str, str], int] = {}

    def get(self, group: str, topic: str) -> tuple[int, Any] | None:
        return self.plans.get((group, topic))

    def record(self, group: str, topic: str, ranges: Any) -> int:
        """Record a new batch (replacing any unfinished one); its batch id."""
        key = (group, topic)
        batch_id = self.next_ids.get(key, 0)
        self.next_ids[key] = batch_id + 1
        self.plans[key] = (batch_id, ranges)
        return batch_id

    def finish(self, group: str, topic: str, batch_id: int) -> bool:
        """Drop the plan of ``batch_id`` (False if another batch is recorded)."""
        key = (group, topic)
        plan = self.plans.get(key)
        if plan is None or plan[0] != batch_id:
            return False
        del self.plans[key]
        return True
