"""Bad requests sent during the soak, and the adapter point for hostile actions.

A hostile action is any callable ``action(ctx: HostileContext) -> object`` that sends
one bad request and should be refused: it must raise a ``rayq.RayqError`` (for a raw
actor call, Ray's error wrapping one). Returning normally means the request was
accepted: a violation. An action that leaves its target actor dead (``RayActorError``)
is a violation unless a fault is under way; one whose target cannot be looked up was
not sent (the closing invariants check that every actor answers). The built-in
actions below use the public API with bad names and wrong types, and raw malformed
requests to the broker actor (the replica serving it now).

More actions plug in without changing the soak: pass ``actions=[...]`` to
:func:`soak.runner.run` or ``--hostile module:attr`` (a list of such callables) on the
command line. ``rayq.testing.hostile``'s attacks (a hostile driver without the server
key) are built in through :func:`hostile_driver`.

What must not change is the canary: a topic and group that no client uses. The soak
snapshots them (route, offsets, committed offsets) and the list of topics before the
clients start and compares at the end (:func:`canary_snapshot`).
"""

from __future__ import annotations

import importlib
import random
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray

import rayq
from rayq.actors.protocol import CommitOffsetsRequest, PullRequest, broker_actor_name
from rayq.store import EncodedBatch
from rayq.testing import hostile
from rayq.transport.ray_actors import RayTransport
from soak.deployment import BROKER
from soak.history import BadRequest, History


@dataclass
class HostileContext:
    namespace: str
    canary_topic: str
    canary_group: str
    producer: rayq.Producer
    admin: rayq.Admin
    rng: random.Random

    def actor(self, name: str) -> Any:
        return ray.get_actor(name, namespace=self.namespace)

    def broker(self) -> Any:
        """The replica serving the broker now: its master, or after a failover the slave
        promoted in its place (the coordinator says which)."""
        replica = RayTransport(self.namespace).serving_replica(BROKER)
        return self.actor(broker_actor_name(replica))


HostileAction = Callable[[HostileContext], object]


def send_to_a_bad_topic_name(ctx: HostileContext) -> object:
    return ctx.producer.send(rayq.Message("bad topic!*", b"x"))


def send_an_int_body(ctx: HostileContext) -> object:
    return ctx.producer.send(rayq.Message(ctx.canary_topic, 123))  # type: ignore[arg-type]


def create_a_topic_without_a_name(ctx: HostileContext) -> object:
    ctx.admin.create_topic("", queues=4)
    return None


def update_the_canary_with_a_string_queue_count(ctx: HostileContext) -> object:
    ctx.admin.update_topic(ctx.canary_topic, queues="many")  # type: ignore[arg-type]
    return None


def pull_consumer_with_a_bad_group(ctx: HostileContext) -> object:
    consumer = rayq.PullConsumer("bad group ?", namespace=ctx.namespace)
    consumer.subscribe(ctx.canary_topic)
    consumer.start()
    consumer.shutdown()
    return None


def raw_put_of_garbage_bytes(ctx: HostileContext) -> object:
    return ray.get(ctx.broker().put.remote(ctx.rng.randbytes(64)), timeout=30)


def raw_put_of_a_garbage_batch(ctx: HostileContext) -> object:
    count = ctx.rng.randint(1, 4)
    batch = EncodedBatch(
        topic=ctx.canary_topic,
        queue_id=0,
        count=count,
        records=ctx.rng.randbytes(ctx.rng.randint(0, 300)),
        sizes=b"".join(ctx.rng.randint(0, 200).to_bytes(4, "little") for _ in range(count)),
        tags_codes=bytes(8 * count),
    )
    return ray.get(ctx.broker().put.remote(batch), timeout=30)


def raw_put_of_a_dict(ctx: HostileContext) -> object:
    return ray.get(ctx.broker().put.remote({"topic": ctx.canary_topic}), timeout=30)


def raw_pull_of_garbage(ctx: HostileContext) -> object:
    return ray.get(ctx.broker().pull.remote(b"\x93junk"), timeout=30)


def raw_pull_with_a_negative_offset(ctx: HostileContext) -> object:
    req = PullRequest(
        group=ctx.canary_group, topic=ctx.canary_topic, queue_id=0, queue_offset=-7, suspend_ms=0
    )
    return ray.get(ctx.broker().pull.remote(req), timeout=30)


def raw_commit_of_a_negative_offset(ctx: HostileContext) -> object:
    req = CommitOffsetsRequest(group=ctx.canary_group, topic=ctx.canary_topic, offsets={0: -5})
    return ray.get(ctx.broker().commit_offsets.remote(req), timeout=30)


def raw_commit_of_a_wrong_type(ctx: HostileContext) -> object:
    return ray.get(ctx.broker().commit_offsets.remote([ctx.canary_group, 3]), timeout=30)


