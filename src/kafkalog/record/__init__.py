"""kafkalog.record: the record codec (spec §1): bytes in, bytes out, no files.

Main entry points::

    from kafkalog.record import iter_batches, build_batch, CompressionType, TimestampType
    for batch in iter_batches(buf):          # RecordBatch views, any magic
        batch.ensure_valid()
        for record in batch.records():
            ...
"""
from kafkalog.record.batch import DefaultRecordBatch, RecordBatch, batch_at, read_batch_header, read_entry_header
from kafkalog.record.builder import BatchBuilder, build_batch, build_empty_batch, build_end_txn_marker
from kafkalog.record.constants import (
                                       LOG_OVERHEAD,
                                       RECORD_BATCH_OVERHEAD,
                                       CompressionType,
                                       ControlRecordType,
                                       TimestampType,
)
from kafkalog.record.control import EndTransactionMarker
from kafkalog.record.legacy import LegacyRecord, LegacyRecordBatch
from kafkalog.record.records import iter_batches, iter_records, scan_batches

__all__ = ["LOG_OVERHEAD", "RECORD_BATCH_OVERHEAD", "CompressionType", "ControlRecordType",
           "TimestampType", "RecordBatch", "DefaultRecordBatch", "LegacyRecordBatch",
           "LegacyRecord", "batch_at", "read_batch_header", "read_entry_header", "iter_batches",
           "iter_records", "scan_batches", "EndTransactionMarker", "BatchBuilder", "build_batch",
           "build_empty_batch", "build_end_txn_marker"]
