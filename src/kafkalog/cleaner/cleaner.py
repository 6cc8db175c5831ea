"""Cleaning one partition: Kafka's ``Cleaner`` (``LogCleaner.scala``; spec §4.11 "Cleaning one
log").

``Cleaner.clean(to_clean)`` builds the offset map over the dirty section ``[firstDirtyOffset,
firstUncleanableOffset)`` (stopping where the map is full: the rest is cleaned next round), groups
every segment from the log start to the end of the mapped range (:mod:`.grouping`), recopies each
group into ``.cleaned`` segments through the batch rules of :mod:`.filter`, and swaps them in
(:mod:`.swap`). It returns the new first dirty offset (``map.latestOffset + 1``) and the stats.

Segments are read in chunks of ``log.cleaner.io.buffer.size / threads / 2`` bytes, grown for a
batch that does not fit (up to ``max.message.bytes``, then to the batch's declared size when it
fits the segment), and written through a buffer of the same size: memory stays within the dedupe
buffer plus a few I/O buffers. Every batch's CRC is verified before it is mapped or copied, so a
corrupt segment fails its partition instead of spreading.

Better than Kafka: the output of a group never overflows a segment - when re-encoding makes the
cleaned data larger than ``segment.bytes`` (delete horizons make timestamp deltas longer;
KAFKA-20036) or fills an index, the group continues in a further ``.cleaned`` segment based at the
next batch, and all of them are swapped in together.
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import Callable, Dict, Iterator, List, Optional, Tuple

from kafkalog.cleaner.filter import CleanerFilter, FilteredBatch, LastRecord, filter_batch
from kafkalog.cleaner.grouping import group_segments_by_size
from kafkalog.cleaner.offset_map import SkimpyOffsetMap
from kafkalog.cleaner.stats import CleanerStats, Throttler
from kafkalog.cleaner.swap import CleaningAbortedError, crash_point, replace_segments
from kafkalog.cleaner.txn import CleanedTransactionMetadata
from kafkalog.errors import CorruptRecordError, KafkalogError
from kafkalog.log import fsutil
from kafkalog.log.config import BrokerConfig
from kafkalog.log.index.txn_index import AbortedTxn
from kafkalog.log.log import Log
from kafkalog.log.naming import CLEANED_FILE_SUFFIX, SEGMENT_SUFFIXES, TopicPartition
from kafkalog.log.segment import LogSegment
from kafkalog.record.constants import (
    DEFAULT_MAX_MESSAGE_BYTES,
    INT32_MAX,
    LOG_OVERHEAD,
    PRODUCER_ID_OFFSET,
    RECORD_BATCH_OVERHEAD,
    RECORDS_OFFSET,
    SIZE_OFFSET,
)
from kafkalog.record.records import iter_batches

__all__ = ["Cleaner", "LogToClean", "last_records_of_active_producers", "CleaningAbortedError"]

_I32 = struct.Struct(">i")
_PID_EPOCH = struct.Struct(">qh")


@dataclass
class LogToClean:
    """A partition chosen for cleaning (Kafka's ``LogToClean``): the log, its first dirty offset,
    the segment-aligned first uncleanable offset and the byte counts behind its dirty ratio."""

    topic_partition: TopicPartition
    log: Log
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int = 0
    cleanable_bytes: int = 0
    need_compaction_now: bool = False

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        t = self.total_bytes
        return self.cleanable_bytes / t if t else 0.0


def last_records_of_active_producers(log: Log, now: int) -> Dict[int, LastRecord]:
    """Producer id -> :class:`LastRecord` for the producers whose state must survive cleaning.

    Uses the log's producer-state manager when it has one, read under the log's lock
    (:meth:`Log.last_records_of_active_producers`: a loop here over the live map failed with
    'dictionary changed size during iteration' while another thread appended). Otherwise scans
    the batch headers of the whole log (producers whose last batch is older than
    ``producer.id.expiration.ms`` are expired, as the producer-state manager would have expired
    them).
    """
    psm = log.producer_state_manager
    if psm is not None:
        return {pid: LastRecord(ldo if ldo >= 0 else None, epoch)
                for pid, (ldo, epoch) in log.last_records_of_active_producers().items()}
    expiration = int(BrokerConfig({}).producer_id_expiration_ms)   # (the broker's default)
    state: Dict[int, list] = {}
    for seg in log.segments:
        for h in seg.log.iter_headers(0):
            if h.magic < 2 or h.size < RECORD_BATCH_OVERHEAD:
                continue
            pid, epoch = _PID_EPOCH.unpack(seg.log.read_at(h.position + PRODUCER_ID_OFFSET, _PID_EPOCH.size))
            if pid < 0:
                continue
            st = state.setdefault(pid, [None, epoch, h.max_timestamp])
            st[1] = epoch
            st[2] = max(st[2], h.max_timestamp)
            if not h.is_control:
                st[0] = h.last_offset
    return {pid: LastRecord(st[0], st[1]) for pid, st in state.items()
            if st[2] < 0 or now - st[2] < expiration}


class _CleanedOutput:
    """Writes filtered batches into one or more ``.cleaned`` segments for one group."""

    def __init__(self, log: Log, first_base: int, buffer_size: int, throttler: Optional[Throttler],
                 stats: CleanerStats) -> None:
        self.log = log
        self.segment_bytes = log.config.segment_bytes
        self.first_base = first_base
        self.buffer_size = buffer_size
        self.throttler = throttler
        self.stats = stats
        self.segments: List[LogSegment] = []
        self.txn_entries: Dict[int, List[AbortedTxn]] = {}
        self._buf = bytearray()
        self._positions: List[int] = []
        self._lasts: List[int] = []
        self._mts: List[int] = []
        self.current: LogSegment = self._open(first_base)

    def _open(self, base: int) -> LogSegment:
        d = self.log.dir
        for suffix in SEGMENT_SUFFIXES:
            fsutil.delete_if_exists(os.path.join(d, f"{base:020d}{suffix}{CLEANED_FILE_SUFFIX}"))
        seg = LogSegment.open(d, base, self.log.config, file_suffix=CLEANED_FILE_SUFFIX, preallocate=False)
        self.segments.append(seg)
        self.txn_entries[id(seg)] = []
        self.current = seg
        return seg

    def set_buffer_size(self, size: int) -> None:
        """The write buffer grows (and shrinks back) with the read buffer."""
        self.buffer_size = size

    def _pending(self) -> int:
        return len(self._buf)

    def append(self, fb: FilteredBatch, txn_entries: List[AbortedTxn]) -> None:
        seg = self.current
        size = len(fb.data)
        if seg.size + self._pending() > 0 and (
                seg.size + self._pending() + size > self.segment_bytes
                or fb.last_offset - seg.base_offset > INT32_MAX
                or seg.offset_index.is_full()
                or seg.time_index.is_full()):
            self.flush()
            self._finish_segment(seg, None)
            base = fb.base_offset if fb.base_offset >= 0 else fb.last_offset
            seg = self._open(base)
        self._positions.append(len(self._buf))
        self._buf += fb.data
        self._lasts.append(fb.last_offset)
        self._mts.append(fb.max_timestamp)
        if txn_entries:
            self.txn_entries[id(seg)].extend(txn_entries)
        if len(self._buf) >= self.buffer_size:
            self.flush()

    def flush(self) -> None:
        if not self._buf:
            return
        data = bytes(self._buf)
        self.current.append_batches(data, self._positions, self._lasts, self._mts)
        if self.throttler is not None:
            self.throttler.maybe_throttle(len(data))
        self._buf = bytearray()
        self._positions, self._lasts, self._mts = [], [], []

    def _finish_segment(self, seg: LogSegment, mtime_ms: Optional[int]) -> None:
        entries = self.txn_entries.get(id(seg)) or []
        if entries:
            path = seg.txn_index_path
            with open(path, "wb") as f:
                f.write(b"".join(t.to_bytes() for t in entries))
                f.flush()
                os.fsync(f.fileno())
        seg.on_become_inactive_segment()
        seg.flush()

    def finish(self, mtime_ms: int) -> List[LogSegment]:
        self.flush()
        self._finish_segment(self.current, mtime_ms)
        for seg in self.segments:
            seg.set_last_modified_ms(mtime_ms)
            if os.path.exists(seg.txn_index_path):
                os.utime(seg.txn_index_path, (mtime_ms / 1000.0, mtime_ms / 1000.0))
        self.stats.segments_written += len(self.segments)
        return self.segments

    def delete(self) -> None:
        for seg in self.segments:
            try:
                seg.delete()
            except OSError:
                pass


class Cleaner:
    """Cleans one partition at a time with a reusable offset map (one per cleaner thread).

    Args:
        offset_map: the thread's dedupe buffer.
        io_buffer_size: read and write buffer size (``log.cleaner.io.buffer.size / threads / 2``).
        max_io_buffer_size: cap for growing the read buffer (``max(max.message.bytes, message.max.bytes)``).
        throttler: shared I/O throttler, or None.
        check_done: called with the topic-partition between batches; raises
            :class:`CleaningAbortedError` to stop (partition deleted, cleaner shutting down).
        clock: milliseconds since the epoch.
    """

    def __init__(self, offset_map: SkimpyOffsetMap, *, io_buffer_size: int = 256 * 1024,
                 max_io_buffer_size: int = DEFAULT_MAX_MESSAGE_BYTES, throttler: Optional[Throttler] = None,
                 check_done: Optional[Callable[[TopicPartition], None]] = None,
                 clock: Optional[Callable[[], int]] = None) -> None:
        import time
        self.offset_map = offset_map
        self.io_buffer_size = max(int(io_buffer_size), 1024)
        self.max_io_buffer_size = max(int(max_io_buffer_size), self.io_buffer_size)
        self.throttler = throttler
        self.check_done = check_done or (lambda tp: None)
        self.clock = clock or (lambda: int(time.time() * 1000))
        #: the largest read/write buffer size used so far (grown for large batches)
        self.peak_buffer_size = self.io_buffer_size

    # --- reading ---------------------------------------------------------------------------------
    def _batches(self, tp: TopicPartition, seg: LogSegment, start: int, max_message_size: int,
                 on_grow: Optional[Callable[[int], None]] = None) -> Iterator:
        """Yield the CRC-verified batches of ``seg`` from byte ``start`` (chunked reads).

        When not even one complete batch fits the read buffer, the read and write buffers double
        up to ``max(max.message.bytes, message.max.bytes)``; at that cap the batch's declared size
        is used instead (so a batch larger than the current limit can still be cleaned), unless it
        exceeds the bytes left in the segment: ``CorruptRecordError`` ("Log segment may be
        corrupt"). The buffers shrink back to ``io_buffer_size`` afterwards (Kafka's
        ``growBuffersOrFail`` / ``restoreBuffers``). ``on_grow`` gets every new buffer size (the
        write buffer's flush threshold)."""
        end = seg.size
        pos = start
        cap = max(self.max_io_buffer_size, max_message_size)
        path = seg.log_path
        size = self.io_buffer_size
        try:
            while pos < end:
                self.check_done(tp)
                n = min(size, end - pos)
                chunk = seg.log.pread(pos, n)
                if self.throttler is not None:
                    self.throttler.maybe_throttle(len(chunk))
                consumed = 0
                try:
                    for b in iter_batches(chunk):
                        b.ensure_valid()
                        yield pos, b
                        consumed = b.end_position
                except KafkalogError as e:
                    raise e.at(path, pos) from None
                if consumed:
                    pos += consumed
                    continue
                if len(chunk) < 12:
                    return                      # fewer bytes than a log overhead: a torn tail
                declared = _I32.unpack_from(chunk, SIZE_OFFSET)[0] + LOG_OVERHEAD
                left = end - pos if len(chunk) >= n else len(chunk)     # the file may be short
                if declared > left:
                    raise CorruptRecordError(
                        f"Log segment may be corrupt, batch size {declared} > {left} bytes "
                        f"left in segment at position {pos}", file=path, position=pos)
                if declared <= size:
                    raise CorruptRecordError(
                        f"Batch size {declared} < buffer size {size}, but not processed at "
                        f"position {pos}", file=path, position=pos)
                size = declared if size >= cap else min(size * 2, cap)
                self.peak_buffer_size = max(self.peak_buffer_size, size)
                if on_grow is not None:
                    on_grow(size)
        finally:
            if size != self.io_buffer_size and on_grow is not None:
                on_grow(self.io_buffer_size)

    # --- the offset map --------------------------------------------------------------------------
    def build_offset_map(self, log: Log, tp: TopicPartition, start: int, end: int, stats: CleanerStats) -> None:
        """Kafka's ``buildOffsetMap``: map the dirty segments ``[start, end)``."""
        m = self.offset_map
        m.clear()
        m.track_superseded(start, end)
        dirty = list(log.segments_in_range(start, end))
        txn = CleanedTransactionMetadata()
        txn.add_aborted_transactions(log.collect_aborted_transactions(start, end))
        max_msg = log.config.max_message_bytes
        for i, seg in enumerate(dirty):
            next_start = dirty[i + 1].base_offset if i + 1 < len(dirty) else end
            if self._map_segment(log, tp, seg, start, next_start, max_msg, txn, stats):
                break
        stats.distinct_keys = m.entries
        stats.buffer_utilization = m.utilization

    def _map_segment(self, log: Log, tp: TopicPartition, seg: LogSegment, start: int, next_start: int, max_msg: int,
                     txn: CleanedTransactionMetadata, stats: CleanerStats) -> bool:
        m = self.offset_map
        try:
            position = seg.offset_index.lookup(start)[1] if seg.size else 0
        except KafkalogError:
            position = 0
        if position > seg.size:
            position = 0
        for chunk_pos, batch in self._batches(tp, seg, position, max_msg):
            stats.map_bytes_read += batch.size_in_bytes
            if batch.magic >= 2 and batch.is_control:
                txn.on_control_batch_read(batch)
                stats.map_messages_read += 1
            elif txn.on_batch_read(batch):
                stats.map_messages_read += batch.count or 0
            elif batch.magic >= 2:
                if batch.last_offset >= start and batch.count:
                    body = batch.records_body()
                    try:
                        read, full = m.put_batch_v2(body, batch.count, batch.base_offset, start)
                    except KafkalogError as e:
                        raise e.at(seg.log_path, chunk_pos + batch.position + RECORDS_OFFSET) from None
                    finally:
                        if isinstance(body, memoryview):
                            body.release()
                    stats.map_messages_read += read
                    if full:
                        return True
            else:
                for r in batch.records():
                    if r.key is not None and r.offset >= start:
                        if m.is_full():
                            return True
                        m.put(r.key, r.offset)
                    stats.map_messages_read += 1
            if batch.last_offset >= start:
                m.update_latest_offset(batch.last_offset)
        m.update_latest_offset(next_start - 1)
        return False

    # --- cleaning --------------------------------------------------------------------------------
    def clean(self, to_clean: LogToClean) -> Tuple[int, CleanerStats]:
        """Clean one partition; returns ``(end_offset, stats)`` where ``end_offset`` is the new first
        dirty offset for ``cleaner-offset-checkpoint``."""
        return self.do_clean(to_clean, self.clock())

    def do_clean(self, to_clean: LogToClean, current_time: int) -> Tuple[int, CleanerStats]:
        log = to_clean.log
        tp = to_clean.topic_partition
        cfg = log.config
        stats = CleanerStats()
        delete_retention_ms = cfg.delete_retention_ms
        below = [s for s in log.segments if s.base_offset < to_clean.first_dirty_offset]
        legacy_delete_horizon_ms = (below[-1].last_modified_ms() - delete_retention_ms) if below else 0
        upper = to_clean.first_uncleanable_offset
        self.build_offset_map(log, tp, to_clean.first_dirty_offset, upper, stats)
        end_offset = self.offset_map.latest_offset + 1
        stats.index_done()
        txn = CleanedTransactionMetadata()
        segs = [s for s in log.segments if s.base_offset < end_offset]
        segs = [s for s in segs if s is not log.active_segment]
        segs = self.split_overflowed_segments(log, tp, segs, stats)
        if not segs:
            stats.all_done()
            return end_offset, stats
        groups = group_segments_by_size(segs, cfg.segment_bytes, cfg.segment_index_bytes, upper)
        producers = last_records_of_active_producers(log, current_time)
        for group in groups:
            self.clean_segments(log, tp, group, current_time, stats, txn,
                                legacy_delete_horizon_ms, upper, delete_retention_ms, producers)
        stats.buffer_utilization = self.offset_map.utilization
        stats.all_done()
        return end_offset, stats

    def split_overflowed_segments(self, log: Log, tp: TopicPartition, segments: List[LogSegment],
                                  stats: CleanerStats) -> List[LogSegment]:
        """Split every segment of ``segments`` whose offsets overflow its base offset (legacy data,
        KAFKA-6264; spec §4.12) and return the list with the parts in its place.

        Kafka meets the overflow while recopying, splits the segment and aborts the round (the
        next round retries); here the check comes first, the split parts are swapped into the
        log with the same crash-safe protocol, and the round goes on with them. Split copies
        batches byte for byte, so the offset map built over the old segment stays valid."""
        out: List[LogSegment] = []
        for seg in segments:
            if not seg.size or seg.read_next_offset() - 1 - seg.base_offset <= INT32_MAX:
                out.append(seg)
                continue
            self.check_done(tp)
            from kafkalog.log.loader import split_overflowed_segment
            parts = split_overflowed_segment(seg, log.config, log.clock)
            try:
                replace_segments(log, parts, [seg], check=lambda: self.check_done(tp))
            except BaseException:
                for p in parts:
                    try:
                        p.delete()
                    except OSError:
                        pass
                raise
            stats.segments_split += 1
            out.extend(sorted(parts, key=lambda p: p.base_offset))
        return out

    def clean_segments(self, log: Log, tp: TopicPartition, segments: List[LogSegment],
                       current_time: int, stats: CleanerStats,
                       txn: CleanedTransactionMetadata, legacy_delete_horizon_ms: int,
                       upper_bound_offset: int, delete_retention_ms: int,
                       producers: Dict[int, LastRecord]) -> None:
        """Kafka's ``cleanSegments``: recopy ``segments`` into new ``.cleaned`` segment(s) and swap."""
        out = _CleanedOutput(log, segments[0].base_offset, self.io_buffer_size, self.throttler, stats)
        max_msg = log.config.max_message_bytes
        f = CleanerFilter(self.offset_map, txn, producers, upper_bound_offset, current_time,
                          delete_retention_ms, stats)
        txn.cleaned_index = []
        try:
            for i, seg in enumerate(segments):
                upper = (segments[i + 1].base_offset if i + 1 < len(segments)
                         else seg.read_next_offset())
                txn.add_aborted_transactions(log.collect_aborted_transactions(seg.base_offset, upper))
                f.retain_legacy_deletes = seg.last_modified_ms() > legacy_delete_horizon_ms
                for chunk_pos, batch in self._batches(tp, seg, 0, max_msg,
                                                      on_grow=out.set_buffer_size):
                    try:
                        fb = filter_batch(batch, f)
                    except KafkalogError as e:
                        raise e.at(seg.log_path, chunk_pos) from None
                    entries = txn.cleaned_index
                    txn.cleaned_index = []
                    if fb is not None:
                        out.append(fb, entries)
            new_segments = out.finish(segments[-1].last_modified_ms())
            crash_point("cleaned-written")
            replace_segments(log, new_segments, segments, check=lambda: self.check_done(tp))
            stats.segments_cleaned += len(segments)
        except BaseException:
            out.delete()
            raise
        finally:
            txn.cleaned_index = None

