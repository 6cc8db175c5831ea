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
topic config override. The record encodings are Kafka's metadata schemas (``TopicRecord`` v0,
``PartitionRecord`` v1, ``ConfigRecord`` v0, framed as ``MetadataRecordSerde`` frames them).
"""

from __future__ import annotations

import mmap
import os
import struct
import uuid as _uuid
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Sequence, Tuple

from kafkalog.errors import LogDirError
from kafkalog.log.fsutil import atomic_write
from kafkalog.record.builder import build_batch
from kafkalog.record.control import parse_control_key
from kafkalog.record.crc import crc32c
from kafkalog.record.records import iter_batches
from kafkalog.record.varint import read_unsigned_varint, write_unsigned_varint

__all__ = ["BOOTSTRAP_SNAPSHOT", "METADATA_PARTITION", "KafkaMetadata", "TopicMetadata", "add_topics",
           "read_kafka_metadata", "read_topic_configs", "topics_in_snapshot"]

METADATA_PARTITION = "__cluster_metadata-0"
#: the snapshot ``kafka-storage.sh format`` writes (end offset 0, epoch 0)
BOOTSTRAP_SNAPSHOT = "00000000000000000000-0000000000.checkpoint"

TOPIC_RECORD, PARTITION_RECORD, CONFIG_RECORD = 2, 3, 4
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


def _uvarint(n: int) -> bytes:
    return write_unsigned_varint(n)


def _string(s: str) -> bytes:
    b = s.encode("utf-8")
    return _uvarint(len(b) + 1) + b


def _nullable_string(s: str | None) -> bytes:
    return b"\x00" if s is None else _string(s)


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
               topics: Sequence[TopicMetadata]) -> int:
    """Write ``topics`` into the bootstrap snapshot at ``snapshot_path`` (a batch before its footer,
    the footer renumbered after it); returns the number of records added."""
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
    values = []
    for t in topics:
        values.append(topic_record(t.name, t.topic_id))
        for p in range(t.partitions):
            epoch = t.leader_epochs[p] if p < len(t.leader_epochs) else 0
            values.append(partition_record(p, t.topic_id, node_id, directory_id, max(epoch, 0)))
        values += [config_record(t.name, k, v) for k, v in sorted(t.configs.items())]
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


def leader_epochs(entries: Mapping[int, Sequence[int]], partitions: int) -> List[int]:
    """The latest leader epoch of each of ``partitions`` (0 without one)."""
    return [max(entries.get(p, ()) or [0]) for p in range(partitions)]


# --- reading: the topic configs Kafka keeps in its metadata log ----------------------------------

REMOVE_TOPIC_RECORD = 5
PRODUCER_IDS_RECORD = 15


@dataclass
class KafkaMetadata:
    """What kafkalog takes from a Kafka 4 metadata log: the topic config overrides by topic name,
    and the first producer id Kafka has not handed out (its controller allocates them in blocks)."""

    topic_configs: Dict[str, Dict[str, str]] = field(default_factory=dict)
    next_producer_id: int = 0


def _snapshot_end(name: str) -> int:
    return int(name.split("-")[0])


def _replay(data: bytes, min_offset: int, ids: Dict[bytes, str], configs: Dict[str, Dict[str, str]],
            meta: KafkaMetadata) -> None:
    for batch in iter_batches(data):
        if batch.is_control or batch.last_offset < min_offset:
            continue
        for r in batch:
            if r.offset < min_offset or r.value is None:
                continue
            v = bytes(r.value)
            try:
                key, p = _record_type(v)
                if key == TOPIC_RECORD:
                    name, p = _compact_string(v, p)
                    ids[v[p:p + 16]] = name
                elif key == PRODUCER_IDS_RECORD:        # BrokerId, BrokerEpoch, NextProducerId
                    meta.next_producer_id = max(meta.next_producer_id,
                                                struct.unpack_from(">q", v, p + 12)[0])
                elif key == REMOVE_TOPIC_RECORD:
                    configs.pop(ids.pop(v[p:p + 16], ""), None)
                elif key == CONFIG_RECORD and v[p] == TOPIC_RESOURCE:
                    fields = []
                    p += 1
                    for _ in range(3):
                        n, p = read_unsigned_varint(v, p)
                        fields.append(None if n == 0 else v[p:p + n - 1].decode("utf-8"))
                        p += max(n - 1, 0)
                    topic, cfg, value = fields
                    if topic is None or cfg is None:
                        continue
                    if value is None:
                        configs.get(topic, {}).pop(cfg, None)
                    else:
                        configs.setdefault(topic, {})[cfg] = value
            except (ValueError, IndexError, UnicodeDecodeError, struct.error):
                continue        # a record this does not read: Kafka's to judge, not a config


def _replay_file(path: str, min_offset: int, ids: Dict[bytes, str], configs: Dict[str, Dict[str, str]],
                 meta: KafkaMetadata) -> None:
    """:func:`_replay` over a file, mapped (a metadata segment may be large)."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            _replay(mm, min_offset, ids, configs, meta)     # type: ignore[arg-type]


def read_kafka_metadata(data_dir: str) -> KafkaMetadata:
    """What ``data_dir``'s Kafka 4 metadata log (``__cluster_metadata-0``: its newest snapshot, then
    the log after it) says of topic configs and producer ids; empty when the directory has no
    metadata log (a kafkalog directory, or ``metadata.log.dir`` elsewhere)."""
    meta = KafkaMetadata()
    mdir = os.path.join(data_dir, METADATA_PARTITION)
    try:
        names = sorted(os.listdir(mdir))
    except OSError:
        return meta
    ids: Dict[bytes, str] = {}
    configs: Dict[str, Dict[str, str]] = {}
    snapshots = sorted((n for n in names if n.endswith(".checkpoint") and "-" in n), key=_snapshot_end)
    start = 0
    if snapshots:
        _replay_file(os.path.join(mdir, snapshots[-1]), 0, ids, configs, meta)
        start = _snapshot_end(snapshots[-1])
    for n in names:
        if n.endswith(".log") and n[:-4].isdigit():
            _replay_file(os.path.join(mdir, n), start, ids, configs, meta)
    known = set(ids.values())
    meta.topic_configs = {t: c for t, c in configs.items() if t in known and c}
    return meta


def read_topic_configs(data_dir: str) -> Dict[str, Dict[str, str]]:
    """The topic config overrides Kafka keeps in ``data_dir``'s metadata log, by topic name."""
    return read_kafka_metadata(data_dir).topic_configs
