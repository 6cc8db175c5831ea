"""Kafka's murmur2 partitioner: the pure-Python reference (``murmur2_py``) against Kafka's UtilsTest
vectors and kafka-python, and the per-key kernel functions (``murmur2`` / ``partition_for_key`` of
both ``_kernel`` and ``_kernel_py``) against the reference."""

import importlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as kp_murmur2

from kafkalog.client import partitioner
from kafkalog.client.partitioner import murmur2, murmur2_py, partition_for_key, partition_for_key_py
from kafkalog.record import kernel

VECTORS = {"21": -973932308, "foobar": -790332482, "a-little-bit-long-string": -985981536,
           "a-little-bit-longer-string": -1486304829,
           "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971, "abc": 479470107}


def _load(name):
    try:
        mod = importlib.import_module(f"kafkalog.record.{name}")
    except ImportError:
        return None
    return mod if hasattr(mod, "murmur2") else None


KERNELS = [k for k in (_load("_kernel"), _load("_kernel_py")) if k is not None]
kernels = pytest.mark.parametrize("K", KERNELS, ids=[k.__name__.rsplit(".", 1)[1] for k in KERNELS])


def _kp_signed(data: bytes) -> int:
    h = kp_murmur2(bytearray(data))
    return h - (1 << 32) if h >= 1 << 31 else h


def test_reference_vectors():
    for s, h in VECTORS.items():
        assert murmur2_py(s.encode()) == h
        assert murmur2(s.encode()) == h


def test_compiled_kernel_is_used_when_built():
    assert kernel.IMPLEMENTATION in ("cython", "python")
    if kernel.IMPLEMENTATION == "cython":
        assert partitioner.IMPLEMENTATION == "cython"
        assert partitioner.murmur2 is kernel.implementation_module.murmur2
        assert partitioner.partition_for_key is kernel.implementation_module.partition_for_key
    else:
        assert partitioner.murmur2 is murmur2_py


@kernels
def test_kernel_vectors_and_java_partitions(K):
    for s, h in VECTORS.items():
        assert K.murmur2(s.encode()) == h
        assert K.partition_for_key(s.encode(), 12) == (h & 0x7FFFFFFF) % 12
    # every tail length, and hashes with the sign bit set
    for n in range(12):
        data = bytes(range(200, 200 + n))
        assert K.murmur2(data) == murmur2_py(data) == _kp_signed(data)
    assert K.partition_for_key(b"foobar", 1) == 0


@kernels
def test_kernel_accepts_bytes_like_and_rejects_the_rest(K):
    data = b"a-little-bit-long-string"
    for form in (bytearray(data), memoryview(data), memoryview(b"xx" + data)[2:]):
        assert K.murmur2(form) == VECTORS["a-little-bit-long-string"]
        assert K.partition_for_key(form, 7) == partition_for_key_py(data, 7)
    with pytest.raises(TypeError):
        K.murmur2("text")
    with pytest.raises(TypeError):
        K.murmur2(None)
    for bad in (0, -3):
        with pytest.raises(ValueError):
            K.partition_for_key(b"k", bad)
    with pytest.raises(ValueError):
        partition_for_key_py(b"k", 0)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300), st.integers(min_value=1, max_value=10_000))
def test_all_implementations_match_kafka_python(data, n):
    want = _kp_signed(data)
    assert murmur2_py(data) == want
    assert murmur2(data) == want
    expected_partition = (want & 0x7FFFFFFF) % n
    assert partition_for_key_py(data, n) == expected_partition
    assert partition_for_key(data, n) == expected_partition
    for K in KERNELS:
        assert K.murmur2(data) == want
        assert K.partition_for_key(data, n) == expected_partition


def test_partition_for_key_range():
    assert all(0 <= partition_for_key(bytes([i]), 3) < 3 for i in range(256))
    assert {partition_for_key(b"key-%d" % i, 5) for i in range(200)} == set(range(5))
