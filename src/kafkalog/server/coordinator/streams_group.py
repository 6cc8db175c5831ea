"""Streams groups (KIP-1071) as Kafka 4.4's group coordinator runs them: the state of each group
(topology, members, target and current task assignments, epochs), Kafka's
``streamsGroupHeartbeat`` over it, and the records it keeps in ``__consumer_offsets``
(:mod:`kafkalog.coordinator.streams_group_records`).

A heartbeat: (1) creates or updates the member (a changed member bumps the group epoch); (2) the
first member's topology initializes the group's; (3) the topology is configured against the
topics (:mod:`kafkalog.server.coordinator.streams_topology`: every source topic must exist, repartition and
changelog topics get their partition counts; missing internal topics are answered with the status
MISSING_INTERNAL_TOPICS and handed back to be created); (4) a bumped group epoch computes a new
target assignment (:mod:`kafkalog.server.coordinator.streams_assignor`); (5) the member's current assignment
moves towards its target: tasks it must give up are revoked first (the member keeps its epoch until
it reports them gone) and a task another member still runs is assigned once released.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from kafkalog.coordinator import streams_group_records as sr
from kafkalog.coordinator.group_config import GroupConfigStore
from kafkalog.record.constants import INT32_MAX
from kafkalog.server import error_codes as ec
from kafkalog.server.coordinator.consumer_group import (
    LEAVE_GROUP_EPOCH,
    LEAVE_GROUP_STATIC_EPOCH,
    ConsumerGroupCoordinator,
)
from kafkalog.server.coordinator.group import (
    GroupCoordinatorBase,
    GroupError,
    ModernGroup,
    Record,
    TopicImage,
)
from kafkalog.server.coordinator.streams_assignor import AssignMember, assign
from kafkalog.server.coordinator.streams_reconcile import STABLE, UNREVOKED_TASKS, owners, reconcile
from kafkalog.server.coordinator.streams_topology import (
    ASSIGNMENT_DELAYED,
    SHUTDOWN_APPLICATION,
    STALE_TOPOLOGY,
    configure_topology,
    topology_record_value,
    topology_topics,
)

Tasks = dict[str, set[int]]
#: active tasks with the epoch each was assigned at (fences zombie offset commits)
EpochTasks = dict[str, dict[int, int]]
#: subtopology -> partition -> changelog offset (sum), as members report them
TaskOffsets = dict[str, dict[int, int]]

#: the heartbeat status MISSING_CLIENT_TAGS (StreamsGroupHeartbeat v1+)
MISSING_CLIENT_TAGS = 6



@dataclass(frozen=True)
class StreamsGroupConfig:
    """Kafka's ``group.streams.*`` broker settings."""
    session_timeout_ms: int = 45000
    heartbeat_interval_ms: int = 5000
    max_size: int = INT32_MAX
    num_standby_replicas: int = 0
    initial_rebalance_delay_ms: int = 3000
    assignment_interval_ms: int = 1000
    task_offset_interval_ms: int = 60000
    acceptable_recovery_lag: int = 10000
    #: the client tags standby tasks are spread over (Kafka 4.4's assignor does not read them: they
    #: only join the assignment configs and, from v1, the MISSING_CLIENT_TAGS status)
    rack_aware_assignment_tags: tuple[str, ...] = ()

    def assignment_configs(self, num_standby_replicas: int) -> dict[str, str]:
        """Kafka's ``streamsGroupAssignmentConfigs`` with the group's ``num_standby_replicas``: what
        the group's metadata record keeps (a change, also of the group's config, bumps the group epoch)."""
        configs = {"num.standby.replicas": str(num_standby_replicas)}
        if self.rack_aware_assignment_tags:
            configs["rack.aware.assignment.tags"] = ",".join(self.rack_aware_assignment_tags)
        return configs


@dataclass(frozen=True)
class Member:
    """A member of a streams group (Kafka's ``StreamsGroupMember``)."""
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout_ms: int = -1
    topology_epoch: int = 0
    process_id: str = ""
    user_endpoint: tuple[str, int] | None = None
    client_tags: tuple[tuple[str, str], ...] = ()
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: int = STABLE
    active: EpochTasks = field(default_factory=dict)
    standby: Tasks = field(default_factory=dict)
    warmup: Tasks = field(default_factory=dict)
    active_revoking: EpochTasks = field(default_factory=dict)
    standby_revoking: Tasks = field(default_factory=dict)
    warmup_revoking: Tasks = field(default_factory=dict)

    def metadata_value(self) -> dict[str, Any]:
        return {"instance_id": self.instance_id, "rack_id": self.rack_id, "client_id": self.client_id,
                "client_host": self.client_host, "rebalance_timeout_ms": self.rebalance_timeout_ms,
                "topology_epoch": self.topology_epoch, "process_id": self.process_id,
                "user_endpoint": None if self.user_endpoint is None else
                {"host": self.user_endpoint[0], "port": self.user_endpoint[1]},
                "client_tags": [{"key": k, "value": v} for k, v in self.client_tags]}

    #: (what the consumer group's offset checks ask of a member)
    uses_classic_protocol = False

    def active_tasks(self) -> Tasks:
        return {s: set(ps) for s, ps in self.active.items()}


@dataclass(eq=False)
class Group(ModernGroup[Member, tuple[Tasks, Tasks, Tasks]]):
    """One streams group's state (Kafka's ``StreamsGroup``): the framework's modern group, whose
    target assignment is a member's (active, standby, warm-up) tasks, plus the topology."""
    group_epoch: int = 0
    validated_topology_epoch: int = -1
    assignment_configs: dict[str, str] = field(default_factory=dict)
    topology: dict[str, Any] | None = None       # StreamsGroupTopologyValue
    endpoint_information_epoch: int = 0
    shutdown_requested_by: str | None = None
    created_at: int | None = None
    #: whether the topology is configured against the topics (not in the records: a restored
    #: group configures it against the topics at load, as Kafka does once its metadata image
    #: is published)
    configured: bool = False
    #: when the target assignment was last computed (monotonic ms)
    assigned_at: int | None = None
    #: member id -> (task offsets, task end offsets) as it last reported them, subtopology ->
    #: partition -> offset (Kafka's ``MemberTaskOffsets``: in memory, not in the records)
    task_offsets: dict[str, tuple[TaskOffsets, TaskOffsets]] = field(default_factory=dict)

    @property
    def state(self) -> str:
        """Kafka's StreamsGroupState name as ListGroups and describe print it."""
        if not self.members:
            return "Empty"
        if self.topology is None or not self.configured:
            return "NotReady"
        if self.group_epoch != self.assignment_epoch:
            return "Assigning"
        if any(m.member_epoch != self.assignment_epoch or m.state != STABLE for m in self.members.values()):
            return "Reconciling"
        return "Stable"

    def source_topics(self) -> set[str]:
        """The topics the group's topology reads: source and repartition source topics."""
        out: set[str] = set()
        for s in () if self.topology is None else self.topology["subtopologies"]:
            out |= set(s["source_topics"]) | {r["name"] for r in s["repartition_source_topics"]}
        return out

    def static_member(self, instance_id: str | None) -> Member | None:
        if instance_id is None:
            return None
        return next((m for m in self.members.values() if m.instance_id == instance_id), None)


class HeartbeatResult(NamedTuple):
    member: Member
    send_assignment: bool
    status: list[tuple[int, str]]
    #: internal topics to create: name -> (partitions, replication factor, configs)
    creatable: dict[str, tuple[int, int, dict[str, str]]]
    endpoints: list[dict[str, Any]] | None
    endpoint_information_epoch: int


# --- records --------------------------------------------------------------------------------------------

def _rec(record_type: int, group_id: str, value: dict[str, Any] | None, member_id: str = "") -> Record:
    return (sr.encode_key(sr.StreamsGroupKey(record_type, group_id, member_id)),
            None if value is None else sr.encode_value(record_type, value))


def _task_list(tasks: Mapping[str, Iterable[int]]) -> list[dict[str, Any]]:
    return [{"subtopology_id": s, "partitions": sorted(ps)} for s, ps in sorted(tasks.items()) if ps]


def _epoch_list(tasks: EpochTasks) -> list[dict[str, Any]]:
    return [{"subtopology_id": s, "partitions": sorted(ps), "assignment_epochs": [ps[p] for p in sorted(ps)]}
            for s, ps in sorted(tasks.items()) if ps]


def _current_record(group_id: str, m: Member) -> Record:
    return _rec(sr.CURRENT_MEMBER_ASSIGNMENT, group_id, {
        "member_epoch": m.member_epoch, "previous_member_epoch": m.previous_member_epoch, "state": m.state,
        "active_tasks": _epoch_list(m.active), "standby_tasks": _task_list(m.standby),
        "warmup_tasks": _task_list(m.warmup), "active_tasks_pending_revocation": _epoch_list(m.active_revoking),
        "standby_tasks_pending_revocation": _task_list(m.standby_revoking),
        "warmup_tasks_pending_revocation": _task_list(m.warmup_revoking)}, m.member_id)


