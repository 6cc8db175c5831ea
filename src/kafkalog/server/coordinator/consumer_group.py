"""The consumer group protocol (KIP-848) on one node: Kafka 4.4's ``GroupMetadataManager`` for groups of
type ``consumer``, their members, target assignments and reconciliation.

No sockets here: :mod:`kafkalog.server.handlers.consumer_group_heartbeat` hands a ConsumerGroupHeartbeat to
:meth:`ConsumerGroupCoordinator.heartbeat` and answers with what it returns. What Kafka does:

* the **group epoch** (starting at 1) is bumped when a member joins, leaves or changes its
  subscription (topic names, regular expression, preferred assignor), or when the metadata of a
  subscribed topic changes (its hash, :func:`topic_hash`, as Kafka's);
* the **target assignment** is recomputed by the group's assignor when the group epoch is ahead of the
  assignment epoch, at most once per ``group.consumer.assignment.interval.ms``;
* each member **reconciles** towards its target (Kafka's ``CurrentAssignmentBuilder``): partitions it
  must give up are revoked first (state UNREVOKED_PARTITIONS, its epoch unchanged, until it heartbeats
  without them); partitions still owned by another member are not given until released
  (UNRELEASED_PARTITIONS); then it moves to the assignment epoch (STABLE);
* a member that does not heartbeat within the session timeout, or does not revoke within its
  rebalance timeout, is fenced; a static member (``group.instance.id``) that leaves temporarily
  (epoch -2) keeps its assignment for its successor with the same instance id, no rebalance;
* regular-expression subscriptions are resolved by the broker (RE2 syntax, whole topic names, as
  RE2/J's ``matches``): at once for a new expression, then when topics appear (no more often than
  every 10 s) or every ``group.consumer.regex.refresh.interval.ms``;
* every change is written to ``__consumer_offsets`` as Kafka's records
  (:mod:`kafkalog.coordinator.consumer_group_records`) before the answer, and :meth:`restore` rebuilds
  the groups from them after a restart (or from a directory a Kafka broker wrote).

Groups move between the classic and the consumer protocol as Kafka moves them: an empty classic group
becomes a consumer group when a consumer member joins (and back); non-empty ones are converted by
:mod:`kafkalog.server.coordinator.group_migration` following ``group.consumer.migration.policy``.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from kafkalog.coordinator.consumer_group_records import (
    CURRENT_MEMBER_ASSIGNMENT,
    GROUP_EPOCH,
    MEMBER_METADATA,
    PARTITION_METADATA,
    REGULAR_EXPRESSION,
    TARGET_ASSIGNMENT_MEMBER,
    TARGET_ASSIGNMENT_METADATA,
    ClassicMemberMetadata,
    ConsumerGroupKey,
    CurrentMemberAssignmentValue,
    GroupEpochValue,
    MemberMetadataValue,
    RegularExpressionValue,
    TargetAssignmentMemberValue,
    TargetAssignmentMetadataValue,
    Value,
    encode_key,
    encode_value,
)
from kafkalog.coordinator.group_config import GroupConfigStore
from kafkalog.record.constants import INT32_MAX
from kafkalog.server import error_codes as ec
from kafkalog.server.coordinator.assignors import MemberSpec, PartitionAssignorError, assign
from kafkalog.server.coordinator.group import (
    Assignment,
    GroupCoordinatorBase,
    GroupError,
    ModernGroup,
    Record,
    TopicImage,
)
from kafkalog.server.coordinator.topic_regex import InvalidRegularExpression, compile_regex, matches

logger = logging.getLogger("kafkalog.server")

# member states (Kafka's MemberState)
STABLE, UNREVOKED_PARTITIONS, UNRELEASED_PARTITIONS, UNKNOWN = 0, 1, 2, 127
# group states (Kafka's ConsumerGroupState)
EMPTY, ASSIGNING, RECONCILING, STABLE_GROUP, DEAD = "Empty", "Assigning", "Reconciling", "Stable", "Dead"

LEAVE_GROUP_EPOCH = -1
LEAVE_GROUP_STATIC_EPOCH = -2
#: Kafka's floor between two resolutions of a group's regular expressions
REGEX_MIN_REFRESH_MS = 10000

#: topic id -> {partition: assignment epoch}
EpochAssignment = dict[uuid.UUID, dict[int, int]]


@dataclass(frozen=True)
class ConsumerGroupConfig:
    """Kafka's ``group.consumer.*`` broker settings (validated in :mod:`kafkalog.server.config`)."""
    session_timeout_ms: int = 45000
    heartbeat_interval_ms: int = 5000
    max_size: int = INT32_MAX
    assignors: tuple[str, ...] = ("uniform", "range")
    migration_policy: str = "bidirectional"
    assignment_interval_ms: int = 1000
    regex_refresh_interval_ms: int = 600000
    classic_max_size: int = INT32_MAX


@dataclass(frozen=True)
class Member:
    """A member of a consumer group (Kafka's ``ConsumerGroupMember``)."""
    member_id: str
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: int = STABLE
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: frozenset[str] = frozenset()
    subscribed_topic_regex: str | None = ""
    server_assignor: str | None = None
    assigned: Mapping[uuid.UUID, Mapping[int, int]] = field(default_factory=dict)
    pending_revocation: Mapping[uuid.UUID, Mapping[int, int]] = field(default_factory=dict)
    classic: ClassicMemberMetadata | None = None

    @property
    def regex(self) -> str | None:
        return self.subscribed_topic_regex or None

    @property
    def uses_classic_protocol(self) -> bool:
        return self.classic is not None

    def reconciled_to(self, epoch: int) -> bool:
        return self.state == STABLE and self.member_epoch == epoch

    def assignment_epoch(self, topic_id: uuid.UUID, partition: int) -> int | None:
        got = self.assigned.get(topic_id, {}).get(partition)
        if got is None:
            got = self.pending_revocation.get(topic_id, {}).get(partition)
        return got

    def assigned_partitions(self) -> Assignment:
        return {t: frozenset(ps) for t, ps in self.assigned.items()}


@dataclass
class ResolvedRegex:
    topics: frozenset[str]
    version: int
    timestamp: int


