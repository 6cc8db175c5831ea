"""Legacy v0/v1 messages and wrappers (spec §1.3-1.4, §5.3) and the builder (§5.4)."""
from __future__ import annotations

import struct

import pytest

from kafkalog.errors import CorruptRecordError, InvalidRecordError, KafkalogError, UnsupportedCompressionTypeError
from kafkalog.record import BatchBuilder, CompressionType, TimestampType, batch_at, build_batch, iter_batches
from kafkalog.record.compression import compress
from kafkalog.record.legacy import encode_legacy_message

LEGACY_CODECS = [CompressionType.NONE, CompressionType.GZIP, CompressionType.SNAPPY,
                 CompressionType.LZ4]
RECS = [(b"k0", b"v0", 10), (None, b"v1", 30), (b"k2", None, 20)]


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", LEGACY_CODECS)
def test_legacy_round_trip(magic, codec):
    buf = build_batch(RECS, magic=magic, compression=codec, base_offset=100)
    batches = list(iter_batches(buf))
    assert len(batches) == (3 if codec == CompressionType.NONE else 1)
    recs = [r for b in batches for r in b.records()]
    for b in batches:
        b.ensure_valid()
        assert b.magic == magic and b.compression == codec and b.count is None
        assert b.producer_id == -1 and b.partition_leader_epoch == -1 and not b.is_control
    assert [r.offset for r in recs] == [100, 101, 102]
    assert [(r.key, r.value) for r in recs] == [(k, v) for k, v, _ in RECS]
    want_ts = [10, 30, 20] if magic == 1 else [-1, -1, -1]
    assert [r.timestamp for r in recs] == want_ts
    assert batches[-1].last_offset == 102 and batches[0].base_offset == 100
    if codec != CompressionType.NONE:
        assert batches[0].max_timestamp == (30 if magic == 1 else -1)


def test_checksum_changes_with_content():
    a = batch_at(build_batch([(b"k", b"v", 1)], magic=1))
    b = batch_at(build_batch([(b"k", b"w", 1)], magic=1))
    assert a.checksum == a.compute_checksum() and a.is_valid()
    assert a.checksum != b.checksum


def test_legacy_crc_corruption_detected():
    buf = bytearray(build_batch([(b"k", b"v", 1)], magic=1))
    buf[-1] ^= 1
    b = batch_at(buf)
    assert not b.is_valid()
    with pytest.raises(CorruptRecordError, match="stored crc"):
        b.ensure_valid()


def _wrapper(magic, inner_offsets, wrapper_offset, codec=CompressionType.GZIP, ts_type_bit=0,
             inner_codec=0, wrapper_ts=50):
    inner = b"".join(encode_legacy_message(o, magic, b"k", b"v%d" % o, timestamp=o,
                                           attributes=inner_codec) for o in inner_offsets)
    return encode_legacy_message(wrapper_offset, magic, None, compress(codec, inner, magic=magic),
                                 timestamp=wrapper_ts, attributes=int(codec) | ts_type_bit)


def test_v1_set_last_offset_rebases_inner():
    buf = bytearray(build_batch(RECS, magic=1, compression=CompressionType.GZIP))
    b = batch_at(buf)
    b.set_last_offset(500)
    assert [r.offset for r in batch_at(buf).records()] == [498, 499, 500]
    assert batch_at(buf).is_valid()


def test_v1_wrapper_offset_zero_librdkafka():
    b = batch_at(_wrapper(1, [0, 1, 2], 0))
    assert [r.offset for r in b.records()] == [0, 1, 2]


def test_v1_wrapper_offset_below_last_inner_rejected():
    with pytest.raises(InvalidRecordError, match="wrapper offset"):
        batch_at(_wrapper(1, [0, 1, 2], 1)).records()


def test_v0_inner_offsets_absolute():
    b = batch_at(_wrapper(0, [7, 8, 9], 9))
    assert [r.offset for r in b.records()] == [7, 8, 9]


def test_nested_compression_rejected():
    with pytest.raises(InvalidRecordError, match="inner record"):
        batch_at(_wrapper(1, [0], 0, inner_codec=1)).records()


def test_zstd_in_legacy_rejected():
    buf = encode_legacy_message(0, 1, None, compress(4, b"x" * 30, magic=2), timestamp=1,
                                attributes=4)
    with pytest.raises(UnsupportedCompressionTypeError):
        batch_at(buf).records()
    with pytest.raises(KafkalogError):
        build_batch(RECS, magic=1, compression=CompressionType.ZSTD)


