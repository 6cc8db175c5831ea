"""Round trips against kafka-python's record classes, both directions, every codec and magic."""
from __future__ import annotations

import pytest

kafka_records = pytest.importorskip("kafka.record.default_records")
from kafka.record.default_records import DefaultRecordBatchBuilder  # noqa: E402
from kafka.record.legacy_records import LegacyRecordBatchBuilder  # noqa: E402
from kafka.record.memory_records import MemoryRecords  # noqa: E402

from kafkalog.record import CompressionType, build_batch, iter_batches  # noqa: E402

TS = 1_700_000_000_000
RECS = [(b"key-%d" % i if i % 3 else None, b"value-%d" % i * (i + 1) if i % 4 else None, TS + i,
         [("h%d" % i, b"x" * i), ("n", None)] if i % 2 else [])
        for i in range(12)]


def _kp_records(buf: bytes):
    mr = MemoryRecords(bytes(buf))
    out = []
    while mr.has_next():
        batch = mr.next_batch()
        if hasattr(batch, "validate_crc"):
            assert batch.validate_crc()
        for r in batch:
            out.append((r.offset, -1 if r.timestamp is None else r.timestamp, r.key, r.value,
                        [(k, v) for k, v in (r.headers or [])]))
    return out


def _our_records(buf: bytes):
    out = []
    for b in iter_batches(buf):
        b.ensure_valid()
        for r in b.records():
            out.append((r.offset, r.timestamp, r.key, r.value, [tuple(h) for h in r.headers]))
    return out


V2_CODECS = list(CompressionType)
LEGACY_CODECS = [CompressionType.NONE, CompressionType.GZIP, CompressionType.SNAPPY,
                 CompressionType.LZ4]


@pytest.mark.parametrize("codec", V2_CODECS)
def test_v2_kafkalog_to_kafka_python(codec, any_kernel):
    buf = build_batch(RECS, base_offset=40, compression=codec, producer_id=7, producer_epoch=1,
                      base_sequence=3)
    assert _kp_records(buf) == _our_records(buf)
    assert [r[0] for r in _kp_records(buf)] == list(range(40, 52))


@pytest.mark.parametrize("codec", V2_CODECS)
def test_v2_kafka_python_to_kafkalog(codec, any_kernel):
    builder = DefaultRecordBatchBuilder(2, int(codec), False, 7, 1, 3, 1 << 20)
    for i, (k, v, ts, h) in enumerate(RECS):
        builder.append(i, ts, k, v, [(hk, hv) for hk, hv in h])
    buf = bytes(builder.build())
    (b,) = list(iter_batches(buf))
    assert b.is_valid() and b.compression == codec and b.producer_id == 7
    assert [r.sequence for r in b.records()] == list(range(3, 15))
    assert _our_records(buf) == _kp_records(buf)
    assert [(r[2], r[3]) for r in _our_records(buf)] == [(k, v) for k, v, _, _ in RECS]


try:
    import xxhash  # noqa: F401  (kafka-python needs it for magic-0 lz4)
    HAVE_XXHASH = True
except ImportError:
    HAVE_XXHASH = False


def _skip_v0_lz4(magic, codec):
    if magic == 0 and codec == CompressionType.LZ4 and not HAVE_XXHASH:
        pytest.skip("kafka-python needs xxhash for magic-0 lz4")


def _legacy_recs():
    return [(k, v, ts) for k, v, ts, _ in RECS]


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", LEGACY_CODECS)
def test_legacy_kafkalog_to_kafka_python(magic, codec):
    _skip_v0_lz4(magic, codec)
    buf = build_batch(_legacy_recs(), magic=magic, compression=codec, base_offset=10)
    assert _kp_records(buf) == _our_records(buf)
    assert [r[0] for r in _our_records(buf)] == list(range(10, 22))


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", LEGACY_CODECS)
def test_legacy_kafka_python_to_kafkalog(magic, codec):
    _skip_v0_lz4(magic, codec)
    builder = LegacyRecordBatchBuilder(magic, int(codec), 1 << 20)
    for i, (k, v, ts) in enumerate(_legacy_recs()):
        builder.append(i, ts if magic else None, k, v)
    buf = bytes(builder.build())
    got = _our_records(buf)
    assert got == _kp_records(buf)
    assert [(r[2], r[3]) for r in got] == [(k, v) for k, v, _ in _legacy_recs()]
    assert [r[1] for r in got] == ([ts for _, _, ts in _legacy_recs()] if magic else [-1] * 12)
