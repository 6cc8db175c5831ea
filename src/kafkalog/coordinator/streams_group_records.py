"""The records a streams group (KIP-1071) keeps in ``__consumer_offsets``, in Kafka 4.4's formats
(``group-coordinator/src/main/resources/common/message/StreamsGroup*.json``), both ways.

Keys: an int16 record type, then the key struct (not flexible): 17 ``StreamsGroupMetadataKey``
(group), 19 ``StreamsGroupMemberMetadataKey`` (group, member), 20
``StreamsGroupTargetAssignmentMetadataKey`` (group), 21 ``StreamsGroupTargetAssignmentMemberKey``
(group, member), 22 ``StreamsGroupCurrentMemberAssignmentKey`` (group, member), 23
``StreamsGroupTopologyKey`` (group). (18 was ``StreamsGroupPartitionMetadata``, gone in 4.4.)
Values: an int16 version (0), then a flexible struct. The value schemas below are Kafka's JSON
schemas written as data (:data:`SCHEMAS`); one reader and one writer walk them, so a value is a
dict of Kafka's snake_case field names. A null value is a tombstone.
"""

from __future__ import annotations

import struct
from typing import Any, NamedTuple

from kafkalog.coordinator.consumer_group_records import _i8, _key_bytes, _tagged, _value_reader
from kafkalog.coordinator.group_metadata import _Reader, _Writer
from kafkalog.errors import InvalidRecordError

__all__ = ["STREAMS_GROUP_RECORD_TYPES", "StreamsGroupKey", "decode_record", "encode_key",
           "encode_value", "decode_value", "value_json"]

GROUP_METADATA = 17
MEMBER_METADATA = 19
TARGET_ASSIGNMENT_METADATA = 20
TARGET_ASSIGNMENT_MEMBER = 21
CURRENT_MEMBER_ASSIGNMENT = 22
TOPOLOGY = 23

STREAMS_GROUP_RECORD_TYPES = {
    GROUP_METADATA: "StreamsGroupMetadata",
    MEMBER_METADATA: "StreamsGroupMemberMetadata",
    TARGET_ASSIGNMENT_METADATA: "StreamsGroupTargetAssignmentMetadata",
    TARGET_ASSIGNMENT_MEMBER: "StreamsGroupTargetAssignmentMember",
    CURRENT_MEMBER_ASSIGNMENT: "StreamsGroupCurrentMemberAssignment",
    TOPOLOGY: "StreamsGroupTopology",
}
_MEMBER_KEYED = frozenset({MEMBER_METADATA, TARGET_ASSIGNMENT_MEMBER, CURRENT_MEMBER_ASSIGNMENT})


class StreamsGroupKey(NamedTuple):
    record_type: int
    group_id: str
    member_id: str = ""


# --- schemas as data --------------------------------------------------------------------------------
# A struct is (fields, tagged): fields are (name, type); tagged are (tag, name, type, default), a
# tagged field written only when its value differs from the default. A type is a primitive name
# ("int8", "int16", "int32", "int64", "uint16", "string", "nstring"), ("array", T), ("narray", T),
# ("struct", S) or ("nstruct", S) (a nullable struct: an int8 -1 / 1 before it).

_KEY_VALUE: Any = ([("key", "string"), ("value", "string")], [])
_TASK_IDS: Any = ([("subtopology_id", "string"), ("partitions", ("array", "int32"))], [])
_TASK_IDS_EPOCHS: Any = ([("subtopology_id", "string"), ("partitions", ("array", "int32"))],
                    [(0, "assignment_epochs", ("narray", "int32"), [])])
_TOPIC_INFO: Any = ([("name", "string"), ("partitions", "int32"), ("replication_factor", "int16"),
                ("topic_configs", ("array", ("struct", _KEY_VALUE)))], [])
