"""Kafka's KRaft metadata records for a data directory's topics, added to the bootstrap snapshot that
``kafka-storage.sh format`` writes, so a new Kafka cluster starts knowing them.

A KRaft broker serves only the partitions its metadata log names, with the topic ID of their
``partition.metadata``: a partition directory whose topic ID the metadata does not hold is renamed
``<topic>-<partition>.<id>-stray`` and set aside. ``kafka-storage.sh format`` writes the metadata log's
first snapshot, ``__cluster_metadata-0/00000000000000000000-0000000000.checkpoint`` (a header, the
KRaft version and voters, the feature levels, a footer), which the controller loads on its first
start. :func:`add_topics` writes one more batch into it before the footer: per topic a
``TopicRecord`` (name, ID), a ``PartitionRecord`` per partition (this node the only replica, leader
and in-sync, at the partition's latest leader epoch, in this log directory) and a ``ConfigRecord`` per
topic config override; then the directory's security metadata (:class:`SecurityMetadata`): an
``AccessControlEntryRecord`` per ACL binding, a ``UserScramCredentialRecord`` per SCRAM credential
(salt, stored key, server key, iterations, as Kafka stores them) and a ``ClientQuotaRecord`` per
quota entity and key; then a ``FeatureLevelRecord`` per feature level given (the controller replays
the snapshot in order: the later record of a feature wins, level 0 removes it). The record encodings
are Kafka's metadata schemas (``TopicRecord`` v0, ``PartitionRecord`` v1, ``ConfigRecord`` v0,
``AccessControlEntryRecord`` v0, ``UserScramCredentialRecord`` v0, ``ClientQuotaRecord`` v0,
``FeatureLevelRecord`` v0, framed as ``MetadataRecordSerde`` frames them). :func:`read_kafka_metadata`
reads the same records (and their removals) back from a Kafka data directory's metadata log, and
:func:`snapshot_feature_levels` the levels of a bootstrap snapshot.
"""

from __future__ import annotations

import mmap
import os
import struct
import uuid as _uuid
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from kafkalog.errors import InvalidRecordError, LogDirError
from kafkalog.log.fsutil import atomic_write
from kafkalog.record.builder import build_batch
from kafkalog.record.constants import ControlRecordType
from kafkalog.record.control import parse_control_key
from kafkalog.record.crc import crc32c
from kafkalog.record.records import iter_batches
from kafkalog.record.varint import read_unsigned_varint, write_unsigned_varint

__all__ = ["BOOTSTRAP_SNAPSHOT", "METADATA_PARTITION", "SCRAM_MECHANISMS", "KafkaMetadata", "SecurityMetadata",
           "TopicMetadata", "acl_record", "add_topics", "client_quota_record", "feature_level_record",
           "read_kafka_metadata", "read_topic_configs", "scram_record", "snapshot_feature_levels",
           "topics_in_snapshot"]

METADATA_PARTITION = "__cluster_metadata-0"
#: the snapshot ``kafka-storage.sh format`` writes (end offset 0, epoch 0)
BOOTSTRAP_SNAPSHOT = "00000000000000000000-0000000000.checkpoint"

TOPIC_RECORD, PARTITION_RECORD, CONFIG_RECORD = 2, 3, 4
USER_SCRAM_CREDENTIAL_RECORD, FEATURE_LEVEL_RECORD, CLIENT_QUOTA_RECORD = 11, 12, 14
#: the feature whose level a ``KRaftVersionRecord`` control record (not a ``FeatureLevelRecord``) holds
KRAFT_VERSION_FEATURE = "kraft.version"
ACCESS_CONTROL_ENTRY_RECORD, REMOVE_ACCESS_CONTROL_ENTRY_RECORD = 18, 19
REMOVE_USER_SCRAM_CREDENTIAL_RECORD = 22
#: Kafka's ``ScramMechanism`` codes
SCRAM_MECHANISMS = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
#: ConfigResource.Type.TOPIC
TOPIC_RESOURCE = 2
_FRAME_VERSION = 1


