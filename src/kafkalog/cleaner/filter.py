"""The batch rewrite rules of the cleaner: Kafka's ``MemoryRecords.filterTo`` with the cleaner's
``RecordFilter`` (``LogCleaner.cleanInto``; spec §4.11 "Record/batch retention rules", §5.5).

:func:`filter_batch` decides the fate of one batch and returns the bytes to write: the original
bytes (nothing removed, no horizon to stamp), a rebuilt batch (same magic, codec at its default
level, timestamp type, producer fields, flags and partition leader epoch; v2 keeps base and last
offset), a 61-byte empty batch (v2 batches retained only for producer state or as the last batch
of the round), or None (deleted). Per-record work for v2 data batches runs in the record kernel.

Better than Kafka: a legacy (v0/v1) batch that would have to be retained empty (Kafka throws
IllegalStateException and the partition becomes uncleanable) is dropped instead - legacy batches
carry no producer state, so nothing is lost but the offset, and reading past a removed offset
returns the next record anyway.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Dict, Optional

from kafkalog.cleaner.offset_map import SkimpyOffsetMap
from kafkalog.cleaner.stats import CleanerStats
from kafkalog.cleaner.txn import CleanedTransactionMetadata
from kafkalog.errors import KafkalogError
from kafkalog.record import compression as _compression
from kafkalog.record.batch import DefaultRecordBatch, RecordBatch
from kafkalog.record.builder import build_batch, write_v2_header
from kafkalog.record.constants import TimestampType
from kafkalog.record.crc import crc32c
from kafkalog.record.legacy import LegacyRecordBatch

__all__ = ["LastRecord", "CleanerFilter", "filter_batch", "FilteredBatch"]

_Q = struct.Struct(">q")
# kinds returned by the kernel's offset_map_clean_v2
_DELETE, _VERBATIM, _REWRITTEN, _EMPTY, _RECORDS = range(5)


@dataclass(frozen=True)
class LastRecord:
    """The last entry of an active producer: the last offset of its last data batch (None when its
    last entry is a transaction marker) and its current epoch (Kafka's ``LastRecord``)."""

    last_data_offset: Optional[int]
    producer_epoch: int


@dataclass(frozen=True)
class FilteredBatch:
    """Bytes to append to the cleaned segment plus the facts its indexes need."""

    data: bytes | memoryview
    base_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int


class CleanerFilter:
    """The cleaner's per-round filter state (Kafka's anonymous ``RecordFilter`` in ``cleanInto``).

    ``retain_legacy_deletes`` is set per source segment (mtime > legacy delete horizon).
    """

    def __init__(self, offset_map: SkimpyOffsetMap, txn: CleanedTransactionMetadata,
                 last_records_of_active_producers: Dict[int, LastRecord],
                 upper_bound_offset: int, current_time: int, delete_retention_ms: int,
                 stats: CleanerStats) -> None:
        self.map = offset_map
        self.txn = txn
        self.producers = last_records_of_active_producers
        self.upper_bound_offset = upper_bound_offset
        self.current_time = current_time
        self.delete_retention_ms = delete_retention_ms
        self.stats = stats
        self.retain_legacy_deletes = True

    def is_last_batch_of_producer(self, batch: RecordBatch) -> bool:
        last = self.producers.get(batch.producer_id)
        if last is None:
            return False
        if last.last_data_offset is not None:
            return batch.last_offset == last.last_data_offset
        return batch.is_control and batch.producer_epoch == last.producer_epoch


def filter_batch(batch: RecordBatch, f: CleanerFilter) -> Optional[FilteredBatch]:
    """Apply the cleaner's rules to one batch (any magic). Returns what to write, or None."""
    stats = f.stats
    stats.read_messages_bytes(batch.size_in_bytes)
    is_v2 = batch.magic >= 2
    is_control = is_v2 and batch.is_control
    # --- checkBatchRetention ---
    if is_control:
        can_discard = f.txn.on_control_batch_read(batch)
        horizon = batch.delete_horizon_ms
        discard_records = can_discard and horizon is not None and horizon <= f.current_time
    else:
        can_discard = f.txn.on_batch_read(batch)
        discard_records = can_discard
        if can_discard:
            stats.aborted_batches_removed += 1
    marker_for_empty_txn = can_discard and is_control
    if (is_v2 and batch.producer_id > -1 and f.is_last_batch_of_producer(batch)) \
            or batch.next_offset == f.upper_bound_offset:
        retain_empty = True
    elif discard_records:
        count = batch.count if is_v2 else len(batch.records())
        stats.read_messages(count)
        return None
    else:
        retain_empty = False
    if isinstance(batch, LegacyRecordBatch):
        return _filter_legacy(batch, f, retain_empty)
    assert isinstance(batch, DefaultRecordBatch)
    return _filter_v2(batch, f, retain_empty, discard_records, is_control, marker_for_empty_txn)


def _filter_v2(batch: DefaultRecordBatch, f: CleanerFilter, retain_empty: bool,
               discard_records: bool,
               is_control: bool, marker_for_empty_txn: bool) -> Optional[FilteredBatch]:
    """One kernel call decides and rewrites the batch (``offset_map_clean_v2``); compressed
    batches are decompressed before and re-compressed after it."""
    stats = f.stats
    count = batch.count
    stats.read_messages(count)
    m = f.map
    codec = batch.compression_id
    buf = batch.buffer()
    body = None
    try:
        if codec and count and not discard_records:
            body = batch.records_body()
        res = m.kernel.offset_map_clean_v2(
            m.table, m.slots, m.superseded, m.superseded_base, buf, 0, len(buf), body,
            m.latest_offset, f.current_time, f.delete_retention_ms, retain_empty, discard_records,
            marker_for_empty_txn, crc32c)
    except KafkalogError as e:
        raise e.at(None, batch.position) from None
    kind, data, kept, keyless, tomb_dropped, max_ts, max_off, nbase, attrs = res
    stats.invalid_messages += keyless
    stats.tombstones_removed += tomb_dropped
    if kind == _DELETE:
        return None
    if kind == _VERBATIM:
        stats.recopied_messages(kept, batch.size_in_bytes)
        return FilteredBatch(buf, batch.base_offset, batch.last_offset, max_ts, max_off)
    if kind == _EMPTY:
        return FilteredBatch(data, batch.base_offset, batch.last_offset, max_ts, max_off)
    if kind == _RECORDS:
        data = write_v2_header(_compression.compress(codec, data, magic=2),
                               base_offset=batch.base_offset, attributes=attrs,
                               last_offset_delta=batch.last_offset_delta, base_timestamp=nbase,
                               max_timestamp=max_ts, producer_id=batch.producer_id,
                               producer_epoch=batch.producer_epoch,
                               base_sequence=batch.base_sequence, count=kept,
                               partition_leader_epoch=batch.partition_leader_epoch)
    stats.recopied_messages(kept, len(data))
    return FilteredBatch(data, batch.base_offset, batch.last_offset, max_ts, max_off)


def _filter_legacy(batch: LegacyRecordBatch, f: CleanerFilter,
                   retain_empty: bool) -> Optional[FilteredBatch]:
    stats = f.stats
    recs = batch.records()
    stats.read_messages(len(recs))
    latest = f.map.latest_offset
    kept = []
    for r in recs:
        if r.offset > latest:
            kept.append(r)
            continue
        if r.key is None:
            stats.invalid_messages += 1
            continue
        found = f.map.get(r.key)
        if r.offset >= found and (r.value is not None or f.retain_legacy_deletes):
            kept.append(r)
        elif r.value is None:
            stats.tombstones_removed += 1
    if not kept:
        return None
    max_ts = max(r.timestamp for r in kept)
    max_off = next(r.offset for r in kept if r.timestamp == max_ts)
    if len(kept) == len(recs):
        stats.recopied_messages(len(kept), batch.size_in_bytes)
        return FilteredBatch(batch.buffer(), kept[0].offset, batch.last_offset, batch.max_timestamp,
                             max_off)
    lat = batch.timestamp_type == TimestampType.LOG_APPEND_TIME
    data = build_batch([(r.key, r.value, r.timestamp) for r in kept], magic=batch.magic,
                       compression=batch.compression, base_offset=kept[0].offset,
                       offsets=[r.offset for r in kept],
                       timestamp_type=(TimestampType.CREATE_TIME if batch.magic == 0 or not lat
                                       else TimestampType.LOG_APPEND_TIME),
                       log_append_time=batch.max_timestamp if lat else None)
    stats.recopied_messages(len(kept), len(data))
    return FilteredBatch(data, kept[0].offset, kept[-1].offset,
                         batch.max_timestamp if batch.compression_id else max_ts, max_off)