_COPARTITION_GROUP: Any = ([("source_topics", ("array", "int16")), ("source_topic_regex", ("array", "int16")),
                       ("repartition_source_topics", ("array", "int16"))], [])
_SUBTOPOLOGY: Any = ([("subtopology_id", "string"), ("source_topics", ("array", "string")),
                 ("source_topic_regex", ("array", "string")),
                 ("state_changelog_topics", ("array", ("struct", _TOPIC_INFO))),
                 ("repartition_sink_topics", ("array", "string")),
                 ("repartition_source_topics", ("array", ("struct", _TOPIC_INFO))),
                 ("copartition_groups", ("array", ("struct", _COPARTITION_GROUP)))], [])

SCHEMAS: dict[int, Any] = {
    GROUP_METADATA: ([("epoch", "int32"), ("metadata_hash", "int64")],
                     [(0, "validated_topology_epoch", "int32", -1),
                      (1, "last_assignment_configs", ("array", ("struct", _KEY_VALUE)), []),
                      (2, "stored_description_topology_epoch", "int32", -1),
                      (3, "failed_description_topology_epoch", "int32", -1)]),
    MEMBER_METADATA: ([("instance_id", "nstring"), ("rack_id", "nstring"), ("client_id", "string"),
                       ("client_host", "string"), ("rebalance_timeout_ms", "int32"), ("topology_epoch", "int32"),
                       ("process_id", "string"),
                       ("user_endpoint", ("nstruct", ([("host", "string"), ("port", "uint16")], []))),
                       ("client_tags", ("array", ("struct", _KEY_VALUE)))], []),
    TARGET_ASSIGNMENT_METADATA: ([("assignment_epoch", "int32")], [(0, "assignment_timestamp", "int64", 0)]),
    TARGET_ASSIGNMENT_MEMBER: ([("active_tasks", ("array", ("struct", _TASK_IDS))),
                                ("standby_tasks", ("array", ("struct", _TASK_IDS))),
                                ("warmup_tasks", ("array", ("struct", _TASK_IDS)))], []),
    CURRENT_MEMBER_ASSIGNMENT: ([("member_epoch", "int32"), ("previous_member_epoch", "int32"), ("state", "int8")]
                                + [(name, ("array", ("struct", _TASK_IDS_EPOCHS))) for name in (
                                    "active_tasks", "standby_tasks", "warmup_tasks", "active_tasks_pending_revocation",
                                    "standby_tasks_pending_revocation", "warmup_tasks_pending_revocation")], []),
    TOPOLOGY: ([("epoch", "int32"), ("subtopologies", ("array", ("struct", _SUBTOPOLOGY)))], []),
}

_FIXED = {"int8": ">b", "int16": ">h", "int32": ">i", "int64": ">q", "uint16": ">H"}


def _write(w: _Writer, t: Any, v: Any, field: str) -> None:
    if isinstance(t, str):
        if t in _FIXED:
            w.out += struct.pack(_FIXED[t], v)
        else:
            w.string(v, nullable=t == "nstring")
        return
    kind, inner = t
    if kind in ("array", "narray"):
        if v is None:
            if kind == "array":
                raise InvalidRecordError(f"{field}: a non-nullable array is null")
            w.array_len(-1)
            return
        w.array_len(len(v))
        for item in v:
            _write(w, inner, item, field)
    elif kind == "nstruct" and v is None:
        w.out += b"\xff"
    else:
        if kind == "nstruct":
            w.out += b"\x01"
        _write_struct(w, inner, v)


def _write_struct(w: _Writer, schema: Any, v: dict[str, Any]) -> None:
    fields, tagged = schema
    for name, t in fields:
        _write(w, t, v[name], name)
    tags = []
    for tag, name, t, default in tagged:
        value = v.get(name, default)
        if value != default:
            sub = _Writer(True)
            _write(sub, t, value, name)
            tags.append((tag, bytes(sub.out)))
    _tagged(w, tags)


