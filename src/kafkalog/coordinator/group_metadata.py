"""The records of Kafka's ``__consumer_offsets`` topic, in Kafka's own key and value formats
(``group-coordinator/src/main/resources/common/message``): ``OffsetCommitKey`` / ``OffsetCommitValue``
and ``GroupMetadataKey`` / ``GroupMetadataValue``, encoded and decoded in both directions.

A key is a big-endian int16 *version* followed by the key struct: versions 0 and 1 are an offset commit
key (group, topic, partition), version 2 a group metadata key (group). Versions 3 and above belong to
the new consumer-group protocol (KIP-848) and are not decoded here (:func:`decode_key` returns None, as
Kafka's old coordinator ignores them). A value is an int16 version followed by the value struct; a null
value is a tombstone. Strings are int16-length UTF-8, nullable strings use length -1, bytes an int32
length; version 4 of both values is *flexible* (compact lengths as unsigned varints of length + 1, and a
tagged-field section after each struct).

The partition of ``__consumer_offsets`` holding a group is
``Utils.abs(groupId.hashCode()) % offsets.topic.num.partitions`` (:func:`partition_for_group`).
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from kafkalog.errors import InvalidRecordError
from kafkalog.record.varint import read_unsigned_varint, write_unsigned_varint

__all__ = [
    "CONSUMER_OFFSETS_TOPIC",
    "ConsumerGroupMetadata",
    "ConsumerProtocolAssignment",
    "ConsumerProtocolSubscription",
    "OFFSETS_TOPIC_NUM_PARTITIONS",
    "GroupMetadataKey",
    "GroupMetadataValue",
    "MemberMetadata",
    "OffsetCommitKey",
    "OffsetCommitValue",
    "decode_group_metadata_value",
    "decode_key",
    "decode_offset_commit_value",
    "encode_group_metadata_value",
    "encode_key",
    "encode_offset_commit_value",
    "consumer_assignment_partitions",
    "decode_consumer_assignment",
    "decode_consumer_subscription",
    "java_string_hash_code",
    "partition_for_group",
]

CONSUMER_OFFSETS_TOPIC = "__consumer_offsets"
#: Kafka's ``offsets.topic.num.partitions`` default.
OFFSETS_TOPIC_NUM_PARTITIONS = 50

OFFSET_COMMIT_KEY_VERSION = 1           # Kafka writes 1 (0 is read the same way)
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3         # Kafka's choice without an expire timestamp (1 with one)
GROUP_METADATA_VALUE_VERSION = 3


class OffsetCommitKey(NamedTuple):
    group: str
    topic: str
    partition: int


class GroupMetadataKey(NamedTuple):
    group: str


class OffsetCommitValue(NamedTuple):
    offset: int
    metadata: str = ""
    commit_timestamp: int = -1
    leader_epoch: int = -1              # versions 3+
    expire_timestamp: int = -1          # version 1 only
    topic_id: bytes | None = None       # version 4+ (tagged), as Kafka 4 writes it


class MemberMetadata(NamedTuple):
    member_id: str
    client_id: str
    client_host: str
    session_timeout: int
    subscription: bytes
    assignment: bytes
    rebalance_timeout: int = -1         # versions 1+
    group_instance_id: str | None = None   # versions 3+


class GroupMetadataValue(NamedTuple):
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    members: tuple[MemberMetadata, ...] = ()
    current_state_timestamp: int = -1   # versions 2+


Key = OffsetCommitKey | GroupMetadataKey


class ConsumerGroupMetadata(NamedTuple):
    """A consumer's group identity (Kafka's ``ConsumerGroupMetadata``): what a transactional
    producer's ``send_offsets_to_transaction`` takes."""

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


# --- primitive writers ------------------------------------------------------------------------------

