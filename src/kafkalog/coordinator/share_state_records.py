"""The records of ``__share_group_state`` (KIP-932), Kafka 4.4's share coordinator's own formats
(``share-coordinator/src/main/resources/common/message``), encoded and decoded both ways.

A key is a big-endian int16 *record type* then the key struct (not flexible): 0 ``ShareSnapshotKey``
and 1 ``ShareUpdateKey``, both ``(string group_id, uuid topic_id, int32 partition)``. A value is an
int16 version (0) then a flexible struct: ``ShareSnapshotValue`` (snapshot epoch, state epoch,
leader epoch, start offset, create and write timestamps, the state batches, tagged 0
``delivery_complete_count``) or ``ShareUpdateValue`` (snapshot epoch, leader epoch, start offset,
the updated state batches, the same tag). A state batch is ``(first offset, last offset, delivery
state (0 Available, 2 Acknowledged, 4 Archived), delivery count)``. A null value (a snapshot's) is a
tombstone: the share partition's state is deleted.

A snapshot carries a share partition's whole state; an update carries the batches changed since,
merged over the snapshot (Kafka's ``PersisterStateBatchCombiner``); the share coordinator writes a
new snapshot every ``share.coordinator.snapshot.update.records.per.snapshot`` updates. The record
of ``(group, topic id, partition)`` goes to ``__share_group_state`` partition
``abs(javaHash("group:topicId:partition")) % partitions`` (Kafka's ``SharePartitionKey``, the topic id
in Kafka's base64 form).
"""

from __future__ import annotations

import base64
import uuid
from typing import NamedTuple

from kafkalog.coordinator.group_metadata import _Reader, _Writer
from kafkalog.coordinator.transaction_log import java_string_hash
from kafkalog.errors import InvalidRecordError
from kafkalog.record.varint import write_unsigned_varint

__all__ = [
    "SHARE_GROUP_STATE_TOPIC",
    "SHARE_SNAPSHOT",
    "SHARE_UPDATE",
    "ShareStateKey",
    "ShareStateValue",
    "StateBatch",
    "decode_record",
    "encode_key",
    "encode_value",
    "kafka_uuid",
    "partition_for",
]

SHARE_GROUP_STATE_TOPIC = "__share_group_state"
SHARE_SNAPSHOT = 0
SHARE_UPDATE = 1
#: the topic configuration Kafka gives ``__share_group_state`` (``share.coordinator.state.topic.*``)
SHARE_GROUP_STATE_CONFIG = {"cleanup.policy": "delete", "segment.bytes": 104857600,
                            "retention.ms": -1, "compression.type": "producer"}
DEFAULT_SHARE_GROUP_STATE_PARTITIONS = 50


class StateBatch(NamedTuple):
    """Offsets ``first_offset``..``last_offset`` in one delivery state with one delivery count."""

    first_offset: int
    last_offset: int
    delivery_state: int
    delivery_count: int


class ShareStateKey(NamedTuple):
    record_type: int                  # SHARE_SNAPSHOT or SHARE_UPDATE
    group_id: str
    topic_id: uuid.UUID
    partition: int


class ShareStateValue(NamedTuple):
    """A snapshot's or an update's value (an update has no state epoch or timestamps: -1, 0)."""

    snapshot_epoch: int
    leader_epoch: int
    start_offset: int
    state_batches: tuple[StateBatch, ...]
    delivery_complete_count: int = -1
    state_epoch: int = -1
    create_timestamp: int = 0
    write_timestamp: int = 0


def kafka_uuid(u: uuid.UUID) -> str:
    """Kafka's ``Uuid.toString``: base64url of the 16 bytes without padding."""
    return base64.urlsafe_b64encode(u.bytes).decode("ascii").rstrip("=")


def partition_for(group_id: str, topic_id: uuid.UUID, partition: int, partitions: int) -> int:
    """The ``__share_group_state`` partition of a share partition (Kafka's share coordinator)."""
    h = java_string_hash(f"{group_id}:{kafka_uuid(topic_id)}:{partition}")
    return (0 if h == -2**31 else abs(h)) % partitions


