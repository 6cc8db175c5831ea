"""Committed offsets: ``__consumer_offsets`` in Kafka's formats, surviving a restart, decoded with
kafka-python's protocol types and Kafka's schemas written out by hand (an independent oracle)."""

from __future__ import annotations

import io
import subprocess
import sys
import textwrap

import pytest
from kafka.protocol.old.types import Array, Bytes, Int16, Int32, Int64, Schema, String

import kafkalog
from kafkalog.client import TopicPartition
from kafkalog.coordinator.group_metadata import (
    GroupMetadataValue,
    MemberMetadata,
    decode_group_metadata_value,
    partition_for_group,
)
from kafkalog.coordinator.offsets import OffsetsStore

# Kafka's group-coordinator/src/main/resources/common/message/*.json, as kafka-python schemas
KEY_VERSION = Schema(("version", Int16))
OFFSET_COMMIT_KEY = Schema(("group", String("utf-8")), ("topic", String("utf-8")), ("partition", Int32))
GROUP_METADATA_KEY = Schema(("group", String("utf-8")))
OFFSET_COMMIT_VALUE_V3 = Schema(("offset", Int64), ("leader_epoch", Int32), ("metadata", String("utf-8")),
                                ("commit_timestamp", Int64))
MEMBER_V3 = Schema(("member_id", String("utf-8")), ("group_instance_id", String("utf-8")),
                   ("client_id", String("utf-8")), ("client_host", String("utf-8")),
                   ("rebalance_timeout", Int32), ("session_timeout", Int32), ("subscription", Bytes),
                   ("assignment", Bytes))
GROUP_METADATA_VALUE_V3 = Schema(("protocol_type", String("utf-8")), ("generation", Int32),
                                 ("protocol", String("utf-8")), ("leader", String("utf-8")),
                                 ("current_state_timestamp", Int64), ("members", Array(MEMBER_V3)))


def _records(data_dir, partition):
    """(key, value) of every record of one ``__consumer_offsets`` partition, read as raw data."""
    with kafkalog.open(data_dir, read_only=True) as dl:
        return [(r.key, r.value) for r in dl.consume("__consumer_offsets", partition)]


def test_commit_survives_a_restart_and_is_kafkas_format(tmp_path):
    d = str(tmp_path / "d")
    with kafkalog.open(d, background=False) as dl:
        dl.create_topic("t", 2)
        dl.produce_many("t", [b"x%d" % i for i in range(10)], partition=0)
    # another process consumes and commits, then exits
    script = textwrap.dedent(f"""
        import kafkalog
        from kafkalog.client import TopicPartition
        with kafkalog.open({d!r}, background=False) as dl:
            c = dl.consumer("t", group_id="billing", auto_offset_reset="earliest",
                            enable_auto_commit=False)
            n = 0
            while n < 7:
                n += sum(len(v) for v in c.poll(timeout_ms=100, max_records=7 - n).values())
            c.commit()
            c.commit({{TopicPartition("t", 1): (3, "meta-data", 4)}})
            c.close()
    """)
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
    with kafkalog.open(d, background=False) as dl:
        c = dl.consumer("t", group_id="billing", enable_auto_commit=False)
        assert c.committed(TopicPartition("t", 0)) == 7
        assert c.position(TopicPartition("t", 0)) == 7
        oam = c.committed(TopicPartition("t", 1), metadata=True)
        assert (oam.offset, oam.metadata, oam.leader_epoch) == (3, "meta-data", 4)
        assert [r.value for r in c.poll(timeout_ms=0)[TopicPartition("t", 0)]] == [b"x7", b"x8", b"x9"]
        c.close()
        assert dl.partitions("__consumer_offsets") == 50
    part = partition_for_group("billing")
    recs = _records(d, part)
    decoded = []
    for key, value in recs:
        kb = io.BytesIO(key)
        version = KEY_VERSION.decode(kb)[0]
        assert version == 1
        group, topic, partition = OFFSET_COMMIT_KEY.decode(kb)
        assert kb.read() == b""
        vb = io.BytesIO(value)
        assert KEY_VERSION.decode(vb)[0] == 3
        offset, epoch, metadata, ts = OFFSET_COMMIT_VALUE_V3.decode(vb)
        assert vb.read() == b"" and ts > 0
        decoded.append((group, topic, partition, offset, epoch, metadata))
    assert decoded == [("billing", "t", 0, 7, -1, ""), ("billing", "t", 1, 0, -1, ""),
                       ("billing", "t", 1, 3, 4, "meta-data")]
    # no other partition holds anything
    assert all(not _records(d, p) for p in (0, 1, 49) if p != part)