@dataclass
class TopicMetadata:
    """What the metadata log holds of one topic."""

    name: str
    topic_id: _uuid.UUID
    partitions: int
    leader_epochs: Sequence[int] = ()            # per partition (0 when empty)
    configs: Dict[str, str] = field(default_factory=dict)


#: an ACL binding's fields, Kafka's codes: resource type, resource name, pattern type, principal,
#: host, operation, permission type
AclFields = Tuple[int, str, int, str, str, int, int]
#: a SCRAM credential as Kafka stores it: salt, stored key, server key, iterations
ScramFields = Tuple[bytes, bytes, bytes, int]
#: a client quota entity: its (entity type, name) pairs sorted by type; a None name is the default
QuotaEntity = Tuple[Tuple[str, Optional[str]], ...]


@dataclass
class SecurityMetadata:
    """The ACLs, SCRAM credentials and client quotas of a cluster's metadata."""

    acls: List[AclFields] = field(default_factory=list)
    #: (mechanism name, user) -> credential
    scram: Dict[Tuple[str, str], ScramFields] = field(default_factory=dict)
    #: entity -> quota key -> value
    quotas: Dict[QuotaEntity, Dict[str, float]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.acls) + len(self.scram) + sum(len(v) for v in self.quotas.values())


def _uvarint(n: int) -> bytes:
    return write_unsigned_varint(n)


def _string(s: str) -> bytes:
    b = s.encode("utf-8")
    return _uvarint(len(b) + 1) + b


def _nullable_string(s: str | None) -> bytes:
    return b"\x00" if s is None else _string(s)


def _bytes(b: bytes) -> bytes:
    return _uvarint(len(b) + 1) + b


def _int32s(xs: Sequence[int]) -> bytes:
    return _uvarint(len(xs) + 1) + b"".join(struct.pack(">i", x) for x in xs)


def _frame(api_key: int, version: int, body: bytes) -> bytes:
    return _uvarint(_FRAME_VERSION) + _uvarint(api_key) + _uvarint(version) + body + _uvarint(0)


def topic_record(name: str, topic_id: _uuid.UUID) -> bytes:
    return _frame(TOPIC_RECORD, 0, _string(name) + topic_id.bytes)


def partition_record(partition: int, topic_id: _uuid.UUID, node_id: int, directory_id: _uuid.UUID,
                     leader_epoch: int) -> bytes:
    body = (struct.pack(">i", partition) + topic_id.bytes
            + _int32s([node_id]) + _int32s([node_id]) + _int32s([]) + _int32s([])   # replicas, isr, removing, adding
            + struct.pack(">iii", node_id, leader_epoch, 0)                            # leader, epoch, partition epoch
            + _uvarint(2) + directory_id.bytes)                                        # directories
    return _frame(PARTITION_RECORD, 1, body)


def config_record(topic: str, name: str, value: str) -> bytes:
    return _frame(CONFIG_RECORD, 0, bytes([TOPIC_RESOURCE]) + _string(topic) + _string(name)
                  + _nullable_string(value))


def acl_record(acl_id: _uuid.UUID, resource_type: int, name: str, pattern_type: int, principal: str,
               host: str, operation: int, permission: int) -> bytes:
    """``AccessControlEntryRecord`` v0: one ACL binding (Kafka's codes), ``acl_id`` its ID."""
    return _frame(ACCESS_CONTROL_ENTRY_RECORD, 0, acl_id.bytes + struct.pack(">b", resource_type) + _string(name)
                  + struct.pack(">b", pattern_type) + _string(principal) + _string(host)
                  + struct.pack(">bb", operation, permission))


def scram_record(user: str, mechanism: str, salt: bytes, stored_key: bytes, server_key: bytes,
                 iterations: int) -> bytes:
    """``UserScramCredentialRecord`` v0: ``user``'s credential of ``mechanism`` (``SCRAM-SHA-256``...)."""
    return _frame(USER_SCRAM_CREDENTIAL_RECORD, 0, _string(user) + struct.pack(">b", SCRAM_MECHANISMS[mechanism])
                  + _bytes(salt) + _bytes(stored_key) + _bytes(server_key) + struct.pack(">i", iterations))


