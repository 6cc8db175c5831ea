"""The classic consumer group protocol's state machine (Kafka's ``GroupCoordinator`` on one node).

No sockets here: the handlers (:mod:`kafkalog.server.handlers.groups`) call :meth:`GroupCoordinator.join`,
:meth:`~GroupCoordinator.sync`, :meth:`~GroupCoordinator.heartbeat` and
:meth:`~GroupCoordinator.leave`; a JoinGroup or a follower's SyncGroup that must wait gets a future
resolved when the rebalance completes. Time moves by :meth:`GroupCoordinator.tick` (the broker calls
it periodically; it looks at the groups whose next deadline passed or that a request was at, see
:mod:`.group`): sessions expire, rebalances end at their timeout, the first rebalance of an empty
group waits ``group.initial.rebalance.delay.ms``. Each completed
rebalance (and each group that becomes empty) is handed to ``persist`` (``OffsetsStore
.store_group_metadata``), and :meth:`GroupCoordinator.restore` loads it back after a restart.

States are Kafka's: Empty, PreparingRebalance, CompletingRebalance, Stable, Dead.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from kafkalog.coordinator.group_metadata import GroupMetadataValue, MemberMetadata
from kafkalog.record.constants import INT32_MAX
from kafkalog.server import error_codes as ec
from kafkalog.server.coordinator.group import GroupCoordinatorBase

EMPTY = "Empty"
PREPARING_REBALANCE = "PreparingRebalance"
COMPLETING_REBALANCE = "CompletingRebalance"
STABLE = "Stable"
DEAD = "Dead"


class JoinResult(NamedTuple):
    error_code: int
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    member_id: str = ""
    #: (member_id, group_instance_id, metadata), only for the leader
    members: tuple[tuple[str, str | None, bytes], ...] = ()


class SyncResult(NamedTuple):
    error_code: int
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    last_heartbeat: int = 0
    join_future: asyncio.Future[JoinResult] | None = None
    sync_future: asyncio.Future[SyncResult] | None = None

    def metadata(self, protocol: str | None) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""


@dataclass
class Group:
    group_id: str
    state: str = EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static: dict[str, str] = field(default_factory=dict)          # group.instance.id -> member id
    pending: dict[str, int] = field(default_factory=dict)         # member id required: id -> deadline
    rebalance_deadline: int = 0
    initial_delay: bool = False
    state_timestamp: int = -1

    def has_member(self, member_id: str) -> bool:
        return member_id in self.members


class GroupCoordinator(GroupCoordinatorBase[Group]):
    """Every classic group of the node. Its timers are the classic protocol's own (pending member
    ids, the initial delay, rebalances ended at their deadline): :meth:`expire` and
    :meth:`next_deadline` are its own."""

    kind = "classic group"

    def __init__(self, persist: Callable[[str, GroupMetadataValue], None], *,
                 min_session_timeout_ms: int = 6000, max_session_timeout_ms: int = 1800000,
                 initial_rebalance_delay_ms: int = 3000, max_size: int = INT32_MAX,
                 clock: Callable[[], int] = lambda: int(time.monotonic() * 1000),
                 wall_clock: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
        super().__init__(persist, clock, wall_clock)
        self.min_session_timeout_ms = min_session_timeout_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.initial_rebalance_delay_ms = initial_rebalance_delay_ms
        self.max_size = max_size

    # --- restart --------------------------------------------------------------------------------

    def restore(self, group_id: str, value: GroupMetadataValue) -> None:
        """A group as last persisted: its members stay until their sessions expire."""
        now = self._clock()
        g = Group(group_id, generation=value.generation, protocol_type=value.protocol_type or None,
                  protocol=value.protocol, leader=value.leader,
                  state_timestamp=value.current_state_timestamp)
        for m in value.members:
            g.members[m.member_id] = Member(
                m.member_id, m.group_instance_id, m.client_id, m.client_host, m.session_timeout,
                m.rebalance_timeout if m.rebalance_timeout >= 0 else m.session_timeout,
                value.protocol_type, [(value.protocol or "", m.subscription)], m.assignment, now)
            if m.group_instance_id is not None:
                g.static[m.group_instance_id] = m.member_id
        g.state = STABLE if g.members else EMPTY
        self.groups[group_id] = g

    # --- JoinGroup --------------------------------------------------------------------------------

    def join(self, group_id: str, member_id: str, group_instance_id: str | None, client_id: str,
             client_host: str, session_timeout_ms: int, rebalance_timeout_ms: int, protocol_type: str,
             protocols: list[tuple[str, bytes]], require_known_member_id: bool,
             loop: asyncio.AbstractEventLoop) -> JoinResult | asyncio.Future[JoinResult]:
        if not group_id:
            return JoinResult(ec.INVALID_GROUP_ID, member_id=member_id)
        if not self.min_session_timeout_ms <= session_timeout_ms <= self.max_session_timeout_ms:
            return JoinResult(ec.INVALID_SESSION_TIMEOUT, member_id=member_id)
        g = self.groups.get(group_id)
        if g is None:
            g = self.groups[group_id] = Group(group_id)
        if g.state == DEAD:
            return JoinResult(ec.COORDINATOR_NOT_AVAILABLE, member_id=member_id)
        if not protocols or (g.protocol_type is not None and g.members and protocol_type != g.protocol_type):
            return JoinResult(ec.INCONSISTENT_GROUP_PROTOCOL, member_id=member_id)
        if g.members and not self._supports_common(g, {n for n, _ in protocols}, exclude=member_id):
            return JoinResult(ec.INCONSISTENT_GROUP_PROTOCOL, member_id=member_id)
        now = self._clock()

        if not member_id and group_instance_id is not None:
            # a static member with an unknown id: a new id, and the old one (if any) fenced
            old = g.static.get(group_instance_id)
            if old is not None:
                return self._rejoin_static(g, old, client_id, client_host, session_timeout_ms,
                                           rebalance_timeout_ms, protocol_type, protocols, loop, now)
            member_id = f"{group_instance_id}-{uuid.uuid4()}"
        elif not member_id:
            member_id = f"{client_id or 'member'}-{uuid.uuid4()}"
            if require_known_member_id:
                g.pending[member_id] = now + session_timeout_ms
                return JoinResult(ec.MEMBER_ID_REQUIRED, member_id=member_id)
        elif member_id not in g.pending or group_instance_id is not None:
            # a known member rejoins, with the id it holds (Kafka's ClassicGroup.validateMember)
            err = self._check_member(g, member_id, g.generation, group_instance_id)
            if err:
                return JoinResult(err, member_id=member_id)

        g.pending.pop(member_id, None)
        m = g.members.get(member_id)
        if m is None:
            if len(g.members) >= self.max_size:
                return JoinResult(ec.GROUP_MAX_SIZE_REACHED, member_id=member_id)
            m = Member(member_id, group_instance_id, client_id, client_host, session_timeout_ms,
                       rebalance_timeout_ms, protocol_type, protocols, last_heartbeat=now)
            g.members[member_id] = m
            if group_instance_id is not None:
                g.static[group_instance_id] = member_id
        else:
            # Kafka: while completing a rebalance only new metadata rebalances again; once stable,
            # new metadata or the leader's rejoin does; otherwise the current generation is answered
            same = m.protocols == protocols
            if (g.state == COMPLETING_REBALANCE and same) or (g.state == STABLE and same
                                                              and member_id != g.leader):
                return self._current(g, m)
            m.protocols, m.protocol_type = protocols, protocol_type
            m.session_timeout_ms, m.rebalance_timeout_ms = session_timeout_ms, rebalance_timeout_ms
            m.last_heartbeat = now
        if g.protocol_type is None:
            g.protocol_type = protocol_type
        return self._await_rebalance(g, m, loop, now)

    def _rejoin_static(self, g: Group, old_id: str, client_id: str, client_host: str,
                       session_timeout_ms: int, rebalance_timeout_ms: int, protocol_type: str,
                       protocols: list[tuple[str, bytes]], loop: asyncio.AbstractEventLoop,
                       now: int) -> JoinResult | asyncio.Future[JoinResult]:
        """A static member back (with a new member id): the old id is fenced; without a change of
        subscription (and unless it led) the group keeps its assignment, no rebalance."""
        old = g.members.pop(old_id)
        instance = old.group_instance_id
        assert instance is not None
        new_id = f"{instance}-{uuid.uuid4()}"
        m = Member(new_id, instance, client_id, client_host, session_timeout_ms, rebalance_timeout_ms,
                   protocol_type, protocols, old.assignment, now)
        g.members[new_id] = m
        g.static[instance] = new_id
        _fail(old, ec.FENCED_INSTANCE_ID)
        was_leader = g.leader == old_id
        if was_leader:
            g.leader = new_id
        if g.state == STABLE and old.protocols == protocols and not was_leader:
            self._store(g)
            return self._current(g, m)
        return self._await_rebalance(g, m, loop, now)

    def _await_rebalance(self, g: Group, m: Member, loop: asyncio.AbstractEventLoop,
                         now: int) -> asyncio.Future[JoinResult]:
        """``m``'s JoinGroup waits for the rebalance (started now unless one is under way)."""
        fut: asyncio.Future[JoinResult] = loop.create_future()
        m.join_future = fut
        if g.state != PREPARING_REBALANCE:
            self._prepare_rebalance(g, now)
        self._maybe_complete_join(g, now)
        return fut

    def _current(self, g: Group, m: Member) -> JoinResult:
        return JoinResult(ec.NONE, g.generation, g.protocol_type, g.protocol, g.leader or "",
                          m.member_id, self._member_list(g) if m.member_id == g.leader else ())

    def _member_list(self, g: Group) -> tuple[tuple[str, str | None, bytes], ...]:
        return tuple((m.member_id, m.group_instance_id, m.metadata(g.protocol)) for m in g.members.values())

    @staticmethod
    def _supports_common(g: Group, names: set[str], exclude: str = "") -> bool:
        common = set(names)
        for m in g.members.values():
            if m.member_id != exclude:
                common &= {n for n, _ in m.protocols}
        return bool(common)

    def _prepare_rebalance(self, g: Group, now: int) -> None:
        if g.state == COMPLETING_REBALANCE:
            for m in g.members.values():       # followers waiting in SyncGroup rejoin
                if m.sync_future is not None and not m.sync_future.done():
                    m.sync_future.set_result(SyncResult(ec.REBALANCE_IN_PROGRESS))
                m.sync_future = None
        timeout = max((m.rebalance_timeout_ms for m in g.members.values()), default=0)
        # the first rebalance of an empty group waits for more members (Kafka's initial delay)
        g.initial_delay = g.state == EMPTY and self.initial_rebalance_delay_ms > 0
        if g.initial_delay:
            timeout = min(timeout, self.initial_rebalance_delay_ms)
        g.rebalance_deadline = now + timeout
        g.state = PREPARING_REBALANCE
        g.state_timestamp = self._wall()

    def _maybe_complete_join(self, g: Group, now: int, *, timed_out: bool = False) -> None:
        if g.state != PREPARING_REBALANCE:
            return
        all_joined = all(m.join_future is not None for m in g.members.values()) and not g.pending
        if not timed_out and (g.initial_delay or not all_joined):
            return
        for m in list(g.members.values()):
            if m.join_future is None:          # did not rejoin in time
                self._remove(g, m)
        g.pending.clear()
        g.generation += 1
        g.state_timestamp = self._wall()
        if not g.members:
            g.state, g.protocol, g.leader = EMPTY, None, None
            g.protocol_type = None
            self._store(g)
            return
        if g.leader not in g.members:
            g.leader = next(iter(g.members))
        g.protocol = self._select_protocol(g)
        g.state = COMPLETING_REBALANCE
        for m in g.members.values():
            m.assignment = b""
            m.last_heartbeat = now     # Kafka restarts every session when the join completes
            fut, m.join_future = m.join_future, None
            if fut is not None and not fut.done():
                fut.set_result(self._current(g, m))

    @staticmethod
    def _select_protocol(g: Group) -> str:
        members = list(g.members.values())
        common = set.intersection(*({n for n, _ in m.protocols} for m in members))
        votes: dict[str, int] = {}
        for m in members:
            pick = next(n for n, _ in m.protocols if n in common)
            votes[pick] = votes.get(pick, 0) + 1
        return max(sorted(votes), key=lambda n: votes[n])

    def _remove(self, g: Group, m: Member) -> None:
        g.members.pop(m.member_id, None)
        if m.group_instance_id is not None and g.static.get(m.group_instance_id) == m.member_id:
            del g.static[m.group_instance_id]
        _fail(m, ec.UNKNOWN_MEMBER_ID)

    # --- SyncGroup, Heartbeat, LeaveGroup -------------------------------------------------------

    def _check_member(self, g: Group | None, member_id: str, generation: int,
                      group_instance_id: str | None) -> int:
        if g is None or g.state == DEAD:
            return ec.UNKNOWN_MEMBER_ID
        if group_instance_id is not None and g.static.get(group_instance_id, member_id) != member_id:
            return ec.FENCED_INSTANCE_ID
        if member_id not in g.members:
            return ec.UNKNOWN_MEMBER_ID
        if generation != g.generation:
            return ec.ILLEGAL_GENERATION
        return ec.NONE

    def check_commit(self, group_id: str, generation: int, member_id: str,
                     group_instance_id: str | None, *, has_offsets: bool = False, version: int = 9,
                     transactional: bool = False) -> int:
        """Kafka 4.4's checks of an (Txn)OffsetCommit against the group (its
        ``OffsetMetadataManager`` and ``ClassicGroup.validateOffsetCommit``): a simple commit
        (generation -1) is for a group without members; a group that does not exist (no members,
        no offsets: ``has_offsets``) refuses a generation with GROUP_ID_NOT_FOUND from
        OffsetCommit v9 (``version``), ILLEGAL_GENERATION before."""
        g = self.groups.get(group_id)
        if g is None:
            if generation < 0:
                return ec.NONE
            if not has_offsets:
                return ec.GROUP_ID_NOT_FOUND if version >= 9 else ec.ILLEGAL_GENERATION
            return ec.UNKNOWN_MEMBER_ID         # an empty group: no member to be
        if g.state == DEAD:
            return ec.COORDINATOR_NOT_AVAILABLE
        if generation < 0 and g.state == EMPTY:
            return ec.NONE
        if generation >= 0 or member_id or group_instance_id is not None:
            err = self._check_member(g, member_id, generation, group_instance_id)
            if err:
                return err
        elif not transactional and g.state != EMPTY:
            return ec.UNKNOWN_MEMBER_ID
        if not transactional and g.state == COMPLETING_REBALANCE:
            return ec.REBALANCE_IN_PROGRESS
        return ec.NONE

    def sync(self, group_id: str, generation: int, member_id: str, group_instance_id: str | None,
             assignments: dict[str, bytes], loop: asyncio.AbstractEventLoop
             ) -> SyncResult | asyncio.Future[SyncResult]:
        g = self.groups.get(group_id)
        err = self._check_member(g, member_id, generation, group_instance_id)
        if err:
            return SyncResult(err)
        assert g is not None
        m = g.members[member_id]
        m.last_heartbeat = self._clock()
        if g.state == PREPARING_REBALANCE:
            return SyncResult(ec.REBALANCE_IN_PROGRESS)
        if g.state == STABLE:
            return SyncResult(ec.NONE, g.protocol_type, g.protocol, m.assignment)
        fut: asyncio.Future[SyncResult] = loop.create_future()
        m.sync_future = fut
        if member_id == g.leader:
            for mid, member in g.members.items():
                member.assignment = assignments.get(mid, b"")
            g.state = STABLE
            g.state_timestamp = self._wall()
            self._store(g)
            for member in g.members.values():
                f, member.sync_future = member.sync_future, None
                if f is not None and not f.done():
                    member.last_heartbeat = m.last_heartbeat   # and each answered member's session
                    f.set_result(SyncResult(ec.NONE, g.protocol_type, g.protocol, member.assignment))
        return fut

    def heartbeat(self, group_id: str, generation: int, member_id: str,
                  group_instance_id: str | None) -> int:
        g = self.groups.get(group_id)
        err = self._check_member(g, member_id, generation, group_instance_id)
        if err == ec.ILLEGAL_GENERATION and g is not None and g.state == PREPARING_REBALANCE:
            err = ec.REBALANCE_IN_PROGRESS
        if err:
            return err
        assert g is not None
        g.members[member_id].last_heartbeat = self._clock()
        if g.state == PREPARING_REBALANCE:
            return ec.REBALANCE_IN_PROGRESS
        return ec.NONE

    def leave(self, group_id: str, members: list[tuple[str, str | None]]) -> list[int]:
        """Members ``(member_id, group_instance_id)`` leaving; an error code for each."""
        g = self.groups.get(group_id)
        out = []
        removed = False
        for member_id, instance in members:
            if g is None:
                out.append(ec.UNKNOWN_MEMBER_ID)
                continue
            if instance is not None:
                current = g.static.get(instance)
                if current is None:
                    out.append(ec.UNKNOWN_MEMBER_ID)
                    continue
                if member_id and member_id != current:
                    out.append(ec.FENCED_INSTANCE_ID)
                    continue
                member_id = current
            if member_id in g.pending:
                del g.pending[member_id]
                out.append(ec.NONE)
                continue
            m = g.members.get(member_id)
            if m is None:
                out.append(ec.UNKNOWN_MEMBER_ID)
                continue
            self._remove(g, m)
            removed = True
            out.append(ec.NONE)
        if g is not None and removed:
            self._after_removal(g)
        return out

    def _after_removal(self, g: Group) -> None:
        now = self._clock()
        if g.state in (STABLE, COMPLETING_REBALANCE):
            if g.members:
                self._prepare_rebalance(g, now)
            else:
                g.generation += 1
                g.state, g.protocol, g.leader, g.protocol_type = EMPTY, None, None, None
                g.state_timestamp = self._wall()
                self._store(g)
        elif g.state == PREPARING_REBALANCE:
            self._maybe_complete_join(g, now)

    # --- time -----------------------------------------------------------------------------------

    def expire(self, g: Group, now: int) -> bool:
        """Expire the group's sessions and pending member ids, end its rebalance at its deadline
        (a write that raises is the tick's to log and retry)."""
        for mid, deadline in list(g.pending.items()):
            if now >= deadline:
                del g.pending[mid]
        expired = [m for m in g.members.values()
                   if m.join_future is None and m.sync_future is None
                   and now - m.last_heartbeat >= m.session_timeout_ms]
        for m in expired:
            self._remove(g, m)
        if expired:
            self._after_removal(g)
        if g.state == PREPARING_REBALANCE and now >= g.rebalance_deadline:
            if g.initial_delay:
                g.initial_delay = False
                # the initial delay is over: wait for the rest as any rebalance does
                if not all(m.join_future is not None for m in g.members.values()) or g.pending:
                    g.rebalance_deadline = now + max(
                        (m.rebalance_timeout_ms for m in g.members.values()), default=0)
                    return True
            self._maybe_complete_join(g, now, timed_out=True)
        return True

    def next_deadline(self, g: Group, now: int) -> int | None:
        """When the group's time comes next: a pending member id's, a session's (a member waiting
        in JoinGroup or SyncGroup has none: its answer restarts it), its rebalance's end."""
        later = [d for d in g.pending.values() if d > now]
        later += [m.last_heartbeat + m.session_timeout_ms for m in g.members.values()
                  if m.join_future is None and m.sync_future is None]
        if g.state == PREPARING_REBALANCE:
            later.append(g.rebalance_deadline)
        return min(later, default=None)

    # --- admin ----------------------------------------------------------------------------------

    def delete(self, group_id: str) -> int:
        """Forget an empty group (DeleteGroups): NON_EMPTY_GROUP while it has members."""
        g = self.groups.get(group_id)
        if g is not None and g.members:
            return ec.NON_EMPTY_GROUP
        self.groups.pop(group_id, None)
        return ec.NONE

    def metadata_value(self, g: Group) -> GroupMetadataValue:
        return GroupMetadataValue(
            g.protocol_type or "", g.generation, g.protocol, g.leader,
            tuple(MemberMetadata(m.member_id, m.client_id, m.client_host, m.session_timeout_ms,
                                 m.metadata(g.protocol), m.assignment, m.rebalance_timeout_ms,
                                 m.group_instance_id) for m in g.members.values()),
            g.state_timestamp)

    def _store(self, g: Group) -> None:
        self._persist(g.group_id, self.metadata_value(g))


def _fail(m: Member, error: int) -> None:
    """Answer a member's waiting JoinGroup/SyncGroup with ``error``."""
    if m.join_future is not None and not m.join_future.done():
        m.join_future.set_result(JoinResult(error, member_id=m.member_id))
    if m.sync_future is not None and not m.sync_future.done():
        m.sync_future.set_result(SyncResult(error))
    m.join_future = m.sync_future = None