def test_group_partition_is_kafkas():
    # Java: "".hashCode() == 0, "a".hashCode() == 97, "hello".hashCode() == 99162322,
    # "polygenelubricants".hashCode() == Integer.MIN_VALUE (Utils.abs maps it to 0)
    assert partition_for_group("") == 0
    assert partition_for_group("a") == 97 % 50
    assert partition_for_group("hello") == 99162322 % 50
    assert partition_for_group("polygenelubricants") == 0
    assert partition_for_group("hello", 7) == 99162322 % 7
    # "Aa" and "BB" collide in Java; a non-BMP character counts as two UTF-16 units
    assert partition_for_group("Aa") == partition_for_group("BB") == 2112 % 50
    assert partition_for_group("\U0001F600") == (0xD83D * 31 + 0xDE00) % 50


def test_store_groups_delete_and_tombstones(tmp_path):
    d = str(tmp_path / "d")
    tp = TopicPartition("t", 0)
    with kafkalog.open(d, background=False) as dl:
        store = OffsetsStore(dl.manager, num_partitions=3)
        store.commit("g1", {tp: (5, "m", 2)})
        store.commit("g2", {tp: 9, TopicPartition("u", 1): 1})
        meta = GroupMetadataValue("consumer", 4, "range", "m-1", (
            MemberMetadata("m-1", "client", "/127.0.0.1", 10000, b"sub", b"assign", 30000, None),),
            1234)
        store.store_group_metadata("g3", meta)
        assert store.groups() == ["g1", "g2", "g3"]
        assert store.fetch("g1", [tp, TopicPartition("x", 0)]) == {tp: store.fetch("g1")[tp]}
        assert store.fetch("g1")[tp][:3] == (5, "m", 2)
        store.delete_offsets("g2", [TopicPartition("u", 1)])
        assert store.delete_group("g1") is True
        assert store.delete_group("nobody") is False
    with kafkalog.open(d, background=False) as dl:
        store = OffsetsStore(dl.manager)
        assert store.num_partitions == 3                  # an existing topic keeps its count
        assert store.groups() == ["g2", "g3"]
        assert {k: v.offset for k, v in store.fetch("g2").items()} == {tp: 9}
        assert store.group_metadata("g3") == meta
    # the group metadata record, read with Kafka's schema
    recs = _records(d, partition_for_group("g3", 3))
    (key, value), = [r for r in recs if r[0][:2] == b"\x00\x02"]
    kb = io.BytesIO(key)
    assert KEY_VERSION.decode(kb)[0] == 2 and list(GROUP_METADATA_KEY.decode(kb)) == ["g3"]
    vb = io.BytesIO(value)
    assert KEY_VERSION.decode(vb)[0] == 3
    ptype, gen, proto, leader, ts, members = GROUP_METADATA_VALUE_V3.decode(vb)
    assert (ptype, gen, proto, leader, ts) == ("consumer", 4, "range", "m-1", 1234)
    assert [list(m) for m in members] == [["m-1", None, "client", "/127.0.0.1", 30000, 10000, b"sub",
                                          b"assign"]]
    # g1's deletion: tombstones (null values) for its offset and its metadata key
    g1 = _records(d, partition_for_group("g1", 3))
    assert [v for _k, v in g1][-2:] == [None, None]
    assert g1[-1][0] == b"\x00\x02" + GROUP_METADATA_KEY.encode(["g1"])