class _Writer:
    def __init__(self, flexible: bool) -> None:
        self.out = bytearray()
        self.flexible = flexible

    def i16(self, v: int) -> None:
        self.out += struct.pack(">h", v)

    def i32(self, v: int) -> None:
        self.out += struct.pack(">i", v)

    def i64(self, v: int) -> None:
        self.out += struct.pack(">q", v)

    def string(self, s: str | None, nullable: bool = False) -> None:
        if s is None:
            if not nullable:
                raise InvalidRecordError("a non-nullable string field is null")
            if self.flexible:
                self.out += write_unsigned_varint(0)
            else:
                self.i16(-1)
            return
        b = s.encode("utf-8")
        if len(b) > 0x7FFF:
            raise InvalidRecordError(f"string of {len(b)} bytes is longer than 32767")
        if self.flexible:
            self.out += write_unsigned_varint(len(b) + 1)
        else:
            self.i16(len(b))
        self.out += b

    def bytes_(self, b: bytes) -> None:
        if self.flexible:
            self.out += write_unsigned_varint(len(b) + 1)
        else:
            self.i32(len(b))
        self.out += b

    def array_len(self, n: int) -> None:
        if self.flexible:
            self.out += write_unsigned_varint(n + 1)
        else:
            self.i32(n)

    def tags(self) -> None:
        if self.flexible:
            self.out += b"\x00"             # no tagged fields


# --- primitive reader -------------------------------------------------------------------------------

class _Reader:
    """Bounds-checked reads; every problem is an :class:`InvalidRecordError` naming the position in
    the key or value and what was being read."""

    def __init__(self, buf: bytes, what: str, flexible: bool = False) -> None:
        self.buf = buf
        self.pos = 0
        self.what = what
        self.flexible = flexible

    def _need(self, n: int, field: str) -> None:
        if n < 0 or self.pos + n > len(self.buf):
            raise InvalidRecordError(f"{self.what}: {field} needs {n} bytes, "
                                     f"{len(self.buf) - self.pos} remain", position=self.pos)

    def _fixed(self, fmt: str, n: int, field: str) -> int:
        self._need(n, field)
        v = struct.unpack_from(fmt, self.buf, self.pos)[0]
        self.pos += n
        return int(v)

    def i16(self, field: str) -> int:
        return self._fixed(">h", 2, field)

    def i32(self, field: str) -> int:
        return self._fixed(">i", 4, field)

    def i64(self, field: str) -> int:
        return self._fixed(">q", 8, field)

    def uvarint(self, field: str) -> int:
        value, self.pos = read_unsigned_varint(self.buf, self.pos, len(self.buf), f"{self.what}: {field}")
        return value

    def _length(self, field: str, wide: bool = False) -> int:
        if self.flexible:
            return self.uvarint(field) - 1
        return self.i32(field) if wide else self.i16(field)

    def string(self, field: str, nullable: bool = False) -> str | None:
        start = self.pos
        n = self._length(field)
        if n < 0:
            if nullable and n == -1:
                return None
            raise InvalidRecordError(f"{self.what}: {field} has length {n}", position=start)
        self._need(n, field)
        raw = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise InvalidRecordError(f"{self.what}: {field} is not UTF-8 ({e.reason})",
                                     position=start) from None

    def nullable_bytes(self, field: str) -> bytes | None:
        start = self.pos
        n = self._length(field, wide=True)
        if n == -1:
            return None
        self.pos = start
        return self.bytes_(field)

    def bytes_(self, field: str) -> bytes:
        start = self.pos
        n = self._length(field, wide=True)
        if n < 0:
            raise InvalidRecordError(f"{self.what}: {field} has length {n}", position=start)
        self._need(n, field)
        raw = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        return raw

    def array_len(self, field: str) -> int:
        start = self.pos
        n = self._length(field, wide=True)
        if n < 0 or n > len(self.buf) - self.pos:      # every element takes at least one byte
            raise InvalidRecordError(f"{self.what}: {field} has {n} elements", position=start)
        return n

    def tags(self) -> dict[int, bytes]:
        """The tagged fields (tag -> raw value); the caller reads those it knows, Kafka skips the
        others."""
        out: dict[int, bytes] = {}
        if not self.flexible:
            return out
        for _ in range(self.uvarint("tagged field count")):
            tag = self.uvarint("tag")
            size = self.uvarint("tagged field size")
            self._need(size, "tagged field")
            out[tag] = bytes(self.buf[self.pos:self.pos + size])
            self.pos += size
        return out

    def done(self) -> None:
        if self.pos != len(self.buf):
            raise InvalidRecordError(f"{self.what}: {len(self.buf) - self.pos} unexpected trailing "
                                     f"bytes", position=self.pos)


# --- keys -------------------------------------------------------------------------------------------

def encode_key(key: Key) -> bytes:
    """The record key of an offset commit (version 1) or a group's metadata (version 2)."""
    w = _Writer(False)
    if isinstance(key, OffsetCommitKey):
        w.i16(OFFSET_COMMIT_KEY_VERSION)
        w.string(key.group)
        w.string(key.topic)
        w.i32(key.partition)
    else:
        w.i16(GROUP_METADATA_KEY_VERSION)
        w.string(key.group)
    return bytes(w.out)


