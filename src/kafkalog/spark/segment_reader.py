"""Reading an offset range of one partition directory as Arrow record batches.

``read_range`` is what a Spark task runs for each topic-partition range it was given:

1. open a snapshot of the partition (:class:`~kafkalog.log.read.partition_view.PartitionView`, a
   :class:`~kafkalog.log.read.reader.PartitionReader`), which seeks to the floor segment of the
   start offset and its byte position through the ``.index`` and yields CRC-checked batches;
2. skip control batches (always) and, with ``read_committed``, batches of aborted transactions
   (the reader's :class:`~kafkalog.log.read.rules.AbortedTxnFilter`) and everything from the
   first offset of a transaction still open (Kafka's last stable offset);
3. decode v2 records with offsets in ``[start, end)`` column-wise with the kernel's
   ``decode_columns_v2`` (:mod:`.arrow_batches`) and yield ``pa.RecordBatch``es of at most
   ``max_rows`` rows. v0/v1 messages (including compressed wrappers) come from the record layer's
   legacy deep iteration (``LegacyRecordBatch.records()``).
"""

from __future__ import annotations

from typing import Iterator

import pyarrow as pa

from kafkalog.errors import KafkalogError
from kafkalog.record.constants import (
    RECORDS_OFFSET,
    IsolationLevel,
    TimestampType,
)
from kafkalog.spark.arrow_batches import MAX_DATA_BYTES, ColumnBuilder
from kafkalog.spark.commit import profile
from kafkalog.spark.log_view import PartitionDir, open_partition

CREATE_TIME, LOG_APPEND_TIME, NO_TIMESTAMP_TYPE = 0, 1, -1


def _ts_type(batch) -> int:
    t = batch.timestamp_type
    if t == TimestampType.LOG_APPEND_TIME:
        return LOG_APPEND_TIME
    if t == TimestampType.CREATE_TIME:
        return CREATE_TIME
    return NO_TIMESTAMP_TYPE


def decode_entry(batch, builder: ColumnBuilder, min_offset: int, max_offset: int, path: str) -> int:
    """Decode the records of one batch (any magic) with offsets in ``[min_offset, max_offset)``
    into ``builder``; returns the number of rows added."""
    try:
        if batch.magic >= 2:
            body = batch.records_body()
            lat = batch.max_timestamp if batch.timestamp_type == TimestampType.LOG_APPEND_TIME else -1
            try:
                return builder.add_v2_batch(body, batch.count, batch.base_offset,
                                            batch.base_timestamp, lat, _ts_type(batch),
                                            min_offset, max_offset)
            except KafkalogError as err:
                raise err.at(None, batch.position + RECORDS_OFFSET if not batch.compression_id
                             else batch.position) from None
        ts_type = _ts_type(batch)
        added = 0
        for r in batch.records():
            if min_offset <= r.offset < max_offset:
                builder.add_record(r.offset, r.timestamp, ts_type, r.key, r.value)
                added += 1
        return added
    except KafkalogError as err:
        raise (err.at(path, 0) if err.file is None else err) from None


def last_stable_offset(pdir: PartitionDir, start: int, log_end_offset: int) -> int:
    """The last stable offset (first offset of the earliest transaction still open, else
    ``log_end_offset``), scanning from ``start`` (a previous LSO or the log start offset)."""
    with open_partition(pdir) as view:
        return view.transaction_state(start, log_end_offset).last_stable_offset


def read_range(pdir: PartitionDir, start: int, end: int, *, include_headers: bool = False,
               read_committed: bool = False, max_rows: int = 65536) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``pdir`` with offsets in ``[start, end)`` as Arrow batches."""
    if start >= end:
        return
    # read_uncommitted reads below ``end`` only: the view need not find the log end offset
    # (a walk of the last segment's tail: a ranged GET in object storage)
    with open_partition(pdir, log_end_offset=None if read_committed else end) as view:
        iso = IsolationLevel.READ_UNCOMMITTED
        if read_committed:
            iso = IsolationLevel.READ_COMMITTED
            end = view.transaction_state(start, end).last_stable_offset
            if start >= end:
                return
        builder = ColumnBuilder(pdir.topic, pdir.partition, include_headers)
        visited = 0                        # bytes of .log walked (for $KAFKALOG_SPARK_PROFILE)
        for batch, visible in view.read(start, end, iso, whole=True, scan_from=start):
            visited += batch.size_in_bytes
            if visible:        # (the reader's filter sees every batch, markers included)
                decode_entry(batch, builder, start, end, view.log_path_of(batch.base_offset))
                if builder.rows >= max_rows or builder.data_bytes >= MAX_DATA_BYTES:
                    yield builder.flush()
        last = builder.flush()
        profile("read.bytes", visited)
        if last is not None:
            yield last
