"""The record codec kernel of this process: the compiled ``_kernel`` or its pure-Python twin
``_kernel_py``, chosen for every layer at once by :mod:`kafkalog.record.kernel_selection`
(``KAFKALOG_PURE_PYTHON=1`` selects pure Python; a partial or stale build raises
:class:`~kafkalog.record.kernel_selection.KernelBuildError`).

Re-exports the kernel's API: ``Record``, ``RecordsEncoder``, ``encode_records_v2``,
``decode_records_v2``, ``read_varint``, ``read_varlong``, ``write_varint``, ``write_varlong``,
``murmur2``, ``partition_for_key``, and ``IMPLEMENTATION`` (``"cython"`` or ``"python"``).
"""
from __future__ import annotations

from kafkalog.record.kernel_selection import load_kernel

#: the module in use (``kafkalog.record._kernel`` or ``kafkalog.record._kernel_py``)
implementation_module = load_kernel("kafkalog.record._kernel")

IMPLEMENTATION: str = implementation_module.IMPLEMENTATION
Record = implementation_module.Record
RecordsEncoder = implementation_module.RecordsEncoder
encode_records_v2 = implementation_module.encode_records_v2
decode_records_v2 = implementation_module.decode_records_v2
#: the consumer's fetch path (kafkalog.client.consumer): its record class, a batch decoded into it
ConsumerRecord = implementation_module.ConsumerRecord
decode_consumer_records = implementation_module.decode_consumer_records
read_varint = implementation_module.read_varint
read_varlong = implementation_module.read_varlong
write_varint = implementation_module.write_varint
write_varlong = implementation_module.write_varlong
#: Kafka's murmur2 of one key (signed Java int) and the default partitioner for one key
murmur2 = implementation_module.murmur2
partition_for_key = implementation_module.partition_for_key
#: the producer's per-record path (kafkalog.client.producer): one open batch, the per-record future base
ProducerBatch = implementation_module.ProducerBatch
RecordFuture = implementation_module.RecordFuture
bind_record_future = implementation_module.bind_record_future
ProducerTopic = implementation_module.ProducerTopic
ProducerSendPath = implementation_module.ProducerSendPath

__all__ = ["IMPLEMENTATION", "ConsumerRecord", "Record", "RecordsEncoder", "decode_consumer_records",
           "decode_records_v2", "encode_records_v2", "implementation_module", "murmur2", "partition_for_key",
           "read_varint", "read_varlong", "write_varint", "write_varlong"]
