"""Deliveries seen inside Consumer actors reach the history through a Recorder actor.

A push consumer's listener runs in its Consumer actor's process, so it cannot append to
the driver's History; it sends each batch it is given to the ``soak-recorder`` actor
(pinned to the head node, never a fault target), and the driver drains it. This module
is pickled by value (``ray.cloudpickle.register_pickle_by_value``), as the Consumer
actors cannot import ``soak``.
"""

from __future__ import annotations

import itertools
import time
import uuid
from typing import Any

import ray

import rayq

RECORDER = "soak-recorder"
Row = tuple[str, str, str, str, str, str, int, int, str, float, int, int]


class Recorder:
    """Keeps delivery rows until the driver takes them."""

    def __init__(self) -> None:
        self.rows: list[Row] = []

    def record(self, rows: list[Row]) -> None:
        self.rows.extend(rows)

    def take(self) -> list[Row]:
        rows, self.rows = self.rows, []
        return rows


def start_recorder(namespace: str, node_id: str) -> Any:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return (
        ray.remote(Recorder)
        .options(
            name=RECORDER,
            namespace=namespace,
            num_cpus=0,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
        )
        .remote()
    )


class RecordingListener:
    """A push listener that records every message it is given, then succeeds."""

    def __init__(self, group: str, contract: str, namespace: str, orderly: bool) -> None:
        self.group = group
        self.contract = contract
        self.namespace = namespace
        self.orderly = orderly
        self.instance = ""
        self.counter: Any = None
        self.recorder: Any = None

    def __call__(self, msgs: list[rayq.MessageExt]) -> Any:
        if self.recorder is None:  # first call in the Consumer actor
            self.instance = f"{self.group}/{uuid.uuid4().hex[:8]}"
            self.counter = itertools.count()
            self.recorder = ray.get_actor(RECORDER, namespace=self.namespace)
        now = time.time()
        rows = [
            delivery_row(self.group, self.contract, self.instance, m, now, next(self.counter))
            for m in msgs
        ]
        # Recorded before the listener succeeds: the consumer commits right after (over
        # the socket, sooner than a Ray call lands), so a process killed in between must
        # not leave a committed delivery out of the history.
        ray.get(self.recorder.record.remote(rows), timeout=60)
        if self.orderly:
            return rayq.ConsumeOrderlyStatus.SUCCESS
        return rayq.ConsumeStatus.CONSUME_SUCCESS


def delivery_row(
    group: str, contract: str, instance: str, m: rayq.MessageExt, t: float, n: int
) -> Row:
    key = m.keys[0] if m.keys else m.body.decode(errors="replace")
    return (
        group,
        contract,
        instance,
        key,
        m.topic,
        m.broker_name,
        m.queue_id,
        m.queue_offset,
        m.msg_id,
        t,
        n,
        m.reconsume_times,
    )