def decode_key(buf: bytes) -> Key | None:
    """An :class:`OffsetCommitKey` (versions 0, 1), a :class:`GroupMetadataKey` (version 2), or None
    for the records of Kafka's newer group protocols (versions 3+)."""
    r = _Reader(buf, "__consumer_offsets key")
    version = r.i16("key version")
    if version in (0, 1):
        out: Key = OffsetCommitKey(str(r.string("group")), str(r.string("topic")), r.i32("partition"))
    elif version == 2:
        out = GroupMetadataKey(str(r.string("group")))
    elif version > 2:
        return None
    else:
        raise InvalidRecordError(f"__consumer_offsets key: unknown version {version}", position=0)
    r.done()
    return out


# --- offset commit values ---------------------------------------------------------------------------

def encode_offset_commit_value(v: OffsetCommitValue, version: int | None = None) -> bytes:
    """Kafka's choice of version unless given: 1 when an expire timestamp is set, else 3."""
    if version is None:
        version = 1 if v.expire_timestamp >= 0 else OFFSET_COMMIT_VALUE_VERSION
    if not 0 <= version <= 4:
        raise InvalidRecordError(f"OffsetCommitValue: unknown version {version}")
    w = _Writer(version >= 4)
    w.i16(version)
    w.i64(v.offset)
    if version >= 3:
        w.i32(v.leader_epoch)
    w.string(v.metadata or "")
    w.i64(v.commit_timestamp)
    if version == 1:
        w.i64(v.expire_timestamp)
    w.tags()
    return bytes(w.out)


def _value_reader(buf: bytes, what: str) -> tuple[_Reader, int]:
    """A reader positioned after the value's version (0-4; 4+ flexible), and the version."""
    r = _Reader(buf, what)
    version = r.i16("value version")
    if not 0 <= version <= 4:
        raise InvalidRecordError(f"{what}: unknown version {version}", position=0)
    r.flexible = version >= 4
    return r, version


def decode_offset_commit_value(buf: bytes) -> OffsetCommitValue:
    r, version = _value_reader(buf, "OffsetCommitValue")
    offset = r.i64("offset")
    epoch = r.i32("leaderEpoch") if version >= 3 else -1
    metadata = r.string("metadata")
    ts = r.i64("commitTimestamp")
    expire = r.i64("expireTimestamp") if version == 1 else -1
    topic_id = r.tags().get(0)          # version 4+: the topic's id, tagged
    r.done()
    if topic_id is not None and len(topic_id) != 16:
        raise InvalidRecordError(f"OffsetCommitValue: topicId has {len(topic_id)} bytes, not 16")
    return OffsetCommitValue(offset, metadata or "", ts, epoch, expire, topic_id)


# --- group metadata values --------------------------------------------------------------------------

def encode_group_metadata_value(v: GroupMetadataValue,
                                version: int = GROUP_METADATA_VALUE_VERSION) -> bytes:
    if not 0 <= version <= 4:
        raise InvalidRecordError(f"GroupMetadataValue: unknown version {version}")
    w = _Writer(version >= 4)
    w.i16(version)
    w.string(v.protocol_type)
    w.i32(v.generation)
    w.string(v.protocol, nullable=True)
    w.string(v.leader, nullable=True)
    if version >= 2:
        w.i64(v.current_state_timestamp)
    w.array_len(len(v.members))
    for m in v.members:
        w.string(m.member_id)
        if version >= 3:
            w.string(m.group_instance_id, nullable=True)
        w.string(m.client_id)
        w.string(m.client_host)
        if version >= 1:
            w.i32(m.rebalance_timeout)
        w.i32(m.session_timeout)
        w.bytes_(m.subscription)
        w.bytes_(m.assignment)
        w.tags()
    w.tags()
    return bytes(w.out)


