"""Spec §1.9 golden byte vectors: built byte for byte, and decoded back."""
from __future__ import annotations

from kafkalog.record import (
    ControlRecordType,
    EndTransactionMarker,
    TimestampType,
    batch_at,
    build_batch,
    build_empty_batch,
    build_end_txn_marker,
    iter_batches,
)
from kafkalog.record.compression import compress


def h(s: str) -> bytes:
    return bytes.fromhex(s.replace(" ", "").replace("\n", ""))


GOLDEN_V2 = h("""0000000000000000 0000004a ffffffff 02 948f1ea4 0000 00000001
   00000000000003e8 00000000000003ed ffffffffffffffff ffff ffffffff 00000002
   10 00 00 00 02 6b 02 76 00
   1e 00 0a 02 01 04 7632 04 02 68 02 78 02 6e 01""")
GOLDEN_COMMIT = h("""0000000000000000 00000042 ffffffff 02 f3af754f 0030 00000000
   00000000000003e8 00000000000003e8 0000000000000001 0000 ffffffff 00000001
   20 00 00 00 08 00000001 0c 0000 00000064 00""")
GOLDEN_EMPTY = h("0000000000000005 00000031 0000000a 02 e47cdff0 0000 00000004 ffffffffffffffff "
                 "00000000000004d2 0000000000000007 0001 00000003 00000000")
GOLDEN_V0 = h("0000000000000000 00000010 1fecd70a 00 00 00000001 6b 00000001 76")
GOLDEN_V1 = h("0000000000000000 00000018 5abedbab 01 00 00000000000004d2 00000001 6b 00000001 76")


def test_v2_golden(any_kernel):
    assert build_batch([(b"k", b"v", 1000), (None, b"v2", 1005, [("h", b"x"), ("n", None)])]) \
        == GOLDEN_V2
    b = batch_at(GOLDEN_V2)
    assert len(GOLDEN_V2) == 86 and b.is_valid() and b.checksum == 0x948F1EA4
    assert (b.base_offset, b.last_offset, b.count, b.max_timestamp) == (0, 1, 2, 1005)
    r0, r1 = b.records()
    assert (r0.offset, r0.timestamp, r0.key, r0.value, list(r0.headers)) == (0, 1000, b"k", b"v", [])
    assert (r1.key, r1.value, [tuple(x) for x in r1.headers]) == (None, b"v2", [("h", b"x"), ("n", None)])
    assert r0.size_in_bytes + r1.size_in_bytes == 86 - 61


def test_commit_marker_golden(any_kernel):
    assert build_end_txn_marker(ControlRecordType.COMMIT, producer_id=1, producer_epoch=0,
                                coordinator_epoch=100, timestamp=1000) == GOLDEN_COMMIT
    b = batch_at(GOLDEN_COMMIT)
    assert b.is_valid() and b.is_control and b.is_transactional and b.size_in_bytes == 78
    (rec,) = b.records()
    m = EndTransactionMarker.deserialize(rec)
    assert m == EndTransactionMarker(ControlRecordType.COMMIT, 100)


def test_empty_batch_golden():
    assert build_empty_batch(base_offset=5, last_offset=9, partition_leader_epoch=10,
                             producer_id=7, producer_epoch=1, base_sequence=3,
                             max_timestamp=1234) == GOLDEN_EMPTY
    b = batch_at(GOLDEN_EMPTY)
    assert b.is_valid() and b.records() == [] and b.count == 0
    assert (b.base_offset, b.last_offset, b.base_timestamp, b.last_sequence) == (5, 9, -1, 7)
    assert (b.partition_leader_epoch, b.producer_id, b.producer_epoch) == (10, 7, 1)


def test_legacy_golden():
    assert build_batch([(b"k", b"v")], magic=0) == GOLDEN_V0
    assert build_batch([(b"k", b"v", 1234)], magic=1) == GOLDEN_V1
    b0, b1 = list(iter_batches(GOLDEN_V0 + GOLDEN_V1))
    assert b0.is_valid() and b1.is_valid()
    assert b0.timestamp_type == TimestampType.NO_TIMESTAMP_TYPE and b0.max_timestamp == -1
    assert b1.timestamp_type == TimestampType.CREATE_TIME and b1.max_timestamp == 1234
    assert [(r.key, r.value, r.timestamp) for r in b1.records()] == [(b"k", b"v", 1234)]


def test_lz4_headers():
    assert compress(3, b"x" * 10, magic=2)[:7] == h("04224d18604082")
    assert compress(3, b"x" * 10, magic=1)[:7] == h("04224d18604082")
    assert compress(3, b"x" * 10, magic=0)[:7] == h("04224d1860401a")
