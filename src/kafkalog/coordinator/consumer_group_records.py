"""The records the consumer group protocol (KIP-848) keeps in ``__consumer_offsets``, in Kafka 4.4's own
formats (``group-coordinator/src/main/resources/common/message``), encoded and decoded both ways.

A key is a big-endian int16 *record type* followed by the key struct (plain, not flexible: int16-length
strings): 3 ``ConsumerGroupMetadataKey`` (group), 4 ``ConsumerGroupPartitionMetadataKey`` (group; Kafka
4.4 only writes its tombstone), 5 ``ConsumerGroupMemberMetadataKey`` (group, member), 6
``ConsumerGroupTargetAssignmentMetadataKey`` (group), 7 ``ConsumerGroupTargetAssignmentMemberKey``
(group, member), 8 ``ConsumerGroupCurrentMemberAssignmentKey`` (group, member), 16
``ConsumerGroupRegularExpressionKey`` (group, regular expression). A value is an int16 version (0)
followed by a *flexible* struct: compact strings and arrays (unsigned varint length + 1), a tagged
field section after each struct, where Kafka writes a tagged field only when it differs from its
default (the metadata hash and the assignment timestamp when not 0, the assignment epochs of a
partition list when set), except the member's classic metadata, which Kafka's broker always writes (a
null one as the single byte 0). A null value is a tombstone.

:func:`decode_record` turns a ``(key, value)`` pair into ``(ConsumerGroupKey, value or None)``, None for
the record types of other groups (classic offsets and metadata, share and streams groups);
:func:`encode_key` / :func:`encode_value` write them back byte for byte as Kafka does.
"""

from __future__ import annotations

import struct
import uuid
from typing import NamedTuple

from kafkalog.coordinator.group_metadata import _Reader, _Writer
from kafkalog.errors import InvalidRecordError
from kafkalog.record.varint import write_unsigned_varint

__all__ = [
    "CONSUMER_GROUP_RECORD_TYPES",
    "ClassicMemberMetadata",
    "ConsumerGroupKey",
    "CurrentMemberAssignmentValue",
    "GroupEpochValue",
    "MemberMetadataValue",
    "PartitionMetadataValue",
    "RegularExpressionValue",
    "TargetAssignmentMemberValue",
    "TargetAssignmentMetadataValue",
    "decode_record",
    "encode_key",
    "encode_value",
]

GROUP_EPOCH = 3                 # ConsumerGroupMetadata
PARTITION_METADATA = 4          # ConsumerGroupPartitionMetadata (tombstones only since Kafka 4.1)
MEMBER_METADATA = 5             # ConsumerGroupMemberMetadata
TARGET_ASSIGNMENT_METADATA = 6  # ConsumerGroupTargetAssignmentMetadata
TARGET_ASSIGNMENT_MEMBER = 7    # ConsumerGroupTargetAssignmentMember
CURRENT_MEMBER_ASSIGNMENT = 8   # ConsumerGroupCurrentMemberAssignment
REGULAR_EXPRESSION = 16         # ConsumerGroupRegularExpression

#: record type -> Kafka's name of the key and value (what DumpLogSegments prints)
CONSUMER_GROUP_RECORD_TYPES: dict[int, str] = {
    GROUP_EPOCH: "ConsumerGroupMetadata",
    PARTITION_METADATA: "ConsumerGroupPartitionMetadata",
    MEMBER_METADATA: "ConsumerGroupMemberMetadata",
    TARGET_ASSIGNMENT_METADATA: "ConsumerGroupTargetAssignmentMetadata",
    TARGET_ASSIGNMENT_MEMBER: "ConsumerGroupTargetAssignmentMember",
    CURRENT_MEMBER_ASSIGNMENT: "ConsumerGroupCurrentMemberAssignment",
    REGULAR_EXPRESSION: "ConsumerGroupRegularExpression",
}
_MEMBER_KEYED = frozenset({MEMBER_METADATA, TARGET_ASSIGNMENT_MEMBER, CURRENT_MEMBER_ASSIGNMENT})

#: (topic id, partitions) of a target assignment, as the records of every modern group hold it
TopicPartitions = tuple[tuple[uuid.UUID, tuple[int, ...]], ...]


