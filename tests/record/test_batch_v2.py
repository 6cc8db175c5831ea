"""DefaultRecordBatchTest / DefaultRecordTest intent (spec §5.1, §5.2), against both kernels."""
from __future__ import annotations

import gzip
import struct

import pytest

from kafkalog.errors import CorruptRecordError, InvalidRecordError, KafkalogError
from kafkalog.record import (
    CompressionType,
    ControlRecordType,
    DefaultRecordBatch,
    EndTransactionMarker,
    TimestampType,
    batch_at,
    build_batch,
    build_empty_batch,
    build_end_txn_marker,
    iter_batches,
)
from kafkalog.record.builder import write_v2_header
from kafkalog.record.compression import compress

CODECS = list(CompressionType)


@pytest.mark.parametrize("ts_type", [TimestampType.CREATE_TIME, TimestampType.LOG_APPEND_TIME])
@pytest.mark.parametrize("txn", [False, True])
@pytest.mark.parametrize("control", [False, True])
def test_empty_header_fields(ts_type, txn, control):
    buf = build_empty_batch(base_offset=15, last_offset=37, producer_id=23423, producer_epoch=138,
                            base_sequence=62, timestamp_type=ts_type, max_timestamp=1234,
                            partition_leader_epoch=9, is_transactional=txn, is_control=control)
    b = batch_at(buf)
    assert b.is_valid() and b.size_in_bytes == 61
    assert (b.base_offset, b.last_offset, b.base_timestamp, b.max_timestamp) == (15, 37, -1, 1234)
    assert (b.producer_id, b.producer_epoch, b.base_sequence, b.last_sequence) == (23423, 138, 62, 84)
    assert b.timestamp_type == ts_type and b.is_transactional == txn and b.is_control == control
    assert b.partition_leader_epoch == 9 and b.records() == [] and b.delete_horizon_ms is None


@pytest.mark.parametrize("codec", CODECS)
def test_two_records_at_large_offset(codec, any_kernel):
    buf = build_batch([(b"a", b"1", 10), (b"b", b"2", 11)], base_offset=1234567, compression=codec)
    b = batch_at(buf)
    b.ensure_valid()
    assert (b.base_offset, b.last_offset, b.next_offset, b.max_timestamp) == (1234567, 1234568, 1234569, 11)
    assert b.compression == codec
    assert (b.producer_id, b.producer_epoch, b.base_sequence, b.last_sequence) == (-1, -1, -1, -1)
    assert [(r.offset, r.key, r.value, r.sequence) for r in b.records()] == [
        (1234567, b"a", b"1", -1), (1234568, b"b", b"2", -1)]


def test_sequence_wrap_around(any_kernel):
    buf = build_batch([(b"a", b"1", 1)] * 3, producer_id=5, producer_epoch=0,
                      base_sequence=2**31 - 2)
    b = batch_at(buf)
    assert b.last_sequence == 0
    assert [r.sequence for r in b.records()] == [2**31 - 2, 2**31 - 1, 0]


def test_size_estimate_matches(any_kernel):
    recs = [(None, None, 1, None), (b"k", None, 2, [("h", None)]), (None, b"v", 3, [("a", b"b")])]
    buf = build_batch(recs)
    assert sum(r.size_in_bytes for r in batch_at(buf).records()) == len(buf) - 61


def test_corrupt_length_is_invalid():
    buf = bytearray(build_batch([(b"a", b"1", 1)]))
    struct.pack_into(">i", buf, 8, 10)
    b = DefaultRecordBatch(buf, 0, 22)
    assert not b.is_valid()
    with pytest.raises(CorruptRecordError) as e:
        b.ensure_valid()
    assert e.value.position == 0
    with pytest.raises(CorruptRecordError):
        list(iter_batches(bytes(buf)))  # length 10 < 14


@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.GZIP])
@pytest.mark.parametrize("count", [1, 3])
def test_count_disagreeing_with_data(codec, count, any_kernel):
    body = any_kernel.encode_records_v2([(b"a", b"1", 1, None), (b"b", b"2", 1, None)], 1)
    if codec:
        body = compress(codec, body, magic=2)
    buf = write_v2_header(body, base_offset=0, attributes=int(codec), last_offset_delta=1,
                          base_timestamp=1, max_timestamp=1, producer_id=-1, producer_epoch=-1,
                          base_sequence=-1, count=count, partition_leader_epoch=-1)
    b = batch_at(buf)
    assert b.is_valid()
    with pytest.raises(InvalidRecordError) as e:
        b.records()
    assert e.value.position is not None and 61 <= e.value.position <= len(buf)


def test_negative_count(any_kernel):
    buf = write_v2_header(b"", base_offset=0, attributes=0, last_offset_delta=0, base_timestamp=1,
                          max_timestamp=1, producer_id=-1, producer_epoch=-1, base_sequence=-1,
                          count=-1, partition_leader_epoch=-1)
    with pytest.raises(InvalidRecordError):
        batch_at(buf).records()


def test_crc_covered_field_change_invalidates():
    buf = bytearray(build_batch([(b"a", b"1", 1)] * 3))
    struct.pack_into(">i", buf, 23, 7)
    assert not batch_at(buf).is_valid()
    with pytest.raises(CorruptRecordError, match="stored crc"):
        batch_at(buf).ensure_valid()


