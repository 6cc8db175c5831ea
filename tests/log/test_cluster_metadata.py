"""What kafkalog takes from a Kafka 4 data directory's metadata log (``__cluster_metadata-0``): the
topic configs (a compacted topic is not a deleting one: its offset gaps are not corruption) and the
producer ids Kafka's controller handed out (never handed out again). The metadata records are
written here with the encoders of :mod:`kafkalog.log.cluster_metadata` (Kafka's schemas, the same
bytes ``tests/kafka44`` feeds a real Kafka 4.4); ``tests/kafka44`` checks both on Kafka's own
directories."""

from __future__ import annotations

import struct
import uuid
from pathlib import Path

import kafkalog
from kafkalog.coordinator.producer_ids import ProducerIdManager
from kafkalog.log.checkpoint import MetaProperties, PartitionMetadataFile
from kafkalog.log.cluster_metadata import _frame, config_record, read_kafka_metadata, topic_record
from kafkalog.record import build_batch


def _producer_ids_record(next_id: int) -> bytes:
    return _frame(15, 0, struct.pack(">iqq", 1, 7, next_id))


def _kafka_dir(tmp_path: Path, configs: dict[str, str], next_producer_id: int) -> Path:
    """A data directory as Kafka 4 leaves it after a kill: meta.properties, the metadata log, and a
    partition ``c-0`` whose records Kafka's cleaner thinned out (offsets 0, 1, then 5, 6)."""
    data = tmp_path / "data"
    (data / "__cluster_metadata-0").mkdir(parents=True)
    MetaProperties(1, "AAAAAAAAAAAAAAAAAAAAAA", 1, "AAAAAAAAAAAAAAAAAAAAAQ").write(data / "meta.properties")
    tid = uuid.uuid4()
    records = [topic_record("c", tid)] + [config_record("c", k, v) for k, v in configs.items()] + \
        [_producer_ids_record(next_producer_id)]
    (data / "__cluster_metadata-0" / ("0" * 20 + ".log")).write_bytes(
        build_batch([(None, r, 1000) for r in records], partition_leader_epoch=1))
    part = data / "c-0"
    part.mkdir()
    PartitionMetadataFile(part / "partition.metadata").write(tid)
    (part / ("0" * 20 + ".log")).write_bytes(
        build_batch([(b"k0", b"v0", 1000), (b"k1", b"v1", 1000)], base_offset=0)
        + build_batch([(b"k5", b"v5", 1000), (b"k6", b"v6", 1000)], base_offset=5))
    return data


def test_a_compacted_topic_of_kafkas_metadata_is_recovered_without_loss(tmp_path: Path) -> None:
    data = _kafka_dir(tmp_path, {"cleanup.policy": "compact", "min.compaction.lag.ms": "0"}, 3000)
    meta = read_kafka_metadata(str(data))
    assert meta.topic_configs == {"c": {"cleanup.policy": "compact", "min.compaction.lag.ms": "0"}}
    assert meta.next_producer_id == 3000
    with kafkalog.open(data, {"log.cleaner.enable": "false"}, background=False) as dl:
        assert dl.topic_config("c")["cleanup.policy"] == ["compact"]
        assert [r.offset for r in dl.consume("c")] == [0, 1, 5, 6]


def test_a_topic_kafka_knows_as_deleting_keeps_kafkalogs_contiguity_check(tmp_path: Path) -> None:
    """The same gap in a topic whose config says delete: kafkalog's recovery still takes a base offset
    that jumps ahead for damage (``contiguous``), as for its own topics."""
    data = _kafka_dir(tmp_path, {"cleanup.policy": "delete"}, 0)
    with kafkalog.open(data, {"log.cleaner.enable": "false"}, background=False) as dl:
        assert [r.offset for r in dl.consume("c")] == [0, 1]


def test_producer_ids_continue_after_kafkas(tmp_path: Path) -> None:
    data = _kafka_dir(tmp_path, {}, 2000)
    ids = ProducerIdManager(data)
    assert [ids.generate_producer_id() for _ in range(2)] == [2000, 2001]
    # the reservation is durable: a restart continues after the block reserved
    assert ProducerIdManager(data).generate_producer_id() == 3000


def test_damaged_security_records_are_skipped_not_a_crash(tmp_path: Path) -> None:
    """ACL, SCRAM and quota records cut at every length (and an unknown mechanism, a negative length)
    amid whole ones: the whole ones are read, the others skipped, nothing raises."""
    from kafkalog.log.cluster_metadata import acl_record, client_quota_record, scram_record
    whole = [acl_record(uuid.uuid4(), 2, "orders", 3, "User:alice", "*", 4, 3),
             scram_record("carol", "SCRAM-SHA-512", b"salt", b"s" * 64, b"k" * 64, 8192),
             client_quota_record((("client-id", None), ("user", "bob")), "producer_byte_rate", 1024.0)]
    cut = [r[:n] for r in whole for n in range(1, len(r))]
    odd = [whole[1].replace(b"\x06carol\x02", b"\x06carol\x07"),         # no such mechanism
           whole[0][:20] + b"\xff\xff\xff\xff\x0f" + whole[0][25:]]     # a length beyond the record
    mdir = tmp_path / "__cluster_metadata-0"
    mdir.mkdir()
    (mdir / ("0" * 20 + ".log")).write_bytes(
        build_batch([(None, r, 1000) for r in cut + odd + whole], partition_leader_epoch=1))
    sec = read_kafka_metadata(str(tmp_path)).security
    assert sec.acls == [(2, "orders", 3, "User:alice", "*", 4, 3)]
    assert sec.scram == {("SCRAM-SHA-512", "carol"): (b"salt", b"s" * 64, b"k" * 64, 8192)}
    assert sec.quotas == {(("client-id", None), ("user", "bob")): {"producer_byte_rate": 1024.0}}
