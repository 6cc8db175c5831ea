"""A streams group member's current assignment moved towards its target, as Kafka 4.4's streams
``CurrentAssignmentBuilder`` moves it.

Each of the three roles (active, standby, warm-up) is compared with the target: tasks in both are
kept, tasks only in the current assignment are to be revoked, tasks only in the target are to be
assigned unless another member still holds them (an active task anywhere; a standby or warm-up
copy on the member's own process). A member keeps its epoch while it has tasks to give up and
still reports one of them; once it has none, it gets the target epoch and what can be assigned.
Role changes on one member: an active task that becomes a standby is a standby at once; a standby
and a warm-up task swap roles at once; a standby or warm-up task that becomes active is not
revoked, and stays in its old role until the active task is granted.

Works on :class:`kafkalog.server.coordinator.streams_group.Member` values (``active``: subtopology
-> partition -> the epoch it was assigned at; the other roles: subtopology -> partitions).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any, NamedTuple

from kafkalog.server import error_codes as ec
from kafkalog.server.coordinator.group import GroupError

Tasks = dict[str, set[int]]
EpochTasks = dict[str, dict[int, int]]
TaskId = tuple[str, int]

#: Kafka's streams MemberState values
STABLE, UNREVOKED_TASKS, UNRELEASED_TASKS, UNKNOWN = 1, 2, 3, 127


class Owners(NamedTuple):
    """Which process holds each task now (assigned or pending revocation), over every member of the
    group: Kafka's ``currentActiveTaskProcessId`` / ``currentStandbyTaskProcessIds`` /
    ``currentWarmupTaskProcessIds``."""
    active: dict[TaskId, str]
    standby: dict[TaskId, set[str]]
    warmup: dict[TaskId, set[str]]


def owners(members: Iterable[Any]) -> Owners:
    out = Owners({}, {}, {})
    for m in members:
        for tasks in (m.active, m.active_revoking):
            for sid, ps in tasks.items():
                for p in ps:
                    out.active[(sid, p)] = m.process_id
        for role, held in ((out.standby, (m.standby, m.standby_revoking)), (out.warmup, (m.warmup, m.warmup_revoking))):
            for tasks in held:
                for sid, ps in tasks.items():
                    for p in ps:
                        role.setdefault((sid, p), set()).add(m.process_id)
    return out


def _has(tasks: Mapping[str, Iterable[int]], sid: str, p: int) -> bool:
    return p in tasks.get(sid, ())


def _overlaps(owned: Mapping[str, Iterable[int]], other: Mapping[str, Iterable[int]]) -> bool:
    return any(not set(ps).isdisjoint(other.get(sid, ())) for sid, ps in owned.items())


def _not_released(owned: tuple[Tasks, Tasks, Tasks] | None, pending: tuple[Mapping[str, Any], ...]) -> bool:
    """Kafka's ``hasNotReleased``: the member did not say what it owns, or still owns one of
    ``pending`` (role by role)."""
    return owned is None or any(_overlaps(o, p) for o, p in zip(owned, pending, strict=True))


def _add(tasks: Tasks, sid: str, p: int) -> None:
    tasks.setdefault(sid, set()).add(p)


def _remove(tasks: Tasks, sid: str, p: int) -> None:
    ps = tasks.get(sid)
    if ps is not None and p in ps:
        ps.discard(p)
        if not ps:
            del tasks[sid]


def _diff(current: Mapping[str, Iterable[int]], target: Mapping[str, set[int]], unreleased: Any
          ) -> tuple[Tasks, Tasks, Tasks, bool]:
    """(kept, to revoke, to assign now, whether a task to assign is still held elsewhere)."""
    kept: Tasks = {}
    revoke: Tasks = {}
    assign: Tasks = {}
    held = False
    for sid in set(current) | set(target):
        cur, tgt = set(current.get(sid, ())), target.get(sid, set())
        if cur & tgt:
            kept[sid] = cur & tgt
        if cur - tgt:
            revoke[sid] = cur - tgt
        todo = {p for p in tgt - cur if not unreleased(sid, p)}
        held |= len(todo) != len(tgt - cur)
        if todo:
            assign[sid] = todo
    return kept, revoke, assign, held


def reconcile(m: Any, target_epoch: int, target: tuple[Tasks, Tasks, Tasks],
              owned: tuple[Tasks, Tasks, Tasks] | None, held_by: Owners) -> Any:
    """The member ``m`` after Kafka's reconciliation step towards ``target`` (active, standby,
    warm-up) at ``target_epoch``; ``owned``: the tasks the member's heartbeat says it owns (None
    when it does not say)."""
    if m.state == STABLE:
        if m.member_epoch == target_epoch:
            return m
        return _next(m, m.member_epoch, target_epoch, target, owned, held_by)
    if m.state == UNREVOKED_TASKS:
        if _not_released(owned, (m.active_revoking, m.standby_revoking, m.warmup_revoking)):
            return m
        return _next(m, m.member_epoch + 1, target_epoch, target, owned, held_by)
    if m.state == UNRELEASED_TASKS:
        return _next(m, m.member_epoch, target_epoch, target, owned, held_by)
    if owned is not None and not any(owned):
        return _next(m, target_epoch, target_epoch, target, owned, held_by)
    raise GroupError(ec.FENCED_MEMBER_EPOCH, "The streams group member is in a unknown state. The member must "
                                             "abandon all its tasks and rejoin.")


def _next(m: Any, member_epoch: int, target_epoch: int, target: tuple[Tasks, Tasks, Tasks],
          owned: tuple[Tasks, Tasks, Tasks] | None, held_by: Owners) -> Any:
    """Kafka's ``computeNextAssignment`` and ``buildNewMember``."""
    proc = m.process_id

    def active_held(sid: str, p: int) -> bool:
        return held_by.active.get((sid, p)) is not None \
            or (proc in held_by.standby.get((sid, p), ()) and not _has(m.standby, sid, p)) \
            or (proc in held_by.warmup.get((sid, p), ()) and not _has(m.warmup, sid, p))

    def standby_held(sid: str, p: int) -> bool:
        return (held_by.active.get((sid, p)) == proc and not _has(m.active, sid, p)) \
            or proc in held_by.standby.get((sid, p), ()) \
            or (proc in held_by.warmup.get((sid, p), ()) and not _has(m.warmup, sid, p))

    def warmup_held(sid: str, p: int) -> bool:
        return held_by.active.get((sid, p)) == proc \
            or (proc in held_by.standby.get((sid, p), ()) and not _has(m.standby, sid, p)) \
            or proc in held_by.warmup.get((sid, p), ())

    kept_a, revoke_a, assign_a, held_a = _diff(m.active, target[0], active_held)
    active: EpochTasks = {sid: {p: m.active[sid][p] for p in ps} for sid, ps in kept_a.items()}
    active_revoking: EpochTasks = {sid: {p: m.active[sid][p] for p in ps} for sid, ps in revoke_a.items()}
    active_assign: EpochTasks = {sid: dict.fromkeys(ps, target_epoch) for sid, ps in assign_a.items()}
    standby, standby_revoking, standby_assign, held_s = _diff(m.standby, target[1], standby_held)
    warmup, warmup_revoking, warmup_assign, held_w = _diff(m.warmup, target[2], warmup_held)
    # an active task to become a standby: a standby at once
    for sid, ps in m.active.items():
        for p in ps:
            if _has(standby_assign, sid, p):
                _remove(standby_assign, sid, p)
                _add(standby, sid, p)
    # a standby and a warm-up task swap roles at once
    for held, revoking, assign, granted in ((m.standby, standby_revoking, warmup_assign, warmup),
                                            (m.warmup, warmup_revoking, standby_assign, standby)):
        for sid, ps in held.items():
            for p in ps:
                if _has(assign, sid, p):
                    _remove(assign, sid, p)
                    _add(granted, sid, p)
                    _remove(revoking, sid, p)
    # a standby or warm-up task to become active is not revoked, and kept until granted
    for held, revoking in ((m.standby, standby_revoking), (m.warmup, warmup_revoking)):
        for sid, ps in held.items():
            for p in ps:
                if _has(target[0], sid, p):
                    _remove(revoking, sid, p)
    pending = (active_revoking, standby_revoking, warmup_revoking)
    revoke = any(pending) and _not_released(owned, pending)
    for held, granted in ((m.standby, standby), (m.warmup, warmup)):
        for sid, ps in held.items():
            for p in ps:
                promoted_now = not revoke and p in active_assign.get(sid, {})
                if _has(target[0], sid, p) and not promoted_now:
                    _add(granted, sid, p)
    unreleased = held_a or held_s or held_w
    if revoke:
        return replace(m, state=UNREVOKED_TASKS, member_epoch=member_epoch, previous_member_epoch=m.member_epoch,
                       active=active, standby=standby, warmup=warmup, active_revoking=active_revoking,
                       standby_revoking=standby_revoking, warmup_revoking=warmup_revoking)
    for sid, eps in active_assign.items():
        active.setdefault(sid, {}).update(eps)
    for granted, assign in ((standby, standby_assign), (warmup, warmup_assign)):
        for sid, ps in assign.items():
            granted.setdefault(sid, set()).update(ps)
    return replace(m, state=UNRELEASED_TASKS if unreleased else STABLE, member_epoch=target_epoch,
                   previous_member_epoch=m.member_epoch, active=active, standby=standby, warmup=warmup,
                   active_revoking={}, standby_revoking={}, warmup_revoking={})
