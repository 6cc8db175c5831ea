"""Kafka's default partitioner hash (``Utils.murmur2``, ``Utils.toPositive``) for keyed records:
``partition = (murmur2(key) & 0x7fffffff) % num_partitions``.

Bit-exact with the Java implementation (signed 32-bit arithmetic, seed ``0x9747b28c``, the tail
switch with fall-through). :func:`murmur2_py` / :func:`partition_for_key_py` are the pure-Python
reference (unsigned 32-bit masks, converted to a signed int); :func:`murmur2` /
:func:`partition_for_key` are the compiled record kernel's ``murmur2`` / ``partition_for_key``
when the kernel is compiled (``IMPLEMENTATION == "cython"``), else the reference.
"""

from __future__ import annotations

import struct
from functools import lru_cache
from typing import Callable, Tuple

__all__ = ["murmur2", "to_positive", "partition_for_key", "murmur2_py", "partition_for_key_py",
           "IMPLEMENTATION"]

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


@lru_cache(maxsize=64)
def _words(n: int) -> struct.Struct:
    return struct.Struct(f"<{n}I")


def murmur2_py(data: bytes) -> int:
    """Kafka's 32-bit murmur2 of ``data`` as a signed Java int (pure-Python reference)."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    n4 = length >> 2
    if n4:
        if n4 <= 64:
            words = _words(n4).unpack_from(data, 0)
        else:
            words = struct.unpack_from(f"<{n4}I", data, 0)
        m = _M
        for k in words:
            k = (k * m) & _MASK
            k ^= k >> 24
            k = (k * m) & _MASK
            h = ((h * m) & _MASK) ^ k
    rem = length & 3
    if rem:
        base = length & ~3
        if rem == 3:
            h ^= data[base + 2] << 16
        if rem >= 2:
            h ^= data[base + 1] << 8
        h ^= data[base]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - 0x100000000 if h & 0x80000000 else h


def to_positive(n: int) -> int:
    """Kafka's ``Utils.toPositive``: ``n & 0x7fffffff``."""
    return n & 0x7FFFFFFF


def partition_for_key_py(key: bytes, num_partitions: int) -> int:
    """The partition Kafka's default partitioner picks for a non-null ``key`` (pure-Python
    reference)."""
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, got {num_partitions}")
    return (murmur2_py(key) & 0x7FFFFFFF) % num_partitions


def _select() -> Tuple[str, Callable[[bytes], int], Callable[[bytes, int], int]]:
    from kafkalog.record import kernel
    impl = kernel.implementation_module
    if kernel.IMPLEMENTATION == "cython" and hasattr(impl, "murmur2") and hasattr(impl, "partition_for_key"):
        return "cython", impl.murmur2, impl.partition_for_key
    return "python", murmur2_py, partition_for_key_py


#: ``"cython"`` when :func:`murmur2` / :func:`partition_for_key` are the compiled kernel's
IMPLEMENTATION, murmur2, partition_for_key = _select()