def encode_key(key: ShareStateKey) -> bytes:
    w = _Writer(False)
    w.i16(key.record_type)
    w.string(key.group_id)
    w.out += key.topic_id.bytes
    w.i32(key.partition)
    return bytes(w.out)


def _batches(w: _Writer, batches: tuple[StateBatch, ...]) -> None:
    w.array_len(len(batches))
    for b in batches:
        w.i64(b.first_offset)
        w.i64(b.last_offset)
        w.out += bytes([b.delivery_state & 0xFF])
        w.i16(b.delivery_count)
        w.tags()


def encode_value(record_type: int, v: ShareStateValue) -> bytes:
    """The value (version 0) of a snapshot or an update, as Kafka 4.4 writes it (the delivery
    complete count tagged only when not its default, -1)."""
    w = _Writer(True)
    w.i16(0)
    w.i32(v.snapshot_epoch)
    if record_type == SHARE_SNAPSHOT:
        w.i32(v.state_epoch)
    w.i32(v.leader_epoch)
    w.i64(v.start_offset)
    if record_type == SHARE_SNAPSHOT:
        w.i64(v.create_timestamp)
        w.i64(v.write_timestamp)
    _batches(w, v.state_batches)
    if v.delivery_complete_count != -1:
        data = v.delivery_complete_count.to_bytes(4, "big", signed=True)
        w.out += b"\x01" + write_unsigned_varint(0) + write_unsigned_varint(4) + data
    else:
        w.out += b"\x00"
    return bytes(w.out)



def decode_key(buf: bytes) -> ShareStateKey | None:
    """The key of a ``__share_group_state`` record (None for an unknown record type)."""
    r = _Reader(buf, "__share_group_state key")
    record_type = r.i16("record type")
    if record_type not in (SHARE_SNAPSHOT, SHARE_UPDATE):
        return None
    group = str(r.string("group_id"))
    r._need(16, "topic_id")
    topic_id = uuid.UUID(bytes=bytes(r.buf[r.pos:r.pos + 16]))
    r.pos += 16
    return ShareStateKey(record_type, group, topic_id, r.i32("partition"))


def decode_value(record_type: int, buf: bytes) -> ShareStateValue:
    what = "ShareSnapshotValue" if record_type == SHARE_SNAPSHOT else "ShareUpdateValue"
    r = _Reader(buf, what, flexible=True)
    version = r.i16("value version")
    if version != 0:
        raise InvalidRecordError(f"{what}: unknown version {version}", position=0)
    snapshot_epoch = r.i32("snapshot_epoch")
    state_epoch = r.i32("state_epoch") if record_type == SHARE_SNAPSHOT else -1
    leader_epoch = r.i32("leader_epoch")
    start_offset = r.i64("start_offset")
    create_ts = write_ts = 0
    if record_type == SHARE_SNAPSHOT:
        create_ts = r.i64("create_timestamp")
        write_ts = r.i64("write_timestamp")
    batches = []
    for _ in range(r.array_len("state_batches")):
        first, last = r.i64("first_offset"), r.i64("last_offset")
        state = r._fixed(">b", 1, "delivery_state")
        count = r.i16("delivery_count")
        r.tags()
        batches.append(StateBatch(first, last, state, count))
    tags = r.tags()
    dcc = int.from_bytes(tags[0], "big", signed=True) if len(tags.get(0, b"")) == 4 else -1
    return ShareStateValue(snapshot_epoch, leader_epoch, start_offset, tuple(batches), dcc, state_epoch,
                           create_ts, write_ts)


def decode_record(key: bytes, value: bytes | None) -> tuple[ShareStateKey, ShareStateValue | None] | None:
    """A record of ``__share_group_state`` (None for an unknown type; value None: a tombstone)."""
    k = decode_key(key)
    if k is None:
        return None
    return k, None if value is None else decode_value(k.record_type, value)
