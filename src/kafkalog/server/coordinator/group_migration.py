"""Groups moving between the classic and the consumer protocol, as Kafka 4.4 moves them
(``group.consumer.migration.policy``: ``bidirectional`` by default, ``upgrade``, ``downgrade``,
``disabled``).

* An **empty** group changes type whenever a member of the other protocol joins, whatever the policy:
  a consumer member (ConsumerGroupHeartbeat epoch 0) replaces an empty classic group (its
  ``GroupMetadata`` record tombstoned), a classic JoinGroup replaces an empty consumer group (its
  consumer group records tombstoned). Committed offsets stay.
* **Upgrade**: a consumer member joining a non-empty classic group whose members use the ``consumer``
  embedded protocol converts it (policy ``upgrade``/``bidirectional``): the group epoch is the
  generation, every classic member becomes a member of the consumer group keeping its partitions
  (its subscription and assignment decoded), and the classic members go on through JoinGroup,
  SyncGroup, Heartbeat and LeaveGroup, answered by the consumer group (:meth:`GroupMigration.join`
  and the rest): their assignment is the broker's, REBALANCE_IN_PROGRESS tells them to rejoin when it
  changes, and their generation is their member epoch.
* **Downgrade**: when the last consumer-protocol member leaves a group whose other members all use
  the classic protocol (policy ``downgrade``/``bidirectional``), it becomes a classic group again
  (generation = group epoch, each member's target assignment as its classic assignment) and a
  rebalance starts.
"""

from __future__ import annotations

import dataclasses
import logging
import struct
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

from kafkalog.coordinator.consumer_group_records import ClassicMemberMetadata
from kafkalog.coordinator.group_metadata import (
    GroupMetadataKey,
    decode_consumer_assignment,
    decode_consumer_subscription,
    encode_group_metadata_value,
    encode_key,
)
from kafkalog.errors import KafkalogError
from kafkalog.server import error_codes as ec
from kafkalog.server.coordinator.classic_group import EMPTY, JoinResult, SyncResult
from kafkalog.server.coordinator.classic_group import Group as ClassicGroup
from kafkalog.server.coordinator.classic_group import Member as ClassicMember
from kafkalog.server.coordinator.consumer_group import (
    UNRELEASED_PARTITIONS,
    UNREVOKED_PARTITIONS,
    ConsumerGroup,
    Member,
    group_records,
    group_tombstones,
)
from kafkalog.server.coordinator.group import GroupError, ModernGroup, Record, TopicImage

if TYPE_CHECKING:
    from kafkalog.coordinator.offsets import OffsetsStore
    from kafkalog.server.coordinator.classic_group import GroupCoordinator
    from kafkalog.server.coordinator.consumer_group import ConsumerGroupCoordinator
    from kafkalog.server.topic_ids import TopicIds

logger = logging.getLogger("kafkalog.server")


def encode_consumer_assignment(version: int, partitions: Mapping[str, list[int]]) -> bytes:
    """Kafka's ``ConsumerProtocol.serializeAssignment`` (versions 0-3 share one layout), no user data."""
    out = bytearray(struct.pack(">hi", max(0, min(version, 3)), len(partitions)))
    for topic, parts in partitions.items():
        name = topic.encode("utf-8")
        out += struct.pack(">h", len(name)) + name + struct.pack(">i", len(parts))
        out += b"".join(struct.pack(">i", p) for p in parts)
    out += struct.pack(">i", -1)
    return bytes(out)


def _protocol_version(metadata: bytes) -> int:
    return struct.unpack_from(">h", metadata, 0)[0] if len(metadata) >= 2 else 0


class Coordinators(Protocol):
    """What a migration reads and writes: the broker's state (:class:`kafkalog.server.broker.Broker`)
    as far as groups go."""

    groups: GroupCoordinator
    consumer_groups: ConsumerGroupCoordinator
    offsets: OffsetsStore
    topic_ids: TopicIds

    def topic_images(self) -> Mapping[str, TopicImage]: ...


class GroupMigration:
    """Wires the classic coordinator (``broker.groups``) and the consumer one (``broker.consumer_groups``)."""

    def __init__(self, broker: Coordinators) -> None:
        self.broker = broker
        cg = broker.consumer_groups
        cg.classic_group_exists = self.classic_group_exists            # type: ignore[method-assign]
        cg.upgrade_classic_group = self.upgrade_classic_group          # type: ignore[method-assign]
        cg.downgrade_after_fence = self.downgrade_after_fence          # type: ignore[method-assign]

    @property
    def policy(self) -> str:
        return self.broker.consumer_groups.config.migration_policy

    # --- topic names <-> ids --------------------------------------------------------------------

    def _ids(self, assigned: list[tuple[str, tuple[int, ...]]]) -> dict[uuid.UUID, frozenset[int]]:
        image = self.broker.topic_images()
        return {image[t].topic_id: frozenset(ps) for t, ps in assigned if t in image and ps}

    def _names(self, assignment: Mapping[uuid.UUID, frozenset[int]]) -> dict[str, list[int]]:
        out = {}
        for topic_id, parts in assignment.items():
            name = self.broker.topic_ids.name_of(topic_id)
            if name is not None:
                out[name] = sorted(parts)
        return out

    # --- classic -> consumer --------------------------------------------------------------------

    def classic_group_exists(self, group_id: str) -> bool:
        return group_id in self.broker.groups.groups

    def upgrade_classic_group(self, group_id: str, records: list[Record]) -> ConsumerGroup:
        classic = self.broker.groups.groups[group_id]
        if not classic.members or classic.state == EMPTY:
            records.append((encode_key(GroupMetadataKey(group_id)), None))
            del self.broker.groups.groups[group_id]
            logger.info("group %s: converted the empty classic group to a consumer group", group_id)
            return ConsumerGroup(group_id)
        why = None
        if self.policy not in ("upgrade", "bidirectional"):
            why = "online upgrade is disabled"
        elif classic.protocol_type != "consumer":
            why = "the group does not use the consumer embedded protocol"
        elif len(classic.members) > self.broker.consumer_groups.config.max_size:
            why = "the group size exceeds the consumer group maximum size"
        if why is not None:
            raise GroupError(ec.GROUP_ID_NOT_FOUND, f"Cannot upgrade classic group {group_id} to consumer group "
                                                    f"because {why}.")
        try:
            g = self._from_classic(classic)
        except (KafkalogError, ValueError) as e:
            raise GroupError(ec.GROUP_ID_NOT_FOUND, f"Cannot upgrade classic group {group_id} to consumer group "
                                                    f"because {e}.") from None
        for m in classic.members.values():       # waiting JoinGroup/SyncGroup: rejoin
            if m.join_future is not None and not m.join_future.done():
                m.join_future.set_result(JoinResult(ec.REBALANCE_IN_PROGRESS, member_id=m.member_id))
            if m.sync_future is not None and not m.sync_future.done():
                m.sync_future.set_result(SyncResult(ec.REBALANCE_IN_PROGRESS))
        records.append((encode_key(GroupMetadataKey(group_id)), None))
        records += group_records(g)
        del self.broker.groups.groups[group_id]
        logger.info("group %s: converted the classic group to a consumer group", group_id)
        return g

    def _from_classic(self, classic: ClassicGroup) -> ConsumerGroup:
        """Kafka's ``ConsumerGroup.fromClassicGroup``."""
        g = ConsumerGroup(classic.group_id, group_epoch=classic.generation, assignment_epoch=classic.generation)
        now = self.broker.consumer_groups._clock()
        for cm in classic.members.values():
            if cm.assignment:
                a = decode_consumer_assignment(cm.assignment)
                if a.user_data:
                    raise ValueError("an unsupported custom assignor is in use (its user data would be lost)")
                assigned = self._ids(list(a.assigned_partitions))
            else:
                assigned = {}
            sub = decode_consumer_subscription(cm.metadata(classic.protocol))
            m = Member(cm.member_id, member_epoch=classic.generation, previous_member_epoch=classic.generation,
                       instance_id=cm.group_instance_id, rack_id=sub.rack_id,
                       rebalance_timeout_ms=cm.rebalance_timeout_ms, client_id=cm.client_id,
                       client_host=cm.client_host, subscribed_topic_names=frozenset(sub.topics),
                       assigned={t: dict.fromkeys(ps, classic.generation) for t, ps in assigned.items()},
                       classic=ClassicMemberMetadata(cm.session_timeout_ms, tuple(cm.protocols)))
            g.members[m.member_id] = m
            g.target[m.member_id] = assigned
            g.session_deadline[m.member_id] = now + cm.session_timeout_ms
        image = self.broker.topic_images()
        names = set().union(*(m.subscribed_topic_names for m in g.members.values()))
        g.metadata_hash = ModernGroup.compute_metadata_hash(names, image)
        g.metadata_expired = False
        return g

    # --- classic members in a consumer group ----------------------------------------------------

    def join(self, group_id: str, member_id: str, instance_id: str | None, client_id: str, client_host: str,
             session_timeout_ms: int, rebalance_timeout_ms: int, protocol_type: str,
             protocols: list[tuple[str, bytes]], require_known_member_id: bool) -> JoinResult:
        """Kafka's ``classicGroupJoinToConsumerGroup``: answered at once (no waiting)."""
        cgc = self.broker.consumer_groups
        g = cgc.groups[group_id]
        try:
            if self.policy == "disabled":
                raise GroupError(ec.INCONSISTENT_GROUP_PROTOCOL)
            unknown = member_id == ""
            if unknown:
                member_id = str(uuid.uuid4())
            cgc._check_full(g, member_id, instance_id)
            names = {n for n, _ in protocols}
            classic = [m for m in g.members.values() if m.uses_classic_protocol]
            if protocol_type != "consumer" or not names or (classic and not any(
                    all(n in {p for p, _ in m.classic.supported_protocols} for m in classic if m.classic)
                    for n in names)):
                raise GroupError(ec.INCONSISTENT_GROUP_PROTOCOL)
            if require_known_member_id and unknown and instance_id is None:
                return JoinResult(ec.MEMBER_ID_REQUIRED, member_id=member_id)
            records: list[Record] = []
            if instance_id is None:
                member = g.members.get(member_id)
                if member is None:
                    member = Member(member_id)
            else:
                existing = g.static_member(instance_id)
                if existing is None:
                    member = g.members.get(member_id) or Member(member_id)
                elif unknown:
                    member = dataclasses.replace(existing, member_id=member_id, member_epoch=0,
                                                 previous_member_epoch=0)
                    cgc._replace_member(g, existing, member, records)
                else:
                    if existing.member_id != member_id:
                        raise GroupError(ec.FENCED_INSTANCE_ID)
                    member = existing
            try:
                sub = decode_consumer_subscription(protocols[0][1])
            except KafkalogError:
                raise GroupError(ec.INCONSISTENT_GROUP_PROTOCOL) from None
            owned = [(t, list(ps)) for t, ps in self._ids(list(sub.owned_partitions)).items()]
            updated = dataclasses.replace(
                member, instance_id=instance_id if instance_id is not None else member.instance_id,
                rack_id=sub.rack_id if sub.rack_id is not None else member.rack_id,
                rebalance_timeout_ms=rebalance_timeout_ms, subscribed_topic_names=frozenset(sub.topics),
                subscribed_topic_regex="", client_id=client_id, client_host=client_host,
                classic=ClassicMemberMetadata(session_timeout_ms, tuple(protocols)))
            result = cgc.classic_member_join(g, member, updated, owned, records)
        except GroupError as e:
            return JoinResult(e.code, member_id=member_id)
        g.session_deadline[result.member_id] = cgc._clock() + session_timeout_ms
        assert result.classic is not None
        logger.info("group %s: classic member %s joined the consumer group at epoch %d", group_id,
                    result.member_id, result.member_epoch)
        return JoinResult(ec.NONE, result.member_epoch, "consumer", result.classic.supported_protocols[0][0],
                          "", result.member_id)

    def _classic_member(self, g: ConsumerGroup, member_id: str, instance_id: str | None) -> Member:
        if instance_id is None:
            m = g.members.get(member_id)
            if m is None:
                raise GroupError(ec.UNKNOWN_MEMBER_ID)
        else:
            m = g.static_member(instance_id)
            if m is None:
                raise GroupError(ec.UNKNOWN_MEMBER_ID)
            if m.member_id != member_id:
                raise GroupError(ec.FENCED_INSTANCE_ID)
        if not m.uses_classic_protocol:
            raise GroupError(ec.UNKNOWN_MEMBER_ID)
        return m

    def sync(self, group_id: str, generation: int, member_id: str, instance_id: str | None,
             protocol_type: str | None, protocol_name: str | None) -> SyncResult:
        g = self.broker.consumer_groups.groups[group_id]
        try:
            m = self._classic_member(g, member_id, instance_id)
            if generation != m.member_epoch:
                raise GroupError(ec.ILLEGAL_GENERATION)
            assert m.classic is not None
            name, metadata = m.classic.supported_protocols[0]
            if (protocol_type is not None and protocol_type != "consumer") or \
                    (protocol_name is not None and protocol_name != name):
                raise GroupError(ec.INCONSISTENT_GROUP_PROTOCOL)
            if g.assignment_epoch > m.member_epoch and m.state != UNREVOKED_PARTITIONS:
                raise GroupError(ec.REBALANCE_IN_PROGRESS)
        except GroupError as e:
            return SyncResult(e.code)
        g.session_deadline[m.member_id] = self.broker.consumer_groups._clock() + m.classic.session_timeout_ms
        assignment = encode_consumer_assignment(_protocol_version(metadata), self._names(m.assigned_partitions()))
        return SyncResult(ec.NONE, protocol_type, protocol_name, assignment)

    def heartbeat(self, group_id: str, generation: int, member_id: str, instance_id: str | None) -> int:
        g = self.broker.consumer_groups.groups[group_id]
        try:
            m = self._classic_member(g, member_id, instance_id)
            if generation != m.member_epoch:
                raise GroupError(ec.ILLEGAL_GENERATION)
        except GroupError as e:
            return e.code
        assert m.classic is not None
        g.session_deadline[m.member_id] = self.broker.consumer_groups._clock() + m.classic.session_timeout_ms
        waiting = m.state == UNRELEASED_PARTITIONS and any(
            p not in m.assigned.get(t, {}) and g.current_partition_epoch(t, p, exclude=m.member_id) != -1
            for t, ps in g.target.get(m.member_id, {}).items() for p in ps)
        if m.member_epoch < g.assignment_epoch or m.state == UNREVOKED_PARTITIONS or \
                (m.state == UNRELEASED_PARTITIONS and not waiting):
            return ec.REBALANCE_IN_PROGRESS
        return ec.NONE

    def leave(self, group_id: str, members: list[tuple[str, str | None]]) -> list[int]:
        cgc = self.broker.consumer_groups
        g = cgc.groups[group_id]
        out, leaving = [], []
        for member_id, instance_id in members:
            if instance_id is None:
                m = g.members.get(member_id)
                code = ec.UNKNOWN_MEMBER_ID if m is None else ec.NONE
            else:
                m = g.static_member(instance_id)
                if m is None:
                    code = ec.UNKNOWN_MEMBER_ID
                elif member_id and m.member_id != member_id:
                    code, m = ec.FENCED_INSTANCE_ID, None
                else:
                    code = ec.NONE
            out.append(code)
            if m is not None and m not in leaving:
                leaving.append(m)
        cgc.fence(g, leaving)
        return out

    # --- consumer -> classic --------------------------------------------------------------------

    def take_over_empty_consumer_group(self, group_id: str) -> None:
        """A classic JoinGroup for an empty consumer group: the consumer group is removed."""
        cg = self.broker.consumer_groups
        g = cg.groups.get(group_id)
        if g is None or g.members:
            return
        self.broker.offsets.store_records(group_id, cg.remove_empty(group_id))
        logger.info("group %s: converted the empty consumer group to a classic group", group_id)

    def downgrade_after_fence(self, g: ConsumerGroup, members: list[Member]) -> bool:
        """Kafka's ``validateOnlineDowngradeWithFencedMembers`` then ``convertToClassicGroup``."""
        gone = {m.member_id for m in members}
        remaining = [m for m in g.members.values() if m.member_id not in gone]
        if not remaining or not all(m.uses_classic_protocol for m in remaining):
            return False
        if self.policy not in ("downgrade", "bidirectional"):
            logger.info("group %s: cannot downgrade to a classic group: online downgrade is disabled", g.group_id)
            return False
        if len(remaining) > self.broker.consumer_groups.config.classic_max_size:
            return False
        coordinator = self.broker.groups
        now = coordinator._clock()
        classic = ClassicGroup(g.group_id, generation=g.group_epoch, protocol_type="consumer",
                               state_timestamp=coordinator._wall())
        for m in remaining:
            assert m.classic is not None
            classic.members[m.member_id] = ClassicMember(
                m.member_id, m.instance_id, m.client_id, m.client_host, m.classic.session_timeout_ms,
                m.rebalance_timeout_ms, "consumer", list(m.classic.supported_protocols), last_heartbeat=now)
            if m.instance_id is not None:
                classic.static[m.instance_id] = m.member_id
        classic.protocol = coordinator._select_protocol(classic)
        classic.state = "Stable"
        for m in remaining:
            metadata = classic.members[m.member_id].metadata(classic.protocol)
            classic.members[m.member_id].assignment = encode_consumer_assignment(
                _protocol_version(metadata), self._names(g.target.get(m.member_id, {})))
        records = group_tombstones(g)
        records.append((encode_key(GroupMetadataKey(g.group_id)),
                        encode_group_metadata_value(coordinator.metadata_value(classic))))
        self.broker.offsets.store_records(g.group_id, records)
        del self.broker.consumer_groups.groups[g.group_id]
        coordinator.groups[g.group_id] = classic
        coordinator._prepare_rebalance(classic, now)
        logger.info("group %s: converted the consumer group to a classic group (its last consumer member left)",
                    g.group_id)
        return True

