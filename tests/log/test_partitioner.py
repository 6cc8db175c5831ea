"""Kafka's murmur2 (UtilsTest vectors) cross-checked with kafka-python."""

from hypothesis import given, settings, strategies as st
from kafka.partitioner.default import murmur2 as kp_murmur2

from kafkalog.log.partitioner import murmur2, partition_for_key

VECTORS = {"21": -973932308, "foobar": -790332482, "a-little-bit-long-string": -985981536,
           "a-little-bit-longer-string": -1486304829,
           "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971, "abc": 479470107}


def test_vectors():
    for s, h in VECTORS.items():
        assert murmur2(s.encode()) == h


def _kp_signed(data: bytes) -> int:
    h = kp_murmur2(bytearray(data))
    return h - (1 << 32) if h >= 1 << 31 else h


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_matches_kafka_python(data):
    assert murmur2(data) == _kp_signed(data)
    assert partition_for_key(data, 7) == (_kp_signed(data) & 0x7FFFFFFF) % 7


def test_partition_for_key_range():
    assert all(0 <= partition_for_key(bytes([i]), 3) < 3 for i in range(256))
