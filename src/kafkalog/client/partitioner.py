"""Kafka's default partitioner hash (``Utils.murmur2``, ``Utils.toPositive``) for keyed records:
``partition = (murmur2(key) & 0x7fffffff) % num_partitions``.

Bit-exact with the Java implementation (signed 32-bit arithmetic, seed ``0x9747b28c``, the tail
switch with fall-through). The hash is the record kernel's, one implementation per kernel twin:
:func:`murmur2` / :func:`partition_for_key` are the selected kernel's (compiled, or the pure-Python
twin with ``KAFKALOG_PURE_PYTHON=1``); :func:`murmur2_py` / :func:`partition_for_key_py` are the
pure-Python twin's, the reference the compiled kernel is tested against.
"""

from __future__ import annotations

from kafkalog.record import _kernel_py as _reference
from kafkalog.record import kernel
from kafkalog.record.constants import INT32_MAX

__all__ = ["murmur2", "to_positive", "partition_for_key", "murmur2_py", "partition_for_key_py",
           "IMPLEMENTATION"]

#: ``"cython"`` when :func:`murmur2` / :func:`partition_for_key` are the compiled kernel's
IMPLEMENTATION: str = kernel.IMPLEMENTATION
#: Kafka's murmur2 of one key (a signed Java int), and the default partitioner for one key
murmur2 = kernel.murmur2
partition_for_key = kernel.partition_for_key
#: the pure-Python reference of both
murmur2_py = _reference.murmur2
partition_for_key_py = _reference.partition_for_key


def to_positive(n: int) -> int:
    """Kafka's ``Utils.toPositive``: ``n & 0x7fffffff``."""
    return n & INT32_MAX