def _target_record(group_id: str, member_id: str, t: tuple[Tasks, Tasks, Tasks]) -> Record:
    return _rec(sr.TARGET_ASSIGNMENT_MEMBER, group_id, {
        "active_tasks": _task_list(t[0]), "standby_tasks": _task_list(t[1]), "warmup_tasks": _task_list(t[2])},
        member_id)


def _metadata_record(g: Group, epoch: int | None = None) -> Record:
    """The group's metadata record (at ``epoch``, else its epoch)."""
    return _rec(sr.GROUP_METADATA, g.group_id, {
        "epoch": g.group_epoch if epoch is None else epoch, "metadata_hash": g.metadata_hash,
        "validated_topology_epoch": g.validated_topology_epoch,
        "last_assignment_configs": [{"key": k, "value": v} for k, v in sorted(g.assignment_configs.items())]})


def _remove_member_records(group_id: str, member_id: str) -> list[Record]:
    return [_rec(sr.CURRENT_MEMBER_ASSIGNMENT, group_id, None, member_id),
            _rec(sr.TARGET_ASSIGNMENT_MEMBER, group_id, None, member_id),
            _rec(sr.MEMBER_METADATA, group_id, None, member_id)]


def group_tombstones(g: Group) -> list[Record]:
    out: list[Record] = []
    for mid in g.members:
        out += _remove_member_records(g.group_id, mid)
    for mid in g.target:
        if mid not in g.members:
            out.append(_rec(sr.TARGET_ASSIGNMENT_MEMBER, g.group_id, None, mid))
    out += [_rec(sr.TARGET_ASSIGNMENT_METADATA, g.group_id, None), _rec(sr.GROUP_METADATA, g.group_id, None),
            _rec(sr.TOPOLOGY, g.group_id, None)]
    return out


def _tasks_of(entries: Iterable[Any] | None) -> Tasks:
    out: Tasks = {}
    for e in entries or ():
        sid = e["subtopology_id"] if isinstance(e, dict) else e.subtopology_id
        ps = e["partitions"] if isinstance(e, dict) else e.partitions
        if ps:
            out.setdefault(sid, set()).update(int(p) for p in ps)
    return out


def _epochs_of(entries: Iterable[dict[str, Any]], default: int) -> EpochTasks:
    out: EpochTasks = {}
    for e in entries:
        epochs = e.get("assignment_epochs") or []
        for i, p in enumerate(e["partitions"]):
            out.setdefault(e["subtopology_id"], {})[p] = epochs[i] if i < len(epochs) else default
    return out


def _offsets_of(entries: Iterable[Any]) -> TaskOffsets:
    """Kafka's ``MemberTaskOffsets.toNestedMap``: a duplicate (subtopology, partition) is an invalid
    request."""
    out: TaskOffsets = {}
    for e in entries:
        by_partition = out.setdefault(e.subtopology_id, {})
        if int(e.partition) in by_partition:
            raise GroupError(ec.INVALID_REQUEST, f"Task offsets contain a duplicate entry for subtopology "
                                                 f"{e.subtopology_id} and partition {e.partition}.")
        by_partition[int(e.partition)] = int(e.offset)
    return out


def _minus(a: Mapping[str, Iterable[int]], b: Mapping[str, Iterable[int]]) -> Tasks:
    out = {s: set(ps) - set(b.get(s, ())) for s, ps in a.items()}
    return {s: ps for s, ps in out.items() if ps}


def _intersects(a: Mapping[str, Iterable[int]], b: Mapping[str, Iterable[int]]) -> bool:
    return any(set(ps) & set(b.get(s, ())) for s, ps in a.items())


# --- the coordinator ------------------------------------------------------------------------------------