@dataclass
class ConsumerGroup(ModernGroup[Member, Assignment]):
    """One group of type ``consumer``."""
    group_epoch: int = 1
    regexes: dict[str, ResolvedRegex] = field(default_factory=dict)
    #: the metadata hash must be recomputed at the next heartbeat (a topic changed)
    metadata_expired: bool = True
    #: the coordinator's topic image the group's subscribed topics were last checked against
    #: (:meth:`ConsumerGroupCoordinator._check_topics`); None: never
    image: Mapping[str, TopicImage] | None = field(default=None, compare=False, repr=False)
    #: a classic group's state written since the last restore (when converted from classic)
    had_partition_metadata: bool = False

    # --- derived state --------------------------------------------------------------------------

    def static_member(self, instance_id: str | None) -> Member | None:
        if instance_id is None:
            return None
        for m in self.members.values():
            if m.instance_id == instance_id:
                return m
        return None

    @property
    def state(self) -> str:
        if not self.members:
            return EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ASSIGNING
        if any(not m.reconciled_to(self.assignment_epoch) for m in self.members.values()):
            return RECONCILING
        return STABLE_GROUP

    def subscribed_regexes(self, members: Iterable[Member] | None = None) -> dict[str, int]:
        out: dict[str, int] = {}
        for m in self.members.values() if members is None else members:
            if m.regex:
                out[m.regex] = out.get(m.regex, 0) + 1
        return out

    def current_partition_epoch(self, topic_id: uuid.UUID, partition: int, exclude: str = "") -> int:
        """The epoch at which another member owns the partition (assigned or pending revocation), -1
        when nobody does."""
        for m in self.members.values():
            if m.member_id == exclude:
                continue
            for source in (m.assigned, m.pending_revocation):
                if partition in source.get(topic_id, {}):
                    return m.member_epoch
        return -1

    def preferred_assignor(self, members: Iterable[Member] | None = None) -> str | None:
        counts: dict[str, int] = {}
        for m in self.members.values() if members is None else members:
            if m.server_assignor:
                counts[m.server_assignor] = counts.get(m.server_assignor, 0) + 1
        if not counts:
            return None
        return max(counts, key=lambda n: counts[n])

    def num_classic_members(self) -> int:
        return sum(1 for m in self.members.values() if m.uses_classic_protocol)


class HeartbeatResult(NamedTuple):
    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    #: the member's assigned partitions when they changed (or a full request), else None
    assignment: Assignment | None


# --- records ----------------------------------------------------------------------------------------

def _key(record_type: int, group_id: str, member_id: str = "", regex: str = "") -> bytes:
    return encode_key(ConsumerGroupKey(record_type, group_id, member_id, regex))


def _record(record_type: int, group_id: str, value: Value | None, member_id: str = "", regex: str = "") -> Record:
    return _key(record_type, group_id, member_id, regex), None if value is None else encode_value(value)


def _member_record(group_id: str, m: Member) -> Record:
    return _record(MEMBER_METADATA, group_id, MemberMetadataValue(
        m.instance_id, m.rack_id, m.client_id, m.client_host, tuple(sorted(m.subscribed_topic_names)),
        m.subscribed_topic_regex, m.rebalance_timeout_ms, m.server_assignor, m.classic), m.member_id)


def _epochs(a: Mapping[uuid.UUID, Mapping[int, int]]) -> tuple[tuple[uuid.UUID, tuple[int, ...], tuple[int, ...]], ...]:
    out = []
    for t, parts in a.items():
        ps = tuple(sorted(parts))
        out.append((t, ps, tuple(parts[p] for p in ps)))
    return tuple(out)


def _current_record(group_id: str, m: Member) -> Record:
    return _record(CURRENT_MEMBER_ASSIGNMENT, group_id, CurrentMemberAssignmentValue(
        m.member_epoch, m.previous_member_epoch, m.state, _epochs(m.assigned), _epochs(m.pending_revocation)),
        m.member_id)


def _target_record(group_id: str, member_id: str, a: Assignment) -> Record:
    return _record(TARGET_ASSIGNMENT_MEMBER, group_id, TargetAssignmentMemberValue(
        tuple((t, tuple(sorted(ps))) for t, ps in a.items())), member_id)


def _epoch_record(group_id: str, epoch: int, metadata_hash: int) -> Record:
    return _record(GROUP_EPOCH, group_id, GroupEpochValue(epoch, metadata_hash))


def _target_metadata_record(group_id: str, epoch: int, timestamp: int) -> Record:
    return _record(TARGET_ASSIGNMENT_METADATA, group_id, TargetAssignmentMetadataValue(epoch, timestamp))


def _regex_record(group_id: str, regex: str, resolved: ResolvedRegex | None) -> Record:
    value = None if resolved is None else RegularExpressionValue(
        tuple(sorted(resolved.topics)), resolved.version, resolved.timestamp)
    return _record(REGULAR_EXPRESSION, group_id, value, regex=regex)


def _remove_member_records(group_id: str, member_id: str) -> list[Record]:
    return [_record(CURRENT_MEMBER_ASSIGNMENT, group_id, None, member_id),
            _record(TARGET_ASSIGNMENT_MEMBER, group_id, None, member_id),
            _record(MEMBER_METADATA, group_id, None, member_id)]


def group_tombstones(g: ConsumerGroup, replaced: tuple[str, str] | None = None) -> list[Record]:
    """Every record of ``g`` removed (Kafka's ``createGroupTombstoneRecords``); ``replaced``: a
    (leaving, joining) member id pair whose joining id is tombstoned in place of the leaving one."""
    def mid(m: str) -> str:
        return replaced[1] if replaced is not None and m == replaced[0] else m
    out = [_record(CURRENT_MEMBER_ASSIGNMENT, g.group_id, None, mid(m)) for m in g.members]
    out += [_record(TARGET_ASSIGNMENT_MEMBER, g.group_id, None, mid(m)) for m in g.members]
    out.append(_record(TARGET_ASSIGNMENT_METADATA, g.group_id, None))
    out += [_record(MEMBER_METADATA, g.group_id, None, mid(m)) for m in g.members]
    out += [_regex_record(g.group_id, r, None) for r in g.regexes]
    out.append(_record(PARTITION_METADATA, g.group_id, None))
    out.append(_record(GROUP_EPOCH, g.group_id, None))
    return out


def group_records(g: ConsumerGroup) -> list[Record]:
    """Every record of ``g`` as Kafka writes a converted group (``createConsumerGroupRecords``)."""
    out = [_member_record(g.group_id, m) for m in g.members.values()]
    out.append(_epoch_record(g.group_id, g.group_epoch, g.metadata_hash))
    out += [_target_record(g.group_id, m, g.target.get(m, {})) for m in g.members]
    out.append(_target_metadata_record(g.group_id, g.assignment_epoch, g.assignment_timestamp))
    out += [_current_record(g.group_id, m) for m in g.members.values()]
    return out


