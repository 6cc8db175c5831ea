"""The records a share group (KIP-932) keeps in ``__consumer_offsets``, in Kafka 4.4's own formats
(``group-coordinator/src/main/resources/common/message``), encoded and decoded both ways.

Keys (an int16 record type, then the key struct, not flexible): 10 ``ShareGroupMemberMetadataKey``
(group, member), 11 ``ShareGroupMetadataKey`` (group), 12 ``ShareGroupTargetAssignmentMetadataKey``
(group), 13 ``ShareGroupTargetAssignmentMemberKey`` (group, member), 14
``ShareGroupCurrentMemberAssignmentKey`` (group, member), 15 ``ShareGroupStatePartitionMetadataKey``
(group). Values: an int16 version (0), then a flexible struct:

* 10: rack id (nullable), client id, client host, subscribed topic names;
* 11: group epoch, metadata hash (int64);
* 12: assignment epoch, tagged 0 assignment timestamp (when not 0);
* 13: the member's target partitions, ``[(topic id, [partition])]``;
* 14: member epoch, previous member epoch, state (int8), the assigned partitions;
* 15: the topics whose share-partition state is initializing, initialized (``[(topic id, name,
  [partition])]``) and being deleted (``[(topic id, name)]``): which share partitions the share
  coordinator holds a state for.

A null value is a tombstone.
"""

from __future__ import annotations

import struct
import uuid
from typing import NamedTuple, Union

from kafkalog.coordinator.consumer_group_records import (
    TopicPartitions,
    _i8,
    _ints,
    _key_bytes,
    _read_ints,
    _read_strings,
    _read_topic_partitions,
    _read_uuid,
    _strings,
    _tagged,
    _uuid,
    _value_reader,
    _write_topic_partitions,
)
from kafkalog.coordinator.group_metadata import _Reader, _Writer

__all__ = [
    "SHARE_GROUP_RECORD_TYPES",
    "ShareGroupKey",
    "ShareCurrentAssignmentValue",
    "ShareGroupEpochValue",
    "ShareMemberMetadataValue",
    "ShareStatePartitionMetadataValue",
    "ShareTargetAssignmentMemberValue",
    "ShareTargetAssignmentMetadataValue",
    "decode_record",
    "encode_key",
    "encode_value",
]

MEMBER_METADATA = 10
GROUP_EPOCH = 11
TARGET_ASSIGNMENT_METADATA = 12
TARGET_ASSIGNMENT_MEMBER = 13
CURRENT_MEMBER_ASSIGNMENT = 14
STATE_PARTITION_METADATA = 15

SHARE_GROUP_RECORD_TYPES = {
    MEMBER_METADATA: "ShareGroupMemberMetadata",
    GROUP_EPOCH: "ShareGroupMetadata",
    TARGET_ASSIGNMENT_METADATA: "ShareGroupTargetAssignmentMetadata",
    TARGET_ASSIGNMENT_MEMBER: "ShareGroupTargetAssignmentMember",
    CURRENT_MEMBER_ASSIGNMENT: "ShareGroupCurrentMemberAssignment",
    STATE_PARTITION_METADATA: "ShareGroupStatePartitionMetadata",
}
_MEMBER_KEYED = frozenset({MEMBER_METADATA, TARGET_ASSIGNMENT_MEMBER, CURRENT_MEMBER_ASSIGNMENT})

NamedTopicPartitions = tuple[tuple[uuid.UUID, str, tuple[int, ...]], ...]


class ShareGroupKey(NamedTuple):
    record_type: int
    group_id: str
    member_id: str = ""


class ShareMemberMetadataValue(NamedTuple):
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]


class ShareGroupEpochValue(NamedTuple):
    epoch: int
    metadata_hash: int


class ShareTargetAssignmentMetadataValue(NamedTuple):
    assignment_epoch: int
    assignment_timestamp: int = 0


class ShareTargetAssignmentMemberValue(NamedTuple):
    partitions: TopicPartitions


class ShareCurrentAssignmentValue(NamedTuple):
    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned: TopicPartitions


class ShareStatePartitionMetadataValue(NamedTuple):
    initializing: NamedTopicPartitions
    initialized: NamedTopicPartitions
    deleting: tuple[tuple[uuid.UUID, str], ...]


Value = Union[ShareMemberMetadataValue, ShareGroupEpochValue, ShareTargetAssignmentMetadataValue,
              ShareTargetAssignmentMemberValue, ShareCurrentAssignmentValue, ShareStatePartitionMetadataValue]


def encode_key(key: ShareGroupKey) -> bytes:
    return _key_bytes(key.record_type, key.group_id, key.member_id if key.record_type in _MEMBER_KEYED else None)


