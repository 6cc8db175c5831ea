"""The ``sticky`` task assignor of streams groups (KIP-1071), as Kafka 4.4's broker-side
``StickyTaskAssignor`` decides: active tasks stay with the member that runs them while it is not
over its share, the rest go to the least loaded member; each task then gets
``num.standby.replicas`` standby tasks on members of other processes (a process never holds an
active and a standby copy of one task), previous standby owners first, then the least loaded.
Tasks are ``(subtopology id, partition)``; the answer is member id -> (active, standby, warm-up)
as ``{subtopology: {partition}}`` maps (no warm-up tasks: see docs/kafka-compatibility.md)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

Tasks = dict[str, set[int]]


class AssignMember(NamedTuple):
    member_id: str
    process_id: str
    #: the tasks the member runs now (its previous assignment)
    active: Mapping[str, set[int]]
    standby: Mapping[str, set[int]]


def _has(tasks: Mapping[str, set[int]], sid: str, p: int) -> bool:
    return p in tasks.get(sid, ())


def assign(members: list[AssignMember], tasks: Mapping[str, int], num_standby: int
           ) -> dict[str, tuple[Tasks, Tasks, Tasks]]:
    """The target assignment of ``tasks`` (subtopology -> number of partitions) over ``members``."""
    out: dict[str, tuple[Tasks, Tasks, Tasks]] = {m.member_id: ({}, {}, {}) for m in members}
    if not members:
        return out
    ordered = sorted(members, key=lambda m: m.member_id)
    all_tasks = [(sid, p) for sid in sorted(tasks) for p in range(tasks[sid])]
    load = {m.member_id: 0 for m in ordered}
    quota = -(-len(all_tasks) // len(ordered))
    owner: dict[tuple[str, int], AssignMember] = {}
    for sid, p in all_tasks:                       # sticky: the previous owner keeps it within its quota
        prev = next((m for m in ordered if _has(m.active, sid, p)), None)
        if prev is not None and load[prev.member_id] < quota:
            owner[(sid, p)] = prev
            load[prev.member_id] += 1
    for sid, p in all_tasks:                       # the rest: the least loaded member
        if (sid, p) not in owner:
            m = min(ordered, key=lambda x: (load[x.member_id], x.member_id))
            owner[(sid, p)] = m
            load[m.member_id] += 1
    for (sid, p), m in owner.items():
        out[m.member_id][0].setdefault(sid, set()).add(p)
    if num_standby <= 0:
        return out
    for sid, p in all_tasks:
        active = owner[(sid, p)]
        used = {active.process_id}
        for _ in range(num_standby):
            candidates = [m for m in ordered if m.process_id not in used]
            if not candidates:
                break
            m = min(candidates, key=lambda x: (not _has(x.standby, sid, p), load[x.member_id], x.member_id))
            used.add(m.process_id)
            load[m.member_id] += 1
            out[m.member_id][1].setdefault(sid, set()).add(p)
    return out