class StreamsGroupCoordinator(GroupCoordinatorBase[Group]):
    """Every streams group of the node.

    Args:
        config: the ``group.streams.*`` settings.
        persist: writes a group's records to ``__consumer_offsets`` (one batch, durable on return).
        topic: a topic's image by name (None when it does not exist): one look-up per topic the
            topology names, nothing that grows with the node's other topics.
        other_group_exists: whether a classic, consumer or share group has the id.
        clock / wall_clock: monotonic and epoch milliseconds.
    """

    kind = "streams group"

    def __init__(self, config: StreamsGroupConfig, persist: Callable[[str, list[Record]], None],
                 topic: Callable[[str], TopicImage | None], other_group_exists: Callable[[str], bool],
                 clock: Callable[[], int] = lambda: int(time.monotonic() * 1000),
                 wall_clock: Callable[[], int] = lambda: int(time.time() * 1000),
                 group_configs: GroupConfigStore | None = None) -> None:
        super().__init__(persist, clock, wall_clock)
        self.config = config
        self._topic = topic
        self._other_group_exists = other_group_exists
        #: the per-group ``streams.*`` configs (Kafka's GroupConfig)
        self.group_configs = group_configs

    def _setting(self, group_id: str, key: str, default: int) -> int:
        """The group's ``key`` (a ``streams.*`` group config), else ``default`` (the broker's)."""
        gc = self.group_configs
        return default if gc is None else gc.get(group_id, key, default)

    def session_timeout_ms(self, group_id: str) -> int:
        """The group's ``streams.session.timeout.ms``, else the broker's."""
        return self._setting(group_id, "streams.session.timeout.ms", self.config.session_timeout_ms)

    def heartbeat_interval_ms(self, group_id: str) -> int:
        """The group's ``streams.heartbeat.interval.ms``, else the broker's."""
        return self._setting(group_id, "streams.heartbeat.interval.ms", self.config.heartbeat_interval_ms)

    def num_standby_replicas(self, group_id: str) -> int:
        """The group's ``streams.num.standby.replicas``, else the broker's."""
        return self._setting(group_id, "streams.num.standby.replicas", self.config.num_standby_replicas)

    def _partitions_of(self, name: str) -> int | None:
        image = self._topic(name)
        return None if image is None else image.partitions

    # --- StreamsGroupHeartbeat -------------------------------------------------------------------

    def heartbeat(self, b: Any, client_id: str, client_host: str, version: int = 0) -> HeartbeatResult:
        """Kafka's ``streamsGroupHeartbeat`` for a request ``b`` of version ``version`` (validated by
        :func:`validate`); raises :class:`GroupError` with the error to answer."""
        if b.member_epoch in (LEAVE_GROUP_EPOCH, LEAVE_GROUP_STATIC_EPOCH):
            return self._leave(b.group_id, b.member_id, b.instance_id, b.member_epoch)
        records: list[Record] = []
        joining = b.member_epoch == 0
        g = self.groups.get(b.group_id)
        if g is None:
            if not joining:
                raise GroupError(ec.GROUP_ID_NOT_FOUND, f"Streams group {b.group_id} not found.")
            if self._other_group_exists(b.group_id):
                raise GroupError(ec.GROUP_ID_NOT_FOUND, f"Group {b.group_id} is not a streams group.")
            g = Group(b.group_id)
            g.created_at = self._clock()
        if joining and b.member_id not in g.members and len(g.members) >= self.config.max_size:
            raise GroupError(ec.GROUP_MAX_SIZE_REACHED,
                             f"The streams group has reached its maximum capacity of {self.config.max_size} members.")
        member = self._member(g, b, records)
        owned = None if b.active_tasks is None else (
            _tasks_of(b.active_tasks), _tasks_of(b.standby_tasks), _tasks_of(b.warmup_tasks))
        updated = replace(
            member,
            rack_id=b.rack_id if b.rack_id is not None else member.rack_id,
            rebalance_timeout_ms=int(b.rebalance_timeout.total_seconds() * 1000)
            if int(b.rebalance_timeout.total_seconds() * 1000) != -1 else member.rebalance_timeout_ms,
            topology_epoch=int(b.topology.epoch) if b.topology is not None else member.topology_epoch,
            client_id=client_id, client_host=client_host,
            process_id=b.process_id if b.process_id is not None else member.process_id,
            client_tags=tuple((kv.key, kv.value) for kv in b.client_tags) if b.client_tags is not None
            else member.client_tags,
            user_endpoint=(b.user_endpoint.host, int(b.user_endpoint.port)) if b.user_endpoint is not None
            else member.user_endpoint)
        bump = False
        if updated.metadata_value() != member.metadata_value() or b.member_id not in g.members \
                or member.member_id != updated.member_id:
            records.append(_rec(sr.MEMBER_METADATA, g.group_id, updated.metadata_value(), updated.member_id))
            bump = True
        status: list[tuple[int, str]] = []
        # 2. the topology
        g_topology: dict[str, Any] | None
        if b.topology is not None:
            value = topology_record_value(b.topology)
            if g.topology is None:
                records.append(_rec(sr.TOPOLOGY, g.group_id, value))
                g_topology = value
            elif g.topology["epoch"] > value["epoch"]:
                g_topology = g.topology
            elif g.topology != value:
                raise GroupError(ec.INVALID_REQUEST, "Topology updates are not supported yet.")
            else:
                g_topology = g.topology
        else:
            g_topology = g.topology
        if g_topology is None:
            raise GroupError(ec.INVALID_REQUEST, "The topology is null and the group topology is also null.")
        if updated.topology_epoch < g_topology["epoch"]:
            status.append((STALE_TOPOLOGY, f"The member's topology epoch {updated.topology_epoch} is behind the "
                                           f"group's topology epoch {g_topology['epoch']}."))
        # 3. the topics
        images = {n: self._topic(n) for n in sorted(topology_topics(g_topology))}
        metadata_hash = ModernGroup.compute_metadata_hash(images, images)
        if metadata_hash != g.metadata_hash:
            bump = True
        configured = configure_topology(g_topology, lambda n: None if images.get(n) is None
                                        else images[n].partitions)  # type: ignore[union-attr]
        validated = g_topology["epoch"] if configured.tasks is not None else -1
        if configured.tasks is not None:
            for tasks in owned or ():
                for sid, ps in tasks.items():
                    n = configured.tasks.get(sid)
                    if n is None or any(p < 0 or p >= n for p in ps):
                        raise GroupError(ec.INVALID_REQUEST, f"Invalid tasks for subtopology {sid}.")
        offsets = None
        if b.task_offsets is not None or b.task_end_offsets is not None:
            before = g.task_offsets.get(b.member_id, ({}, {}))
            offsets = (before[0] if b.task_offsets is None else _offsets_of(b.task_offsets),
                       before[1] if b.task_end_offsets is None else _offsets_of(b.task_end_offsets))
        if validated != g.validated_topology_epoch:
            bump = True
        configs = self.config.assignment_configs(self.num_standby_replicas(b.group_id))
        bumps = int(bump) + int(configs != g.assignment_configs)     # as Kafka 4.4: each counts
        # apply: the group's new state
        g.topology = g_topology
        g.configured = configured.tasks is not None
        g.members.pop(member.member_id, None)
        g.members[updated.member_id] = updated
        if offsets is not None:
            g.task_offsets[b.member_id] = offsets
        if bumps:
            g.group_epoch += bumps
            g.metadata_hash = metadata_hash
            g.validated_topology_epoch = validated
            g.assignment_configs = configs
            records.append(_metadata_record(g))
        # 4. the target assignment, unless a delay holds it back
        now = self._clock()
        if g.group_epoch > g.assignment_epoch:
            delay = self._setting(g.group_id, "streams.initial.rebalance.delay.ms",
                                  self.config.initial_rebalance_delay_ms)
            interval = self._setting(g.group_id, "streams.assignment.interval.ms", self.config.assignment_interval_ms)
            if (delay > 0 and g.assigned_at is None and g.created_at is not None
                    and now < g.created_at + delay):
                status.append((ASSIGNMENT_DELAYED, "Assignment delayed due to the configured initial rebalance "
                                                   "delay."))
                if g.assignment_epoch == 0:
                    # as Kafka 4.4: while the delay holds the first assignment back, the group's target is
                    # empty at the epoch before its last bump, and its members reconcile to that epoch
                    self._hold_target(g, records)
            elif g.assigned_at is not None and now < g.assigned_at + interval:
                status.append((ASSIGNMENT_DELAYED, "Assignment delayed due to the configured assignment interval."))
            else:
                self._update_target(g, configured.tasks or {}, records)
                g.assigned_at = now
        # 5. reconcile
        target = g.target.get(updated.member_id, ({}, {}, {}))
        new = reconcile(updated, g.assignment_epoch, target, owned, owners(g.members.values()))
        if new != updated:
            records.append(_current_record(g.group_id, new))
        g.members[new.member_id] = new
        changed = (new.active, new.standby, new.warmup) != (member.active, member.standby, member.warmup)
        if (joining or changed) and new.user_endpoint is not None:
            g.endpoint_information_epoch += 1
        g.session_deadline[new.member_id] = now + self.session_timeout_ms(g.group_id)
        if new.state == UNREVOKED_TASKS:
            g.rebalance_deadline.setdefault(new.member_id, (now + new.rebalance_timeout_ms, new.member_epoch))
        else:
            g.rebalance_deadline.pop(new.member_id, None)
        if b.shutdown_application:
            g.shutdown_requested_by = new.member_id
        if configured.status is not None:
            status.append(configured.status)
        if g.shutdown_requested_by is not None:
            status.append((SHUTDOWN_APPLICATION, f"Streams group member {g.shutdown_requested_by} encountered a "
                                                 f"fatal error and requested a shutdown for the entire application."))
        tags = [t for t in self.config.rack_aware_assignment_tags if t not in dict(new.client_tags)]
        if version >= 1 and tags:           # (v0 clients do not know the status)
            status.append((MISSING_CLIENT_TAGS, f"Missing required client tags for rack-aware standby assignment: "
                                                f"[{', '.join(tags)}]. Configure them via 'client.tag.<tagKey>' in "
                                                f"your Streams config."))
        self._write(g, records)
        endpoints = None
        if g.endpoint_information_epoch != b.endpoint_information_epoch:
            endpoints = self._endpoints(g, new)
        return HeartbeatResult(new, joining or changed, status, configured.creatable, endpoints,
                               g.endpoint_information_epoch)

    def _member(self, g: Group, b: Any, records: list[Record]) -> Member:
        """The member the heartbeat is from (a new one when joining); raises for an unknown member
        or a fenced epoch."""
        if b.instance_id is not None:
            static = g.static_member(b.instance_id)
            if b.member_epoch == 0:
                if static is None:
                    return g.members.get(b.member_id) or Member(b.member_id, instance_id=b.instance_id)
                if static.member_id == b.member_id:
                    return static
                if static.member_epoch != LEAVE_GROUP_STATIC_EPOCH:
                    raise GroupError(ec.UNRELEASED_INSTANCE_ID,
                                     f"Static member {b.member_id} with instance id {b.instance_id} cannot join "
                                     f"the group because the instance id is owned by {static.member_id} member.")
                # the static member rejoins under a new id: it takes over the tasks of the one it replaces
                new = replace(static, member_id=b.member_id, member_epoch=0, previous_member_epoch=0)
                records += _remove_member_records(g.group_id, static.member_id)
                target = g.target.pop(static.member_id, ({}, {}, {}))
                g.target[new.member_id] = target
                records += [_rec(sr.MEMBER_METADATA, g.group_id, new.metadata_value(), new.member_id),
                            _target_record(g.group_id, new.member_id, target), _current_record(g.group_id, new)]
                del g.members[static.member_id]
                g.task_offsets.pop(static.member_id, None)
                g.members[new.member_id] = new
                for deadlines in (g.session_deadline, g.rebalance_deadline):
                    deadlines.pop(static.member_id, None)
                return new
            if static is None:
                raise GroupError(ec.UNKNOWN_MEMBER_ID, f"Instance id {b.instance_id} is unknown.")
            if static.member_id != b.member_id:
                raise GroupError(ec.FENCED_INSTANCE_ID, f"Static member {b.member_id} with instance id "
                                                        f"{b.instance_id} was fenced by member {static.member_id}.")
        m = g.members.get(b.member_id)
        if m is None:
            if b.member_epoch == 0:
                return Member(b.member_id, instance_id=b.instance_id)
            raise GroupError(ec.UNKNOWN_MEMBER_ID, f"Member {b.member_id} is not a member of group {g.group_id}.")
        if b.member_epoch == 0:
            return m
        if b.member_epoch != m.member_epoch:
            owned_ok = b.member_epoch == m.previous_member_epoch and b.active_tasks is not None and not _minus(
                _tasks_of(b.active_tasks), m.active)
            if not owned_ok:
                raise GroupError(ec.FENCED_MEMBER_EPOCH, f"The streams group member has a smaller member epoch "
                                 f"({b.member_epoch}) than the one known by the group coordinator "
                                 f"({m.member_epoch}). The member must abandon all its partitions and rejoin."
                                 if b.member_epoch < m.member_epoch else
                                 f"The streams group member has a greater member epoch ({b.member_epoch}) than "
                                 f"the one known by the group coordinator ({m.member_epoch}). The member must "
                                 f"abandon all its partitions and rejoin.")
        return m

    def _update_target(self, g: Group, tasks: Mapping[str, int], records: list[Record]) -> None:
        members = [AssignMember(m.member_id, m.process_id or m.member_id, m.active_tasks(), m.standby,
                                g.task_offsets.get(m.member_id, ({}, {}))[0])
                   for m in g.members.values()]
        stateful = [s["subtopology_id"] for s in (g.topology or {}).get("subtopologies", ())
                    if s["state_changelog_topics"]]
        new = assign(members, tasks, self.num_standby_replicas(g.group_id), stateful)
        for mid, t in new.items():
            if g.target.get(mid) != t:
                records.append(_target_record(g.group_id, mid, t))
        g.target = new
        g.assignment_epoch, g.assignment_timestamp = g.group_epoch, self._wall()
        records.append(_rec(sr.TARGET_ASSIGNMENT_METADATA, g.group_id,
                            {"assignment_epoch": g.assignment_epoch, "assignment_timestamp": g.assignment_timestamp}))

    def _hold_target(self, g: Group, records: list[Record]) -> None:
        """An empty target assignment at the epoch before the group's (the first assignment waits for
        the initial rebalance delay): Kafka 4.4 answers the joining members that epoch, no tasks."""
        g.target = {}
        g.assignment_epoch, g.assignment_timestamp = max(g.group_epoch - 1, 0), self._wall()
        records.append(_rec(sr.TARGET_ASSIGNMENT_METADATA, g.group_id,
                            {"assignment_epoch": g.assignment_epoch, "assignment_timestamp": g.assignment_timestamp}))

    def _endpoints(self, g: Group, member: Member) -> list[dict[str, Any]]:
        """partitionsByUserEndpoint: each member with an endpoint and the source partitions of the
        tasks it runs (the heartbeating member last)."""
        if g.topology is None:
            return []
        subs = {s["subtopology_id"]: s for s in g.topology["subtopologies"]}

        def partitions(tasks: Mapping[str, Iterable[int]]) -> list[dict[str, Any]]:
            by_topic: dict[str, set[int]] = {}
            for sid, ps in tasks.items():
                s = subs.get(sid)
                if s is None:
                    continue
                for t in [*s["source_topics"], *(r["name"] for r in s["repartition_source_topics"])]:
                    n = self._partitions_of(t) or 0
                    by_topic.setdefault(t, set()).update(p for p in ps if p < n)
            return [{"topic": t, "partitions": sorted(ps)} for t, ps in sorted(by_topic.items())]
        out = []
        for m in [*(x for x in g.members.values() if x.member_id != member.member_id), member]:
            if m.user_endpoint is not None:
                out.append({"user_endpoint": {"host": m.user_endpoint[0], "port": m.user_endpoint[1]},
                            "active_partitions": partitions(m.active), "standby_partitions": partitions(m.standby)})
        return out

    # --- leaving and fencing ---------------------------------------------------------------------

    def _leave(self, group_id: str, member_id: str, instance_id: str | None, epoch: int) -> HeartbeatResult:
        g = self.groups.get(group_id)
        if g is None:
            raise GroupError(ec.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.")
        if instance_id is None:
            m = g.members.get(member_id)
            if m is None:
                raise GroupError(ec.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group_id}.")
        else:
            static = g.static_member(instance_id)
            if static is None:
                raise GroupError(ec.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
            if static.member_id != member_id:
                raise GroupError(ec.FENCED_INSTANCE_ID, f"Static member {member_id} with instance id {instance_id} "
                                                        f"was fenced by member {static.member_id}.")
            m = static
        if epoch == LEAVE_GROUP_STATIC_EPOCH:      # a static member going away for a while keeps its tasks
            left = replace(m, member_epoch=LEAVE_GROUP_STATIC_EPOCH)
            g.members[m.member_id] = left
            self._write(g, [_current_record(group_id, left)])
            return HeartbeatResult(left, False, [], {}, None, g.endpoint_information_epoch)
        self.fence(g, [m])
        return HeartbeatResult(replace(m, member_epoch=epoch), False, [], {}, None, g.endpoint_information_epoch)

    def fence(self, g: Group, members: list[Member]) -> None:
        """Remove ``members`` (left, session or rebalance timeout): their records tombstoned, the
        group epoch bumped; written first, so a write that fails changes nothing."""
        records: list[Record] = []
        for m in members:
            records += _remove_member_records(g.group_id, m.member_id)
        records.append(_metadata_record(g, g.group_epoch + 1))
        self._write(g, records)
        for m in members:
            g.members.pop(m.member_id, None)
            g.target.pop(m.member_id, None)
            g.task_offsets.pop(m.member_id, None)
            g.session_deadline.pop(m.member_id, None)
            g.rebalance_deadline.pop(m.member_id, None)
            if g.shutdown_requested_by == m.member_id:
                g.shutdown_requested_by = None
        g.group_epoch += 1

    def timed_out(self, g: Group, now: int) -> list[tuple[str, str]]:
        """Sessions expired, then members that did not revoke their tasks within their rebalance
        timeout."""
        return g.timed_out(now, lambda m: m.member_epoch, "tasks")

    def fence_member(self, g: Group, member_id: str) -> None:
        self.fence(g, [g.members[member_id]])

    # --- persistence ------------------------------------------------------------------------------

    def restore(self, group_id: str, records: Mapping[bytes, tuple[sr.StreamsGroupKey, dict[str, Any]]]) -> None:
        """Rebuild a group from its live records (as Kafka replays ``__consumer_offsets``)."""
        g = Group(group_id)
        metas: dict[str, dict[str, Any]] = {}
        currents: dict[str, dict[str, Any]] = {}
        for k, v in records.values():
            t = k.record_type
            if t == sr.GROUP_METADATA:
                g.group_epoch, g.metadata_hash = v["epoch"], v["metadata_hash"]
                g.validated_topology_epoch = v["validated_topology_epoch"]
                g.assignment_configs = {kv["key"]: kv["value"] for kv in v["last_assignment_configs"]}
            elif t == sr.TOPOLOGY:
                g.topology = v
            elif t == sr.TARGET_ASSIGNMENT_METADATA:
                g.assignment_epoch, g.assignment_timestamp = v["assignment_epoch"], v.get("assignment_timestamp", 0)
            elif t == sr.TARGET_ASSIGNMENT_MEMBER:
                g.target[k.member_id] = (_tasks_of(v["active_tasks"]), _tasks_of(v["standby_tasks"]),
                                         _tasks_of(v["warmup_tasks"]))
            elif t == sr.MEMBER_METADATA:
                metas[k.member_id] = v
            elif t == sr.CURRENT_MEMBER_ASSIGNMENT:
                currents[k.member_id] = v
        now = self._clock()
        for mid, v in metas.items():
            c = currents.get(mid, {})
            ep = v["user_endpoint"]
            epoch = c.get("member_epoch", 0)
            g.members[mid] = Member(
                mid, v["instance_id"], v["rack_id"], v["client_id"], v["client_host"], v["rebalance_timeout_ms"],
                v["topology_epoch"], v["process_id"], None if ep is None else (ep["host"], ep["port"]),
                tuple((kv["key"], kv["value"]) for kv in v["client_tags"]), epoch,
                c.get("previous_member_epoch", -1), c.get("state", STABLE),
                _epochs_of(c.get("active_tasks", []), epoch), _tasks_of(c.get("standby_tasks")),
                _tasks_of(c.get("warmup_tasks")), _epochs_of(c.get("active_tasks_pending_revocation", []), epoch),
                _tasks_of(c.get("standby_tasks_pending_revocation")),
                _tasks_of(c.get("warmup_tasks_pending_revocation")))
            g.session_deadline[mid] = now + self.session_timeout_ms(group_id)
        if g.topology is not None:
            g.configured = configure_topology(g.topology, self._partitions_of).tasks is not None
        self.groups[group_id] = g

    # --- offsets ------------------------------------------------------------------------------------

    def validate_commit(self, group_id: str, member_id: str, epoch: int, transactional: bool = False
                        ) -> Callable[[str, Any, int], int] | None:
        """Kafka's ``StreamsGroup.validateOffsetCommit``: None when every partition may be
        committed, else a check of each ``(topic, topic id, partition) -> error code``."""
        g = self.groups[group_id]
        if epoch < 0 and not g.members:
            return None
        if transactional and epoch == -1 and member_id == "":
            return None
        m = g.members.get(member_id)
        if m is None:
            raise GroupError(ec.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group_id}.")
        if epoch == m.member_epoch:
            return None
        if transactional:
            raise GroupError(ec.ILLEGAL_GENERATION, f"The received member epoch {epoch} does not match the "
                                                    f"expected member epoch {m.member_epoch}.")
        if epoch > m.member_epoch:
            raise GroupError(ec.STALE_MEMBER_EPOCH, f"Received member epoch {epoch} is newer than current "
                                                    f"member epoch {m.member_epoch}.")
        subs = {} if g.topology is None else {s["subtopology_id"]: s for s in g.topology["subtopologies"]}

        def check(topic: str, _topic_id: Any, partition: int) -> int:
            for sid, ps in m.active.items():
                s = subs.get(sid)
                if s is not None and partition in ps and (
                        topic in s["source_topics"] or any(r["name"] == topic for r in s["repartition_source_topics"])):
                    return ec.NONE if epoch >= ps[partition] else ec.STALE_MEMBER_EPOCH
            return ec.STALE_MEMBER_EPOCH
        return check

    def validate_fetch(self, group_id: str, member_id: str | None, epoch: int) -> None:
        """Kafka's ``StreamsGroup.validateOffsetFetch``: the consumer group's check (by the group's
        members and their epochs; a streams member never uses the classic protocol)."""
        ConsumerGroupCoordinator.validate_fetch(self, group_id, member_id, epoch)  # type: ignore[arg-type]

    # --- admin --------------------------------------------------------------------------------------

    def tombstones(self, g: Group) -> list[Record]:
        return group_tombstones(g)