class ConsumerGroupKey(NamedTuple):
    """A key of the consumer group records: ``member_id`` for the member-keyed types, ``regex`` for
    type 16, else empty."""

    record_type: int
    group_id: str
    member_id: str = ""
    regex: str = ""

    @property
    def name(self) -> str:
        return CONSUMER_GROUP_RECORD_TYPES[self.record_type]


class GroupEpochValue(NamedTuple):
    epoch: int
    metadata_hash: int = 0


class ClassicMemberMetadata(NamedTuple):
    session_timeout_ms: int
    supported_protocols: tuple[tuple[str, bytes], ...]


class MemberMetadataValue(NamedTuple):
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None
    classic_member_metadata: ClassicMemberMetadata | None = None


class TargetAssignmentMetadataValue(NamedTuple):
    assignment_epoch: int
    assignment_timestamp: int = 0


class TargetAssignmentMemberValue(NamedTuple):
    partitions: TopicPartitions


class CurrentMemberAssignmentValue(NamedTuple):
    member_epoch: int
    previous_member_epoch: int
    state: int
    #: (topic id, partitions, assignment epochs or None)
    assigned: tuple[tuple[uuid.UUID, tuple[int, ...], tuple[int, ...] | None], ...]
    pending_revocation: tuple[tuple[uuid.UUID, tuple[int, ...], tuple[int, ...] | None], ...]


class RegularExpressionValue(NamedTuple):
    topics: tuple[str, ...]
    version: int
    timestamp: int


class PartitionMetadataValue(NamedTuple):
    #: (topic id, name, partition count, ((partition, racks), ...))
    topics: tuple[tuple[uuid.UUID, str, int, tuple[tuple[int, tuple[str, ...]], ...]], ...]


Value = (GroupEpochValue | MemberMetadataValue | TargetAssignmentMetadataValue | TargetAssignmentMemberValue
         | CurrentMemberAssignmentValue | RegularExpressionValue | PartitionMetadataValue)


# --- keys -------------------------------------------------------------------------------------------

def _key_bytes(record_type: int, group_id: str, second: str | None = None) -> bytes:
    """A modern group record's key: its type, the group id and (member or regex keyed) a second
    string; the share and streams groups' keys are written the same way."""
    w = _Writer(False)
    w.i16(record_type)
    w.string(group_id)
    if second is not None:
        w.string(second)
    return bytes(w.out)


def _value_reader(what: str, buf: bytes, version_field: str = "value version") -> _Reader:
    """A reader of a flexible record value past its version, which must be 0 (an unknown version
    is an error naming the record)."""
    r = _Reader(buf, what, flexible=True)
    version = r.i16(version_field)
    if version != 0:
        raise InvalidRecordError(f"{what}: unknown version {version}", position=0)
    return r


def encode_key(key: ConsumerGroupKey) -> bytes:
    t = key.record_type
    return _key_bytes(t, key.group_id, key.member_id if t in _MEMBER_KEYED else
                      key.regex if t == REGULAR_EXPRESSION else None)


def decode_key(buf: bytes) -> ConsumerGroupKey | None:
    """The key of a consumer group record, None for another record type."""
    r = _Reader(buf, "__consumer_offsets key")
    record_type = r.i16("key version")
    if record_type not in CONSUMER_GROUP_RECORD_TYPES:
        return None
    group = str(r.string("group_id"))
    member = str(r.string("member_id")) if record_type in _MEMBER_KEYED else ""
    regex = str(r.string("regular_expression")) if record_type == REGULAR_EXPRESSION else ""
    r.done()
    return ConsumerGroupKey(record_type, group, member, regex)


# --- flexible value helpers -------------------------------------------------------------------------

def _uuid(w: _Writer, u: uuid.UUID) -> None:
    w.out += u.bytes


def _read_uuid(r: _Reader, field: str) -> uuid.UUID:
    r._need(16, field)
    u = uuid.UUID(bytes=bytes(r.buf[r.pos:r.pos + 16]))
    r.pos += 16
    return u


def _i8(r: _Reader, field: str) -> int:
    return r._fixed(">b", 1, field)


def _tagged(w: _Writer, fields: list[tuple[int, bytes]]) -> None:
    w.out += write_unsigned_varint(len(fields))
    for tag, data in fields:
        w.out += write_unsigned_varint(tag) + write_unsigned_varint(len(data)) + data