def decode_group_metadata_value(buf: bytes) -> GroupMetadataValue:
    r, version = _value_reader(buf, "GroupMetadataValue")
    protocol_type = str(r.string("protocolType"))
    generation = r.i32("generation")
    protocol = r.string("protocol", nullable=True)
    leader = r.string("leader", nullable=True)
    ts = r.i64("currentStateTimestamp") if version >= 2 else -1
    members: list[MemberMetadata] = []
    for _ in range(r.array_len("members")):
        member_id = str(r.string("memberId"))
        instance = r.string("groupInstanceId", nullable=True) if version >= 3 else None
        client_id = str(r.string("clientId"))
        client_host = str(r.string("clientHost"))
        rebalance = r.i32("rebalanceTimeout") if version >= 1 else -1
        session = r.i32("sessionTimeout")
        sub = r.bytes_("subscription")
        assignment = r.bytes_("assignment")
        r.tags()
        members.append(MemberMetadata(member_id, client_id, client_host, session, sub, assignment,
                                      rebalance, instance))
    r.tags()
    r.done()
    return GroupMetadataValue(protocol_type, generation, protocol, leader, tuple(members), ts)


# --- the consumer protocol's subscription and assignment -----------------------------------------

class ConsumerProtocolSubscription(NamedTuple):
    """A ``consumer`` protocol member's subscription (Kafka's ``ConsumerProtocolSubscription``,
    versions 0-3), as stored in a member of :class:`GroupMetadataValue`."""

    version: int
    topics: tuple[str, ...]
    user_data: bytes | None
    owned_partitions: tuple[tuple[str, tuple[int, ...]], ...] = ()     # versions 1+
    generation_id: int = -1                                            # versions 2+
    rack_id: str | None = None                                         # versions 3+


class ConsumerProtocolAssignment(NamedTuple):
    """A ``consumer`` protocol member's assignment (Kafka's ``ConsumerProtocolAssignment``)."""

    version: int
    assigned_partitions: tuple[tuple[str, tuple[int, ...]], ...]
    user_data: bytes | None


def _topic_partitions(r: _Reader, field: str) -> tuple[tuple[str, tuple[int, ...]], ...]:
    out = []
    for _ in range(r.array_len(field)):
        topic = str(r.string("topic"))
        out.append((topic, tuple(r.i32("partition") for _ in range(r.array_len("partitions")))))
    return tuple(out)


def decode_consumer_subscription(buf: bytes) -> ConsumerProtocolSubscription:
    """Kafka's ``ConsumerProtocol.deserializeSubscription`` (a newer version is read as the newest
    known one, its extra bytes ignored, as Kafka does)."""
    r = _Reader(buf, "ConsumerProtocolSubscription")
    version = r.i16("version")
    if version < 0:
        raise InvalidRecordError(f"ConsumerProtocolSubscription: version {version}", position=0)
    topics = tuple(str(r.string("topic")) for _ in range(r.array_len("topics")))
    user_data = r.nullable_bytes("userData")
    owned = _topic_partitions(r, "ownedPartitions") if version >= 1 else ()
    generation = r.i32("generationId") if version >= 2 else -1
    rack = r.string("rackId", nullable=True) if version >= 3 else None
    return ConsumerProtocolSubscription(version, topics, user_data, owned, generation, rack)


def decode_consumer_assignment(buf: bytes) -> ConsumerProtocolAssignment:
    """Kafka's ``ConsumerProtocol.deserializeAssignment``."""
    r = _Reader(buf, "ConsumerProtocolAssignment")
    version = r.i16("version")
    if version < 0:
        raise InvalidRecordError(f"ConsumerProtocolAssignment: version {version}", position=0)
    return ConsumerProtocolAssignment(version, _topic_partitions(r, "assignedPartitions"),
                                      r.nullable_bytes("userData"))


def consumer_assignment_partitions(assignment: bytes) -> list[tuple[str, int]]:
    """The ``(topic, partition)`` pairs of a ``consumer`` protocol member assignment; empty for an
    empty assignment (a member before its first sync)."""
    if not assignment:
        return []
    return [(t, p) for t, ps in decode_consumer_assignment(assignment).assigned_partitions for p in ps]


# --- partitioning -----------------------------------------------------------------------------------

def java_string_hash_code(s: str) -> int:
    """Java's ``String.hashCode()``: ``s[0]*31^(n-1) + ... + s[n-1]`` over UTF-16 code units, as a
    signed 32-bit int."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_group(group_id: str, num_partitions: int = OFFSETS_TOPIC_NUM_PARTITIONS) -> int:
    """Kafka's ``Utils.abs(groupId.hashCode()) % groupMetadataTopicPartitionCount`` (``Utils.abs``
    maps Integer.MIN_VALUE to 0)."""
    h = java_string_hash_code(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions
