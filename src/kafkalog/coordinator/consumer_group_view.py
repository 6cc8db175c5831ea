"""A consumer group (KIP-848) as its records in ``__consumer_offsets`` describe it, for the readers
that do not run the protocol (``kafkalog groups``, the embedded client's offsets store): its epochs,
state (Kafka's: Empty, Assigning, Reconciling, Stable) and members with what each owns."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import NamedTuple

from kafkalog.coordinator.consumer_group_records import (
    ConsumerGroupKey,
    CurrentMemberAssignmentValue,
    GroupEpochValue,
    MemberMetadataValue,
    TargetAssignmentMetadataValue,
    Value,
)

#: Kafka's MemberState.STABLE
_STABLE = 0


class ConsumerGroupMemberView(NamedTuple):
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    member_epoch: int
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    #: topic id -> partitions (assigned and pending revocation)
    assignment: dict[uuid.UUID, tuple[int, ...]]
    #: the member uses the classic protocol (a classic consumer in a consumer group)
    classic: bool
    session_timeout_ms: int | None


class ConsumerGroupView(NamedTuple):
    group_id: str
    state: str
    group_epoch: int
    assignment_epoch: int
    members: tuple[ConsumerGroupMemberView, ...]


def consumer_group_view(group_id: str, records: Mapping[bytes, tuple[ConsumerGroupKey, Value]]) -> ConsumerGroupView:
    """The group of its live records (the last value of each key)."""
    epoch, assignment_epoch = 0, 0
    metadata: dict[str, MemberMetadataValue] = {}
    current: dict[str, CurrentMemberAssignmentValue] = {}
    for key, value in records.values():
        if isinstance(value, GroupEpochValue):
            epoch = value.epoch
        elif isinstance(value, TargetAssignmentMetadataValue):
            assignment_epoch = value.assignment_epoch
        elif isinstance(value, MemberMetadataValue):
            metadata[key.member_id] = value
        elif isinstance(value, CurrentMemberAssignmentValue):
            current[key.member_id] = value
    members = []
    reconciled = True
    for mid, md in metadata.items():
        cur = current.get(mid)
        owned: dict[uuid.UUID, set[int]] = {}
        if cur is not None:
            for t, ps, _e in cur.assigned + cur.pending_revocation:
                owned.setdefault(t, set()).update(ps)
        member_epoch = cur.member_epoch if cur is not None else 0
        if cur is None or cur.state != _STABLE or member_epoch != assignment_epoch:
            reconciled = False
        c = md.classic_member_metadata
        members.append(ConsumerGroupMemberView(
            mid, md.instance_id, md.client_id, md.client_host, member_epoch, md.subscribed_topic_names,
            md.subscribed_topic_regex, md.rebalance_timeout_ms, {t: tuple(sorted(p)) for t, p in owned.items()},
            c is not None, None if c is None else c.session_timeout_ms))
    if not members:
        state = "Empty"
    elif epoch > assignment_epoch:
        state = "Assigning"
    elif not reconciled:
        state = "Reconciling"
    else:
        state = "Stable"
    return ConsumerGroupView(group_id, state, epoch, assignment_epoch, tuple(members))
