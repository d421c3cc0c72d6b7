"""``config/dispatch.json``: what the store knew of its consume queues and index.

Written (JSON, ``.tmp`` + ``.bak`` + rename, see json_file.py) when a queue is
created, on every ``flush`` and on close, only when it changed::

    {"queues": {"<topic>": {"<queue id>": [min offset, max offset]}},
     "indexed_from": <commit-log offset of the oldest indexed record, -1: none>,
     "indexed_to": <commit-log offset of the newest indexed record, -1: none>}

On open it tells recovery what was lost below the checkpoint, where re-validating
the tail cannot see it: a consume queue that is missing, lost a segment at either
end or in the middle, or an index that lost its oldest or newest files. Those are
rebuilt from the commit log.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from .consume_queue import ENTRY_SIZE, ConsumeQueue
from .index_file import IndexService

QueueKey = tuple[str, int]


class DispatchManifest(msgspec.Struct, kw_only=True):
    queues: dict[str, dict[int, list[int]]] = {}
    indexed_from: int = -1
    indexed_to: int = -1


def damaged_queues(
    manifest: DispatchManifest, queues: Mapping[QueueKey, ConsumeQueue]
) -> list[QueueKey]:
    """Queues whose files lost entries the manifest says they had."""
    damaged: list[QueueKey] = []
    for topic, recorded in manifest.queues.items():
        for queue_id, (min_offset, max_offset) in recorded.items():
            cq = queues.get((topic, queue_id))
            if (
                cq is None
                or cq.gaps
                or cq.max_offset < max_offset
                or cq.file.min_offset // ENTRY_SIZE > min_offset
            ):
                damaged.append((topic, queue_id))
    damaged.extend(k for k, cq in queues.items() if cq.gaps and k not in damaged)
    return damaged


def index_damaged(manifest: DispatchManifest, index: IndexService, commitlog_min: int) -> bool:
    """Whether index files the manifest knows of are gone."""
    if manifest.indexed_from < 0:
        return False
    begin, end = index.begin_phy_offset, index.end_phy_offset
    if begin < 0 or end < manifest.indexed_to:
        return True
    return begin > max(manifest.indexed_from, commitlog_min)
