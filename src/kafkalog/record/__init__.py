"""kafkalog.record: the record codec (spec §1): bytes in, bytes out, no files.

Main entry points::

    from kafkalog.record import iter_batches, build_batch, CompressionType, TimestampType
    for batch in iter_batches(buf):          # RecordBatch views, any magic
        batch.ensure_valid()
        for record in batch.records():
            ...

The names below are imported from their modules on first use: importing a submodule (such as
``kafkalog.record.constants``, which every layer names) does not load the whole codec and its
kernels.
"""
from importlib import import_module
from typing import TYPE_CHECKING, Any, List

if TYPE_CHECKING:
    from kafkalog.record.batch import (
        DefaultRecordBatch,
        RecordBatch,
        read_batch_header,
        read_entry_header,
    )
    from kafkalog.record.builder import (
        BatchBuilder,
        build_batch,
        build_empty_batch,
        build_end_txn_marker,
    )
    from kafkalog.record.constants import (
        LOG_OVERHEAD,
        RECORD_BATCH_OVERHEAD,
        CompressionType,
        ControlRecordType,
        TimestampType,
    )
    from kafkalog.record.control import EndTransactionMarker
    from kafkalog.record.legacy import LegacyRecord, LegacyRecordBatch
    from kafkalog.record.records import batch_at, iter_batches, iter_records, scan_batches

#: name -> the module defining it
_LAZY = {
    **dict.fromkeys(("DefaultRecordBatch", "RecordBatch", "read_batch_header", "read_entry_header"),
                    "kafkalog.record.batch"),
    **dict.fromkeys(("BatchBuilder", "build_batch", "build_empty_batch", "build_end_txn_marker"),
                    "kafkalog.record.builder"),
    **dict.fromkeys(("LOG_OVERHEAD", "RECORD_BATCH_OVERHEAD", "CompressionType", "ControlRecordType",
                     "TimestampType"), "kafkalog.record.constants"),
    "EndTransactionMarker": "kafkalog.record.control",
    **dict.fromkeys(("LegacyRecord", "LegacyRecordBatch"), "kafkalog.record.legacy"),
    **dict.fromkeys(("batch_at", "iter_batches", "iter_records", "scan_batches"),
                    "kafkalog.record.records"),
}

__all__ = ["LOG_OVERHEAD", "RECORD_BATCH_OVERHEAD", "CompressionType", "ControlRecordType",
           "TimestampType", "RecordBatch", "DefaultRecordBatch", "LegacyRecordBatch",
           "LegacyRecord", "batch_at", "read_batch_header", "read_entry_header", "iter_batches",
           "iter_records", "scan_batches", "EndTransactionMarker", "BatchBuilder", "build_batch",
           "build_empty_batch", "build_end_txn_marker"]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'kafkalog.record' has no attribute {name!r}")
    value = getattr(import_module(module), name)       # a lazy re-export, by name
    globals()[name] = value
    return value


def __dir__() -> List[str]:
    return sorted(set(globals()) | set(_LAZY))