def _strings(w: _Writer, items: tuple[str, ...] | list[str]) -> None:
    w.array_len(len(items))
    for s in items:
        w.string(s)


def _read_strings(r: _Reader, field: str) -> tuple[str, ...]:
    return tuple(str(r.string(field)) for _ in range(r.array_len(field)))


def _ints(w: _Writer, items: tuple[int, ...] | list[int]) -> None:
    w.array_len(len(items))
    for i in items:
        w.i32(i)


def _read_ints(r: _Reader, field: str) -> tuple[int, ...]:
    return tuple(r.i32(field) for _ in range(r.array_len(field)))


def _sub(what: str, data: bytes) -> _Reader:
    return _Reader(data, what, flexible=True)


def _write_topic_partitions(w: _Writer, topics: TopicPartitions) -> None:
    w.array_len(len(topics))
    for topic_id, parts in topics:
        _uuid(w, topic_id)
        _ints(w, parts)
        w.tags()


def _read_topic_partitions(r: _Reader, field: str) -> TopicPartitions:
    out = []
    for _ in range(r.array_len(field)):
        topic_id = _read_uuid(r, "topic_id")
        parts = _read_ints(r, "partitions")
        r.tags()
        out.append((topic_id, parts))
    return tuple(out)


# --- values -----------------------------------------------------------------------------------------

def encode_value(value: Value) -> bytes:
    """The record value (version 0) as Kafka 4.4 writes it."""
    w = _Writer(True)
    w.i16(0)
    if isinstance(value, GroupEpochValue):
        w.i32(value.epoch)
        _tagged(w, [(0, struct.pack(">q", value.metadata_hash))] if value.metadata_hash else [])
    elif isinstance(value, TargetAssignmentMetadataValue):
        w.i32(value.assignment_epoch)
        _tagged(w, [(0, struct.pack(">q", value.assignment_timestamp))] if value.assignment_timestamp else [])
    elif isinstance(value, MemberMetadataValue):
        w.string(value.instance_id, nullable=True)
        w.string(value.rack_id, nullable=True)
        w.string(value.client_id)
        w.string(value.client_host)
        _strings(w, value.subscribed_topic_names)
        w.string(value.subscribed_topic_regex, nullable=True)
        w.i32(value.rebalance_timeout_ms)
        w.string(value.server_assignor, nullable=True)
        # Kafka's broker writes the classic member metadata always: a null one as one byte 0
        c = _Writer(True)
        if value.classic_member_metadata is None:
            c.out += b"\x00"
        else:
            c.out += b"\x01"          # a nullable struct: present
            c.i32(value.classic_member_metadata.session_timeout_ms)
            c.array_len(len(value.classic_member_metadata.supported_protocols))
            for name, meta in value.classic_member_metadata.supported_protocols:
                c.string(name)
                c.bytes_(meta)
                c.tags()
            c.tags()
        tags = [(0, bytes(c.out))]
        _tagged(w, tags)
    elif isinstance(value, TargetAssignmentMemberValue):
        _write_topic_partitions(w, value.partitions)
        w.tags()
    elif isinstance(value, CurrentMemberAssignmentValue):
        w.i32(value.member_epoch)
        w.i32(value.previous_member_epoch)
        w.out += struct.pack(">b", value.state)
        for topics in (value.assigned, value.pending_revocation):
            w.array_len(len(topics))
            for topic_id, parts, epochs in topics:
                _uuid(w, topic_id)
                _ints(w, parts)
                if epochs is None:
                    w.tags()
                else:
                    e = _Writer(True)
                    _ints(e, epochs)
                    _tagged(w, [(0, bytes(e.out))])
        w.tags()
    elif isinstance(value, RegularExpressionValue):
        _strings(w, value.topics)
        w.i64(value.version)
        w.i64(value.timestamp)
        w.tags()
    elif isinstance(value, PartitionMetadataValue):
        w.array_len(len(value.topics))
        for topic_id, name, count, racked in value.topics:
            _uuid(w, topic_id)
            w.string(name)
            w.i32(count)
            w.array_len(len(racked))
            for index, racks in racked:
                w.i32(index)
                _strings(w, racks)
                w.tags()
            w.tags()
        w.tags()
    else:   # pragma: no cover - the union is closed
        raise TypeError(f"not a consumer group record value: {value!r}")
    return bytes(w.out)


