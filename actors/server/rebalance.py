"""Consumer-group rebalance computed in one place: the coordinator (no Ray here).

RocketMQ lets every consumer compute its own share from its own view of the group,
so during churn two consumers can own a queue at once. Here the coordinator holds
the single view of each push-consumer group (members, subscriptions, strategy) and
plans every change as two steps:

1. ``revoke``: each member is told which of its queues it loses; it stops pulling
   them, finishes (or abandons) in-flight work, commits and acknowledges;
2. ``assign``: only then does every member get its full new set of queues.

A ``Plan`` carries a generation number that grows with every rebalance; consumers
commit with it and a broker refuses commits of an older generation than one it has
seen for that queue, so a stale consumer cannot move a group's offsets back.

Members of one group must subscribe to the same topics with the same expressions
and use the same model and strategy; a member that differs gets a ConfigError
instead of silently splitting the group's messages.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from rayq.actors.protocol import MemberSpec as MemberSpec  # re-exported
from rayq.actors.protocol import MessageModel, MessageQueue
from rayq.actors.server.allocation import STRATEGIES, AllocateStrategy, allocate_by_config
from rayq.store.errors import ConfigError


@dataclass
class Plan:
    """One rebalance of a group: what each member gives up, then what each member owns."""

    group: str
    generation: int
    revoke: dict[str, list[MessageQueue]]
    assign: dict[str, list[MessageQueue]]


@dataclass
class _Group:
    members: dict[str, MemberSpec] = field(default_factory=dict)
    owned: dict[str, frozenset[MessageQueue]] = field(default_factory=dict)
    generation: int = 0


class Rebalancer:
    """Membership and ownership of every push-consumer group."""

    def __init__(self) -> None:
        self._groups: dict[str, _Group] = {}

    def join(self, group: str, client_id: str, spec: MemberSpec) -> None:
        g = self._groups.setdefault(group, _Group())
        for other_id, other in g.members.items():
            if other_id == client_id:
                continue
            if not spec.same_group_settings(other):
                raise ConfigError(
                    f"consumer {client_id} of group {group!r} subscribes to "
                    f"{dict(spec.subscriptions)} ({spec.model.value}, {spec.strategy.value}) "
                    "but member "
                    f"{other_id} subscribes to {dict(other.subscriptions)} ({other.model.value}, "
                    f"{other.strategy.value}); every consumer of a group must subscribe alike, "
                    "or messages would be lost: use another group name",
                    group=group,
                )
            overlap = set(spec.allocation) & set(other.allocation)
            if overlap:
                raise ConfigError(
                    f"consumer {client_id} of group {group!r} is configured with queues "
                    f"{sorted(overlap)} that member {other_id} already has",
                    group=group,
                )
        g.members[client_id] = spec
        g.owned.setdefault(client_id, frozenset())

    def leave(self, group: str, client_id: str) -> bool:
        """Forget a member (its queues become free at once); True if it was there."""
        g = self._groups.get(group)
        if g is None or client_id not in g.members:
            return False
        del g.members[client_id]
        g.owned.pop(client_id, None)
        if not g.members:
            del self._groups[group]
        return True

    def groups(self) -> list[str]:
        return sorted(self._groups)

    def groups_of_topics(self, topics: set[str]) -> list[str]:
        return sorted(
            name
            for name, g in self._groups.items()
            if any(set(s.topics) & topics for s in g.members.values())
        )

    def members(self, group: str) -> list[str]:
        g = self._groups.get(group)
        return sorted(g.members) if g else []

    def topics(self, group: str) -> list[str]:
        g = self._groups.get(group)
        if not g or not g.members:
            return []
        return next(iter(g.members.values())).topics

    def owned(self, group: str) -> dict[str, frozenset[MessageQueue]]:
        g = self._groups.get(group)
        return dict(g.owned) if g else {}

    def plan(
        self, group: str, queues_of: Callable[[str], list[MessageQueue]], now_ms: int
    ) -> Plan | None:
        """The next rebalance of ``group`` from its members and the current routes.

        Generations are wall-clock milliseconds (or one more than the last), so they
        keep growing across a coordinator restart, which forgets everything else."""
        g = self._groups.get(group)
        if g is None:
            return None
        g.generation = max(g.generation + 1, now_ms)
        spec = next(iter(g.members.values()))
        members = sorted(g.members)
        target: dict[str, list[MessageQueue]] = {m: [] for m in members}
        for topic in spec.topics:  # each topic on its own, as RocketMQ does
            queues = sorted(queues_of(topic))
            if spec.model is MessageModel.BROADCASTING:
                share = {m: list(queues) for m in members}
            else:
                share = _allocate(spec, queues, members, g.members)
            for m in members:
                target[m].extend(share.get(m, []))
        if spec.model is MessageModel.BROADCASTING:
            return Plan(group, g.generation, {m: [] for m in members}, target)
        revoke = {m: sorted(g.owned.get(m, frozenset()) - set(target[m])) for m in members}
        return Plan(group, g.generation, revoke, target)

    def released(self, group: str, client_id: str, queues: list[MessageQueue]) -> None:
        """``client_id`` acknowledged (or can no longer hold) ``queues``."""
        g = self._groups.get(group)
        if g is not None and client_id in g.owned:
            g.owned[client_id] = g.owned[client_id] - set(queues)

    def assigned(self, group: str, client_id: str, queues: list[MessageQueue]) -> None:
        g = self._groups.get(group)
        if g is not None and client_id in g.members:
            g.owned[client_id] = frozenset(queues)

    def holder(self, group: str, mq: MessageQueue, *, besides: str) -> str | None:
        """Another member that still owns ``mq`` (it has not released it yet)."""
        g = self._groups.get(group)
        if g is None:
            return None
        return next((m for m, qs in g.owned.items() if m != besides and mq in qs), None)


def _allocate(
    spec: MemberSpec,
    queues: list[MessageQueue],
    members: list[str],
    specs: Mapping[str, MemberSpec],
) -> dict[str, list[MessageQueue]]:
    if spec.strategy is AllocateStrategy.CONFIG:
        known = set(queues)
        config = {m: [q for q in specs[m].allocation if q in known] for m in members}
        return allocate_by_config(queues, members, config)
    return STRATEGIES[spec.strategy](queues, members)
