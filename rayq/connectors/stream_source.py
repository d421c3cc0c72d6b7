"""The planning half of Spark's Structured Streaming source (``readStream.format("rayq")``).

Spark's micro-batch engine drives rayq's JVM source (connectors/jvm RayqMicroBatch), which
asks this module, through the driver's bridge (connectors/spark_bridge.py), for:

* ``check``: the options, at ``load()`` (an unknown topic, a bad ``startingOffsets``,
  credentials the brokers refuse raise here, before any query runs);
* ``initial``: the offsets ``startingOffsets`` names, for a query with no checkpoint;
* ``latest``: where the next batch ends (each queue's max offset, at most
  ``maxMessagesPerTrigger`` messages past the start in all, shared fairly);
* ``plan``: a batch's ``[start, end)`` per queue dealt to Spark tasks (``ranges.pack``),
  each range naming the page reader that serves it and, with ACL on, a signed grant
  the page reader checks instead of a per-page signature (the JVM does not sign);
* ``batch``: the same for a batch read (``spark.read.format("rayq")``), from
  ``startingOffsets`` (default earliest) to ``endingOffsets`` (default latest);
* ``validate``: offsets read back from a checkpoint (every queue they name must exist);
* ``commit``: a finished batch's end, committed to ``group`` when one is given (for lag
  monitoring: ``Admin.consumer_progress``; the checkpoint, not the group, is what the
  query resumes from). Spark commits a batch to its source only when the next batch
  starts, so ``latest`` commits its start (the end of the last finished batch) too.

Offsets are JSON per topic, broker and queue, as spark-sql-kafka keeps them per topic and
partition: ``{"orders": {"broker-a": {"0": 12, "1": 40}}}`` (an offset is the next message
to read). In ``startingOffsets`` -2 stands for the queue's earliest offset and -1 for its
latest, as in Kafka; queues it leaves out start at the latest.

Data loss: a start below a queue's min offset (retention deleted the messages), above its
max (the log was cut short) or a queue that is gone. With ``failOnDataLoss`` (the default)
the batch fails with ``DataLossError``; with ``failOnDataLoss=false`` it logs a warning and
reads what is left.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Mapping
from typing import Any

import msgspec

from rayq.actors.protocol import ClientRequest, CommitOffsetsRequest, ReadGrant
from rayq.actors.protocol.auth import Credentials, Signer
from rayq.actors.protocol.config import ClientConfig
from rayq.connectors.arrow_io import page_readers
from rayq.connectors.ranges import (
    OffsetRange,
    QueueKey,
    pack,
    queue_bounds,
    resolve,
)
from rayq.connectors.streaming import share
from rayq.store.errors import (
    BrokerUnavailableError,
    ConfigError,
    DataLossError,
    InvalidOffsetError,
    TopicNotFoundError,
)
from rayq.store.names import validate_group, validate_topic
from rayq.transport.base import Transport
from rayq.transport.context import ClientContext, bind

logger = logging.getLogger(__name__)

Offsets = dict[str, dict[QueueKey, int]]  # topic -> (broker, queue id) -> next offset
EARLIEST, LATEST = -2, -1
DEFAULT_MAX_MESSAGES_PER_PARTITION = 262_144
RECENT_BOUNDS_S = 1.0  # how old the bounds ``plan`` takes from ``latest`` may be


class SourceOptions(msgspec.Struct, frozen=True):
    """The source's options, checked (Spark passes them as strings, any case)."""

    topics: tuple[str, ...] = ()
    pattern: str = ""
    starting: str = ""  # "": latest for a stream, earliest for a batch read
    ending: str = "latest"  # a batch read's end
    max_per_trigger: int = 0  # 0: everything there is
    max_per_partition: int = DEFAULT_MAX_MESSAGES_PER_PARTITION
    fail_on_data_loss: bool = True
    namespace: str | None = None
    credentials: Credentials | None = None
    group: str = ""
    page_bytes: int = 16 * 1024 * 1024
    min_partitions: int = 0  # tasks a batch is dealt to at least (0: a queue's range each)


