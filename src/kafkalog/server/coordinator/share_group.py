"""Share groups (KIP-932): Kafka 4.4's ``GroupMetadataManager.shareGroupHeartbeat`` for one node.

A member joins with epoch 0 and its subscribed topics, heartbeats with its epoch and leaves with -1;
a subscription change, a member leaving (or fenced when its ``share.session.timeout.ms`` runs out)
or a topic's metadata changing bumps the group epoch, and the ``simple`` assignor (Kafka's
``SimpleAssignor``: each partition to at least one member, shared once members outnumber
partitions) computes the target assignment, which a member takes at once (no revocation in share
groups). Only partitions whose share-partition state is initialized are assignable: a new
subscription initializes them in the share coordinator (``__share_group_state``, start offset -1:
``share.auto.offset.reset`` decides at the first fetch) and they are assigned from the next
heartbeat on, as on Kafka. Every change is written to ``__consumer_offsets`` as Kafka's share group
records (:mod:`kafkalog.coordinator.share_group_records`) before it is answered, and a restart
rebuilds the groups from them. A member leaving or fenced releases the records it had acquired.
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from kafkalog.coordinator.group_config import GroupConfigStore, ShareGroupBrokerConfig
from kafkalog.coordinator.share_group_records import (
    CURRENT_MEMBER_ASSIGNMENT,
    GROUP_EPOCH,
    MEMBER_METADATA,
    STATE_PARTITION_METADATA,
    TARGET_ASSIGNMENT_MEMBER,
    TARGET_ASSIGNMENT_METADATA,
    ShareCurrentAssignmentValue,
    ShareGroupEpochValue,
    ShareGroupKey,
    ShareMemberMetadataValue,
    ShareStatePartitionMetadataValue,
    ShareTargetAssignmentMemberValue,
    ShareTargetAssignmentMetadataValue,
    encode_key,
    encode_value,
)
from kafkalog.server import error_codes as ec
from kafkalog.server.coordinator.group import (
    Assignment,
    GroupCoordinatorBase,
    GroupError,
    ModernGroup,
    Record,
    TopicImage,
)

logger = logging.getLogger("kafkalog.server")

__all__ = ["ShareGroup", "ShareGroupCoordinator", "ShareMember", "simple_assign"]

STABLE = 0          # MemberState.STABLE


@dataclass(frozen=True)
class ShareMember:
    member_id: str
    epoch: int = 0
    previous_epoch: int = -1
    client_id: str = ""
    client_host: str = ""
    rack_id: str | None = None
    subscribed: tuple[str, ...] = ()
    assigned: Mapping[uuid.UUID, frozenset[int]] = field(default_factory=dict)

    def metadata(self) -> tuple[Any, ...]:
        return self.rack_id, self.client_id, self.client_host, tuple(sorted(self.subscribed))


@dataclass
class ShareGroup(ModernGroup[ShareMember, Assignment]):
    #: Kafka's ``ModernGroup`` starts a new group at epoch 1 (the first join bumps it to 2)
    epoch: int = 1
    #: topic id -> (name, partitions) with an initialized share-partition state
    initialized: dict[uuid.UUID, tuple[str, frozenset[int]]] = field(default_factory=dict)

    @property
    def state(self) -> str:
        return "Stable" if self.members else "Empty"

    def subscribed_names(self, members: Mapping[str, ShareMember] | None = None) -> set[str]:
        out: set[str] = set()
        for m in (self.members if members is None else members).values():
            out |= set(m.subscribed)
        return out


def simple_assign(members: list[str], partitions: list[tuple[uuid.UUID, int]],
                  current: Mapping[str, Assignment]) -> dict[str, Assignment]:
    """Kafka's ``SimpleHomogeneousAssignmentBuilder``: every partition to ``ceil(members /
    partitions)`` members, each member its share of the partitions, current assignments kept
    where they fit (members in the given order, partitions by topic then index)."""
    n, p = len(members), len(partitions)
    if n == 0:
        return {}
    if p == 0:
        return {m: {} for m in members}
    sharing = (n + p - 1) // p
    precise = sharing * p / n
    desired = [math.ceil(precise * (i + 1)) - math.ceil(precise * i) for i in range(n)]
    targets = set(partitions)
    by_member: dict[int, set[tuple[uuid.UUID, int]]] = {}
    by_partition: dict[tuple[uuid.UUID, int], set[int]] = {tp: set() for tp in partitions}
    for i, m in enumerate(members):
        keep: set[tuple[uuid.UUID, int]] = set()
        for topic_id, parts in (current.get(m) or {}).items():
            for part in sorted(parts):
                tp = (topic_id, part)
                if tp in targets and len(keep) < desired[i] and len(by_partition[tp]) < sharing:
                    keep.add(tp)
                    by_partition[tp].add(i)
        by_member[i] = keep
    unfilled = [i for i in range(n) if len(by_member[i]) < desired[i]]
    for tp in partitions:
        for i in list(unfilled):
            if len(by_partition[tp]) >= sharing:
                break
            if i in by_partition[tp]:
                continue
            by_member[i].add(tp)
            by_partition[tp].add(i)
            if len(by_member[i]) >= desired[i]:
                unfilled.remove(i)
    out: dict[str, Assignment] = {}
    for i, m in enumerate(members):
        a: dict[uuid.UUID, set[int]] = {}
        for topic_id, part in by_member[i]:
            a.setdefault(topic_id, set()).add(part)
        out[m] = {t: frozenset(ps) for t, ps in a.items()}
    return out


def _tp(a: Mapping[uuid.UUID, frozenset[int]]) -> tuple[tuple[uuid.UUID, tuple[int, ...]], ...]:
    return tuple((t, tuple(sorted(ps))) for t, ps in sorted(a.items()) if ps)


def _record(rtype: int, group: str, value: Any, member: str = "") -> Record:
    return encode_key(ShareGroupKey(rtype, group, member)), None if value is None else encode_value(value)


class ShareGroupCoordinator(GroupCoordinatorBase[ShareGroup]):
    """Every share group of the node."""

    kind = "share group"

    def __init__(self, broker: ShareGroupBrokerConfig, configs: GroupConfigStore,
                 persist: Callable[[str, list[Record]], None], topics: Callable[[], Mapping[str, TopicImage]],
                 initialize: Callable[[str, int, list[tuple[uuid.UUID, int]]], None],
                 member_left: Callable[[str, str], None],
                 other_group_exists: Callable[[str], bool] = lambda _g: False,
                 clock: Callable[[], int] = lambda: int(time.monotonic() * 1000),
                 wall_clock: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
        super().__init__(persist, clock, wall_clock)
        self.broker = broker
        self.configs = configs
        self._topics = topics
        self._initialize = initialize
        self._member_left = member_left
        self._other_group_exists = other_group_exists

    def _setting(self, group: str, key: str) -> int:
        return int(self.configs.effective(group)[key])

    # --- ShareGroupHeartbeat ------------------------------------------------------------------------

    def heartbeat(self, group_id: str, member_id: str, member_epoch: int, rack_id: str | None,
                  topics: list[str] | None, client_id: str, client_host: str) -> dict[str, Any]:
        """The ShareGroupHeartbeat answer: ``member_id``, ``member_epoch``, ``heartbeat_interval``,
        ``assignment`` (None when unchanged); raises :class:`GroupError` with Kafka's code."""
        if not member_id or len(member_id) > 36:
            raise GroupError(ec.INVALID_REQUEST)      # Kafka: "Invalid member id in the request."
        if group_id.strip() == "":
            raise GroupError(ec.INVALID_REQUEST, "GroupId can't be empty.")
        if rack_id is not None and rack_id.strip() == "":
            raise GroupError(ec.INVALID_REQUEST, "RackId can't be empty.")
        if member_epoch == 0 and not topics:
            raise GroupError(ec.INVALID_REQUEST, "SubscribedTopicNames must be set in first request.")
        if member_epoch < -1:
            raise GroupError(ec.INVALID_REQUEST, "MemberEpoch is invalid.")
        if member_epoch == -1:
            return self._leave(group_id, member_id)
        g = self.groups.get(group_id)
        if g is None:
            if self._other_group_exists(group_id):
                raise GroupError(ec.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.")
            if member_epoch != 0:
                raise GroupError(ec.GROUP_ID_NOT_FOUND, f"Share group {group_id} not found.")
            g = ShareGroup(group_id)
        if len(g.members) >= self.broker.max_size and member_id not in g.members:
            raise GroupError(ec.GROUP_MAX_SIZE_REACHED, f"The share group has reached its maximum capacity of "
                                                       f"{self.broker.max_size} members.")
        member = g.members.get(member_id)
        if member is None:
            if member_epoch != 0:
                raise GroupError(ec.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group_id}.")
            member = ShareMember(member_id)
            logger.info("share group %s: member %s joins", group_id, member_id)
        elif member_epoch != 0:
            if member_epoch > member.epoch:
                raise GroupError(ec.FENCED_MEMBER_EPOCH, f"The share group member has a greater member epoch "
                                 f"({member_epoch}) than the one known by the group coordinator ({member.epoch}). "
                                 f"The member must abandon all its partitions and rejoin.")
            if member_epoch < member.epoch and member_epoch != member.previous_epoch:
                raise GroupError(ec.FENCED_MEMBER_EPOCH, f"The share group member has a smaller member epoch "
                                 f"({member_epoch}) than the one known by the group coordinator ({member.epoch}), "
                                 f"and it does not match the previous member epoch ({member.previous_epoch}). "
                                 f"The member must abandon all its partitions and rejoin.")
        image = self._topics()
        records: list[Record] = []
        updated = replace(member, rack_id=rack_id if rack_id is not None else member.rack_id,
                          subscribed=tuple(topics) if topics is not None else member.subscribed,
                          client_id=client_id, client_host=client_host)
        bump = False
        if updated.metadata() != member.metadata() or member_id not in g.members:
            records.append(_record(MEMBER_METADATA, group_id, ShareMemberMetadataValue(
                updated.rack_id, updated.client_id, updated.client_host, tuple(updated.subscribed)), member_id))
            if set(updated.subscribed) != set(member.subscribed):
                bump = True
        members_after = dict(g.members)
        members_after[member_id] = updated
        if g.assignment_epoch >= g.epoch:
            bump |= self._initialized_assignment_pending(g, members_after)
        names = g.subscribed_names(members_after)
        new_hash = ModernGroup.compute_metadata_hash(names, image)
        if new_hash != g.metadata_hash:
            bump = True
        if bump:
            g.epoch += 1
            g.metadata_hash = new_hash
            records.append(_record(GROUP_EPOCH, group_id, ShareGroupEpochValue(g.epoch, new_hash)))
        target_epoch, target = self._maybe_update_target(g, members_after, image, records)
        assigned = self._filter(target.get(member_id, {}), updated.subscribed, image)
        if target_epoch != updated.epoch:
            updated = replace(updated, previous_epoch=updated.epoch, epoch=target_epoch, assigned=assigned)
        elif set(updated.subscribed) != set(member.subscribed):
            updated = replace(updated, assigned=assigned)
        if (updated.epoch, updated.previous_epoch, _tp(updated.assigned)) != \
                (member.epoch, member.previous_epoch, _tp(member.assigned)) or member_id not in g.members:
            records.append(_record(CURRENT_MEMBER_ASSIGNMENT, group_id, ShareCurrentAssignmentValue(
                updated.epoch, updated.previous_epoch, STABLE, _tp(updated.assigned)), member_id))
        init = self._to_initialize(g, names, image)
        if init:
            initialized = dict(g.initialized)
            for topic_id, (name, parts) in init.items():
                old = initialized.get(topic_id, (name, frozenset()))[1]
                initialized[topic_id] = (name, old | parts)
            records.append(self._partition_metadata_record(group_id, initialized))
        self._write(g, records)
        g.members[member_id] = updated
        self.groups[group_id] = g
        if init:
            self._initialize(group_id, g.epoch, [(t, p) for t, (_n, parts) in init.items() for p in sorted(parts)])
            for topic_id, (name, parts) in init.items():
                old = g.initialized.get(topic_id, (name, frozenset()))[1]
                g.initialized[topic_id] = (name, old | parts)
        g.session_deadline[member_id] = self._clock() + self._setting(group_id, "share.session.timeout.ms")
        full = topics is not None
        changed = _tp(member.assigned) != _tp(updated.assigned)
        return {"member_id": member_id, "member_epoch": updated.epoch,
                "heartbeat_interval": self._setting(group_id, "share.heartbeat.interval.ms"),
                "assignment": dict(updated.assigned) if member_epoch == 0 or full or changed else None}

    def _initialized_assignment_pending(self, g: ShareGroup, members: Mapping[str, ShareMember]) -> bool:
        """Kafka's ``initializedAssignmentPending``: an initialized partition of a subscribed topic is
        missing from the target assignment."""
        if not members or not g.initialized:
            return False
        names = g.subscribed_names(members)
        current: dict[uuid.UUID, set[int]] = {}
        for a in g.target.values():
            for t, ps in a.items():
                current.setdefault(t, set()).update(ps)
        return any(name in names and current.get(t) != set(parts) for t, (name, parts) in g.initialized.items())

    def _to_initialize(self, g: ShareGroup, names: set[str], image: Mapping[str, TopicImage]
                       ) -> dict[uuid.UUID, tuple[str, frozenset[int]]]:
        """The partitions of subscribed topics without a share-partition state yet."""
        out = {}
        for name in names:
            topic = image.get(name)
            if topic is None:
                continue
            known = g.initialized.get(topic.topic_id, (name, frozenset()))[1]
            missing = frozenset(range(topic.partitions)) - known
            if missing:
                out[topic.topic_id] = (name, missing)
        return out

    @staticmethod
    def _partition_metadata_record(group_id: str, initialized: Mapping[uuid.UUID, tuple[str, frozenset[int]]]
                                   ) -> Record:
        return _record(STATE_PARTITION_METADATA, group_id, ShareStatePartitionMetadataValue(
            (), tuple((t, n, tuple(sorted(ps))) for t, (n, ps) in sorted(initialized.items())), ()))

    @staticmethod
    def _filter(a: Mapping[uuid.UUID, frozenset[int]], subscribed: tuple[str, ...],
                image: Mapping[str, TopicImage]) -> dict[uuid.UUID, frozenset[int]]:
        ids = {image[n].topic_id for n in subscribed if n in image}
        return {t: ps for t, ps in a.items() if t in ids and ps}

    def _maybe_update_target(self, g: ShareGroup, members: Mapping[str, ShareMember],
                             image: Mapping[str, TopicImage], records: list[Record]
                             ) -> tuple[int, Mapping[str, Assignment]]:
        """The target assignment at the group epoch (computed when behind it)."""
        if g.assignment_epoch >= g.epoch:
            return g.assignment_epoch, g.target
        interval = self._setting(g.group_id, "share.assignment.interval.ms")
        now = self._wall()
        if g.assignment_timestamp and now < g.assignment_timestamp + interval:
            return g.assignment_epoch, g.target
        by_id = {t.topic_id: (n, t) for n, t in image.items()}
        subscribed_ids = {image[n].topic_id for n in g.subscribed_names(members) if n in image}
        assignable = [(t, p) for t in sorted(subscribed_ids, key=lambda t: by_id[t][0])
                      for p in sorted(g.initialized.get(t, ("", frozenset()))[1])
                      if p < by_id[t][1].partitions]
        homogeneous = len({frozenset(m.subscribed) for m in members.values()}) <= 1
        if homogeneous:
            new = simple_assign(list(members), assignable, g.target)
        else:           # each member over the partitions of its own topics
            new = {}
            for mid, m in members.items():
                ids = {image[n].topic_id for n in m.subscribed if n in image}
                same = [x for x, o in members.items() if set(o.subscribed) == set(m.subscribed)]
                part = simple_assign(same, [tp for tp in assignable if tp[0] in ids], g.target)
                new[mid] = part[mid]
        for mid, a in new.items():
            if _tp(a) != _tp(g.target.get(mid, {})) or mid not in g.target:
                records.append(_record(TARGET_ASSIGNMENT_MEMBER, g.group_id,
                                       ShareTargetAssignmentMemberValue(_tp(a)), mid))
        records.append(_record(TARGET_ASSIGNMENT_METADATA, g.group_id,
                               ShareTargetAssignmentMetadataValue(g.epoch, now)))
        g.target = {m: new[m] for m in new}
        g.assignment_epoch = g.epoch
        g.assignment_timestamp = now
        return g.epoch, g.target

    # --- leaving and fencing -----------------------------------------------------------------------

    def _leave(self, group_id: str, member_id: str) -> dict[str, Any]:
        g = self.groups.get(group_id)
        if g is None:
            if self._other_group_exists(group_id):
                raise GroupError(ec.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.")
            raise GroupError(ec.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.")     # Kafka's words
        if member_id not in g.members:
            raise GroupError(ec.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group_id}.")
        logger.info("share group %s: member %s left", group_id, member_id)
        self.fence(g, member_id)
        return {"member_id": member_id, "member_epoch": -1, "heartbeat_interval": 0, "assignment": None}

    def fence(self, g: ShareGroup, member_id: str) -> None:
        """Remove a member (Kafka's ``shareGroupFenceMember``): its records tombstoned, the group
        epoch bumped, its acquired records released."""
        records = [_record(CURRENT_MEMBER_ASSIGNMENT, g.group_id, None, member_id),
                   _record(TARGET_ASSIGNMENT_MEMBER, g.group_id, None, member_id),
                   _record(MEMBER_METADATA, g.group_id, None, member_id)]
        members_after = {m: v for m, v in g.members.items() if m != member_id}
        image = self._topics()
        names = g.subscribed_names(members_after)
        new_hash = ModernGroup.compute_metadata_hash(names, image)
        epoch = g.epoch + 1
        records.append(_record(GROUP_EPOCH, g.group_id, ShareGroupEpochValue(epoch, new_hash)))
        if len(g.members) == 1:
            records.append(_record(TARGET_ASSIGNMENT_METADATA, g.group_id,
                                   ShareTargetAssignmentMetadataValue(epoch, 0)))
        self._write(g, records)
        g.members.pop(member_id, None)
        g.target.pop(member_id, None)
        g.session_deadline.pop(member_id, None)
        g.epoch, g.metadata_hash = epoch, new_hash
        if not g.members:
            g.assignment_epoch, g.assignment_timestamp = epoch, 0
        self._member_left(g.group_id, member_id)

    def timed_out(self, g: ShareGroup, now: int) -> list[tuple[str, str]]:
        return g.timed_out(now, lambda m: m.epoch, "partitions")

    def fence_member(self, g: ShareGroup, member_id: str) -> None:
        self.fence(g, member_id)

    # --- persistence -------------------------------------------------------------------------------

    def _keep(self, g: ShareGroup) -> None:
        """(a share group is held from its first member's join)"""

    def restore(self, group_id: str, records: Mapping[bytes, tuple[ShareGroupKey, Any]]) -> None:
        """Rebuild a group from its live records; its members heartbeat on within a session."""
        g = ShareGroup(group_id)
        now = self._clock()
        metadata: dict[str, ShareMemberMetadataValue] = {}
        current: dict[str, ShareCurrentAssignmentValue] = {}
        for key, value in records.values():
            if key.record_type == GROUP_EPOCH:
                g.epoch, g.metadata_hash = value.epoch, value.metadata_hash
            elif key.record_type == TARGET_ASSIGNMENT_METADATA:
                g.assignment_epoch, g.assignment_timestamp = value.assignment_epoch, value.assignment_timestamp
            elif key.record_type == TARGET_ASSIGNMENT_MEMBER:
                g.target[key.member_id] = {t: frozenset(ps) for t, ps in value.partitions}
            elif key.record_type == MEMBER_METADATA:
                metadata[key.member_id] = value
            elif key.record_type == CURRENT_MEMBER_ASSIGNMENT:
                current[key.member_id] = value
            elif key.record_type == STATE_PARTITION_METADATA:
                g.initialized = {t: (n, frozenset(ps)) for t, n, ps in value.initialized}
        for mid, meta in metadata.items():
            cur = current.get(mid)
            g.members[mid] = ShareMember(
                mid, cur.member_epoch if cur else 0, cur.previous_member_epoch if cur else -1,
                meta.client_id, meta.client_host, meta.rack_id, tuple(meta.subscribed_topic_names),
                {t: frozenset(ps) for t, ps in cur.assigned} if cur else {})
            g.session_deadline[mid] = now + self._setting(group_id, "share.session.timeout.ms")
        g.target = {m: a for m, a in g.target.items() if m in g.members}
        self.groups[group_id] = g

    # --- the share group offset APIs ------------------------------------------------------------------

    def alter_offsets(self, group_id: str, starts: Mapping[tuple[uuid.UUID, str], Mapping[int, int]]) -> ShareGroup:
        """Kafka's AlterShareGroupOffsets: an empty (or new) share group's partitions start at the
        given offsets (their states initialized again); NON_EMPTY_GROUP while it has members."""
        g = self.groups.get(group_id)
        if g is None:
            if self._other_group_exists(group_id):
                raise GroupError(ec.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.")
            g = ShareGroup(group_id)
        if g.members:
            raise GroupError(ec.NON_EMPTY_GROUP, "The group is not empty.")
        initialized = dict(g.initialized)
        for (topic_id, name), parts in starts.items():
            old = initialized.get(topic_id, (name, frozenset()))[1]
            initialized[topic_id] = (name, old | frozenset(parts))
        self._write(g, [self._partition_metadata_record(group_id, initialized)])
        g.initialized = initialized
        self.groups[group_id] = g
        return g

    def delete_offsets(self, group_id: str, topic_ids: set[uuid.UUID]) -> ShareGroup:
        """Kafka's DeleteShareGroupOffsets: the topics' share-partition states are forgotten by an
        empty share group (GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP otherwise)."""
        g = self.groups.get(group_id)
        if g is None:
            raise GroupError(ec.GROUP_ID_NOT_FOUND, f"Group {group_id} not found." if not self._other_group_exists(
                group_id) else f"Group {group_id} is not a share group.")
        if g.members:
            raise GroupError(ec.NON_EMPTY_GROUP, "The group is not empty.")
        initialized = {t: v for t, v in g.initialized.items() if t not in topic_ids}
        self._write(g, [self._partition_metadata_record(group_id, initialized)])
        g.initialized = initialized
        return g