def client_quota_record(entity: QuotaEntity, key: str, value: float) -> bytes:
    """``ClientQuotaRecord`` v0: quota ``key`` of ``entity`` set to ``value``."""
    pairs = b"".join(_string(t) + _nullable_string(n) + _uvarint(0) for t, n in entity)
    return _frame(CLIENT_QUOTA_RECORD, 0, _uvarint(len(entity) + 1) + pairs + _string(key)
                  + struct.pack(">d", value) + b"\x00")


def feature_level_record(name: str, level: int) -> bytes:
    """``FeatureLevelRecord`` v0: feature ``name`` finalized at ``level`` (0: not finalized)."""
    return _frame(FEATURE_LEVEL_RECORD, 0, _string(name) + struct.pack(">h", level))


def security_records(security: SecurityMetadata) -> List[bytes]:
    """The records of ``security``: an ``AccessControlEntryRecord`` per ACL (a new random ID each, as
    Kafka's controller gives them), a ``UserScramCredentialRecord`` per credential, a
    ``ClientQuotaRecord`` per entity and key."""
    out = [acl_record(_uuid.uuid4(), *a) for a in security.acls]
    out += [scram_record(user, mech, *cred) for (mech, user), cred in sorted(security.scram.items())]
    out += [client_quota_record(entity, k, v) for entity, values in sorted(security.quotas.items(), key=repr)
            for k, v in sorted(values.items())]
    return out


def _record_type(v: bytes) -> Tuple[int, int]:
    """A metadata record's type and the position of its fields (after the frame version, the type
    and the record's version)."""
    _frame_v, p = read_unsigned_varint(v, 0)
    key, p = read_unsigned_varint(v, p)
    _ver, p = read_unsigned_varint(v, p)
    return key, p


def _compact_string(v: bytes, p: int) -> Tuple[str, int]:
    """The compact string at ``p`` and the position after it."""
    n, p = read_unsigned_varint(v, p)
    return v[p:p + n - 1].decode("utf-8"), p + n - 1


def topics_in_snapshot(data: bytes) -> List[str]:
    """The names of the ``TopicRecord`` s in a metadata snapshot's bytes."""
    out = []
    for batch in iter_batches(data):
        if batch.is_control:
            continue
        for r in batch:
            v = bytes(r.value or b"")
            try:
                key, p = _record_type(v)
                if key == TOPIC_RECORD:
                    out.append(_compact_string(v, p)[0])
            except Exception:       # not a record this reads: the snapshot is Kafka's to judge
                continue
    return out


