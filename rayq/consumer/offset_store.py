"""Where a push consumer keeps its offsets (RocketMQ ``OffsetStore``).

Clustering: on the brokers, shared by the group (``RemoteOffsetStore``); commits
carry the assignment's generation, so a broker refuses a stale member's commit, and
with each offset the ranges past it consumed already (``ProcessQueue.commit_state``),
so the next owner of a queue consumes only the rest again. A push consumer's pull
carries the commits of its queues that changed (``pending``/``committed``); ``persist``
sends the ones no pull took.
Broadcasting: in a local file per consumer instance (``LocalOffsetStore``), since
every member reads every queue::

    <offset_store_dir>/<instance_name>/<group>/
        offsets.json        {"offsets": {"<topic>|<broker>|<queue id>": next offset}}
        offsets.json.bak    the previous good version
        offsets.json.tmp    written and fsynced, then renamed

``offset_store_dir`` defaults to ``~/.rayq_offsets`` on the consumer's node. The instance
name and the group are each one directory level: a name that is not a legal instance or
group name (``..``, ``a/b``, ``/abs``, NUL) or whose resolved path leaves ``offset_store_dir``
is a ``ConfigError`` before anything is created.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

import msgspec

from rayq.actors.protocol import CommitOffsetsRequest, MessageQueue, QueryOffsetsRequest
from rayq.store.errors import ConfigError
from rayq.store.json_file import JsonFile
from rayq.store.names import validate_group, validate_instance_name
from rayq.transport.context import ClientContext, bind

logger = logging.getLogger(__name__)

CALL_TIMEOUT_S = 30.0

Ranges = list[tuple[int, int]]
State = tuple[int, Ranges]  # (offset, acked ranges past it)


class _OffsetsFile(msgspec.Struct):
    offsets: dict[str, int]


def _key(mq: MessageQueue) -> str:
    return f"{mq.topic}|{mq.broker_name}|{mq.queue_id}"


class RemoteOffsetStore:
    """The group's offsets on the brokers; ``ctx`` gives broker handles by name."""

    def __init__(self, ctx: ClientContext, group: str) -> None:
        self._ctx = ctx
        self.group = group
        self.offsets: dict[MessageQueue, State] = {}
        self._committed: dict[MessageQueue, State] = {}
        self._acked_read: dict[MessageQueue, Ranges] = {}

    def update(self, mq: MessageQueue, offset: int, acked: Ranges | None = None) -> None:
        self.offsets[mq] = (offset, list(acked or []))

    async def read(self, mqs: list[MessageQueue]) -> dict[MessageQueue, int]:
        """The committed offsets of ``mqs`` (queues without one are left out); their acked
        ranges are kept for ``acked``."""
        found = await asyncio.to_thread(self._query, mqs)
        for mq, (_, acked) in found.items():
            self._acked_read[mq] = acked
        return {mq: off for mq, (off, _) in found.items()}

    def acked(self, mq: MessageQueue) -> Ranges:
        """The ranges past ``mq``'s committed offset consumed already, as ``read`` found."""
        return self._acked_read.pop(mq, [])

    def _query(self, mqs: list[MessageQueue]) -> dict[MessageQueue, State]:
        pairs = sorted({(mq.broker_name, mq.topic) for mq in mqs})
        found = self._ctx.broker_calls(
            {
                p: bind(
                    lambda b, t: b.query_offsets(
                        QueryOffsetsRequest(
                            group=self.group, topic=t, client_id=self._ctx.client_id
                        )
                    ),
                    p[1],
                )
                for p in pairs
            },
            CALL_TIMEOUT_S,
        )
        out: dict[MessageQueue, State] = {}
        for mq in mqs:
            reply = found[(mq.broker_name, mq.topic)]
            if mq.queue_id in reply.offsets:
                acked = [(lo, hi) for lo, hi in reply.acked.get(mq.queue_id, [])]
                out[mq] = (reply.offsets[mq.queue_id], acked)
        return out

    def pending(self, mq: MessageQueue) -> State | None:
        """``mq``'s state if it changed since it was last committed (a pull may carry it)."""
        state = self.offsets.get(mq)
        if state is None or state[0] < 0 or self._committed.get(mq) == state:
            return None
        return state

    def committed(self, mq: MessageQueue, state: State) -> None:
        """``state`` of ``mq`` was committed (inside a pull)."""
        self._committed[mq] = state

    def recommit(self, broker: str) -> None:
        """A call to ``broker`` failed: it may have restarted or failed over, and lost the
        offsets committed since it last wrote them down. Its queues' offsets are sent
        again with the next commit, changed or not (else an idle queue's consumer would
        start over at the older offset at its next rebalance)."""
        for mq in [m for m in self._committed if m.broker_name == broker]:
            del self._committed[mq]

    async def persist(self, mqs: list[MessageQueue] | None, generation: int) -> None:
        """Commit the offsets of ``mqs`` (default: all) that changed since the last commit."""
        todo: dict[tuple[str, str], dict[int, State]] = {}
        for mq in mqs if mqs is not None else list(self.offsets):
            state = self.pending(mq)
            if state is not None:
                todo.setdefault((mq.broker_name, mq.topic), {})[mq.queue_id] = state
        if not todo:
            return
        results = await self._ctx.broker_calls_async(
            {
                (b, t): bind(
                    lambda c, r: c.commit_offsets(r),
                    CommitOffsetsRequest(
                        group=self.group,
                        topic=t,
                        offsets={q: s[0] for q, s in states.items()},
                        generation=generation,
                        client_id=self._ctx.client_id,
                        acked={q: s[1] for q, s in states.items() if s[1]},
                    ),
                )
                for (b, t), states in todo.items()
            },
            return_exceptions=True,
        )
        for ((broker, topic), states), result in zip(todo.items(), results.values(), strict=True):
            if isinstance(result, BaseException):
                logger.warning(
                    "group %s: committing %s on %s failed: %s", self.group, topic, broker, result
                )
                continue
            for qid, state in states.items():
                if qid in result.stale:
                    logger.warning(
                        "group %s: commit of %s:%s:%d refused (a newer owner committed)",
                        self.group,
                        topic,
                        broker,
                        qid,
                    )
                self._committed[MessageQueue(topic, broker, qid)] = state

    def forget(self, mq: MessageQueue) -> None:
        self.offsets.pop(mq, None)
        self._committed.pop(mq, None)
        self._acked_read.pop(mq, None)


