"""Reading an offset range of one partition directory as Arrow record batches.

``read_range`` is what a Spark task runs for each topic-partition range it was given:

1. seek to the floor segment of the start offset and its byte position through the ``.index``
   (:func:`~kafkalog.spark.log_view.iter_segment_batches`);
2. walk the batches with :func:`kafkalog.record.records.iter_batches`, verify each batch's CRC
   (``RecordBatch.ensure_valid``), skip control batches (always) and, with ``read_committed``,
   batches of aborted transactions and everything from the first offset of a transaction still
   open (Kafka's last stable offset);
3. decode v2 records with offsets in ``[start, end)`` column-wise with the kernel's
   ``decode_columns_v2`` (:mod:`.arrow_batches`) and yield ``pa.RecordBatch``es of at most
   ``max_rows`` rows. v0/v1 messages (including compressed wrappers) come from the record layer's
   legacy deep iteration (``LegacyRecordBatch.records()``).
"""

from __future__ import annotations

from typing import Dict, Iterator, List, Optional, Set, Tuple

import pyarrow as pa

from kafkalog.errors import KafkalogError
from kafkalog.record.constants import TimestampType
from kafkalog.record.control import parse_control_key
from kafkalog.spark.arrow_batches import MAX_DATA_BYTES, ColumnBuilder
from kafkalog.spark.commit import profile
from kafkalog.spark.log_view import PartitionDir, iter_segment_batches

CREATE_TIME, LOG_APPEND_TIME, NO_TIMESTAMP_TYPE = 0, 1, -1
MAX_OFFSET = (1 << 63) - 1


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
                raise err.at(None, batch.position + 61 if not batch.compression_id
                             else batch.position) from None
        ts_type = _ts_type(batch)
        added = 0
        for r in batch.records():
            if min_offset <= r.offset < max_offset:
                builder.add_record(r.offset, r.timestamp, ts_type, r.key, r.value)
                added += 1
        return added
    except KafkalogError as err:
        raise err.at(path, 0) if err.file is None else err


def control_type(batch, path: str) -> Optional[int]:
    """The control record type of a control batch (0 ABORT, 1 COMMIT, ...), None when empty."""
    try:
        records = batch.records()
        if not records:
            return None
        return int(parse_control_key(records[0].key)[1])
    except KafkalogError as err:
        raise err.at(path, 0) if err.file is None else err


def aborted_batches(pdir: PartitionDir, start: int, end: int) -> Tuple[Set[Tuple[int, int]], int]:
    """For ``read_committed``: the ``(producer_id, base_offset)`` of transactional batches in
    ``[start, end)`` whose transaction was aborted, and the last stable offset bound (``end``, or
    the first offset of a transaction still open at ``end``, if lower).

    Found by following each producer's transaction to its end marker in a header walk from
    ``start``, so it works for directories with or without ``.txnindex`` files. A transaction
    still open at offset ``start`` began at or after the previous bound, which is how the
    streaming source calls it (from its last end offset).
    """
    aborted: Set[Tuple[int, int]] = set()
    pending: Dict[int, List[int]] = {}
    for seg, batch in iter_segment_batches(pdir, start):
        if batch.last_offset < start or batch.magic < 2 or not batch.is_transactional:
            if batch.magic >= 2 and batch.base_offset >= end and not pending:
                return aborted, end
            continue
        if batch.base_offset >= end and not pending:
            return aborted, end
        if batch.is_control:
            ctype = control_type(batch, seg.path)
            batches = pending.pop(batch.producer_id, [])
            if ctype == 0:
                aborted.update((batch.producer_id, b) for b in batches)
        elif batch.base_offset < end:
            pending.setdefault(batch.producer_id, []).append(batch.base_offset)
    if pending:
        end = min(end, min(b[0] for b in pending.values()))
    return aborted, end


def last_stable_offset(pdir: PartitionDir, start: int, log_end_offset: int) -> int:
    """The last stable offset (first offset of the earliest transaction still open, else the
    log end offset), scanning from ``start`` (a previous LSO or the log start offset)."""
    return aborted_batches(pdir, start, log_end_offset)[1]


def read_range(pdir: PartitionDir, start: int, end: int, *, include_headers: bool = False,
               read_committed: bool = False, max_rows: int = 65536) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``pdir`` with offsets in ``[start, end)`` as Arrow batches."""
    if start >= end:
        return
    aborted: Set[Tuple[int, int]] = set()
    if read_committed:
        aborted, end = aborted_batches(pdir, start, end)
        if start >= end:
            return
    builder = ColumnBuilder(pdir.topic, pdir.partition, include_headers)
    visited = 0                        # bytes of .log walked (for $KAFKALOG_SPARK_PROFILE)
    for seg, batch in iter_segment_batches(pdir, start):
        visited += batch.end_position - batch.position
        if batch.last_offset < start:
            continue
        if batch.magic >= 2 and batch.base_offset >= end:
            break
        try:
            batch.ensure_valid()
        except KafkalogError as err:
            raise err.at(seg.path, 0) if err.file is None else err
        if not (batch.is_control or (aborted and (batch.producer_id, batch.base_offset) in aborted)):
            decode_entry(batch, builder, start, end, seg.path)
            if builder.rows >= max_rows or builder.data_bytes >= MAX_DATA_BYTES:
                yield builder.flush()
        if batch.last_offset >= end - 1:
            break
    last = builder.flush()
    profile("read.bytes", visited)
    if last is not None:
        yield last


def first_record_at_or_after(batch, timestamp: int, start_offset: int, path: str) -> Optional[int]:
    """Offset of the first record of ``batch`` with timestamp >= ``timestamp`` and offset >=
    ``start_offset`` (control batches never match), or None."""
    if batch.is_control:
        return None
    probe = ColumnBuilder("", 0)
    n = decode_entry(batch, probe, start_offset, MAX_OFFSET, path)
    if not n:
        return None
    offsets = memoryview(probe.cols[0]).cast("q")
    stamps = memoryview(probe.cols[1]).cast("q")
    for i in range(n):
        if stamps[i] >= timestamp:
            return offsets[i]
    return None