def _read(r: _Reader, t: Any, field: str) -> Any:
    if isinstance(t, str):
        if t == "int8":
            return _i8(r, field)
        if t == "int16":
            return r.i16(field)
        if t == "int32":
            return r.i32(field)
        if t == "int64":
            return r.i64(field)
        if t == "uint16":
            return r._fixed(">H", 2, field)
        return r.string(field, nullable=t == "nstring")
    kind, inner = t
    if kind in ("array", "narray"):
        start = r.pos
        if kind == "narray" and r.uvarint(field) == 0:
            return None
        r.pos = start
        return [_read(r, inner, field) for _ in range(r.array_len(field))]
    if kind == "nstruct":
        present = _i8(r, field)
        if present < 0:
            return None
    return _read_struct(r, inner)


def _read_struct(r: _Reader, schema: Any) -> dict[str, Any]:
    fields, tagged = schema
    out = {name: _read(r, t, name) for name, t in fields}
    raw = r.tags()
    for tag, name, t, default in tagged:
        if tag in raw:
            sub = _Reader(raw[tag], f"{r.what}: tagged field {name}", flexible=True)
            out[name] = _read(sub, t, name)
            sub.done()
        else:
            out[name] = default
    return out


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(w.capitalize() for w in rest)


def _json(t: Any, v: Any) -> Any:
    if v is None or isinstance(t, str):
        return v
    kind, inner = t
    if kind in ("array", "narray"):
        return [_json(inner, x) for x in v]
    return _struct_json(inner, v)


def _struct_json(schema: Any, v: dict[str, Any]) -> dict[str, Any]:
    fields, tagged = schema
    out = {_camel(name): _json(t, v[name]) for name, t in fields}
    for _tag, name, t, default in tagged:
        if v.get(name, default) != default:
            out[_camel(name)] = _json(t, v[name])
    return out


def value_json(record_type: int, value: dict[str, Any]) -> dict[str, Any]:
    """A value as Kafka's generated JSON converter prints it (camelCase names, a tagged field only
    when it is not its default): what ``kafka-dump-log.sh --offsets-decoder`` shows."""
    return _struct_json(SCHEMAS[record_type], value)


# --- records ----------------------------------------------------------------------------------------

def encode_key(key: StreamsGroupKey) -> bytes:
    return _key_bytes(key.record_type, key.group_id, key.member_id if key.record_type in _MEMBER_KEYED else None)


def decode_key(buf: bytes) -> StreamsGroupKey | None:
    """The key of a streams group record; None for a record type that is not one."""
    if len(buf) < 2:
        return None
    record_type = struct.unpack_from(">h", buf, 0)[0]
    if record_type not in STREAMS_GROUP_RECORD_TYPES:
        return None
    r = _Reader(buf, f"{STREAMS_GROUP_RECORD_TYPES[record_type]}Key")
    r.pos = 2
    group = str(r.string("group_id"))
    member = str(r.string("member_id")) if record_type in _MEMBER_KEYED else ""
    r.done()
    return StreamsGroupKey(record_type, group, member)


def encode_value(record_type: int, value: dict[str, Any]) -> bytes:
    """The record value (version 0) as Kafka 4.4 writes it."""
    w = _Writer(True)
    w.i16(0)
    _write_struct(w, SCHEMAS[record_type], value)
    return bytes(w.out)


def decode_value(record_type: int, buf: bytes) -> dict[str, Any]:
    r = _value_reader(f"{STREAMS_GROUP_RECORD_TYPES[record_type]}Value", buf, "version")
    out = _read_struct(r, SCHEMAS[record_type])
    r.done()
    return out


def decode_record(key: bytes, value: bytes | None) -> tuple[StreamsGroupKey, dict[str, Any] | None] | None:
    """A streams group record's key and value (None: a tombstone); None when not one."""
    k = decode_key(key)
    if k is None:
        return None
    return k, None if value is None else decode_value(k.record_type, value)