def offsets_path(directory: str, instance_name: str, group: str) -> Path:
    """``<directory>/<instance_name>/<group>/offsets.json``; ConfigError if it would escape."""
    validate_instance_name(instance_name)
    validate_group(group)
    if "\0" in directory:
        raise ConfigError(
            f"offset_store_dir={directory!r} contains a NUL character", value=directory
        )
    root = Path(directory or os.path.expanduser("~/.rayq_offsets")).resolve()
    path = (root / instance_name / group / "offsets.json").resolve()
    if not path.is_relative_to(root):
        raise ConfigError(
            f"the offsets file of instance {instance_name!r}, group {group!r} would be {path}, "
            f"outside offset_store_dir {root}; use a plain instance name such as 'worker-1'",
            value=str(path),
            limit=str(root),
        )
    return path


class LocalOffsetStore:
    """Offsets of one broadcasting consumer, in a local JSON file."""

    def __init__(self, directory: str, instance_name: str, group: str) -> None:
        path = offsets_path(directory, instance_name, group)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.file = JsonFile(path, _OffsetsFile)
        loaded = self.file.load()
        self._saved = dict(loaded.offsets) if loaded else {}
        self.offsets: dict[MessageQueue, int] = {}

    def update(self, mq: MessageQueue, offset: int, acked: Ranges | None = None) -> None:
        self.offsets[mq] = offset  # acked ranges are not kept locally: they come again

    async def read(self, mqs: list[MessageQueue]) -> dict[MessageQueue, int]:
        return self.saved(mqs)

    def saved(self, mqs: list[MessageQueue]) -> dict[MessageQueue, int]:
        """The saved offsets of ``mqs`` (queues without one are left out)."""
        return {mq: self._saved[_key(mq)] for mq in mqs if _key(mq) in self._saved}

    def acked(self, mq: MessageQueue) -> Ranges:
        return []

    def pending(self, mq: MessageQueue) -> State | None:
        return None  # no broker to commit to inside a pull

    def committed(self, mq: MessageQueue, state: State) -> None:
        pass

    def recommit(self, broker: str) -> None:
        pass  # the offsets are in a local file, not on the broker

    async def persist(self, mqs: list[MessageQueue] | None, generation: int) -> None:
        self.save()

    def save(self) -> None:
        """Write the offsets that changed since the last save."""
        changed = False
        for mq, off in self.offsets.items():
            if off >= 0 and self._saved.get(_key(mq)) != off:
                self._saved[_key(mq)] = off
                changed = True
        if changed:
            self.file.save(_OffsetsFile(offsets=dict(sorted(self._saved.items()))))

    def forget(self, mq: MessageQueue) -> None:
        self.offsets.pop(mq, None)
