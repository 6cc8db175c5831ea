"""The ``sticky`` task assignor of streams groups (KIP-1071), as Kafka 4.4's broker-side
``StickyTaskAssignor`` decides.

Load is counted per process (a Streams instance, whose members are its threads): a process's load
is its tasks over its members. Active tasks, taken by partition then subtopology: (1) stay with the
member that runs them while it is under its share; (2) else go to a member that has the task's
state (a previous standby first, then the member that reported the largest offset sum for it in
the heartbeat's ``task_offsets``) and is under its share; (3) the rest go, by subtopology then
partition, to the least loaded member of the least loaded process. Then each task of a stateful
subtopology (one with changelog topics) gets ``num.standby.replicas`` standby tasks on processes
that do not hold it yet: the member that ran it as active, the members with its state (ranked as
above), then the least loaded processes. A share (``ceil(tasks / members)``) is recomputed each
time a member fills its own, as Kafka's does.

The assignor hands out no warm-up tasks: in Kafka 4.4 neither it nor the refinement step after it
does (``AssignmentRefiner.refine`` returns the target unchanged), whatever
``group.streams.num.warmup.replicas`` says. Client tags are not read (Kafka 4.4's assignor does not
place standbys by tag). Where Kafka breaks a tie by Java hash and heap order, this one takes
process and member ids in order (docs/kafka-compatibility.md).

Tasks are ``(subtopology id, partition)``; the answer is member id -> (active, standby, warm-up)
as ``{subtopology: {partition}}`` maps.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import NamedTuple

Tasks = dict[str, set[int]]
TaskId = tuple[str, int]

logger = logging.getLogger("kafkalog.server")


class AssignMember(NamedTuple):
    member_id: str
    process_id: str
    #: the tasks the member runs now (its current assignment)
    active: Mapping[str, Iterable[int]]
    standby: Mapping[str, Iterable[int]]
    #: the changelog offset sum of each task's state the member reported (``task_offsets``)
    task_offsets: Mapping[str, Mapping[int, int]] = {}


class _Process:
    """Kafka's ``ProcessState``: one process's members, tasks and load."""

    def __init__(self, process_id: str) -> None:
        self.process_id = process_id
        self.counts: dict[str, int] = {}
        self.task_count = 0
        self.tasks: set[TaskId] = set()
        self.load = 0.0

    def add_member(self, member_id: str) -> None:
        self.counts[member_id] = 0
        self.load = self.task_count / len(self.counts)

    def add(self, member_id: str, task: TaskId) -> int:
        self.task_count += 1
        self.tasks.add(task)
        self.counts[member_id] += 1
        self.load = self.task_count / len(self.counts)
        return self.counts[member_id]

    def least_loaded_member(self) -> str:
        return min(self.counts, key=lambda m: (self.counts[m], m))


def _share(tasks: int, members: int) -> int:
    return 0 if members == 0 else -(-tasks // members)


class _State:
    def __init__(self, members: list[AssignMember], tasks: Mapping[str, int], stateful: set[str],
                 num_standby: int) -> None:
        self.num_standby = num_standby
        self.total_active = sum(tasks.values())
        self.total = self.total_active + sum(n for s, n in tasks.items() if s in stateful) * num_standby
        self.active_cap = self.cap = len(members)
        self.active_share = _share(self.total_active, self.active_cap)
        self.total_share = _share(self.total, self.cap)
        self.processes: dict[str, _Process] = {}
        self.process_of: dict[str, _Process] = {}
        self.prev_active: dict[TaskId, str] = {}
        self.out: dict[str, tuple[Tasks, Tasks, Tasks]] = {m.member_id: ({}, {}, {}) for m in members}
        candidates: dict[TaskId, list[tuple[bool, int, str]]] = {}
        for m in members:
            p = self.processes.setdefault(m.process_id, _Process(m.process_id))
            p.add_member(m.member_id)
            self.process_of[m.member_id] = p
            for sid, ps in m.active.items():
                for part in ps:
                    self.prev_active[(sid, part)] = m.member_id
            standby = {(sid, part) for sid, ps in m.standby.items() for part in ps}
            for sid, part in sorted(standby):
                offset = m.task_offsets.get(sid, {}).get(part, 0)
                candidates.setdefault((sid, part), []).append((True, offset, m.member_id))
            for sid, offsets in sorted(m.task_offsets.items()):
                for part, offset in sorted(offsets.items()):
                    if (sid, part) not in standby:
                        candidates.setdefault((sid, part), []).append((False, offset, m.member_id))
        # previous standbys first, then by the offset sum, largest first (a stable sort, as Java's)
        self.prev_standby = {t: [mid for _prev, _off, mid in sorted(c, key=lambda x: (not x[0], -x[1]))]
                             for t, c in candidates.items()}

    def add(self, member_id: str, task: TaskId, active: bool) -> None:
        count = self.process_of[member_id].add(member_id, task)
        self.out[member_id][0 if active else 1].setdefault(task[0], set()).add(task[1])
        if active and count == self.active_share:
            self.active_cap -= 1
            self.total_active -= count
            self.active_share = _share(self.total_active, self.active_cap)
        if count == self.total_share:
            self.cap -= 1
            self.total -= count
            self.total_share = _share(self.total, self.cap)

    def count(self, member_id: str) -> int:
        return self.process_of[member_id].counts[member_id]

    def least_loaded_prev(self, members: list[str] | None, standby_of: TaskId | None) -> str | None:
        """Kafka's ``findPrevMemberWithLeastLoad``: the first candidate, replaced only by one
        whose process and member both carry less."""
        best: str | None = None
        best_process = best_member = float("inf")
        for mid in members or ():
            p = self.process_of[mid]
            if standby_of is not None and standby_of in p.tasks:
                continue
            if best is None or (p.load < best_process and p.counts[mid] < best_member):
                best, best_process, best_member = mid, p.load, p.counts[mid]
        return best

    def processes_by_load(self) -> list[_Process]:
        return sorted(self.processes.values(), key=lambda p: (p.load, p.process_id))


def assign(members: list[AssignMember], tasks: Mapping[str, int], num_standby: int,
           stateful: Iterable[str] | None = None) -> dict[str, tuple[Tasks, Tasks, Tasks]]:
    """The target assignment of ``tasks`` (subtopology -> number of partitions) over ``members``;
    ``stateful``: the subtopologies with state (every one when not given), which get standbys."""
    members = sorted(members, key=lambda m: m.member_id)
    stateful_set = set(tasks) if stateful is None else set(stateful)
    st = _State(members, tasks, stateful_set, num_standby)
    if not members:
        return st.out
    # active tasks: 1. stay; 2. to a member with the task's state; 3. to the least loaded
    todo = sorted(((sid, p) for sid in sorted(tasks) for p in range(tasks[sid])), key=lambda t: (t[1], t[0]))
    rest = []
    for task in todo:
        prev = st.prev_active.get(task)
        if prev is not None and st.count(prev) < st.active_share:
            st.add(prev, task, True)
        else:
            rest.append(task)
    todo, rest = rest, []
    for task in todo:
        prev = st.least_loaded_prev(st.prev_standby.get(task), None)
        if prev is not None and st.count(prev) < st.active_share:
            st.add(prev, task, True)
        else:
            rest.append(task)
    for task in sorted(rest):
        process = st.processes_by_load()[0]
        st.add(process.least_loaded_member(), task, True)
    if num_standby <= 0:
        return st.out
    # standby tasks of the stateful subtopologies
    stateful_tasks = [(sid, p) for sid in sorted(tasks) if sid in stateful_set for p in range(tasks[sid])]
    remaining: list[tuple[TaskId, int]] = []
    for task in sorted(stateful_tasks, key=lambda t: (t[1], t[0]), reverse=True):
        placed = 0
        while placed < num_standby:
            prev = st.prev_active.get(task)
            if prev is not None and task not in st.process_of[prev].tasks and st.count(prev) < st.total_share:
                st.add(prev, task, False)
                placed += 1
                continue
            cand = st.least_loaded_prev(st.prev_standby.get(task), task)
            if cand is None or st.count(cand) >= st.total_share:
                break
            st.add(cand, task, False)
            placed += 1
        remaining.append((task, num_standby - placed))
    for task, n in sorted(remaining, reverse=True):
        for i in range(n):
            free = next((p for p in st.processes_by_load() if task not in p.tasks), None)
            if free is None:
                logger.warning("Unable to assign %d of %d standby tasks for task [%s_%d]. There is not enough "
                               "available capacity. You should increase the number of threads and/or "
                               "application instances to maintain the requested number of standby replicas.",
                               num_standby - i, num_standby, task[0], task[1])
                break
            st.add(free.least_loaded_member(), task, False)
    return st.out
