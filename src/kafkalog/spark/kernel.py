"""The Spark kernel of this process: the compiled ``_kernel`` or its pure-Python twin
``_kernel_py`` (Arrow column builders and encoders, keyed partitioning of a column), chosen for
every layer at once by :mod:`kafkalog.record.kernel_selection`.

Re-exports the kernel's API: ``decode_columns_v2``, ``encode_columns_v2``,
``murmur2_partitions``, ``partition_groups`` and ``IMPLEMENTATION``.
"""
from __future__ import annotations

from kafkalog.record.kernel_selection import load_kernel

#: the module in use (``kafkalog.spark._kernel`` or ``kafkalog.spark._kernel_py``)
implementation_module = load_kernel("kafkalog.spark._kernel")

IMPLEMENTATION: str = implementation_module.IMPLEMENTATION
decode_columns_v2 = implementation_module.decode_columns_v2
encode_columns_v2 = implementation_module.encode_columns_v2
murmur2_partitions = implementation_module.murmur2_partitions
partition_groups = implementation_module.partition_groups

__all__ = ["IMPLEMENTATION", "decode_columns_v2", "encode_columns_v2", "implementation_module",
           "murmur2_partitions", "partition_groups"]
