"""Selects the record kernel: the compiled ``_kernel`` (Cython) unless ``KAFKALOG_PURE_PYTHON=1``
or it is not built / does not export the API, else the pure-Python ``_kernel_py``.

Everything the kernel exports is re-exported here: ``Record``, ``encode_records_v2``,
``decode_records_v2``, ``read_varint``, ``read_varlong``, ``write_varint``, ``write_varlong``,
``RecordsEncoder`` and ``IMPLEMENTATION`` (``"cython"`` or ``"python"``).
"""
from __future__ import annotations

import os

from kafkalog.record import _kernel_py

_REQUIRED = ("Record", "encode_records_v2", "decode_records_v2", "read_varint", "read_varlong",
             "write_varint", "write_varlong")


def _select():
    if os.environ.get("KAFKALOG_PURE_PYTHON", "") not in ("", "0"):
        return _kernel_py
    try:
        from kafkalog.record import _kernel  # type: ignore[attr-defined]
    except ImportError:
        return _kernel_py
    if not all(hasattr(_kernel, name) for name in _REQUIRED):
        return _kernel_py
    return _kernel


_impl = _select()

IMPLEMENTATION: str = "cython" if _impl is not _kernel_py else "python"
Record = _impl.Record
encode_records_v2 = _impl.encode_records_v2
decode_records_v2 = _impl.decode_records_v2
read_varint = _impl.read_varint
read_varlong = _impl.read_varlong
write_varint = _impl.write_varint
write_varlong = _impl.write_varlong
RecordsEncoder = getattr(_impl, "RecordsEncoder", _kernel_py.RecordsEncoder)
#: columnar (Arrow) kernels of kafkalog.spark: decode v2 bodies into column buffers, encode Arrow
#: columns into v2 bodies, Kafka's murmur2 partitioner over a binary column, rows by partition
decode_columns_v2 = getattr(_impl, "decode_columns_v2", _kernel_py.decode_columns_v2)
encode_columns_v2 = getattr(_impl, "encode_columns_v2", _kernel_py.encode_columns_v2)
murmur2_partitions = getattr(_impl, "murmur2_partitions", _kernel_py.murmur2_partitions)
partition_groups = getattr(_impl, "partition_groups", _kernel_py.partition_groups)
#: Kafka's murmur2 of one key (signed Java int) and the default partitioner for one key
murmur2 = getattr(_impl, "murmur2", _kernel_py.murmur2)
partition_for_key = getattr(_impl, "partition_for_key", _kernel_py.partition_for_key)
#: the producer's per-record path (kafkalog.client.producer): one open batch, the per-record future base
_producer_impl = _impl if hasattr(_impl, "ProducerBatch") else _kernel_py
ProducerBatch = _producer_impl.ProducerBatch
RecordFuture = _producer_impl.RecordFuture
bind_record_future = _producer_impl.bind_record_future
ProducerTopic = _producer_impl.ProducerTopic
ProducerSendPath = _producer_impl.ProducerSendPath
#: the module in use (``_kernel`` or ``_kernel_py``)
implementation_module = _impl

__all__ = ["IMPLEMENTATION", "Record", "RecordsEncoder", "encode_records_v2", "decode_records_v2",
           "read_varint", "read_varlong", "write_varint", "write_varlong", "implementation_module"]