# --- reconciliation (Kafka's CurrentAssignmentBuilder) ---------------------------------------------

OwnedPartitions = list[tuple[uuid.UUID, list[int]]] | None


def _owns_any(owned: OwnedPartitions, partitions: Mapping[uuid.UUID, Mapping[int, int]]) -> bool:
    """Whether the member still owns one of ``partitions`` (unknown, None: assumed it does)."""
    if owned is None:
        return True
    for t, ps in owned:
        pending = partitions.get(t, {})
        if any(p in pending for p in ps):
            return True
    return False


class Reconciler:
    """The next state of one member towards its target assignment."""

    def __init__(self, group: ConsumerGroup, member: Member, target_epoch: int, target: Assignment,
                 subscribed_topic_ids: frozenset[uuid.UUID], subscription_changed: bool,
                 owned: OwnedPartitions) -> None:
        self.g, self.m = group, member
        self.target_epoch, self.target = target_epoch, target
        self.subscribed = subscribed_topic_ids
        self.subscription_changed = subscription_changed
        self.owned = owned

    def build(self) -> Member:
        m = self.m
        if m.state == STABLE:
            if m.member_epoch != self.target_epoch:
                return self._next(m.member_epoch, m.assigned)
            if self.subscription_changed:
                return self._update_current(m.member_epoch, m.assigned)
            return m
        if m.state == UNREVOKED_PARTITIONS:
            if _owns_any(self.owned, m.pending_revocation):
                if self.subscription_changed:
                    return self._update_current(m.member_epoch, m.assigned)
                return m
            return self._next(m.member_epoch, m.assigned)
        if m.state == UNRELEASED_PARTITIONS:
            return self._next(m.member_epoch, m.assigned)
        if self.owned is None or self.owned:
            raise GroupError(ec.FENCED_MEMBER_EPOCH, "The consumer group member is in a unknown state. "
                                                     "The member must abandon all its partitions and rejoin.")
        return self._next(self.target_epoch, m.assigned)

    def _update_current(self, epoch: int, assigned: Mapping[uuid.UUID, Mapping[int, int]]) -> Member:
        m = self.m
        if not self.subscribed and not m.pending_revocation:
            new_assigned: dict[uuid.UUID, Mapping[int, int]] = {}
            pending: dict[uuid.UUID, Mapping[int, int]] = dict(assigned)
        else:
            new_assigned = {t: ps for t, ps in assigned.items() if t in self.subscribed}
            merged = {t: dict(ps) for t, ps in m.pending_revocation.items()}
            for t, ps in assigned.items():
                if t not in self.subscribed:
                    merged.setdefault(t, {}).update(ps)
            pending = dict(merged)
        if len(new_assigned) == len(assigned):
            return m
        if pending and _owns_any(self.owned, pending):
            return dataclasses.replace(m, state=UNREVOKED_PARTITIONS, member_epoch=epoch,
                                       previous_member_epoch=m.member_epoch, assigned=new_assigned,
                                       pending_revocation=pending)
        return dataclasses.replace(m, member_epoch=epoch, previous_member_epoch=m.member_epoch,
                                   assigned=new_assigned)

    def _next(self, epoch: int, current: Mapping[uuid.UUID, Mapping[int, int]]) -> Member:
        m, g = self.m, self.g
        unreleased = False
        new_assigned: dict[uuid.UUID, dict[int, int]] = {}
        revoke: dict[uuid.UUID, dict[int, int]] = {}
        to_assign: dict[uuid.UUID, set[int]] = {}
        for t in set(self.target) | set(current):
            target = self.target.get(t, frozenset()) if t in self.subscribed else frozenset()
            cur = current.get(t, {})
            kept = {p: e for p, e in cur.items() if p in target}
            gone = {p: e for p, e in cur.items() if p not in kept}
            pending = set(target) - set(kept)
            for p in sorted(pending):
                if (g.current_partition_epoch(t, p, exclude=m.member_id) != -1
                        and p not in m.pending_revocation.get(t, {})):
                    pending.discard(p)
                    unreleased = True
            if kept:
                new_assigned[t] = kept
            if gone:
                revoke[t] = gone
            if pending:
                to_assign[t] = pending
        if revoke and _owns_any(self.owned, revoke):
            return dataclasses.replace(m, state=UNREVOKED_PARTITIONS, member_epoch=epoch,
                                       previous_member_epoch=m.member_epoch, assigned=new_assigned,
                                       pending_revocation=revoke)
        for t, ps in to_assign.items():
            new_assigned.setdefault(t, {}).update(dict.fromkeys(ps, self.target_epoch))
        return dataclasses.replace(m, state=UNRELEASED_PARTITIONS if unreleased else STABLE,
                                   member_epoch=self.target_epoch, previous_member_epoch=m.member_epoch,
                                   assigned=new_assigned, pending_revocation={})


# --- the coordinator --------------------------------------------------------------------------------