def decode_key(buf: bytes) -> ShareGroupKey | None:
    r = _Reader(buf, "__consumer_offsets key")
    record_type = r.i16("key version")
    if record_type not in SHARE_GROUP_RECORD_TYPES:
        return None
    group = str(r.string("group_id"))
    member = str(r.string("member_id")) if record_type in _MEMBER_KEYED else ""
    r.done()
    return ShareGroupKey(record_type, group, member)


def _named(w: _Writer, topics: NamedTopicPartitions) -> None:
    w.array_len(len(topics))
    for topic_id, name, parts in topics:
        _uuid(w, topic_id)
        w.string(name)
        _ints(w, parts)
        w.tags()


def encode_value(value: Value) -> bytes:
    """The record value (version 0) as Kafka 4.4 writes it."""
    w = _Writer(True)
    w.i16(0)
    if isinstance(value, ShareMemberMetadataValue):
        w.string(value.rack_id, nullable=True)
        w.string(value.client_id)
        w.string(value.client_host)
        _strings(w, value.subscribed_topic_names)
        w.tags()
    elif isinstance(value, ShareGroupEpochValue):
        w.i32(value.epoch)
        w.i64(value.metadata_hash)
        w.tags()
    elif isinstance(value, ShareTargetAssignmentMetadataValue):
        w.i32(value.assignment_epoch)
        _tagged(w, [(0, struct.pack(">q", value.assignment_timestamp))] if value.assignment_timestamp else [])
    elif isinstance(value, ShareTargetAssignmentMemberValue):
        _write_topic_partitions(w, value.partitions)
        w.tags()
    elif isinstance(value, ShareCurrentAssignmentValue):
        w.i32(value.member_epoch)
        w.i32(value.previous_member_epoch)
        w.out += struct.pack(">b", value.state)
        _write_topic_partitions(w, value.assigned)
        w.tags()
    elif isinstance(value, ShareStatePartitionMetadataValue):
        _named(w, value.initializing)
        _named(w, value.initialized)
        w.array_len(len(value.deleting))
        for topic_id, name in value.deleting:
            _uuid(w, topic_id)
            w.string(name)
            w.tags()
        w.tags()
    else:   # pragma: no cover - the union is closed
        raise TypeError(f"not a share group record value: {value!r}")
    return bytes(w.out)


def _read_named(r: _Reader, field: str) -> NamedTopicPartitions:
    out = []
    for _ in range(r.array_len(field)):
        topic_id = _read_uuid(r, "topic_id")
        name = str(r.string("topic_name"))
        parts = _read_ints(r, "partitions")
        r.tags()
        out.append((topic_id, name, parts))
    return tuple(out)


def decode_value(record_type: int, buf: bytes) -> Value:
    what = SHARE_GROUP_RECORD_TYPES[record_type] + "Value"
    r = _value_reader(what, buf)
    out: Value
    if record_type == MEMBER_METADATA:
        out = ShareMemberMetadataValue(r.string("rack_id", nullable=True), str(r.string("client_id")),
                                       str(r.string("client_host")), _read_strings(r, "subscribed_topic_names"))
        r.tags()
    elif record_type == GROUP_EPOCH:
        out = ShareGroupEpochValue(r.i32("epoch"), r.i64("metadata_hash"))
        r.tags()
    elif record_type == TARGET_ASSIGNMENT_METADATA:
        epoch = r.i32("assignment_epoch")
        tags = r.tags()
        ts = struct.unpack(">q", tags[0])[0] if len(tags.get(0, b"")) == 8 else 0
        out = ShareTargetAssignmentMetadataValue(epoch, ts)
    elif record_type == TARGET_ASSIGNMENT_MEMBER:
        out = ShareTargetAssignmentMemberValue(_read_topic_partitions(r, "topic_partitions"))
        r.tags()
    elif record_type == CURRENT_MEMBER_ASSIGNMENT:
        epoch, previous = r.i32("member_epoch"), r.i32("previous_member_epoch")
        state = _i8(r, "state")
        out = ShareCurrentAssignmentValue(epoch, previous, state, _read_topic_partitions(r, "assigned_partitions"))
        r.tags()
    else:
        initializing = _read_named(r, "initializing_topics")
        initialized = _read_named(r, "initialized_topics")
        deleting = []
        for _ in range(r.array_len("deleting_topics")):
            topic_id = _read_uuid(r, "topic_id")
            deleting.append((topic_id, str(r.string("topic_name"))))
            r.tags()
        r.tags()
        out = ShareStatePartitionMetadataValue(initializing, initialized, tuple(deleting))
    return out


def decode_record(key: bytes, value: bytes | None) -> tuple[ShareGroupKey, Value | None] | None:
    """A share group record (None for other record types; value None for a tombstone)."""
    k = decode_key(key)
    if k is None:
        return None
    return k, None if value is None else decode_value(k.record_type, value)