def add_topics(snapshot_path: str, node_id: int, directory_id: _uuid.UUID,
               topics: Sequence[TopicMetadata], security: SecurityMetadata | None = None,
               features: Mapping[str, int] | None = None) -> int:
    """Write ``topics`` (and ``security``'s ACLs, SCRAM credentials and client quotas, then a
    ``FeatureLevelRecord`` per level of ``features``) into the bootstrap snapshot at ``snapshot_path`` (a
    batch before its footer, the footer renumbered after it); returns the number of records added. A
    topic or security entry the snapshot holds already is refused, naming it."""
    try:
        with open(snapshot_path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise LogDirError(f"cannot read the bootstrap snapshot: {e.strerror}", file=snapshot_path) from e
    batches = list(iter_batches(data))
    if len(batches) < 2 or not batches[-1].is_control or \
            parse_control_key(next(iter(batches[-1])).key)[1].name != "SNAPSHOT_FOOTER":
        raise LogDirError("not a KRaft snapshot ending with a SnapshotFooter", file=snapshot_path)
    known = set(topics_in_snapshot(data))
    clash = sorted(t.name for t in topics if t.name in known)
    if clash:
        raise LogDirError(f"the metadata already holds the topics {', '.join(clash)}", file=snapshot_path)
    security = security or SecurityMetadata()
    if security:
        _refuse_held(security, snapshot_path, data)
    values = []
    for t in topics:
        values.append(topic_record(t.name, t.topic_id))
        for p in range(t.partitions):
            epoch = t.leader_epochs[p] if p < len(t.leader_epochs) else 0
            values.append(partition_record(p, t.topic_id, node_id, directory_id, max(epoch, 0)))
        values += [config_record(t.name, k, v) for k, v in sorted(t.configs.items())]
    values += security_records(security)
    values += [feature_level_record(name, level) for name, level in sorted((features or {}).items())]
    if not values:
        return 0
    footer, last = batches[-1], batches[-2]
    base = last.last_offset + 1
    added = build_batch([(None, v, last.max_timestamp, []) for v in values], base_offset=base,
                        # both kinds of batch have it (v0/v1: -1); their base type RecordBatch does not
                        partition_leader_epoch=getattr(last, "partition_leader_epoch", 0))
    tail = bytearray(data[footer.position:])
    struct.pack_into(">q", tail, 0, base + len(values))          # the footer's offset follows the batch
    struct.pack_into(">I", tail, 17, crc32c(bytes(tail[21:])))
    mode = os.stat(snapshot_path).st_mode & 0o777
    atomic_write(snapshot_path, data[:footer.position] + added + bytes(tail))
    os.chmod(snapshot_path, mode)
    return len(values)


def _refuse_held(security: SecurityMetadata, snapshot_path: str, data: bytes) -> None:
    """A snapshot holding an ACL, a SCRAM credential (user and mechanism: ``kafka-storage.sh format
    --add-scram``) or a quota key of ``security`` already is refused: a second run, or two sources for one
    credential."""
    held = _Replay()
    held.replay(data, 0)
    have = held.security
    clash = [f"the ACL {a}" for a in security.acls if a in set(have.acls)]
    clash += [f"the {mech} credential of {user!r}" for mech, user in sorted(security.scram)
              if (mech, user) in have.scram]
    clash += [f"the quota {k} of {dict(e)}" for e, values in security.quotas.items() for k in sorted(values)
              if k in have.quotas.get(e, {})]
    if clash:
        more = f" and {len(clash) - 5} more" if len(clash) > 5 else ""
        raise LogDirError(f"the metadata already holds {', '.join(clash[:5])}{more}", file=snapshot_path)


def leader_epochs(entries: Mapping[int, Sequence[int]], partitions: int) -> List[int]:
    """The latest leader epoch of each of ``partitions`` (0 without one)."""
    return [max(entries.get(p, ()) or [0]) for p in range(partitions)]


# --- reading: what kafkalog takes from Kafka's metadata log ----------------------------------------

REMOVE_TOPIC_RECORD = 5
PRODUCER_IDS_RECORD = 15
_MECHANISM_NAMES = {code: name for name, code in SCRAM_MECHANISMS.items()}


@dataclass
class KafkaMetadata:
    """What kafkalog takes from a Kafka 4 metadata log: the topic config overrides by topic name,
    the first producer id Kafka has not handed out (its controller allocates them in blocks), the
    ACLs, SCRAM credentials and client quotas, and the finalized feature levels (``FeatureLevelRecord``
    s, the last of a feature winning, level 0 removing it; ``kraft.version`` from the
    ``KRaftVersionRecord`` control record)."""

    topic_configs: Dict[str, Dict[str, str]] = field(default_factory=dict)
    next_producer_id: int = 0
    security: SecurityMetadata = field(default_factory=SecurityMetadata)
    features: Dict[str, int] = field(default_factory=dict)


class _Fields:
    """Reads a metadata record's fields in order (Kafka's compact encodings)."""

    def __init__(self, v: bytes, p: int) -> None:
        self.v, self.p = v, p

    def _take(self, n: int) -> bytes:
        if n < 0 or self.p + n > len(self.v):
            raise ValueError("a field beyond the record")
        b = self.v[self.p:self.p + n]
        self.p += n
        return b

    def uvarint(self) -> int:
        n, self.p = read_unsigned_varint(self.v, self.p)
        return n

    def nullable_bytes(self) -> bytes | None:
        n = self.uvarint()
        return None if n == 0 else self._take(n - 1)

    def nullable_string(self) -> str | None:
        b = self.nullable_bytes()
        return None if b is None else b.decode("utf-8")

    def string(self) -> str:
        s = self.nullable_string()
        if s is None:
            raise ValueError("a null string")
        return s

    def compact_bytes(self) -> bytes:
        b = self.nullable_bytes()
        if b is None:
            raise ValueError("null bytes")
        return b

    def uuid(self) -> bytes:
        return self._take(16)

    def int8(self) -> int:
        return int(struct.unpack(">b", self._take(1))[0])

    def int16(self) -> int:
        return int(struct.unpack(">h", self._take(2))[0])

    def int32(self) -> int:
        return int(struct.unpack(">i", self._take(4))[0])

    def int64(self) -> int:
        return int(struct.unpack(">q", self._take(8))[0])

    def float64(self) -> float:
        return float(struct.unpack(">d", self._take(8))[0])

    def tagged_fields(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self._take(self.uvarint())


class _Replay:
    """The state of a metadata log replayed record by record (a snapshot, then the log after it)."""

    def __init__(self) -> None:
        self.meta = KafkaMetadata()
        self.ids: Dict[bytes, str] = {}
        self.configs: Dict[str, Dict[str, str]] = {}
        self.acls: Dict[bytes, AclFields] = {}

    @property
    def security(self) -> SecurityMetadata:
        sec = self.meta.security
        sec.acls = list(self.acls.values())
        return sec

    def replay(self, data: bytes, min_offset: int) -> None:
        for batch in iter_batches(data):
            if batch.last_offset < min_offset:
                continue
            for r in batch:
                if r.offset < min_offset or r.value is None:
                    continue
                v = bytes(r.value)
                try:
                    if batch.is_control:
                        self._control(r.key, v)
                        continue
                    key, p = _record_type(v)
                    self._record(key, _Fields(v, p))
                except (ValueError, IndexError, UnicodeDecodeError, struct.error, InvalidRecordError):
                    continue        # a record this does not read (cut short, a varint too long): Kafka's to judge

    def _control(self, key: bytes | None, v: bytes) -> None:
        """A ``KRaftVersionRecord`` (version, kraft.version) sets kraft.version; other control records
        hold nothing this keeps."""
        if parse_control_key(key)[1] == ControlRecordType.KRAFT_VERSION:
            f = _Fields(v, 0)
            f.int16()
            self._feature(KRAFT_VERSION_FEATURE, f.int16())

    def _feature(self, name: str, level: int) -> None:
        if level == 0:
            self.meta.features.pop(name, None)
        else:
            self.meta.features[name] = level

    def _record(self, key: int, f: _Fields) -> None:
        sec = self.meta.security
        if key == TOPIC_RECORD:
            name = f.string()
            self.ids[f.uuid()] = name
        elif key == FEATURE_LEVEL_RECORD:
            name = f.string()
            self._feature(name, f.int16())
        elif key == PRODUCER_IDS_RECORD:        # BrokerId, BrokerEpoch, NextProducerId
            f.int32()
            f.int64()
            self.meta.next_producer_id = max(self.meta.next_producer_id, f.int64())
        elif key == REMOVE_TOPIC_RECORD:
            self.configs.pop(self.ids.pop(f.uuid(), ""), None)
        elif key == CONFIG_RECORD:
            if f.int8() != TOPIC_RESOURCE:
                return
            topic, cfg, value = f.nullable_string(), f.nullable_string(), f.nullable_string()
            if topic is None or cfg is None:
                return
            if value is None:
                self.configs.get(topic, {}).pop(cfg, None)
            else:
                self.configs.setdefault(topic, {})[cfg] = value
        elif key == ACCESS_CONTROL_ENTRY_RECORD:
            acl_id = f.uuid()
            self.acls[acl_id] = (f.int8(), f.string(), f.int8(), f.string(), f.string(), f.int8(), f.int8())
        elif key == REMOVE_ACCESS_CONTROL_ENTRY_RECORD:
            self.acls.pop(f.uuid(), None)
        elif key == USER_SCRAM_CREDENTIAL_RECORD:
            user, mech = f.string(), _MECHANISM_NAMES.get(f.int8())
            cred = (f.compact_bytes(), f.compact_bytes(), f.compact_bytes(), f.int32())
            if mech is not None:
                sec.scram[(mech, user)] = cred
        elif key == REMOVE_USER_SCRAM_CREDENTIAL_RECORD:
            user, mech = f.string(), _MECHANISM_NAMES.get(f.int8())
            sec.scram.pop((mech or "", user), None)
        elif key == CLIENT_QUOTA_RECORD:
            pairs = []
            for _ in range(f.uvarint() - 1):
                pairs.append((f.string(), f.nullable_string()))
                f.tagged_fields()
            entity: QuotaEntity = tuple(sorted(pairs))
            quota, amount, remove = f.string(), f.float64(), f.int8() != 0
            values = sec.quotas.setdefault(entity, {})
            if remove:
                values.pop(quota, None)
            else:
                values[quota] = amount
            if not values:
                del sec.quotas[entity]


def _snapshot_end(name: str) -> int:
    return int(name.split("-")[0])


def _replay_file(path: str, min_offset: int, state: _Replay) -> None:
    """:meth:`_Replay.replay` over a file, mapped (a metadata segment may be large)."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            state.replay(mm, min_offset)     # type: ignore[arg-type]


#: the last metadata log read (its directory, its files' names, sizes and times) and what it said
_LAST_READ: List[Tuple[object, KafkaMetadata]] = []


def _copied(meta: KafkaMetadata) -> KafkaMetadata:
    """A copy of ``meta`` its reader may change (the values inside are immutable)."""
    sec = meta.security
    return KafkaMetadata({t: dict(c) for t, c in meta.topic_configs.items()}, meta.next_producer_id,
                         SecurityMetadata(list(sec.acls), dict(sec.scram),
                                          {e: dict(v) for e, v in sec.quotas.items()}),
                         dict(meta.features))


def read_kafka_metadata(data_dir: str) -> KafkaMetadata:
    """What ``data_dir``'s Kafka 4 metadata log (``__cluster_metadata-0``: its newest snapshot, then
    the log after it) says of topic configs, producer ids, ACLs, SCRAM credentials, client quotas and
    feature levels;
    empty when the directory has no metadata log (a kafkalog directory, or ``metadata.log.dir``
    elsewhere)."""
    mdir = os.path.join(data_dir, METADATA_PARTITION)
    try:
        names = sorted(os.listdir(mdir))
    except OSError:
        return KafkaMetadata()
    snapshots = sorted((n for n in names if n.endswith(".checkpoint") and "-" in n), key=_snapshot_end)
    logs = [n for n in names if n.endswith(".log") and n[:-4].isdigit()]
    try:
        key = (os.path.realpath(mdir), tuple((n, st.st_size, st.st_mtime_ns) for n in snapshots[-1:] + logs
                                             for st in [os.stat(os.path.join(mdir, n))]))
    except OSError:
        key = None
    if key is not None and _LAST_READ and _LAST_READ[0][0] == key:
        return _copied(_LAST_READ[0][1])        # a start reads it for each store: replayed once
    state = _Replay()
    start = 0
    if snapshots:
        _replay_file(os.path.join(mdir, snapshots[-1]), 0, state)
        start = _snapshot_end(snapshots[-1])
    for n in logs:
        _replay_file(os.path.join(mdir, n), start, state)
    known = set(state.ids.values())
    meta = state.meta
    meta.topic_configs = {t: c for t, c in state.configs.items() if t in known and c}
    meta.security = state.security
    if key is not None:
        _LAST_READ[:] = [(key, _copied(meta))]
    return meta


def read_topic_configs(data_dir: str) -> Dict[str, Dict[str, str]]:
    """The topic config overrides Kafka keeps in ``data_dir``'s metadata log, by topic name."""
    return read_kafka_metadata(data_dir).topic_configs


def snapshot_feature_levels(snapshot_path: str) -> Dict[str, int]:
    """The feature levels a bootstrap snapshot finalizes (``kraft.version`` included)."""
    try:
        with open(snapshot_path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise LogDirError(f"cannot read the bootstrap snapshot: {e.strerror}", file=snapshot_path) from e
    state = _Replay()
    state.replay(data, 0)
    return state.meta.features