def parse_options(raw: Mapping[str, str], *, sink: bool = False) -> SourceOptions:
    """``raw`` (Spark's options) checked; ConfigError names a bad one."""
    opts = {k.lower(): v for k, v in raw.items()}
    topic, pattern = opts.get("topic", "").strip(), opts.get("topicpattern", "").strip()
    if bool(topic) == bool(pattern) and not sink:
        raise ConfigError(
            "rayq source: give exactly one of the options topic (a name or a comma-separated "
            "list) and topicPattern (a regular expression)"
        )
    if sink and not topic:
        raise ConfigError("rayq sink: the option topic (the topic to write to) is missing")
    topics = tuple(validate_topic(t.strip()) for t in topic.split(",")) if topic else ()
    if pattern:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ConfigError(
                f"rayq source: topicPattern {pattern!r} is not a regex: {exc}"
            ) from None
    starting = opts.get("startingoffsets", "").strip()
    if starting not in ("", "earliest", "latest"):
        _parse_offsets(starting, "startingOffsets")  # checked now; resolved at initial()
    ending = opts.get("endingoffsets", "latest").strip()
    if ending != "latest":
        _parse_offsets(ending, "endingOffsets")
    access, secret = opts.get("accesskey"), opts.get("secretkey")
    if (access is None) != (secret is None):
        raise ConfigError("rayq: give both accessKey and secretKey (ACL credentials), or neither")
    fail = opts.get("failondataloss", "true").strip().lower()
    if fail not in ("true", "false"):
        raise ConfigError(f"rayq source: failOnDataLoss must be true or false, got {fail!r}")
    group = opts.get("group", "")
    return SourceOptions(
        topics=topics,
        pattern=pattern,
        starting=starting,
        ending=ending,
        max_per_trigger=_count(opts, "maxmessagespertrigger", "maxMessagesPerTrigger", 0),
        max_per_partition=_count(
            opts,
            "maxmessagesperpartition",
            "maxMessagesPerPartition",
            DEFAULT_MAX_MESSAGES_PER_PARTITION,
        ),
        fail_on_data_loss=fail == "true",
        namespace=opts.get("namespace") or None,
        credentials=Credentials(access_key=access, secret_key=secret or "") if access else None,
        group=validate_group(group) if group else "",
        page_bytes=_count(opts, "pagebytes", "pageBytes", 16 * 1024 * 1024),
        min_partitions=_count(opts, "minpartitions", "minPartitions", 0),
    )


def _count(opts: Mapping[str, str], key: str, name: str, default: int) -> int:
    raw = opts.get(key)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ConfigError(f"rayq: {name} must be an integer >= 1, got {raw!r}")
    return value


def _parse_offsets(text: str, what: str) -> Offsets:
    """Offsets JSON (``{"topic": {"broker": {"queue id": offset}}}``) as a dict."""
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise InvalidOffsetError(
            f'{what} is not "earliest", "latest" or JSON like '
            f'{{"orders": {{"broker-a": {{"0": 12}}}}}}: {exc}'
        ) from None
    out: Offsets = {}
    if not isinstance(raw, dict):
        raise InvalidOffsetError(f"{what} must be a JSON object of topics, got {text!r}")
    for topic, brokers in raw.items():
        validate_topic(topic)
        if not isinstance(brokers, dict):
            raise InvalidOffsetError(f"{what}: topic {topic!r} must map brokers to queues")
        queues = out.setdefault(topic, {})
        for broker, offsets in brokers.items():
            if not isinstance(offsets, dict):
                raise InvalidOffsetError(f"{what}: {topic}/{broker} must map queue ids to offsets")
            for qid, offset in offsets.items():
                if not str(qid).isdigit():
                    raise InvalidOffsetError(f"{what}: {topic}/{broker}: bad queue id {qid!r}")
                if not isinstance(offset, int) or isinstance(offset, bool) or offset < EARLIEST:
                    raise InvalidOffsetError(
                        f"{what}: {topic}/{broker}/{qid}: an offset is an int >= 0 "
                        f"(or -2 earliest, -1 latest), got {offset!r}"
                    )
                queues[(broker, int(qid))] = offset
    return out