def _assigned_partitions(r: _Reader, field: str
                         ) -> tuple[tuple[uuid.UUID, tuple[int, ...], tuple[int, ...] | None], ...]:
    """A current assignment's partitions by topic, each with its assignment epochs (a tagged field)."""
    out = []
    for _ in range(r.array_len(field)):
        topic_id = _read_uuid(r, "topic_id")
        parts = _read_ints(r, "partitions")
        epochs = None
        tags = r.tags()
        if 0 in tags:
            er = _sub("assignment_epochs", tags[0])
            epochs = _read_ints(er, "assignment_epochs")
        out.append((topic_id, parts, epochs))
    return tuple(out)


def decode_value(record_type: int, buf: bytes) -> Value:
    """The value of a record of ``record_type`` (version 0; an unknown version is an error naming it)."""
    what = CONSUMER_GROUP_RECORD_TYPES[record_type] + "Value"
    r = _value_reader(what, buf)
    out: Value
    if record_type == GROUP_EPOCH:
        epoch = r.i32("epoch")
        tags = r.tags()
        out = GroupEpochValue(epoch, _sub(what, tags[0]).i64("metadata_hash") if 0 in tags else 0)
    elif record_type == TARGET_ASSIGNMENT_METADATA:
        epoch = r.i32("assignment_epoch")
        tags = r.tags()
        out = TargetAssignmentMetadataValue(
            epoch, _sub(what, tags[0]).i64("assignment_timestamp") if 0 in tags else 0)
    elif record_type == MEMBER_METADATA:
        instance = r.string("instance_id", nullable=True)
        rack = r.string("rack_id", nullable=True)
        client_id = str(r.string("client_id"))
        client_host = str(r.string("client_host"))
        topics = _read_strings(r, "subscribed_topic_names")
        regex = r.string("subscribed_topic_regex", nullable=True)
        rebalance = r.i32("rebalance_timeout_ms")
        assignor = r.string("server_assignor", nullable=True)
        tags = r.tags()
        classic = None
        if 0 in tags:
            c = _sub("classic_member_metadata", tags[0])
            if _i8(c, "classic_member_metadata presence") > 0:
                session = c.i32("session_timeout_ms")
                protocols = []
                for _ in range(c.array_len("supported_protocols")):
                    name = str(c.string("name"))
                    protocols.append((name, c.bytes_("metadata")))
                    c.tags()
                c.tags()
                classic = ClassicMemberMetadata(session, tuple(protocols))
        out = MemberMetadataValue(instance, rack, client_id, client_host, topics, regex, rebalance, assignor,
                                  classic)
    elif record_type == TARGET_ASSIGNMENT_MEMBER:
        out = TargetAssignmentMemberValue(_read_topic_partitions(r, "topic_partitions"))
        r.tags()
    elif record_type == CURRENT_MEMBER_ASSIGNMENT:
        epoch = r.i32("member_epoch")
        previous = r.i32("previous_member_epoch")
        state = _i8(r, "state")
        assigned = _assigned_partitions(r, "assigned_partitions")
        pending = _assigned_partitions(r, "partitions_pending_revocation")
        r.tags()
        out = CurrentMemberAssignmentValue(epoch, previous, state, assigned, pending)
    elif record_type == REGULAR_EXPRESSION:
        topics = _read_strings(r, "topics")
        out = RegularExpressionValue(topics, r.i64("version"), r.i64("timestamp"))
        r.tags()
    else:
        tops = []
        for _ in range(r.array_len("topics")):
            topic_id = _read_uuid(r, "topic_id")
            name = str(r.string("topic_name"))
            count = r.i32("num_partitions")
            parts = []
            for _ in range(r.array_len("partition_metadata")):
                p = r.i32("partition")
                parts.append((p, _read_strings(r, "racks")))
                r.tags()
            r.tags()
            tops.append((topic_id, name, count, tuple(parts)))
        r.tags()
        out = PartitionMetadataValue(tuple(tops))
    r.done()
    return out


def decode_record(key: bytes, value: bytes | None) -> tuple[ConsumerGroupKey, Value | None] | None:
    """``(key, value)`` of a consumer group record (value None: a tombstone), None for other types."""
    k = decode_key(key)
    if k is None:
        return None
    return k, (None if value is None else decode_value(k.record_type, value))