class ConsumerGroupCoordinator(GroupCoordinatorBase[ConsumerGroup]):
    """Every consumer group of the node.

    Args:
        config: the ``group.consumer.*`` settings.
        persist: writes a group's records to ``__consumer_offsets`` (one batch, durable on return);
            raising fails the request.
        topics: the current topics, ``name -> TopicImage``.
        clock / wall_clock: monotonic and epoch milliseconds.
    """

    def __init__(self, config: ConsumerGroupConfig, persist: Callable[[str, list[Record]], None],
                 topics: Callable[[], Mapping[str, TopicImage]],
                 clock: Callable[[], int] = lambda: int(time.monotonic() * 1000),
                 wall_clock: Callable[[], int] = lambda: int(time.time() * 1000),
                 group_configs: GroupConfigStore | None = None) -> None:
        super().__init__(persist, clock, wall_clock)
        self.config = config
        self._topics = topics
        #: the per-group ``consumer.session.timeout.ms`` / ``consumer.heartbeat.interval.ms`` (Kafka's GroupConfig)
        self.group_configs = group_configs
        #: the topic set the regexes were last resolved against, and its version (bumped when it grows)
        self._known_topics: frozenset[str] = frozenset()
        self._topics_version = 0
        self._last_image: Mapping[str, TopicImage] = {}
        #: with an authorizer: the topics (of those given) the member being served may DESCRIBE; a
        #: regular expression resolves to those only (Kafka's ``filterTopicDescribeAuthorizedTopics``)
        self.describable: Callable[[Iterable[str]], Iterable[str]] | None = None

    @property
    def default_assignor(self) -> str:
        return self.config.assignors[0]

    def _setting(self, group_id: str, key: str, default: int) -> int:
        """The group's ``key`` (a ``consumer.*`` group config), else ``default`` (the broker's)."""
        gc = self.group_configs
        return default if gc is None else gc.get(group_id, key, default)

    def session_timeout_ms(self, group_id: str) -> int:
        return self._setting(group_id, "consumer.session.timeout.ms", self.config.session_timeout_ms)

    def heartbeat_interval_ms(self, group_id: str) -> int:
        return self._setting(group_id, "consumer.heartbeat.interval.ms", self.config.heartbeat_interval_ms)

    # --- topics ---------------------------------------------------------------------------------

    def _image(self) -> Mapping[str, TopicImage]:
        """The topics now (the broker's image, one mapping while no topic changed); a topic the
        image did not have before moves the version the regular expressions were resolved at."""
        image = self._topics()
        if image is self._last_image:
            return image
        if image != self._last_image:
            names = frozenset(image)
            if names - self._known_topics:
                self._topics_version += 1
            self._known_topics = names
        self._last_image = image
        return image

    def _check_topics(self, g: ConsumerGroup, image: Mapping[str, TopicImage]) -> None:
        """Kafka's ``onMetadataUpdate``, at the group's next request rather than over every group
        at each topic change: a topic the group subscribes to created, deleted or grown since the
        image it was last checked against expires its metadata hash (recomputed by this request).
        A look-up while the image stays; its subscribed topics once after a change."""
        seen = g.image
        if seen is image:
            return
        if seen is None or any(seen.get(n) != image.get(n) for n in self._subscribed_names(g)):
            g.metadata_expired = True
        g.image = image

    def topics_changed(self, names: Iterable[str]) -> None:
        """Topics were created, deleted or grew: the groups subscribed to them recompute their
        metadata hash at their next heartbeat (Kafka's ``onMetadataUpdate``)."""
        del names       # the next look at the topics finds what changed
        self._image()

    def _subscribed_names(self, g: ConsumerGroup, members: Iterable[Member] | None = None,
                          regexes: Mapping[str, ResolvedRegex] | None = None) -> set[str]:
        ms = list(g.members.values()) if members is None else list(members)
        names: set[str] = set()
        for m in ms:
            names |= m.subscribed_topic_names
        live = {m.regex for m in ms if m.regex}
        for r, resolved in (g.regexes if regexes is None else regexes).items():
            if r in live:
                names |= resolved.topics
        return names

    def _subscribed_ids(self, g: ConsumerGroup, m: Member, image: Mapping[str, TopicImage]) -> frozenset[uuid.UUID]:
        names = set(m.subscribed_topic_names)
        if m.regex and m.regex in g.regexes:
            names |= g.regexes[m.regex].topics
        return frozenset(image[n].topic_id for n in names if n in image)

    # --- ConsumerGroupHeartbeat -----------------------------------------------------------------

    def heartbeat(self, group_id: str, member_id: str, member_epoch: int, instance_id: str | None,
                  rack_id: str | None, rebalance_timeout_ms: int, topic_names: list[str] | None,
                  topic_regex: str | None, assignor: str | None, owned: OwnedPartitions,
                  client_id: str, client_host: str, *, api_version: int = 1) -> HeartbeatResult:
        """Kafka's ``consumerGroupHeartbeat``: raises :class:`GroupError` with the error to answer."""
        self._validate(group_id, member_id, member_epoch, instance_id, rack_id, rebalance_timeout_ms,
                       topic_names, topic_regex, assignor, owned, api_version)
        if member_epoch in (LEAVE_GROUP_EPOCH, LEAVE_GROUP_STATIC_EPOCH):
            return self._leave(group_id, instance_id, member_id, member_epoch)
        records: list[Record] = []
        now = self._clock()
        image = self._image()
        joining = member_epoch == 0
        g = self._group_for_heartbeat(group_id, joining, records)
        self._check_topics(g, image)
        self._check_full(g, member_id, instance_id)
        if not member_id:
            member_id = str(uuid.uuid4())
        if instance_id is None:
            member = self._dynamic_member(g, member_id, member_epoch, owned, joining)
        else:
            member = self._static_member(g, member_id, member_epoch, instance_id, owned, joining, records)
        updated = dataclasses.replace(
            member,
            instance_id=instance_id if instance_id is not None else member.instance_id,
            rack_id=rack_id if rack_id is not None else member.rack_id,
            rebalance_timeout_ms=rebalance_timeout_ms if rebalance_timeout_ms != -1 else member.rebalance_timeout_ms,
            server_assignor=assignor if assignor is not None else member.server_assignor,
            subscribed_topic_names=frozenset(topic_names) if topic_names is not None else member.subscribed_topic_names,
            subscribed_topic_regex=topic_regex if topic_regex is not None else member.subscribed_topic_regex,
            client_id=client_id, client_host=client_host, classic=None)
        names_changed = False
        if updated != member:
            records.append(_member_record(group_id, updated))
            names_changed = updated.subscribed_topic_names != member.subscribed_topic_names
        regex_status = self._update_regex(g, member, updated, records)
        assignor_changed = ((g.preferred_assignor() or self.default_assignor)
                            != (g.preferred_assignor(self._with(g, updated)) or self.default_assignor))
        subscription_changed = names_changed or regex_status != "unchanged"
        group_epoch = g.group_epoch
        bump = names_changed or regex_status == "resolved" or assignor_changed
        if bump or g.metadata_expired:
            group_epoch = self._update_subscription_metadata(g, bump, updated, image, records)
        target_epoch, target = self._maybe_update_target(g, group_epoch, updated, image, records, now)
        updated = self._reconcile(g, updated, target_epoch, target, subscription_changed, owned, image,
                                  records, now)
        self._write(g, records)
        g.session_deadline[updated.member_id] = now + self.session_timeout_ms(group_id)
        if regex_status == "refresh" or self._regex_refresh_due(g, now):
            self._refresh_regexes(g, now)
        full = rebalance_timeout_ms != -1 and (topic_names is not None or topic_regex is not None) \
            and owned is not None
        send = member_epoch == 0 or full or dict(member.assigned) != dict(updated.assigned)
        return HeartbeatResult(updated.member_id, updated.member_epoch, self.heartbeat_interval_ms(group_id),
                               updated.assigned_partitions() if send else None)

    def classic_member_join(self, g: ConsumerGroup, member: Member, updated: Member, owned: OwnedPartitions,
                            records: list[Record]) -> Member:
        """A classic member's JoinGroup in a consumer group (Kafka's ``classicGroupJoinToConsumerGroup``
        after the member is found): its subscription taken from the embedded protocol, the target
        assignment updated, the member reconciled against the partitions it says it owns."""
        now = self._clock()
        image = self._image()
        self._check_topics(g, image)
        names_changed = False
        if updated != member:
            records.append(_member_record(g.group_id, updated))
            names_changed = updated.subscribed_topic_names != member.subscribed_topic_names
        regex_status = self._update_regex(g, member, updated, records)
        bump = names_changed or regex_status != "unchanged"
        group_epoch = g.group_epoch
        if bump or g.metadata_expired:
            group_epoch = self._update_subscription_metadata(g, bump, updated, image, records)
        target_epoch, target = self._maybe_update_target(g, group_epoch, updated, image, records, now)
        updated = self._reconcile(g, updated, target_epoch, target, bump, owned, image, records, now)
        self._write(g, records)
        return updated

    def _validate(self, group_id: str, member_id: str, member_epoch: int, instance_id: str | None,
                  rack_id: str | None, rebalance_timeout_ms: int, topic_names: list[str] | None,
                  topic_regex: str | None, assignor: str | None, owned: OwnedPartitions,
                  api_version: int) -> None:
        if (api_version >= 1 or member_epoch > 0 or member_epoch == -1) and member_id == "":
            raise GroupError(ec.INVALID_REQUEST, "MemberId can't be empty.")
        if group_id == "":
            raise GroupError(ec.INVALID_REQUEST, "GroupId can't be empty.")
        if instance_id == "":
            raise GroupError(ec.INVALID_REQUEST, "InstanceId can't be empty.")
        if rack_id == "":
            raise GroupError(ec.INVALID_REQUEST, "RackId can't be empty.")
        if member_epoch == 0:
            if rebalance_timeout_ms == -1:
                raise GroupError(ec.INVALID_REQUEST, "RebalanceTimeoutMs must be provided in first request.")
            if owned is None or owned:
                raise GroupError(ec.INVALID_REQUEST, "TopicPartitions must be empty when (re-)joining.")
            if topic_names is None and topic_regex is None:
                raise GroupError(ec.INVALID_REQUEST, "Either SubscribedTopicNames or SubscribedTopicRegex "
                                                     "must be non-null when (re-)joining.")
        elif member_epoch == LEAVE_GROUP_STATIC_EPOCH:
            if instance_id is None:
                raise GroupError(ec.INVALID_REQUEST, "InstanceId can't be null.")
        elif member_epoch < LEAVE_GROUP_STATIC_EPOCH:
            raise GroupError(ec.INVALID_REQUEST, "MemberEpoch is invalid.")
        if assignor is not None and assignor not in self.config.assignors:
            raise GroupError(ec.UNSUPPORTED_ASSIGNOR, f"ServerAssignor {assignor} is not supported. Supported "
                                                      f"assignors: {', '.join(self.config.assignors)}.")

    def _group_for_heartbeat(self, group_id: str, joining: bool, records: list[Record]) -> ConsumerGroup:
        g = self.groups.get(group_id)
        if g is not None:
            return g
        if not joining:
            raise GroupError(ec.GROUP_ID_NOT_FOUND, f"Consumer group {group_id} not found.")
        if self.classic_group_exists(group_id):
            return self.upgrade_classic_group(group_id, records)
        return ConsumerGroup(group_id)

    #: set by the broker: whether a classic group of that id exists, and its conversion
    def classic_group_exists(self, group_id: str) -> bool:
        return False

    def upgrade_classic_group(self, group_id: str, records: list[Record]) -> ConsumerGroup:
        raise GroupError(ec.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")

    def _check_full(self, g: ConsumerGroup, member_id: str, instance_id: str | None) -> None:
        if g.static_member(instance_id) is not None:
            return
        if len(g.members) >= self.config.max_size and (not member_id or member_id not in g.members):
            raise GroupError(ec.GROUP_MAX_SIZE_REACHED, f"The consumer group has reached its maximum capacity "
                                                        f"of {self.config.max_size} members.")

    def _check_epoch(self, m: Member, epoch: int, owned: OwnedPartitions) -> None:
        if epoch == 0:
            return
        if epoch > m.member_epoch:
            raise GroupError(ec.FENCED_MEMBER_EPOCH, f"The consumer group member has a greater member epoch "
                                                     f"({epoch}) than the one known by the group coordinator "
                                                     f"({m.member_epoch}). The member must abandon all its "
                                                     f"partitions and rejoin.")
        if epoch < m.member_epoch and not (epoch == m.previous_member_epoch and owned is not None and all(
                t in m.assigned and all(p in m.assigned[t] for p in ps) for t, ps in owned)):
            raise GroupError(ec.FENCED_MEMBER_EPOCH, f"The consumer group member has a smaller member epoch "
                                                     f"({epoch}) than the one known by the group coordinator "
                                                     f"({m.member_epoch}). The member must abandon all its "
                                                     f"partitions and rejoin.")

    def _get_member(self, g: ConsumerGroup, member_id: str) -> Member:
        m = g.members.get(member_id)
        if m is None:
            raise GroupError(ec.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {g.group_id}.")
        return m

    def _dynamic_member(self, g: ConsumerGroup, member_id: str, epoch: int, owned: OwnedPartitions,
                        joining: bool) -> Member:
        m = g.members.get(member_id)
        if m is None:
            if not joining:
                self._get_member(g, member_id)
            m = Member(member_id)
            logger.info("group %s: member %s joins the consumer group using the consumer protocol",
                        g.group_id, member_id)
        self._check_epoch(m, epoch, owned)
        return m

    def _static_member(self, g: ConsumerGroup, member_id: str, epoch: int, instance_id: str,
                       owned: OwnedPartitions, joining: bool, records: list[Record]) -> Member:
        existing = g.static_member(instance_id)
        if joining:
            if existing is None:
                return g.members.get(member_id) or Member(member_id)
            if not existing.uses_classic_protocol and existing.member_epoch != LEAVE_GROUP_STATIC_EPOCH:
                raise GroupError(ec.UNRELEASED_INSTANCE_ID,
                                 f"Static member {member_id} with instance id {instance_id} cannot join the group "
                                 f"because the instance id is owned by {existing.member_id} member.")
            new = dataclasses.replace(existing, member_id=member_id, member_epoch=0, previous_member_epoch=0)
            self._replace_member(g, existing, new, records)
            logger.info("group %s: static member with instance id %s rejoins as %s (replacing %s)",
                        g.group_id, instance_id, member_id, existing.member_id)
            return new
        if existing is None:
            raise GroupError(ec.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
        if existing.member_id != member_id:
            raise GroupError(ec.FENCED_INSTANCE_ID, f"Static member {member_id} with instance id {instance_id} "
                                                    f"was fenced by member {existing.member_id}.")
        self._check_epoch(existing, epoch, owned)
        return existing

    def _replace_member(self, g: ConsumerGroup, old: Member, new: Member, records: list[Record]) -> None:
        records += _remove_member_records(g.group_id, old.member_id)
        records.append(_member_record(g.group_id, new))
        target = g.target.get(old.member_id, {})
        records.append(_target_record(g.group_id, new.member_id, target))
        records.append(_current_record(g.group_id, new))
        del g.members[old.member_id]
        g.target.pop(old.member_id, None)
        g.session_deadline.pop(old.member_id, None)
        g.rebalance_deadline.pop(old.member_id, None)
        g.members[new.member_id] = new
        g.target[new.member_id] = target

    @staticmethod
    def _with(g: ConsumerGroup, m: Member) -> list[Member]:
        out = [x for x in g.members.values() if x.member_id != m.member_id
               and not (m.instance_id is not None and x.instance_id == m.instance_id)]
        out.append(m)
        return out

    def _update_regex(self, g: ConsumerGroup, old: Member, new: Member, records: list[Record]) -> str:
        """Kafka's ``maybeUpdateRegularExpressions``: "unchanged", "updated" (a regex resolved later),
        "resolved" (its resolution is known: the epoch is bumped now) or "refresh"."""
        if old.regex == new.regex:
            return "unchanged"
        status = "updated"
        counts = g.subscribed_regexes()
        if old.regex and counts.get(old.regex, 0) == 1:
            records.append(_regex_record(g.group_id, old.regex, None))
            g.regexes.pop(old.regex, None)
        if new.regex:
            if counts.get(new.regex, 0) == 0:
                try:
                    compile_regex(new.regex)
                except InvalidRegularExpression as e:
                    raise GroupError(ec.INVALID_REGULAR_EXPRESSION,
                                     f"SubscribedTopicRegex `{new.regex}` is not a valid regular expression: {e}.") \
                        from None
                status = "refresh"
            elif new.regex in g.regexes:
                status = "resolved"
        elif old.regex:
            status = "resolved"
        return status

    def _regex_refresh_due(self, g: ConsumerGroup, now_wall: int) -> bool:
        live = g.subscribed_regexes()
        if not live:
            return False
        last = min((r.timestamp for r in g.regexes.values()), default=-(1 << 62))
        now = self._wall()
        if now <= last + REGEX_MIN_REFRESH_MS:
            return False
        version = min((r.version for r in g.regexes.values()), default=0)
        return (set(live) != set(g.regexes) or version < self._topics_version
                or now > last + self.config.regex_refresh_interval_ms)

    def _refresh_regexes(self, g: ConsumerGroup, _now: int) -> None:
        """Resolve the group's regular expressions against the topics (Kafka resolves them off the
        request path and applies the result as a separate write: so does this, after the answer)."""
        image = self._image()
        live = g.subscribed_regexes()
        if not live:
            return
        now = self._wall()
        resolved = {}
        for regex in live:
            try:
                pattern = compile_regex(regex)
            except InvalidRegularExpression:
                logger.error("group %s: cannot parse regular expression %r; ignored", g.group_id, regex)
                pattern = None
            topics = frozenset(t for t in image if pattern is not None and matches(pattern, t))
            if self.describable is not None and topics:
                topics = frozenset(self.describable(topics))
            resolved[regex] = ResolvedRegex(topics, self._topics_version, now)
        records: list[Record] = []
        bump = False
        for regex, r in resolved.items():
            old = g.regexes.get(regex)
            if old is None or old.topics != r.topics:
                bump = True
            g.regexes[regex] = r
            records.append(_regex_record(g.group_id, regex, r))
        new_hash = ModernGroup.compute_metadata_hash(self._subscribed_names(g), image)
        if new_hash != g.metadata_hash:
            bump = True
        if bump:
            g.group_epoch += 1
            g.metadata_hash = new_hash
            records.append(_epoch_record(g.group_id, g.group_epoch, new_hash))
            logger.info("group %s: regular expressions resolved (%s), group epoch %d", g.group_id,
                        {k: sorted(v.topics) for k, v in resolved.items()}, g.group_epoch)
        g.metadata_expired = False
        self._write(g, records)

    def _update_subscription_metadata(self, g: ConsumerGroup, bump: bool, updated: Member,
                                      image: Mapping[str, TopicImage], records: list[Record]) -> int:
        members = self._with(g, updated)
        new_hash = ModernGroup.compute_metadata_hash(self._subscribed_names(g, members), image)
        if new_hash != g.metadata_hash:
            bump = True
        if bump:
            g.group_epoch += 1
            records.append(_epoch_record(g.group_id, g.group_epoch, new_hash))
            logger.info("group %s: bumped group epoch to %d", g.group_id, g.group_epoch)
        g.metadata_hash = new_hash
        g.metadata_expired = False
        if g.had_partition_metadata:
            records.append(_record(PARTITION_METADATA, g.group_id, None))
            g.had_partition_metadata = False
        return g.group_epoch

    def _homogeneous(self, g: ConsumerGroup, members: list[Member]) -> bool:
        regexes = g.subscribed_regexes(members)
        names: dict[str, list[int]] = {}       # topic -> [by name, by regex]
        for m in members:
            for t in m.subscribed_topic_names:
                names.setdefault(t, [0, 0])[0] += 1
        for r in regexes:
            if r in g.regexes:
                for t in g.regexes[r].topics:
                    names.setdefault(t, [0, 0])[1] += 1
        n = len(members)
        if not regexes:
            return all(c[0] == n for c in names.values())
        if next(iter(regexes.values())) == n:
            return all(c[1] == 1 and c[0] <= 0 for c in names.values())
        return False

    def _maybe_update_target(self, g: ConsumerGroup, group_epoch: int, updated: Member,
                             image: Mapping[str, TopicImage], records: list[Record], now: int
                             ) -> tuple[int, Assignment]:
        def last() -> tuple[int, Assignment]:
            old = g.static_member(updated.instance_id) if updated.instance_id is not None else None
            return g.assignment_epoch, g.target.get(old.member_id if old is not None else updated.member_id, {})

        if g.assignment_epoch >= group_epoch:
            return last()
        wall = self._wall()
        interval = self._setting(g.group_id, "consumer.assignment.interval.ms", self.config.assignment_interval_ms)
        if g.assignment_timestamp and interval and wall < g.assignment_timestamp + interval:
            return last()
        members = self._with(g, updated)
        name = g.preferred_assignor(members) or self.default_assignor
        specs = {}
        for m in members:
            specs[m.member_id] = MemberSpec(self._subscribed_ids(g, m, image), m.instance_id, m.rack_id,
                                            dict(g.target.get(m.member_id, {})))
        if updated.member_id not in g.target and updated.instance_id is not None:
            old = g.static_member(updated.instance_id)
            if old is not None:
                specs[updated.member_id].assignment = dict(g.target.get(old.member_id, {}))
        counts = {img.topic_id: img.partitions for img in image.values()}
        try:
            new_target = assign(name, specs, self._homogeneous(g, members), counts)
        except PartitionAssignorError as e:
            raise GroupError(ec.UNKNOWN_SERVER_ERROR,
                             f"Failed to compute a new target assignment for epoch {group_epoch}: {e}") from None
        for mid, a in new_target.items():
            if g.target.get(mid) != a:
                records.append(_target_record(g.group_id, mid, a))
        records.append(_target_metadata_record(g.group_id, group_epoch, wall))
        g.target = {mid: new_target.get(mid, {}) for mid in specs}
        g.assignment_epoch, g.assignment_timestamp = group_epoch, wall
        logger.info("group %s: computed a new target assignment for epoch %d with the %r assignor",
                    g.group_id, group_epoch, name)
        return group_epoch, g.target.get(updated.member_id, {})

    def _reconcile(self, g: ConsumerGroup, m: Member, target_epoch: int, target: Assignment,
                   subscription_changed: bool, owned: OwnedPartitions, image: Mapping[str, TopicImage],
                   records: list[Record], now: int) -> Member:
        if not subscription_changed and m.reconciled_to(target_epoch):
            g.members[m.member_id] = m
            return m
        new = Reconciler(g, m, target_epoch, target, self._subscribed_ids(g, m, image), subscription_changed,
                         owned).build()
        if new != m:
            records.append(_current_record(g.group_id, new))
            if not new.uses_classic_protocol:
                if new.state == UNREVOKED_PARTITIONS:
                    g.rebalance_deadline[new.member_id] = (now + max(new.rebalance_timeout_ms, 0),
                                                           new.member_epoch)
                else:
                    g.rebalance_deadline.pop(new.member_id, None)
        g.members[new.member_id] = new
        return new

    # --- leaving, fencing -----------------------------------------------------------------------

    def _leave(self, group_id: str, instance_id: str | None, member_id: str, epoch: int) -> HeartbeatResult:
        g = self.groups.get(group_id)
        if g is None:
            raise GroupError(ec.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.")
        if instance_id is None:
            m = self._get_member(g, member_id)
            logger.info("group %s: member %s left the consumer group", group_id, member_id)
            self.fence(g, [m])
            return HeartbeatResult(member_id, epoch, 0, None)
        static = g.static_member(instance_id)
        if static is None:
            raise GroupError(ec.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
        m = static
        if m.member_id != member_id:
            raise GroupError(ec.FENCED_INSTANCE_ID, f"Static member {member_id} with instance id {instance_id} "
                                                    f"was fenced by member {m.member_id}.")
        if epoch == LEAVE_GROUP_STATIC_EPOCH:
            logger.info("group %s: static member %s (instance id %s) left temporarily", group_id, member_id,
                        instance_id)
            left = dataclasses.replace(m, member_epoch=LEAVE_GROUP_STATIC_EPOCH, pending_revocation={},
                                       assigned={t: dict.fromkeys(ps, 0) for t, ps in m.assigned.items()})
            self._write(g, [_current_record(group_id, left)])
            g.members[member_id] = left
            return HeartbeatResult(member_id, LEAVE_GROUP_STATIC_EPOCH, 0, None)
        logger.info("group %s: static member %s (instance id %s) left", group_id, member_id, instance_id)
        self.fence(g, [m])
        return HeartbeatResult(member_id, epoch, 0, None)

    def fence(self, g: ConsumerGroup, members: list[Member]) -> None:
        """Remove ``members`` (left, session or rebalance timeout): their records tombstoned, the group
        epoch bumped; the group becomes a classic group when only classic members remain and the
        migration policy allows it."""
        if not members:
            return
        if self.downgrade_after_fence(g, members):
            return
        records: list[Record] = []
        gone = {m.member_id for m in members}
        for m in members:
            records += _remove_member_records(g.group_id, m.member_id)
        remaining = [m for m in g.members.values() if m.member_id not in gone]
        live = g.subscribed_regexes(remaining)
        dropped = [r for r in g.regexes if r not in live and any(m.regex == r for m in members)]
        records += [_regex_record(g.group_id, r, None) for r in dropped]
        image = self._image()
        new_hash = ModernGroup.compute_metadata_hash(self._subscribed_names(g, remaining), image)
        epoch = g.group_epoch + 1
        records.append(_epoch_record(g.group_id, epoch, new_hash))
        if not remaining:
            records.append(_target_metadata_record(g.group_id, epoch, 0))
        self._write(g, records)             # written first: a write that fails changes nothing
        for r in dropped:
            del g.regexes[r]
        g.group_epoch, g.metadata_hash = epoch, new_hash
        if not remaining:
            g.assignment_epoch, g.assignment_timestamp = epoch, 0
        for mid in gone:
            g.members.pop(mid, None)
            g.target.pop(mid, None)
            g.session_deadline.pop(mid, None)
            g.rebalance_deadline.pop(mid, None)

    def downgrade_after_fence(self, g: ConsumerGroup, members: list[Member]) -> bool:
        """Set by the broker (:mod:`kafkalog.server.coordinator.group_migration`): convert ``g`` to a classic group
        instead of removing ``members`` from it; True when it did."""
        return False

    def timed_out(self, g: ConsumerGroup, now: int) -> list[tuple[str, str]]:
        return g.timed_out(now, lambda m: m.member_epoch, "partitions")

    def fence_member(self, g: ConsumerGroup, member_id: str) -> None:
        self.fence(g, [g.members[member_id]])

    # --- persistence ----------------------------------------------------------------------------

    def _keep(self, g: ConsumerGroup) -> None:
        if g.members or g.group_id in self.groups:
            self.groups[g.group_id] = g

    def restore(self, group_id: str, records: Mapping[bytes, tuple[ConsumerGroupKey, Value]]) -> None:
        """Rebuild a group from its live records (the last value of each key, tombstones dropped), as
        Kafka's replay leaves it; every member's session starts now."""
        g = ConsumerGroup(group_id)
        metadata: dict[str, MemberMetadataValue] = {}
        current: dict[str, CurrentMemberAssignmentValue] = {}
        for key, value in records.values():
            if isinstance(value, GroupEpochValue):
                g.group_epoch, g.metadata_hash = value.epoch, value.metadata_hash
            elif isinstance(value, TargetAssignmentMetadataValue):
                g.assignment_epoch, g.assignment_timestamp = value.assignment_epoch, value.assignment_timestamp
            elif isinstance(value, TargetAssignmentMemberValue):
                g.target[key.member_id] = {t: frozenset(ps) for t, ps in value.partitions if ps}
            elif isinstance(value, MemberMetadataValue):
                metadata[key.member_id] = value
            elif isinstance(value, CurrentMemberAssignmentValue):
                current[key.member_id] = value
            elif isinstance(value, RegularExpressionValue):
                g.regexes[key.regex] = ResolvedRegex(frozenset(value.topics), value.version, value.timestamp)
            elif key.record_type == PARTITION_METADATA:
                g.had_partition_metadata = True
        now = self._clock()
        for mid, md in metadata.items():
            cur = current.get(mid)

            def epochs(topics: Any, default: int) -> dict[uuid.UUID, dict[int, int]]:
                out: dict[uuid.UUID, dict[int, int]] = {}
                for t, ps, es in topics:
                    if es is not None and len(es) == len(ps):
                        out[t] = dict(zip(ps, es, strict=True))
                    else:
                        out[t] = dict.fromkeys(ps, max(default, 0))
                return out

            m = Member(mid, instance_id=md.instance_id, rack_id=md.rack_id,
                       rebalance_timeout_ms=md.rebalance_timeout_ms, client_id=md.client_id,
                       client_host=md.client_host, subscribed_topic_names=frozenset(md.subscribed_topic_names),
                       subscribed_topic_regex=md.subscribed_topic_regex, server_assignor=md.server_assignor,
                       classic=md.classic_member_metadata)
            if cur is not None:
                m = dataclasses.replace(
                    m, member_epoch=cur.member_epoch, previous_member_epoch=cur.previous_member_epoch,
                    state=cur.state if cur.state in (STABLE, UNREVOKED_PARTITIONS, UNRELEASED_PARTITIONS)
                    else UNKNOWN,
                    assigned=epochs(cur.assigned, cur.member_epoch),
                    pending_revocation=epochs(cur.pending_revocation, cur.member_epoch))
            g.members[mid] = m
            timeout = (m.classic.session_timeout_ms if m.classic is not None
                       else self.session_timeout_ms(group_id))
            g.session_deadline[mid] = now + timeout
            if m.state == UNREVOKED_PARTITIONS:
                g.rebalance_deadline[mid] = (now + max(m.rebalance_timeout_ms, 0), m.member_epoch)
        g.target = {mid: a for mid, a in g.target.items() if mid in g.members}
        g.metadata_expired = True
        self.groups[group_id] = g

    # --- offsets --------------------------------------------------------------------------------

    def validate_commit(self, group_id: str, member_id: str, instance_id: str | None, epoch: int,
                        api_version: int, transactional: bool = False
                        ) -> Callable[[str, uuid.UUID | None, int], int] | None:
        """Kafka's ``ConsumerGroup.validateOffsetCommit``: None when every partition may be
        committed, else a check of each partition ``(topic, topic_id, partition) -> error code``;
        raises :class:`GroupError` for the whole request."""
        g = self.groups[group_id]
        if epoch < 0 and not g.members:
            return None
        if transactional and epoch == -1 and member_id == "" and instance_id is None:
            return None
        m = self._get_member(g, member_id)
        if not transactional and not m.uses_classic_protocol and api_version < 9:
            raise GroupError(ec.UNSUPPORTED_VERSION, "OffsetCommit version 9 or above must be used by members "
                                                     "using the consumer group protocol")
        if epoch == m.member_epoch:
            return None
        if transactional:       # Kafka 4.4: a transactional commit's epoch must be the member's own
            raise GroupError(ec.ILLEGAL_GENERATION, f"The received member epoch {epoch} does not match the "
                                                    f"expected member epoch {m.member_epoch}.")
        stale = ec.ILLEGAL_GENERATION if m.uses_classic_protocol else ec.STALE_MEMBER_EPOCH
        if epoch > m.member_epoch:
            raise GroupError(stale, f"Received member epoch {epoch} is newer than current member epoch "
                                    f"{m.member_epoch}.")

        def check(_topic: str, topic_id: uuid.UUID | None, partition: int) -> int:
            assigned = None if topic_id is None else m.assignment_epoch(topic_id, partition)
            if assigned is None or epoch < assigned:
                return stale
            return ec.NONE
        return check

    def validate_fetch(self, group_id: str, member_id: str | None, epoch: int) -> None:
        """Kafka's ``ConsumerGroup.validateOffsetFetch`` (raises :class:`GroupError`)."""
        g = self.groups[group_id]
        if member_id is None and epoch < 0:
            return
        m = g.members.get(member_id or "")
        if m is None:
            raise GroupError(ec.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group_id}.")
        if epoch != m.member_epoch:
            code = ec.ILLEGAL_GENERATION if m.uses_classic_protocol else ec.STALE_MEMBER_EPOCH
            raise GroupError(code, f"The received member epoch {epoch} does not match the expected member "
                                   f"epoch {m.member_epoch}.")

    # --- admin ----------------------------------------------------------------------------------

    def tombstones(self, g: ConsumerGroup) -> list[Record]:
        return group_tombstones(g)

    def remove_empty(self, group_id: str) -> list[Record]:
        """Forget an empty group that another protocol takes over; its tombstones."""
        g = self.groups.pop(group_id)
        return group_tombstones(g)