def test_empty_and_null_wrapper_rejected():
    empty = encode_legacy_message(0, 1, None, compress(1, b"", magic=1), timestamp=1, attributes=1)
    with pytest.raises(InvalidRecordError, match="no inner records"):
        batch_at(empty).records()
    null = encode_legacy_message(0, 1, None, None, timestamp=1, attributes=1)
    with pytest.raises(InvalidRecordError, match="null"):
        batch_at(null).records()


def test_v1_set_max_timestamp_log_append_time():
    buf = bytearray(build_batch(RECS, magic=1, compression=CompressionType.GZIP))
    b = batch_at(buf)
    b.set_max_timestamp(TimestampType.LOG_APPEND_TIME, 999)
    b = batch_at(buf)
    assert b.is_valid() and b.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert [r.timestamp for r in b.records()] == [999] * 3
    with pytest.raises(ValueError):
        b.set_max_timestamp(TimestampType.NO_TIMESTAMP_TYPE, 1)


def test_v0_mutations_unsupported():
    b = batch_at(bytearray(build_batch(RECS, magic=0)))
    with pytest.raises(KafkalogError):
        b.set_max_timestamp(TimestampType.CREATE_TIME, 1)
    with pytest.raises(KafkalogError):
        b.set_partition_leader_epoch(1)


def test_negative_key_length_is_null_and_oversized_key_rejected():
    buf = bytearray(encode_legacy_message(0, 1, b"k", b"v", timestamp=1))
    struct.pack_into(">i", buf, 26, -7)  # any negative length reads as null ... value then misparsed
    with pytest.raises(KafkalogError):
        batch_at(bytes(buf)).records()
    buf2 = bytearray(encode_legacy_message(0, 1, b"k", b"v", timestamp=1))
    struct.pack_into(">i", buf2, 26, 1000)
    with pytest.raises(InvalidRecordError):
        batch_at(bytes(buf2)).records()
    buf3 = encode_legacy_message(0, 1, None, b"v", timestamp=1)
    assert batch_at(buf3).records()[0].key is None


# --- builder (MemoryRecordsBuilderTest) -------------------------------------------------------

def test_builder_rules():
    assert BatchBuilder().build() == b""
    with pytest.raises(ValueError):
        BatchBuilder(magic=1, is_transactional=True, producer_id=1, producer_epoch=0,
                     base_sequence=0)
    with pytest.raises(ValueError):
        BatchBuilder(is_transactional=True)
    with pytest.raises(ValueError):
        BatchBuilder(producer_id=1, producer_epoch=-1, base_sequence=0)
    with pytest.raises(ValueError):
        BatchBuilder(producer_id=1, producer_epoch=0, base_sequence=-1)
    b = BatchBuilder()
    b.append(b"a", b"1", 5, offset=3)
    with pytest.raises(ValueError):
        b.append(b"a", b"1", 5, offset=3)
    with pytest.raises(ValueError):
        b.append(b"a", b"1", -5)


@pytest.mark.parametrize("magic,codec", [(1, CompressionType.NONE), (1, CompressionType.GZIP),
                                         (2, CompressionType.NONE), (2, CompressionType.LZ4)])
def test_log_append_time_build(magic, codec, any_kernel):
    buf = build_batch(RECS, magic=magic, compression=codec,
                      timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time=777)
    recs = [r for b in iter_batches(buf) for r in b.records()]
    assert [r.timestamp for r in recs] == [777] * 3
    assert all(b.max_timestamp == 777 for b in iter_batches(buf))


@pytest.mark.parametrize("codec", list(CompressionType))
@pytest.mark.parametrize("level_ok", [True])
def test_v2_codec_levels(codec, level_ok, any_kernel):
    level = {CompressionType.GZIP: 1, CompressionType.LZ4: 17, CompressionType.ZSTD: -5}.get(codec)
    buf = build_batch([(b"k%d" % i, b"v" * i, i) for i in range(50)], compression=codec,
                      compression_level=level, producer_id=4, producer_epoch=2, base_sequence=9,
                      is_transactional=True, partition_leader_epoch=3)
    b = batch_at(buf)
    b.ensure_valid()
    assert b.count == 50 and b.is_transactional and b.partition_leader_epoch == 3
    assert [r.value for r in b.records()] == [b"v" * i for i in range(50)]
    assert [r.sequence for r in b.records()] == list(range(9, 59))


def test_offsets_with_gaps(any_kernel):
    buf = build_batch(RECS, base_offset=0, offsets=[5, 8, 10])
    b = batch_at(buf)
    assert (b.base_offset, b.last_offset, b.count) == (0, 10, 3)
    assert [r.offset for r in b.records()] == [5, 8, 10]