def test_set_last_offset(any_kernel):
    buf = bytearray(build_batch([(b"a", b"1", 1)] * 3))
    b = batch_at(buf)
    b.set_last_offset(500)
    assert (b.base_offset, b.last_offset) == (498, 500) and b.is_valid()
    assert [r.offset for r in batch_at(buf).records()] == [498, 499, 500]


def test_set_partition_leader_epoch():
    buf = bytearray(build_batch([(b"a", b"1", 1)]))
    b = batch_at(buf)
    b.set_partition_leader_epoch(15)
    assert b.partition_leader_epoch == 15 and b.is_valid()


@pytest.mark.parametrize("codec", CODECS)
def test_set_max_timestamp(codec, any_kernel):
    buf = bytearray(build_batch([(b"a", b"1", 1), (b"b", b"2", 5)], compression=codec,
                                producer_id=3, producer_epoch=1, base_sequence=0,
                                is_transactional=True))
    b = batch_at(buf)
    crc = b.checksum
    b.set_max_timestamp(TimestampType.CREATE_TIME, 5)  # unchanged: no rewrite
    assert b.checksum == crc
    b.set_max_timestamp(TimestampType.LOG_APPEND_TIME, 15)
    b2 = batch_at(buf)
    assert b2.timestamp_type == TimestampType.LOG_APPEND_TIME and b2.max_timestamp == 15
    assert b2.is_valid() and b2.is_transactional and b2.compression == codec
    assert [r.timestamp for r in b2.records()] == [15, 15]
    with pytest.raises(ValueError):
        b2.set_max_timestamp(TimestampType.NO_TIMESTAMP_TYPE, 1)
    with pytest.raises(KafkalogError):
        b2.set_max_timestamp(TimestampType.NO_TIMESTAMP_TYPE, 1)


def test_mutation_of_readonly_buffer_fails():
    b = batch_at(build_batch([(b"a", b"1", 1)]))
    with pytest.raises(TypeError):
        b.set_last_offset(3)


def test_control_batch_round_trip(any_kernel):
    buf = build_end_txn_marker(EndTransactionMarker(ControlRecordType.ABORT, 17), producer_id=9,
                               producer_epoch=2, timestamp=77, base_offset=40)
    b = batch_at(buf)
    assert b.is_control and b.is_transactional and b.base_sequence == -1 and len(buf) == 78
    m = EndTransactionMarker.deserialize(b.records()[0])
    assert m.control_type == ControlRecordType.ABORT and m.coordinator_epoch == 17


def test_delete_horizon(any_kernel):
    buf = build_batch([(b"a", b"1", 1000), (b"b", None, 900)], delete_horizon_ms=5000)
    b = batch_at(buf)
    assert b.delete_horizon_ms == 5000 and b.base_timestamp == 5000 and b.attributes & 0x40
    assert [r.timestamp for r in b.records()] == [1000, 900]
    assert b.max_timestamp == 1000


def test_unknown_codec():
    buf = write_v2_header(b"x" * 7, base_offset=0, attributes=6, last_offset_delta=0,
                          base_timestamp=1, max_timestamp=1, producer_id=-1, producer_epoch=-1,
                          base_sequence=-1, count=1, partition_leader_epoch=-1)
    b = batch_at(buf)
    assert b.is_valid()
    with pytest.raises(InvalidRecordError, match="Unknown compression"):
        b.records()


def test_decompression_bomb(any_kernel):
    body = any_kernel.encode_records_v2([(None, b"\x00" * (4 << 20), 1, None)], 1)
    buf = write_v2_header(gzip.compress(body), base_offset=0, attributes=1, last_offset_delta=0,
                          base_timestamp=1, max_timestamp=1, producer_id=-1, producer_epoch=-1,
                          base_sequence=-1, count=1, partition_leader_epoch=-1)
    assert len(buf) < 20000
    with pytest.raises(InvalidRecordError):
        batch_at(buf).records(max_decompressed_size=1 << 20)
    assert len(batch_at(buf).records()[0].value) == 4 << 20


MALFORMED_RECORDS = {
    # hand-made record bodies (after the length varint) -> InvalidRecordError
    "key beyond record": "00 00 00 14 6b 02 76 00",
    "negative header count": "00 00 00 01 01 01",
    "header count too large": "00 00 00 01 01 7e",
    "negative header key": "00 00 00 01 01 02 01 01",
    "overlong varlong": "00" + "80" * 10 + "00 00 01 01 00",
    "trailing bytes in record": "00 00 00 01 01 00 00",
}


@pytest.mark.parametrize("case", sorted(MALFORMED_RECORDS))
def test_malformed_records_in_batch(case, any_kernel):
    payload = bytes.fromhex(MALFORMED_RECORDS[case].replace(" ", ""))
    body = any_kernel.write_varint(len(payload)) + payload
    buf = write_v2_header(body, base_offset=0, attributes=0, last_offset_delta=0, base_timestamp=1,
                          max_timestamp=1, producer_id=-1, producer_epoch=-1, base_sequence=-1,
                          count=1, partition_leader_epoch=-1)
    with pytest.raises(InvalidRecordError) as e:
        batch_at(buf).records()
    assert 61 <= e.value.position <= len(buf)


def test_short_v2_batch_header_access_raises():
    buf = bytes.fromhex("00000000000000000000000ea7ec68030200ffffffffffffffff")  # sarama emptyv2
    (b,) = list(iter_batches(buf))
    assert not b.is_valid()
    with pytest.raises(CorruptRecordError):
        b.ensure_valid()
    with pytest.raises(CorruptRecordError):
        b.records()