def dump_offsets(offsets: Offsets) -> str:
    """The JSON Spark keeps in its checkpoint (sorted, so equal offsets are equal text)."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for topic in sorted(offsets):
        for (broker, qid), offset in sorted(offsets[topic].items()):
            out.setdefault(topic, {}).setdefault(broker, {})[str(qid)] = offset
    return json.dumps(out, separators=(",", ":"))


class SourcePlanner:
    """The answers one streaming source gets (one per option set; see the module doc)."""

    def __init__(self, options: SourceOptions, transport: Transport | None = None) -> None:
        self.options = options
        config = ClientConfig(credentials=options.credentials) if options.credentials else None
        self.ctx = ClientContext(config, options.namespace, transport)
        self._signer = Signer(options.credentials) if options.credentials else None
        self._committed: Offsets = {}  # the last offsets committed to the group
        self._bounds: tuple[float, dict[str, dict[QueueKey, tuple[int, int]]]] = (-1e9, {})

    # ------------------------------------------------------------ topics
    def topics(self) -> list[str]:
        """The topics read now: those named (each must exist), or those matching."""
        if self.options.topics:
            for topic in self.options.topics:
                self.ctx.read_queues(topic, refresh=True)  # TopicNotFoundError, or ACL's
            return list(self.options.topics)
        req = ClientRequest(client_id=self.ctx.client_id)
        names = self.ctx.coordinator.topics(req).result(self.ctx.timeout_s).names
        rx = re.compile(self.options.pattern)
        return sorted(t for t in names if rx.fullmatch(t) and not t.startswith("%"))

    def bounds(self, topics: list[str]) -> dict[str, dict[QueueKey, tuple[int, int]]]:
        """(min, max) of every readable queue of each topic; a broker that is down is
        left out (its queues make no progress until it is back)."""
        found = {t: queue_bounds(self.ctx, t, skip_unavailable=True) for t in topics}
        self._bounds = (time.monotonic(), found)
        return found

    def recent_bounds(self, topics: list[str]) -> dict[str, dict[QueueKey, tuple[int, int]]]:
        """``bounds``, or those ``latest`` read for this batch a moment ago (planning a
        batch follows its ``latest`` at once; a second read is a third of a batch's
        planning at a 1 s trigger)."""
        at, found = self._bounds
        if time.monotonic() - at < RECENT_BOUNDS_S and all(t in found for t in topics):
            return {t: found[t] for t in topics}
        return self.bounds(topics)

    def check(self) -> list[str]:
        """What ``load()`` and ``start()`` check: the topics exist, the coordinator takes
        the credentials (ACL), and ``startingOffsets`` names queues the topics have."""
        topics = self.topics()
        for spec, what in (
            (self.options.starting, "startingOffsets"),
            (self.options.ending, "endingOffsets"),
        ):
            if spec not in ("", "earliest", "latest"):
                self.validate(_parse_offsets(spec, what), what)
        return topics

    # ----------------------------------------------------------- offsets
    def initial(self, default: str = "latest") -> Offsets:
        """The offsets ``startingOffsets`` names (``default`` if not given)."""
        spec = self.options.starting or default
        named = {} if spec in ("earliest", "latest") else _parse_offsets(spec, "startingOffsets")
        out: Offsets = {}
        for topic, bounds in self.bounds(self.topics()).items():
            base = resolve(
                self.ctx,
                topic,
                spec if spec in ("earliest", "latest") else "latest",
                bounds,
                default="latest",
                what="startingOffsets",
            )
            for key, offset in named.get(topic, {}).items():
                if key not in bounds:
                    raise InvalidOffsetError(
                        f"startingOffsets: topic {topic!r} has no queue {key[1]} on broker "
                        f"{key[0]!r} (its queues: {sorted(bounds)})"
                    )
                lo, hi = bounds[key]
                base[key] = lo if offset == EARLIEST else hi if offset == LATEST else offset
            out[topic] = base
        return out

    def validate(self, offsets: Offsets, what: str = "the checkpoint") -> None:
        """InvalidOffsetError if ``offsets`` name a queue its topic does not have."""
        for topic, queues in offsets.items():
            if self.options.topics and topic not in self.options.topics:
                raise InvalidOffsetError(
                    f"{what} names topic {topic!r}, which this source does not read "
                    f"(topic={','.join(self.options.topics)})"
                )
            try:
                have = {(q.broker_name, q.queue_id) for q in self.ctx.read_queues(topic)}
            except TopicNotFoundError:
                raise InvalidOffsetError(
                    f"{what} names topic {topic!r}, which no longer exists", topic=topic
                ) from None
            gone = sorted(set(queues) - have)
            if gone:
                fix = (
                    "; start the query with a new checkpointLocation"
                    if what == "the checkpoint"
                    else ""
                )
                raise InvalidOffsetError(
                    f"{what} names queues that topic {topic!r} does not have: "
                    f"{[f'{b}/{q}' for b, q in gone]} (it has "
                    f"{[f'{b}/{q}' for b, q in sorted(have)]}){fix}",
                    topic=topic,
                )

    def latest(self, start: Offsets, max_rows: int) -> Offsets:
        """Where the batch after ``start`` ends: each queue's max offset, at most
        ``max_rows`` messages in all (0: no limit). A queue ``start`` does not know (a new
        queue or topic) starts at its earliest offset, as Kafka's new partitions do. A
        start below the queue's min offset ends there at least, so ``plan`` sees the
        loss."""
        self.commit(start)  # the batch that ended at ``start`` is done: lag is now
        end: Offsets = {}
        base: dict[tuple[str, QueueKey], int] = {}
        backlog: dict[tuple[str, QueueKey], int] = {}
        for topic, bounds in self.bounds(self.topics()).items():
            known = start.get(topic, {})
            end[topic] = dict(known)  # a queue whose broker is down: no progress
            for key, (lo, hi) in bounds.items():
                at = max(known.get(key, lo), lo)
                if at > hi:  # the queue was cut short or made anew: it ends before us
                    where = f"{topic}/{key[0]}/{key[1]}"
                    at = self._lost(f"{where} ends at {hi}, before offset {at} already read", lo)
                base[(topic, key)] = at
                backlog[(topic, key)] = max(0, hi - at)
        budget = max_rows if max_rows > 0 else sum(backlog.values())
        for (topic, key), take in share(backlog, budget).items():
            end[topic][key] = base[(topic, key)] + take
        return end

    def batch(self) -> dict[str, Any]:
        """A batch read (``spark.read.format("rayq")``): from ``startingOffsets`` (default
        earliest) to ``endingOffsets`` (default latest; -1 in JSON: a queue's latest)."""
        start = self.initial(default="earliest")
        named = (
            {}
            if self.options.ending == "latest"
            else _parse_offsets(self.options.ending, "endingOffsets")
        )
        end: Offsets = {}
        for topic, bounds in self.bounds(sorted(start)).items():
            ends = named.get(topic, {})
            end[topic] = {
                key: hi if ends.get(key, LATEST) == LATEST else min(max(ends[key], lo), hi)
                for key, (lo, hi) in bounds.items()
            }
            for key, at in start[topic].items():
                end[topic][key] = max(end[topic].get(key, at), at)
        return self.plan(start, end)

    # ------------------------------------------------------------- plans
    def plan(self, start: Offsets, end: Offsets) -> dict[str, Any]:
        """The batch ``(start, end]``: ``tasks``, per task its ranges as ``[page reader,
        topic, queue id, start, end, grant JSON or ""]``, and the ``namespace`` of the
        page readers."""
        bounds = self.recent_bounds(sorted(end))
        ranges: list[tuple[str, OffsetRange]] = []
        for topic in sorted(end):
            for key, stop in sorted(end[topic].items()):
                first = start.get(topic, {}).get(key)
                have = bounds[topic].get(key)
                if first is None:  # a queue new in this batch: from its earliest offset
                    first = have[0] if have is not None else stop
                first = self._checked(topic, key, first, stop, have)
                if stop > first:
                    ranges.append((topic, OffsetRange(key[0], key[1], first, stop)))
        tasks: list[list[list[Any]]] = []
        readers: dict[str, list[str]] = {}
        # Tasks from the ranges and the options alone (not the session's cores): a batch
        # run again after a restart gets the same partitions, which an exactly-once sink
        # needs (the same rows in the same order), as Kafka's source keeps one partition
        # per Kafka partition unless minPartitions asks for more.
        by_topic = pack(
            [msgspec.structs.replace(r, committed=i) for i, (_, r) in enumerate(ranges)],
            self.options.max_per_partition,
            max(self.options.min_partitions, len(ranges)),
        )
        for n, task in enumerate(by_topic):
            out = []
            for r in task:
                topic = ranges[r.committed][0]
                if r.broker not in readers:
                    readers[r.broker] = self._readers(r.broker)
                names = readers[r.broker]
                reader = names[n % len(names)]
                out.append([reader, topic, r.queue_id, r.start, r.end, self._grant(topic, r)])
            tasks.append(out)
        return {"namespace": self.ctx.namespace, "tasks": tasks}

    def _readers(self, broker: str) -> list[str]:
        """The page readers serving ``broker``: asked through the transport's handle (one
        call), and afresh, the serving replica looked up again, when that fails."""
        ns = self.ctx.namespace
        try:
            return page_readers(ns, broker, self._signer, refresh=False)
        except BrokerUnavailableError:
            return page_readers(ns, broker, self._signer, refresh=True)

    def _checked(
        self, topic: str, key: QueueKey, first: int, stop: int, have: tuple[int, int] | None
    ) -> int:
        """Where reading ``key`` starts: ``first``, unless messages were lost."""
        where = f"{topic}/{key[0]}/{key[1]}"
        if have is None:
            lost = f"queue {where} is gone (or its broker is down) with offsets {first}..{stop}"
            return self._lost(lost, stop)
        lo, hi = have
        if first < lo:
            return self._lost(
                f"messages {first}..{lo} of {where} were deleted before they were read (retention)",
                lo,
            )
        if first > hi:  # cut short or made anew since the last batch (latest() saw it)
            return self._lost(f"{where} ends at {hi}, before offset {first} already read", lo)
        if stop > hi:
            return self._lost(f"{where} ends at {hi}, before the planned end {stop}", stop)
        return first

    def _lost(self, what: str, resume: int) -> int:
        if self.options.fail_on_data_loss:
            raise DataLossError(
                f"rayq source: {what}. Set the option failOnDataLoss to false to skip them "
                "with a warning"
            )
        logger.warning("rayq source: %s; skipped (failOnDataLoss=false)", what)
        return resume

    def _grant(self, topic: str, r: OffsetRange) -> str:
        """A signed grant to read ``r`` (ACL), as JSON; "" without credentials."""
        if self._signer is None:
            return ""
        grant = ReadGrant(topic=topic, queue_id=r.queue_id, start=r.start, end=r.end)
        return msgspec.json.encode(self._signer.sign("read_grant", grant)).decode()

    # ------------------------------------------------------------ commits
    def commit(self, end: Offsets) -> None:
        """``end`` committed to the option ``group`` (none given: nothing)."""
        if not self.options.group or end == self._committed:
            return
        calls = {}
        for topic, queues in end.items():
            per_broker: dict[str, dict[int, int]] = {}
            for (broker, qid), offset in queues.items():
                per_broker.setdefault(broker, {})[qid] = offset
            for broker, offsets in per_broker.items():
                req = CommitOffsetsRequest(
                    group=self.options.group,
                    topic=topic,
                    offsets=offsets,
                    client_id=self.ctx.client_id,
                )
                calls[(broker, topic)] = bind(lambda c, r: c.commit_offsets(r), req)
        try:
            self.ctx.broker_calls(calls)
            self._committed = end
        except BrokerUnavailableError as exc:  # only lag monitoring misses it
            logger.warning("rayq source: could not commit to group %s: %s", self.options.group, exc)


def load_offsets(text: str) -> Offsets:
    return _parse_offsets(text, "offsets")


__all__ = [
    "SourceOptions",
    "SourcePlanner",
    "dump_offsets",
    "load_offsets",
    "parse_options",
]
