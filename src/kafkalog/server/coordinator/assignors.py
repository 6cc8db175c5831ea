"""The consumer group protocol's server-side assignors (KIP-848): ``uniform`` (Kafka's default) and
``range``, as Kafka 4.4's ``UniformAssignor`` and ``RangeAssignor`` assign.

An assignor gets the members (their subscribed topic ids, instance id, current target assignment),
whether every member subscribes to the same topics (*homogeneous*) or not, and each topic's partition
count; it returns every member's new target assignment, ``{topic_id: frozenset(partitions)}``.

* ``uniform``, homogeneous: each member's quota is ``partitions // members``, the first
  ``partitions % members`` members (in member order) taking one more; a member keeps what it already
  has up to its quota (sticky), the rest and the unassigned partitions fill the members under quota.
* ``uniform``, heterogeneous: sticky too: a member keeps the partitions of topics it still subscribes
  to, unassigned partitions go to the least loaded subscriber, then partitions move from the most to
  the least loaded subscriber of a topic until no subscriber has two more than another (Kafka's
  heterogeneous builder also balances; its exact choice of partitions differs).
* ``range``: per topic, members sorted (static members by instance id first, then member id) take
  consecutive ranges, the first ``partitions % members`` subscribers one partition more.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

TopicAssignment = dict[uuid.UUID, frozenset[int]]

UNIFORM = "uniform"
RANGE = "range"
#: Kafka's built-in assignors, the default first (``group.consumer.assignors``)
BUILTIN_ASSIGNORS = (UNIFORM, RANGE)


class PartitionAssignorError(Exception):
    """The assignment cannot be computed (a subscribed topic vanished, partitions left over)."""


@dataclass
class MemberSpec:
    subscribed_topic_ids: frozenset[uuid.UUID]
    instance_id: str | None = None
    rack_id: str | None = None
    assignment: TopicAssignment = field(default_factory=dict)


def assign(name: str, members: Mapping[str, MemberSpec], homogeneous: bool,
           partition_counts: Mapping[uuid.UUID, int]) -> dict[str, TopicAssignment]:
    """Every member's target assignment computed by assignor ``name``."""
    if not members:
        return {}
    for spec in members.values():
        for t in spec.subscribed_topic_ids:
            if t not in partition_counts:
                raise PartitionAssignorError(f"Members are subscribed to topic {t} which doesn't exist "
                                             f"in the topic metadata.")
    if name == RANGE:
        return _range(members, partition_counts)
    if name != UNIFORM:
        raise PartitionAssignorError(f"unknown assignor {name!r}")
    if homogeneous:
        return _uniform_homogeneous(members, partition_counts)
    return _uniform_heterogeneous(members, partition_counts)


def _freeze(a: Mapping[uuid.UUID, set[int]]) -> TopicAssignment:
    return {t: frozenset(ps) for t, ps in a.items() if ps}


def _uniform_homogeneous(members: Mapping[str, MemberSpec],
                         counts: Mapping[uuid.UUID, int]) -> dict[str, TopicAssignment]:
    topics = sorted(next(iter(members.values())).subscribed_topic_ids)
    if not topics:
        return {m: {} for m in members}
    owned = {(t, p) for spec in members.values() for t, ps in spec.assignment.items() for p in ps}
    unassigned = [(t, p) for t in topics for p in range(counts[t]) if (t, p) not in owned]
    total = sum(counts[t] for t in topics)
    n = len(members)
    minimum, extra = divmod(total, n)
    unfilled: list[tuple[str, int]] = []
    out: dict[str, dict[uuid.UUID, set[int]]] = {}
    for index, (member_id, spec) in enumerate(members.items()):
        quota, has_extra = minimum, False
        if extra > 0:
            quota, has_extra = quota + 1, True
        new: dict[uuid.UUID, set[int]] = {}
        for t, parts in spec.assignment.items():
            if t not in counts or t not in topics:
                continue                       # no longer subscribed: revoked
            keep = set()
            for p in sorted(parts):
                if p >= counts[t]:
                    continue
                if quota > 0:
                    quota -= 1
                    keep.add(p)
                else:
                    unassigned.append((t, p))
            if keep:
                new[t] = keep
        if quota > 0 and has_extra and n - index > extra:
            quota -= 1
            has_extra = False
        if quota > 0:
            unfilled.append((member_id, quota))
        if has_extra:
            extra -= 1
        out[member_id] = new
    i = 0
    for member_id, quota in unfilled:
        for _ in range(quota):
            if i >= len(unassigned):
                break
            t, p = unassigned[i]
            out[member_id].setdefault(t, set()).add(p)
            i += 1
    if i < len(unassigned):
        raise PartitionAssignorError("Partitions were left unassigned")
    return {m: _freeze(a) for m, a in out.items()}


def _uniform_heterogeneous(members: Mapping[str, MemberSpec],
                           counts: Mapping[uuid.UUID, int]) -> dict[str, TopicAssignment]:
    out: dict[str, dict[uuid.UUID, set[int]]] = {m: {} for m in members}
    owner: dict[tuple[uuid.UUID, int], str] = {}
    for member_id, spec in members.items():
        for t, parts in spec.assignment.items():
            if t in spec.subscribed_topic_ids and t in counts:
                for p in parts:
                    if p < counts[t] and (t, p) not in owner:
                        owner[(t, p)] = member_id
                        out[member_id].setdefault(t, set()).add(p)

    def load(m: str) -> int:
        return sum(len(ps) for ps in out[m].values())

    subscribers = {t: [m for m, s in members.items() if t in s.subscribed_topic_ids] for t in counts}
    # topics with the fewest subscribers first: they have the fewest choices
    for t in sorted((t for t in counts if subscribers[t]), key=lambda t: (len(subscribers[t]), t)):
        for p in range(counts[t]):
            if (t, p) not in owner:
                m = min(subscribers[t], key=lambda m: (load(m), list(members).index(m)))
                owner[(t, p)] = m
                out[m].setdefault(t, set()).add(p)
    moved = True
    while moved:
        moved = False
        for t in sorted(t for t in counts if len(subscribers[t]) > 1):
            heavy = max(subscribers[t], key=lambda m: (load(m), len(out[m].get(t, ()))))
            light = min(subscribers[t], key=load)
            if load(heavy) - load(light) > 1 and out[heavy].get(t):
                p = max(out[heavy][t])
                out[heavy][t].discard(p)
                out[light].setdefault(t, set()).add(p)
                moved = True
    return {m: _freeze(a) for m, a in out.items()}


def _range(members: Mapping[str, MemberSpec], counts: Mapping[uuid.UUID, int]) -> dict[str, TopicAssignment]:
    def order(m: str) -> tuple[int, str]:
        inst = members[m].instance_id
        return (0, inst) if inst is not None else (1, m)

    ordered = sorted(members, key=order)
    subscribers: dict[uuid.UUID, int] = {}
    for m in ordered:
        for t in members[m].subscribed_topic_ids:
            subscribers[t] = subscribers.get(t, 0) + 1
    state = {t: [counts[t] // n, counts[t] % n, 0] for t, n in subscribers.items()}
    out: dict[str, TopicAssignment] = {}
    for m in ordered:
        a: TopicAssignment = {}
        for t in sorted(members[m].subscribed_topic_ids):
            quota, extra, start = state[t]
            if extra > 0:
                quota += 1
                state[t][1] = extra - 1
            end = min(start + quota, counts[t])
            state[t][2] = end
            if start < end:
                a[t] = frozenset(range(start, end))
        out[m] = a
    return out