def test_group_metadata_value_written_by_kafkas_schema_decodes():
    members = [["c-1", "static-1", "cid", "/10.0.0.1", 45000, 10000, b"\x00\x01", b""]]
    raw = Int16.encode(3) + GROUP_METADATA_VALUE_V3.encode(["consumer", 2, "range", "c-1", 99, members])
    v = decode_group_metadata_value(raw)
    assert (v.protocol_type, v.generation, v.protocol, v.leader, v.current_state_timestamp) == \
        ("consumer", 2, "range", "c-1", 99)
    assert v.members == (MemberMetadata("c-1", "cid", "/10.0.0.1", 10000, b"\x00\x01", b"", 45000,
                                        "static-1"),)
    from kafkalog.errors import InvalidRecordError
    with pytest.raises(InvalidRecordError):
        decode_group_metadata_value(raw[:-3])


def test_auto_commit_and_commit_on_close(tmp_path):
    d = str(tmp_path / "d")
    tp = TopicPartition("t", 0)
    with kafkalog.open(d, background=False) as dl:
        dl.create_topic("t", 1)
        dl.produce_many("t", [b"%d" % i for i in range(6)])
        c = dl.consumer("t", group_id="g", auto_offset_reset="earliest", auto_commit_interval_ms=0,
                        max_poll_records=2)
        c.poll(timeout_ms=0)
        c.poll(timeout_ms=0)                        # the interval has passed: commits position 2
        assert c.committed(tp) == 2
        c.poll(timeout_ms=0)
        c.close()                                   # auto-commit commits on close
        c2 = dl.consumer("t", group_id="g")
        assert c2.committed(tp) == 6 and c2.position(tp) == 6
        c3 = dl.consumer("t", group_id="other", auto_offset_reset="earliest", enable_auto_commit=False)
        c3.poll(timeout_ms=0)
        c3.close()
        assert dl.consumer("t", group_id="other").committed(tp) is None


def test_offset_commit_value_versions_from_kafkas_schema():
    """Byte vectors written out by hand from OffsetCommitValue.json: v1 (expireTimestamp), v3
    (leaderEpoch) and the flexible v4 (compact string, empty tagged-field section)."""
    import struct

    from kafkalog.coordinator.group_metadata import (
        OffsetCommitValue,
        decode_offset_commit_value,
        encode_offset_commit_value,
    )
    v1 = struct.pack(">hqh2sqq", 1, 42, 2, b"md", 1000, 2000)
    v3 = struct.pack(">hqih2sq", 3, 42, 7, 2, b"md", 1000)
    v4 = struct.pack(">hqi", 4, 42, 7) + bytes([3]) + b"md" + struct.pack(">q", 1000) + b"\x00"
    assert decode_offset_commit_value(v1) == OffsetCommitValue(42, "md", 1000, -1, 2000)
    assert decode_offset_commit_value(v3) == OffsetCommitValue(42, "md", 1000, 7, -1)
    assert decode_offset_commit_value(v4) == OffsetCommitValue(42, "md", 1000, 7, -1)
    assert encode_offset_commit_value(OffsetCommitValue(42, "md", 1000, -1, 2000)) == v1
    assert encode_offset_commit_value(OffsetCommitValue(42, "md", 1000, 7)) == v3
    assert encode_offset_commit_value(OffsetCommitValue(42, "md", 1000, 7), version=4) == v4
    from kafkalog.errors import InvalidRecordError
    for bad in (v3[:-1], v3 + b"\x00", struct.pack(">h", 9) + v3[2:]):
        with pytest.raises(InvalidRecordError):
            decode_offset_commit_value(bad)


def test_read_only_directory_reads_committed_offsets_and_refuses_commits(tmp_path):
    from kafkalog.errors import InvalidConfigError, LogDirError
    d = str(tmp_path / "d")
    tp = TopicPartition("t", 0)
    with kafkalog.open(d, background=False) as dl:
        dl.create_topic("t", 1)
        dl.produce_many("t", [b"a", b"b", b"c"])
        c = dl.consumer("t", group_id="g", enable_auto_commit=False)
        c.commit({tp: 2})
        c.close()
    with kafkalog.open(d, read_only=True) as dl:
        c = dl.consumer("t", group_id="g")             # auto-commit defaults to off here
        assert c.committed(tp) == 2
        assert [r.value for r in c.poll(timeout_ms=0)[tp]] == [b"c"]
        with pytest.raises(LogDirError):
            c.commit()
        c.close()
        with pytest.raises(InvalidConfigError):
            dl.consumer("t", group_id="g", enable_auto_commit=True)