def hostile_driver() -> list[HostileAction]:
    """``rayq.testing.hostile``'s attacks (a driver without the server key or ACL
    credentials: replication, registration, shutdown, flush, whitelist spoofing, raw
    puts with reserved properties or mismatched ids) as actions on the canary: each
    raises the rayq error that refused it, or returns what answered it."""

    def adapt(name: str, attack: hostile.Attack) -> HostileAction:
        def action(ctx: HostileContext) -> object:
            seen = attack(ctx.namespace, ctx.canary_topic, ctx.canary_group)
            if seen.refused:
                raise rayq.RayqError(seen.error)
            return seen.answer

        action.__name__ = f"hostile_{name}"
        return action

    # Deleting a topic, a route lookup or a leave_group are client operations any
    # client may call while ACL is off (as in the soak's deployment): those attacks
    # (hostile.ACL_ONLY) are refused only with ACL on (tests/integration/test_acl.py
    # runs them there).
    return [
        adapt(name, attack)
        for name, attack in sorted(hostile.ATTACKS.items())
        if name not in hostile.ACL_ONLY
    ]


BUILT_IN: list[HostileAction] = [
    send_to_a_bad_topic_name,
    send_an_int_body,
    create_a_topic_without_a_name,
    update_the_canary_with_a_string_queue_count,
    pull_consumer_with_a_bad_group,
    raw_put_of_garbage_bytes,
    raw_put_of_a_garbage_batch,
    raw_put_of_a_dict,
    raw_pull_of_garbage,
    raw_pull_with_a_negative_offset,
    raw_commit_of_a_negative_offset,
    raw_commit_of_a_wrong_type,
    *hostile_driver(),
]


def from_module(spec: str) -> list[HostileAction]:
    """``module:attr``: a list of hostile actions (e.g. adapters of
    ``rayq.testing.hostile``'s attacks) to run beside the built-in ones."""
    module, _, attr = spec.partition(":")
    actions = getattr(importlib.import_module(module), attr or "ACTIONS")
    return list(actions() if callable(actions) else actions)


def attempt(action: HostileAction, ctx: HostileContext) -> BadRequest:
    name = getattr(action, "__name__", repr(action))
    t = time.time()
    try:
        result = action(ctx)
    except (ray.exceptions.ActorUnavailableError, ray.exceptions.ActorUnschedulableError) as exc:
        # the target was restarting, or its node is gone: the request never reached it
        return BadRequest(name, t, True, f"target unavailable: {exc}"[:200])
    except ray.exceptions.RayActorError as exc:
        return BadRequest(name, t, True, f"{type(exc).__name__}: {exc}"[:200], actor_died=True)
    except ray.exceptions.GetTimeoutError as exc:  # the target is paused by a fault
        return BadRequest(name, t, True, f"timeout: {exc}"[:200])
    except ValueError as exc:  # ray.get_actor: the target is not there (restarting): not sent
        if "Failed to look up actor" not in str(exc):
            return BadRequest(name, t, False, f"ValueError: {exc}"[:200])
        # Not sent, so it cannot have stopped anything: an outage that outlasts the fault
        # windows (both replicas gone until the coordinator places them again) is a
        # matter of the resume times; an actor a bad request stopped for good fails the
        # closing invariants ("... answers"), and one it crashed fails its own call.
        return BadRequest(name, t, True, f"target missing, not sent: {exc}"[:200])
    except Exception as exc:
        cause = getattr(exc, "cause", exc)
        refused = isinstance(exc, rayq.RayqError) or isinstance(cause, rayq.RayqError)
        frames = traceback.extract_tb(exc.__traceback__)
        at = (
            ""
            if refused or not frames
            else f" at {Path(frames[-1].filename).name}:{frames[-1].lineno}"
        )
        return BadRequest(name, t, refused, f"{type(cause).__name__}{at}: {cause}"[:200])
    return BadRequest(name, t, False, f"answered {result!r}"[:200])


class BadClient(threading.Thread):
    """Sends one bad request (picked with the seed's rng) every ``every_s`` seconds."""

    def __init__(
        self,
        ctx: HostileContext,
        actions: Sequence[HostileAction],
        history: History,
        every_s: float = 1.0,
    ) -> None:
        super().__init__(name="bad-input", daemon=True)
        self.ctx, self.actions, self.history, self.every_s = ctx, list(actions), history, every_s
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.wait(self.every_s):
            self.history.add(attempt(self.ctx.rng.choice(self.actions), self.ctx))

    def stop(self) -> None:
        self.stopping.set()
        self.join(60)


SYSTEM_PREFIXES = ("%RETRY%", "%DLQ%", "RMQ_SYS_", "TRANS_CHECK_MAX_TIME_TOPIC", "SCHEDULE_")


def canary_snapshot(admin: rayq.Admin, topic: str, group: str) -> dict[str, Any]:
    """What bad input must not change: the canary's route and offsets, its group's
    committed offsets, and the user topics there are."""
    route = admin.route(topic)
    return {
        "route": repr(route),
        "offsets": sorted(
            (repr(s.queue), s.min_offset, s.max_offset) for s in admin.topic_stats(topic)
        ),
        "committed": sorted(
            (repr(p.queue), p.committed_offset) for p in admin.consumer_progress(group)
        ),
        "topics": sorted(t for t in admin.topics() if not t.startswith(SYSTEM_PREFIXES)),
    }
