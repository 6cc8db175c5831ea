"""``LogSegment``: one ``.log`` file plus its lazily created ``.index`` / ``.timeindex`` and optional
``.txnindex`` (Kafka's ``LogSegment``; spec §2, §4.3, §4.4, §4.6-4.8).

All hot paths are batch-level: appends receive already-validated buffers plus per-batch facts
computed by the caller's single validation pass, recovery walks headers over an mmap and checks
CRCs on memoryviews, and no record is decoded except by :meth:`LogSegment.find_offset_by_timestamp`
for the one batch that holds the answer.
"""

from __future__ import annotations

import mmap
import os
import threading
import time as _time
from bisect import bisect_right
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, List, Optional, Sequence, Tuple

from kafkalog.errors import KafkalogError, KafkalogIOError, LogSegmentOffsetOverflowError
from kafkalog.log.config import LogConfig
from kafkalog.log.fetch_data_info import EMPTY_SLICE, FetchDataInfo, FileSlice, LogOffsetMetadata
from kafkalog.log.file_records import (
    BatchHeader,
    FileRecords,
    TimestampAndOffset,
    segment_next_offset,
)
from kafkalog.log.fsutil import io_error
from kafkalog.log.index.offset_index import OffsetIndex
from kafkalog.log.index.time_index import TimeIndex
from kafkalog.log.index.txn_index import AbortedTxn, TransactionIndex
from kafkalog.log.naming import INDEX_FILE_SUFFIX, LOG_FILE_SUFFIX, TIME_INDEX_FILE_SUFFIX, TXN_INDEX_FILE_SUFFIX
from kafkalog.log.protocols import LeaderEpochCacheLike, ProducerStateLike, Scheduler
from kafkalog.record.constants import (
    HEADER_SIZE_UP_TO_MAGIC,
    INT32_MAX,
    INT64_MAX,
    MAGIC_OFFSET,
    NO_TIMESTAMP,
    RECORD_OVERHEAD_V0,
)
from kafkalog.record.crc import Buffer
from kafkalog.record.header_walk import (
    F_ATTRIBUTES,
    F_BASE_OFFSET,
    F_LAST_OFFSET,
    F_MAGIC,
    F_MAX_TIMESTAMP,
    F_MAX_TIMESTAMP_SO_FAR,
    F_OFFSET_OF_MAX_TIMESTAMP_SO_FAR,
    F_POSITION,
    F_SIZE,
    NF,
    Finding,
    FindingKind,
    HeaderWalk,
    all_zero,
    walk,
)

LOG_SUFFIX = LOG_FILE_SUFFIX
INDEX_SUFFIX = INDEX_FILE_SUFFIX
TIME_INDEX_SUFFIX = TIME_INDEX_FILE_SUFFIX
TXN_INDEX_SUFFIX = TXN_INDEX_FILE_SUFFIX
#: one is taken to make a segment's transaction index on its first use: a read on the event loop and
#: the retention thread may both be first, and each ``TransactionIndex`` opens the file (the one not
#: kept would leak its descriptor). Making one reads the file whole: the locks are striped by segment,
#: as the offset and time indexes' (``_mmap_index._FILE_LOCKS``), so it never holds up another
#: segment's.
_TXN_INDEX_LOCKS = tuple(threading.Lock() for _ in range(64))
# how far past a corrupt entry recovery looks for further valid batches (report only)
_CORRUPTION_PROBE_WINDOW = 1 << 20


def segment_file_name(base_offset: int, suffix: str) -> str:
    """``%020d`` + suffix (spec §3.2)."""
    return f"{base_offset:020d}{suffix}"


def _now_ms() -> int:
    return int(_time.time() * 1000)


@dataclass(frozen=True)
class RollParams:
    """Inputs of :meth:`LogSegment.should_roll` (Kafka's ``RollParams``)."""

    max_segment_ms: int
    max_segment_bytes: int
    max_timestamp_in_messages: int
    max_offset_in_messages: int
    messages_size: int
    now: int


@dataclass
class SegmentRecovery:
    """What :meth:`LogSegment.recover` found (used by the loader's :class:`RecoveryReport`)."""

    file: str
    valid_bytes: int
    truncated_bytes: int
    reason: Optional[str] = None          # why the scan stopped before the end, None = clean
    position: Optional[int] = None        # byte position of the first bad/partial entry
    kind: str = "clean"                   # clean | partial-tail | zero-filled-tail | corruption
    valid_data_follows: Optional[bool] = None
    next_valid_position: Optional[int] = None
    batches: int = 0
    #: the offset after the kept batches
    next_offset: Optional[int] = None

    def to_json(self) -> dict[str, object]:
        return {"file": self.file, "validBytes": self.valid_bytes,
                "truncatedBytes": self.truncated_bytes, "kind": self.kind, "reason": self.reason,
                "position": self.position, "validDataFollows": self.valid_data_follows,
                "nextValidPosition": self.next_valid_position, "batches": self.batches}


class LogSegment:
    """One segment of a partition log.

    ``append_batches`` is the fast path used by :class:`kafkalog.log.log.Log`; :meth:`append` is
    Kafka's signature (one index entry at most per call). Indexes are created on first use
    (Kafka's ``LazyIndex``); the ``.txnindex`` only when an aborted transaction is recorded.
    """

    def __init__(self, dir_path: str, base_offset: int, *, index_interval_bytes: int = 4096,
                 max_index_size: int = 10 * 1024 * 1024, roll_jitter_ms: int = 0,
                 file_already_exists: bool = False, init_file_size: int = 0,
                 preallocate: bool = False, file_suffix: str = "",
                 clock: Callable[[], int] = _now_ms, files_made: bool = False) -> None:
        self.dir = d = os.fspath(dir_path)
        self.base_offset = base_offset
        #: the files' path without their suffixes (a segment's directory and base never change)
        self._stem = f"{d}{'' if d.endswith('/') else '/'}{base_offset:020d}"
        self.index_interval_bytes = index_interval_bytes
        self.max_index_size = max_index_size
        self.roll_jitter_ms = roll_jitter_ms
        self.clock = clock
        self.file_suffix = file_suffix
        self.log = FileRecords.made_empty(self._path(LOG_SUFFIX)) if files_made else \
            FileRecords.open(self._path(LOG_SUFFIX), file_already_exists=file_already_exists,
                             init_file_size=init_file_size, preallocate=preallocate)
        self._offset_index: Optional[OffsetIndex] = None
        self._time_index: Optional[TimeIndex] = None
        self._txn_index: Optional[TransactionIndex] = None
        self.bytes_since_last_index_entry = 0
        self.created_ms = clock()
        self.rolling_based_timestamp: Optional[int] = None
        self._max_ts: Optional[int] = None       # None = not loaded yet (lazy, from the time index)
        self._max_ts_offset = base_offset
        self.last_recovery: Optional[SegmentRecovery] = None
        self._indexes_touched = False
        #: both index files are on disk (made by :meth:`touch_indexes`, or found by a log's load):
        #: a flush need not load the indexes to make them
        self.index_files_exist = False

    @classmethod
    def open(cls, dir_path: str, base_offset: int, config: LogConfig, *,
             file_already_exists: bool = False, file_suffix: str = "",
             preallocate: Optional[bool] = None, clock: Callable[[], int] = _now_ms,
             files_made: bool = False) -> LogSegment:
        """Open or create a segment using a ``LogConfig`` (``index.interval.bytes``,
        ``segment.index.bytes``, ``preallocate``, ``segment.bytes``, jitter). ``files_made``: the
        caller has just made its three files empty (not preallocated): nothing opened, each index
        grown to ``segment.index.bytes`` at its first entry (:meth:`create_indexes_before_first_entry`)."""
        pre = config.preallocate if preallocate is None else preallocate
        seg = cls(dir_path, base_offset, index_interval_bytes=config.index_interval_bytes,
                  max_index_size=config.segment_index_bytes,
                  roll_jitter_ms=config.random_segment_jitter(),
                  file_already_exists=file_already_exists,
                  init_file_size=config.segment_bytes if pre else 0, preallocate=bool(pre),
                  file_suffix=file_suffix, clock=clock, files_made=files_made)
        if files_made:
            for index in (seg.offset_index, seg.time_index):
                index.made_empty(config.segment_index_bytes)
            seg._indexes_touched = seg.index_files_exist = True
        return seg

    # --- files -----------------------------------------------------------------------------------

    def _path(self, suffix: str) -> str:
        return self._stem + suffix + self.file_suffix      # (a load asks ~8 per segment)

    @property
    def log_path(self) -> str:
        return self.log.path

    @property
    def offset_index_path(self) -> str:
        return self._path(INDEX_SUFFIX)

    @property
    def time_index_path(self) -> str:
        return self._path(TIME_INDEX_SUFFIX)

    @property
    def txn_index_path(self) -> str:
        return self._path(TXN_INDEX_SUFFIX)

    @property
    def offset_index(self) -> OffsetIndex:
        """The offset index, created/mapped on first access."""
        if self._offset_index is None:
            self._offset_index = OffsetIndex(self.offset_index_path, self.base_offset, self.max_index_size)
        return self._offset_index

    @property
    def time_index(self) -> TimeIndex:
        """The time index, created/mapped on first access."""
        if self._time_index is None:
            self._time_index = TimeIndex(self.time_index_path, self.base_offset, self.max_index_size)
        return self._time_index

    @property
    def txn_index(self) -> TransactionIndex:
        """The transaction index (the file itself appears only with the first entry), made once
        whichever threads ask first."""
        index = self._txn_index
        if index is None:
            with _TXN_INDEX_LOCKS[(id(self) >> 4) % len(_TXN_INDEX_LOCKS)]:
                index = self._txn_index
                if index is None:
                    index = self._txn_index = TransactionIndex(self.base_offset, self.txn_index_path)
        return index

    def note_txn_index_absent(self) -> None:
        """The ``.txnindex`` is known not to exist (the loader listed the directory): its index is
        made without looking for the file, so a recovery's reset of it opens nothing."""
        if self._txn_index is None:
            self._txn_index = TransactionIndex(self.base_offset, self.txn_index_path, absent=True)

    def touch_indexes(self) -> None:
        """Create/map both index files now (Kafka touches them on the first append/flush/roll), so a
        segment with data always has its ``.index``/``.timeindex`` on disk."""
        if not self._indexes_touched:
            _ = self.time_index.entries        # maps (creating) the files
            _ = self.offset_index.entries
            self._indexes_touched = True
            self.index_files_exist = True

    @property
    def size(self) -> int:
        """Logical size of the ``.log`` in bytes."""
        return self.log.size

    def __repr__(self) -> str:
        return f"LogSegment(baseOffset={self.base_offset}, size={self.size}, file={self.log.path})"

    # --- timestamps ------------------------------------------------------------------------------

    def _load_max_ts(self) -> int:
        """The segment's max timestamp so far, loaded from the time index on first use."""
        mts = self._max_ts
        if mts is None:
            mts, off = self.time_index.last_entry
            self._max_ts = mts
            self._max_ts_offset = off
        return mts

    @property
    def max_timestamp_so_far(self) -> int:
        return self._load_max_ts()

    @property
    def shallow_offset_of_max_timestamp_so_far(self) -> int:
        self._load_max_ts()
        return self._max_ts_offset

    def largest_timestamp(self) -> int:
        """The largest record timestamp in the segment, or the ``.log`` mtime when none (spec §7.15)."""
        ts = self.max_timestamp_so_far
        if ts >= 0:
            return ts
        return self.last_modified_ms()

    def last_modified_ms(self) -> int:
        return int(os.stat(self.log.path).st_mtime * 1000)

    def set_last_modified_ms(self, ms: int) -> None:
        s = ms / 1000.0
        os.utime(self.log.path, (s, s))
        for idx in (self._offset_index, self._time_index):
            if idx is not None and os.path.exists(idx_path := idx.path):
                os.utime(idx_path, (s, s))

    def get_first_batch_timestamp(self) -> int:
        """The first batch's max timestamp, or ``Long.MAX_VALUE`` when the segment is empty."""
        for h in self.log.iter_headers(0):
            return h.max_timestamp
        return INT64_MAX

    def _load_first_batch_timestamp(self) -> None:
        if self.rolling_based_timestamp is None and self.log.size > 0:
            for h in self.log.iter_headers(0):
                self.rolling_based_timestamp = h.max_timestamp
                break

    def time_waited_for_roll(self, now: int, message_timestamp: int) -> int:
        self._load_first_batch_timestamp()
        t = self.rolling_based_timestamp
        if t is not None and t >= 0:
            return message_timestamp - t
        return now - self.created_ms

    def should_roll(self, p: RollParams) -> bool:
        """Spec §4.3: size, time (with jitter), a full index, or an unrepresentable offset."""
        reach_roll_time = self.time_waited_for_roll(p.now, p.max_timestamp_in_messages) > \
            p.max_segment_ms - self.roll_jitter_ms
        return (self.size > p.max_segment_bytes - p.messages_size
                or (self.size > 0 and reach_roll_time)
                or self.offset_index.is_full()
                or self.time_index.is_full()
                or not self.can_convert_to_relative_offset(p.max_offset_in_messages))

    def can_convert_to_relative_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= INT32_MAX

    # --- append ----------------------------------------------------------------------------------

    def append(self, largest_offset: int, largest_timestamp: int,
               shallow_offset_of_max_timestamp: int, records: Buffer) -> None:
        """Kafka's ``LogSegment.append``: write ``records`` (whole batches) and add at most one index
        entry, keyed by ``largest_offset`` at the append's start position, when more than
        ``index.interval.bytes`` were appended since the last entry (measured before this append)."""
        n = len(records)
        if n == 0:
            return
        pos = self.log.size
        if pos == 0:
            self.rolling_based_timestamp = largest_timestamp
        self._ensure_offset_in_range(largest_offset)
        if not self._indexes_touched:
            self.touch_indexes()
        if self.bytes_since_last_index_entry > self.index_interval_bytes:
            self._reserve_index_entries(1)
        self.log.append(records)
        if largest_timestamp > self._load_max_ts():
            self._max_ts = largest_timestamp
            self._max_ts_offset = shallow_offset_of_max_timestamp
        if self.bytes_since_last_index_entry > self.index_interval_bytes:
            self._append_index_entries(largest_offset, pos)
            self.bytes_since_last_index_entry = 0
        self.bytes_since_last_index_entry += n

    def append_batches(self, data: Buffer, positions: Sequence[int], last_offsets: Sequence[int],
                       max_timestamps: Sequence[int]) -> None:
        """Fast path: write ``data`` (whole, validated batches; ``positions[i]`` is where batch ``i``
        starts inside ``data``) in one ``pwrite`` and maintain the indexes per batch with the
        recovery rule (entry ``(batch.last_offset, batch_position)`` whenever more than
        ``index.interval.bytes`` were written since the last entry), so an appended segment has the
        same index as a recovered one. Data is written before the indexes."""
        n = len(data)
        if n == 0:
            return
        pos0 = self.log.size
        self._ensure_offset_in_range(last_offsets[-1])
        if not self._indexes_touched:
            self.touch_indexes()
        interval = self.index_interval_bytes
        if self.bytes_since_last_index_entry + positions[-1] - positions[0] > interval:
            self._reserve_index_entries(min(len(positions), 1 + n // max(1, interval)))
        self.log.append(data)
        self._index_batches(pos0, n, positions, last_offsets, max_timestamps)

    def _reserve_index_entries(self, entries: int) -> None:
        """Reserve the index blocks ``entries`` more entries need before the data is written (the
        index files are sparse): a full disk fails the append here, with nothing written."""
        self.offset_index.reserve(entries)
        self.time_index.reserve(entries)

    def adopt_log_file(self, path: str, size: int, positions: Sequence[int],
                       last_offsets: Sequence[int], max_timestamps: Sequence[int]) -> None:
        """Make the file ``path`` (``size`` bytes of whole, validated batches whose offsets are
        already this segment's, its data already durable) this empty segment's ``.log``: it is
        renamed over the empty ``.log`` and indexed as :meth:`append_batches` would have indexed
        it (``Log.append_file(move=True)``)."""
        if self.log.size:
            raise KafkalogError("only an empty segment can adopt a file", file=self.log.path)
        self._ensure_offset_in_range(last_offsets[-1])
        target = self.log.path
        self.log.close()
        try:
            os.rename(path, target)
        except OSError as e:
            self.log = FileRecords.open(target, file_already_exists=True)
            raise KafkalogIOError(f"cannot move {path} into the log: {e.strerror}", file=target) from e
        self.log = FileRecords.open(target, file_already_exists=True)
        if self.log.size != size:
            raise KafkalogError(f"adopted file has {self.log.size} bytes, expected {size}", file=target)
        if not self._indexes_touched:
            self.touch_indexes()
        self._index_batches(0, size, positions, last_offsets, max_timestamps)

    def _index_batches(self, pos0: int, n: int, positions: Sequence[int],
                       last_offsets: Sequence[int], max_timestamps: Sequence[int]) -> None:
        """Index entries and max timestamp for ``n`` bytes of batches just added at ``pos0``."""
        if pos0 == 0:
            self.rolling_based_timestamp = max_timestamps[0]
        mts = self._load_max_ts()
        moff = self._max_ts_offset
        since = self.bytes_since_last_index_entry
        interval = self.index_interval_bytes
        oi = None
        count = len(positions)
        for i in range(count):
            ts = max_timestamps[i]
            if ts > mts:
                mts = ts
                moff = last_offsets[i]
            if since > interval:
                if oi is None:
                    oi = self.offset_index
                    ti = self.time_index
                if not (oi.is_full() or ti.is_full()):
                    oi.append(last_offsets[i], pos0 + positions[i])
                    ti.maybe_append(mts, moff)
                since = 0
            since += (positions[i + 1] if i + 1 < count else n) - positions[i]
        self._max_ts = mts
        self._max_ts_offset = moff
        self.bytes_since_last_index_entry = since

    def try_append_one(self, data: Buffer, size: int, last_offset: int, max_timestamp: int,
                       max_segment_bytes: int, max_segment_ms: int) -> bool:
        """Fast path of ``Log.append`` for one batch (offsets already assigned in ``data``): the
        :meth:`should_roll` checks, then exactly what :meth:`append_batches` does for one batch.
        Returns False, having done nothing, when the general path is needed: empty segment, indexes
        not yet mapped, first-batch timestamp or max timestamp not loaded yet, or a roll is due."""
        pos0 = self.log.size
        t = self.rolling_based_timestamp
        mts = self._max_ts
        if (pos0 == 0 or pos0 > max_segment_bytes - size or not self._indexes_touched
                or t is None or mts is None or not 0 <= last_offset - self.base_offset <= INT32_MAX):
            return False
        waited = max_timestamp - t if t >= 0 else self.clock() - self.created_ms
        if waited > max_segment_ms - self.roll_jitter_ms:
            return False
        oi = self._offset_index
        ti = self._time_index
        if oi is None or ti is None or oi.is_full() or ti.is_full():
            return False
        if self.bytes_since_last_index_entry > self.index_interval_bytes:
            self._reserve_index_entries(1)
        self.log.append(data)
        if max_timestamp > mts:
            self._max_ts = mts = max_timestamp
            self._max_ts_offset = last_offset
        since = self.bytes_since_last_index_entry
        if since > self.index_interval_bytes:
            oi.append(last_offset, pos0)
            ti.maybe_append(mts, self._max_ts_offset)
            since = 0
        self.bytes_since_last_index_entry = since + size
        return True

    def _append_index_entries(self, offset: int, position: int) -> None:
        oi = self.offset_index
        ti = self.time_index
        if oi.is_full() or ti.is_full():
            return
        oi.append(offset, position)
        ti.maybe_append(self._load_max_ts(), self._max_ts_offset)

    def _ensure_offset_in_range(self, offset: int) -> None:
        if not self.can_convert_to_relative_offset(offset):
            raise LogSegmentOffsetOverflowError(
                f"Detected offset overflow at offset {offset} in segment with base offset "
                f"{self.base_offset}", file=self.log.path)

    def update_txn_index(self, aborted_txns: Iterable[AbortedTxn]) -> None:
        """Append completed aborted transactions to the ``.txnindex``."""
        for txn in aborted_txns:
            self.txn_index.append(txn)

    # --- read ------------------------------------------------------------------------------------

    def translate_offset(self, offset: int, starting_file_position: int = 0) -> Optional[BatchHeader]:
        """Index lookup (largest entry <= offset) then a forward header walk to the first batch whose
        last offset is >= ``offset``; None when the segment holds no such batch.

        A batch-aligned offset (every client fetches from the offset after its last batch) has its
        index entry on the batch before it, since an entry holds its chunk's last offset: when the
        batch at the next entry holds ``offset``, it is the walk's answer (the batches between hold
        lower offsets), read in one header instead of walking from the entry before."""
        pos = 0
        if self.log.size > 0 and (self._offset_index is not None
                                  or os.path.exists(self.offset_index_path)):
            entry, following = self.offset_index.lookup_with_next(offset)
            pos = entry.position
            if (following is not None and entry.offset < offset and following > pos
                    and following >= starting_file_position):
                h = self.log.batch_holding(following, offset)
                if h is not None:
                    return h
        start = max(pos, starting_file_position)
        h = self.log.search_for_offset_with_size(offset, start)
        if start > starting_file_position and (h is None or (
                h.position == start and h.magic >= 2 and h.base_offset > offset)):
            # the index entry overshoots (damaged or foreign index): scan instead of skipping
            h = self.log.search_for_offset_with_size(offset, starting_file_position)
        return h

    def read(self, start_offset: int, max_size: int, max_position: Optional[int] = -1,
             min_one_message: bool = False) -> Optional[FetchDataInfo]:
        """Spec §4.6 step 6. ``max_position=-1`` means the segment's size, ``None`` means no safe
        position is known (empty records, offset metadata only). Returns None when ``start_offset`` is
        beyond the segment's data."""
        if max_size < 0:
            raise KafkalogError(f"Invalid max size {max_size} for log read from segment {self.log.path}")
        start = self.translate_offset(start_offset)
        if start is None:
            return None
        meta = LogOffsetMetadata(start_offset, self.base_offset, start.position)
        adjusted = max(max_size, start.size) if min_one_message else max_size
        if adjusted == 0 or max_position is None:
            return FetchDataInfo(meta, EMPTY_SLICE)
        if max_position == -1:
            max_position = self.log.size
        fetch_size = min(max_position - start.position, adjusted)
        return FetchDataInfo(meta, FileSlice(self.log.path, -1, start.position, max(fetch_size, 0), self.log),
                             adjusted < start.size)

    def read_next_offset(self) -> int:
        """The next offset after the last batch (walk from the last offset-index entry). A segment
        of at most ``index.interval.bytes`` whose index is not open yet is walked from its start:
        its index holds no entry (the first is written past that many bytes), and opening it to
        find so mapped all of it after a crash, which leaves it at its preallocated length."""
        size = self.log.size
        if size == 0:
            return self.base_offset
        pos = 0
        if self._offset_index is not None or (size > self.index_interval_bytes
                                              and os.path.exists(self.offset_index_path)):
            oi = self.offset_index
            pos = oi.last_entry.position
        if pos == 0 and self.rolling_based_timestamp is None:
            return segment_next_offset(self._headers_noting_the_first, 0, self.base_offset)
        return segment_next_offset(self._edges, pos, self.base_offset)

    def _edges(self, position: int) -> Iterator[BatchHeader]:
        """The headers from ``position`` whose last is the segment's (``iter_headers``' edges)."""
        return self.log.iter_headers(position, edges=True)

    def _headers_noting_the_first(self, position: int) -> Iterator[BatchHeader]:
        """The headers from ``position`` whose last is the segment's; from the start, the first
        one's max timestamp kept as the time-based roll's (a walk of the whole segment passes it:
        the first append after a restart then reads no header)."""
        for h in self.log.iter_headers(position, edges=True):
            if position == 0 and self.rolling_based_timestamp is None:
                self.rolling_based_timestamp = h.max_timestamp
            yield h

    def find_offset_by_timestamp(self, timestamp: int, starting_offset: Optional[int] = None
                                 ) -> Optional[TimestampAndOffset]:
        """The first record with timestamp >= ``timestamp`` and offset >= ``starting_offset``
        (spec §4.7; Kafka's ``LogSegment.findOffsetByTimestamp``): the ``.timeindex`` entry at or
        below the timestamp, its position from the ``.index``, then the batches from there
        (:meth:`~kafkalog.log.file_records.FileRecords.search_for_timestamp`)."""
        start = self.base_offset if starting_offset is None else starting_offset
        target = max(int(self.time_index.lookup(timestamp).offset), start)
        h = self.translate_offset(target)
        if h is None:
            return None
        return self.log.search_for_timestamp(timestamp, h.position, start)

    # --- recovery --------------------------------------------------------------------------------

    def recover(self, producer_state_manager: Optional[ProducerStateLike] = None,
                leader_epoch_cache: Optional[LeaderEpochCacheLike] = None,
                contiguous: bool = False, active: bool = False,
                index_lengths: Tuple[Optional[int], Optional[int]] = (None, None)) -> int:
        """Rebuild the indexes from the data, CRC-check every batch and truncate at the first bad
        or partial entry (spec §4.8). Returns the truncated bytes; details in ``last_recovery``.

        ``contiguous`` (logs that are never compacted): every v2 batch must start right after the
        previous one, so a damaged baseOffset (outside the CRC) is caught even when it grows.
        ``active`` (the log's last segment, which the load resizes to ``segment.index.bytes``
        next): its indexes are left at that length, not trimmed to their entries first (each file
        was cut and grown again after every crash); the time index's last entry is written
        without a mapping when the index has none (:meth:`AbstractIndex.write_unmapped`), and a
        mapping it was written through is dropped all the same
        (:meth:`AbstractIndex.release_mapping`: one kept by each recovered partition reached the
        kernel's 65,530 at 100,000 partitions). ``index_lengths``: the lengths of the offset and
        time index files as the caller knows them (None: unknown), for
        :meth:`AbstractIndex.reset`.

        Better than Kafka: the stop is classified (partial tail, zero-filled tail, or corruption)
        and, for corruption, the bytes after the bad entry are probed for further valid batches so
        that mid-segment damage is reported instead of passing for a torn tail.

        Steps: reset the indexes, walk the batches in windows (:meth:`_recover_window`: index
        entries, leader epochs, producer state), classify the stop (:func:`_classify_stop`),
        truncate, set the segment's timestamps (:meth:`_finish_recovery`).
        """
        self.offset_index.reset(index_lengths[0])
        self.time_index.reset(index_lengths[1])
        self.txn_index.reset()
        size = self.log.size
        scan = _RecoveryScan(self.base_offset, leader_epoch_cache)
        stop: Tuple[Optional[str], Optional[int], str, Optional[bool], Optional[int]] = \
            (None, None, "clean", None, None)
        if size > 0:
            mm = self._recovery_view(size)
            walked = len(mm)            # (a file shorter than its logical size: what it holds)
            try:
                finding = None
                while finding is None and scan.valid < walked:
                    before = scan.valid
                    finding = self._recover_window(mm, walked, scan, producer_state_manager,
                                                   leader_epoch_cache, contiguous)
                    if finding is None and scan.valid == before:   # pragma: no cover - walker bug
                        raise KafkalogError("recovery walk made no progress", file=self.log.path,
                                            position=before)
                if finding is not None:
                    stop = _classify_stop(mm, walked, finding, self.base_offset)
            finally:
                if isinstance(mm, mmap.mmap):
                    mm.close()
        truncated = self.log.truncate_to(scan.valid) if scan.valid < size else 0
        self._finish_recovery(scan, trim=not active)
        reason, bad_pos, kind, follows, next_valid = stop
        self.last_recovery = SegmentRecovery(self.log.path, scan.valid, truncated, reason,
                                             bad_pos, kind, follows, next_valid, scan.batches,
                                             scan.expect_next)
        return truncated

    def _recovery_view(self, size: int) -> bytes | mmap.mmap:
        """The first ``size`` bytes of the ``.log`` for a recovery's walk: read when they are few
        (:data:`_RECOVERY_READ_LIMIT`: one ``pread``, where a mapping took five system calls, a
        partition's active segment after a crash; none, nor the file opened, when a load's
        read-ahead read it whole: :meth:`FileRecords.read_at`), else mapped."""
        if size <= _RECOVERY_READ_LIMIT:
            try:
                return self.log.read_at(0, size)
            except OSError as err:
                raise io_error(err, self.log.path, "read segment for recovery") from err
        fd = self.log.pin()
        try:
            return mmap.mmap(fd, size, access=mmap.ACCESS_READ)   # (keeps a descriptor of its own)
        finally:
            self.log.unpin()

    def _recover_window(self, mm: bytes | mmap.mmap, size: int, scan: _RecoveryScan,
                        psm: Optional[ProducerStateLike], cache: Optional[LeaderEpochCacheLike],
                        contiguous: bool) -> Optional[Finding]:
        """Walk up to ``_RECOVERY_WINDOW`` batches from ``scan.valid`` and apply them: index
        entries every ``index.interval.bytes``, leader-epoch starts, producer state. Returns the
        walk's finding (None: more to walk, or the end was reached)."""
        w, n, finding = _walk_window(mm, size, scan, self.base_offset, contiguous)
        if n == 0:
            return finding
        cols = memoryview(w.facts).cast("q")
        last_row = (n - 1) * NF
        if scan.batches == 0:
            scan.first_ts = cols[F_MAX_TIMESTAMP]
        self._index_window(cols, n, scan)
        if cache is not None:
            for epoch, start in w.epoch_starts:
                if start > cols[last_row + F_LAST_OFFSET]:
                    break
                cache.assign(epoch, start)
                scan.latest_epoch = epoch
        if psm is not None and w.producer_batches:
            txn = self.txn_index
            for aborted in psm.replay_walk(mm, w, 0, n):
                txn.append(aborted)
        scan.max_ts = cols[last_row + F_MAX_TIMESTAMP_SO_FAR]
        scan.max_ts_offset = cols[last_row + F_OFFSET_OF_MAX_TIMESTAMP_SO_FAR]
        scan.expect_next = cols[last_row + F_LAST_OFFSET] + 1
        scan.valid = cols[last_row + F_POSITION] + cols[last_row + F_SIZE]
        scan.batches += n
        cols.release()
        return finding

    def _index_window(self, cols: memoryview, n: int, scan: _RecoveryScan) -> None:
        """Index entries for ``n`` walked batches: one ``(last offset, position)`` (and the running
        max timestamp) at each batch starting more than ``index.interval.bytes`` after the last
        entry, as :meth:`append_batches` does."""
        positions = cols[F_POSITION:n * NF:NF]
        oi = self.offset_index
        ti = self.time_index
        room = min(oi.max_entries - oi.entries, ti.max_entries - 1 - ti.entries)   # is_full()
        interval = self.index_interval_bytes
        rows: List[int] = []
        i = bisect_right(positions, scan.last_index_pos + interval)
        while i < n:
            r = i * NF
            if len(rows) < room:
                rows.append(r)
            scan.last_index_pos = cols[r + F_POSITION]
            i = bisect_right(positions, scan.last_index_pos + interval, i + 1)
        if rows:
            oi.append_entries([cols[r + F_LAST_OFFSET] for r in rows],
                              [cols[r + F_POSITION] for r in rows])
            ti.maybe_append_entries([cols[r + F_MAX_TIMESTAMP_SO_FAR] for r in rows],
                                    [cols[r + F_OFFSET_OF_MAX_TIMESTAMP_SO_FAR] for r in rows])
        positions.release()

    def _finish_recovery(self, scan: _RecoveryScan, trim: bool = True) -> None:
        """The segment's timestamps and index tails after a recovery walk: the time index's
        entry of the max timestamp (Kafka's ``maybeAppend(..., skipFullCheck=true)``) and the index
        files cut to their entries, unless not ``trim`` (the active segment's): its max timestamp
        is then kept in memory and its entry written as a segment's last entry is, by its roll or
        its close (a crash before either recovers the active segment again). After a crash every
        partition's active segment is recovered: the entry took an open, a write and a close
        each (~0.3 s of a 20,000-partition load here), and an fsync at the next flush."""
        if self.rolling_based_timestamp is None and scan.first_ts is not None:
            self.rolling_based_timestamp = scan.first_ts
        self._max_ts = scan.max_ts
        self._max_ts_offset = scan.max_ts_offset
        self.bytes_since_last_index_entry = scan.valid - scan.last_index_pos
        if trim:
            self.time_index.maybe_append(scan.max_ts, scan.max_ts_offset, skip_full_check=True)
            self.offset_index.trim_to_valid_size()
            self.time_index.trim_to_valid_size()
        else:
            self.time_index.release_mapping()

    # --- truncation ------------------------------------------------------------------------------

    def truncate_to(self, offset: int) -> int:
        """Remove every batch whose last offset is >= ``offset`` (whole batches only; spec §2.7).
        Returns the bytes removed."""
        mapping = self.translate_offset(offset)
        oi = self.offset_index
        ti = self.time_index
        oi.truncate_to(offset)
        ti.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        oi.resize(self.max_index_size)
        ti.resize(self.max_index_size)
        removed = 0 if mapping is None else self.log.truncate_to(mapping.position)
        if self.log.size == 0:
            self.created_ms = self.clock()
            self.rolling_based_timestamp = None
        self.bytes_since_last_index_entry = 0
        if self._max_ts is not None:
            ts, off = ti.last_entry
            pos = oi.lookup(off).position if ti.entries > 0 else 0
            for h in self.log.iter_headers(pos):
                if h.max_timestamp > ts:
                    ts = h.max_timestamp
                    off = h.last_offset
            self._max_ts = ts
            self._max_ts_offset = off
        return removed

    # --- lifecycle -------------------------------------------------------------------------------

    def on_become_inactive_segment(self) -> None:
        """On roll: final time-index entry, trim both indexes and the ``.log`` (spec §2.5)."""
        self.time_index.maybe_append(self._load_max_ts(), self._max_ts_offset, skip_full_check=True)
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()
        self.log.trim()

    def flush(self) -> None:
        """fsync the ``.log``, force both index mmaps, fsync the ``.txnindex``."""
        if not self.index_files_exist:
            self.touch_indexes()
        self.log.flush()
        self.offset_index.flush()
        self.time_index.flush()
        if self._txn_index is not None:
            self._txn_index.flush()

    def written_since_open(self) -> bool:
        """Whether a flush has anything to make durable that was written since the segment was
        opened: its ``.log`` holds unflushed writes (:meth:`FileRecords.holds_unflushed_writes`),
        an index may hold writes (:attr:`AbstractIndex.may_hold_writes`: one loaded only to be
        read does not) or the transaction index was written (a read-committed Fetch opens it)."""
        return (self.log.holds_unflushed_writes() or self._indexes_touched
                or (self._txn_index is not None and self._txn_index.written)
                or any(idx is not None and idx.may_hold_writes
                       for idx in (self._offset_index, self._time_index)))

    def resize_indexes(self, size: int) -> None:
        self.offset_index.resize(size)
        self.time_index.resize(size)

    def resize_indexes_before_first_entry(self, size: int) -> None:
        """:meth:`resize_indexes` of each index before its first entry is written (see
        :meth:`AbstractIndex.resize_before_first_entry`)."""
        self.offset_index.resize_before_first_entry(size)
        self.time_index.resize_before_first_entry(size)

    def create_indexes_before_first_entry(self, size: int) -> None:
        """Both index files of a new segment made empty, each grown to ``size`` before its first
        entry is written (:meth:`AbstractIndex.create_empty`; a file already there is resized
        now, as :meth:`resize_indexes` does, as is one already read): a new partition's, or the
        one a log's load makes in an empty directory, whose indexes most often never get an entry."""
        for index in (self.offset_index, self.time_index):
            if not index.create_empty(size):
                index.resize(size)
        self._indexes_touched = self.index_files_exist = True

    def append_final_time_index_entry(self) -> None:
        """The time index's entry of the segment's max timestamp, if it was ever loaded and the
        index lacks it (Kafka's close appends it; :meth:`Log.close` before its last flush, so the
        entry is forced with the records: a recovered active segment keeps it in memory only,
        :meth:`_finish_recovery`). An index that cannot take it (full, or broken) is left as it
        is: a close still closes."""
        try:
            if self._max_ts is not None:
                self.time_index.maybe_append(self._max_ts, self._max_ts_offset, skip_full_check=True)
        except KafkalogError:
            pass

    def close(self) -> None:
        """Final time-index entry (:meth:`append_final_time_index_entry`), trim and close the
        indexes, trim and close the ``.log``."""
        if self.log.closed:
            return
        self.append_final_time_index_entry()
        for idx in (self._offset_index, self._time_index, self._txn_index):
            if idx is not None:
                idx.close()
        self.log.close()

    def close_handlers(self) -> None:
        """Close file handles without trimming or writing anything (used before deletion)."""
        for idx in (self._offset_index, self._time_index, self._txn_index):
            if idx is not None:
                try:
                    idx.close_handler()
                except Exception:
                    pass
        self.log.close_handle()

    def change_file_suffixes(self, old_suffix: str, new_suffix: str) -> None:
        """Rename every file of the segment from ``old_suffix`` to ``new_suffix`` (``""``,
        ``.cleaned``, ``.swap``, ``.deleted``); a missing index file is skipped."""
        def renamed(p: str) -> str:
            if old_suffix and p.endswith(old_suffix):
                p = p[: -len(old_suffix)]
            return p + new_suffix
        self.log.rename_to(renamed(self.log.path))
        for suffix, idx in ((INDEX_SUFFIX, self._offset_index), (TIME_INDEX_SUFFIX, self._time_index),
                            (TXN_INDEX_SUFFIX, self._txn_index)):
            cur = self._path(suffix)
            if idx is not None:
                idx.rename_to(renamed(cur))
            elif os.path.exists(cur):
                os.rename(cur, renamed(cur))
        self.file_suffix = new_suffix

    def has_suffix(self, suffix: str) -> bool:
        return self.log.path.endswith(suffix)

    def delete(self) -> None:
        """Close and delete every file of the segment (missing files are fine)."""
        self.close_handlers()
        for p in (self.log.path, self._path(INDEX_SUFFIX), self._path(TIME_INDEX_SUFFIX),
                  self._path(TXN_INDEX_SUFFIX)):
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass


# --- recovery steps ------------------------------------------------------------------------------

_RECOVERY_WINDOW = 1 << 16        # batches per walk: bounded memory for the facts of a window
#: a segment of at most this many bytes is read, not mapped, for its recovery
_RECOVERY_READ_LIMIT = 1 << 20


class _RecoveryScan:
    """The running state of :meth:`LogSegment.recover` across walk windows."""

    __slots__ = ("valid", "last_index_pos", "max_ts", "max_ts_offset", "first_ts", "batches",
                 "expect_next", "latest_epoch")

    def __init__(self, base_offset: int, cache: Optional[LeaderEpochCacheLike]) -> None:
        self.valid = 0
        self.last_index_pos = 0
        self.max_ts = NO_TIMESTAMP
        self.max_ts_offset = base_offset
        self.first_ts: Optional[int] = None
        self.batches = 0
        self.expect_next = base_offset      # offsets increase from batch to batch (outside the CRC)
        self.latest_epoch = cache.latest_epoch() if cache is not None else None


def _walk_window(mm: bytes | mmap.mmap, size: int, scan: _RecoveryScan, base: int, contiguous: bool
                 ) -> Tuple[HeaderWalk, int, Optional[Finding]]:
    """One window of a recovery walk from ``scan.valid``: the walk, how many of its batches are
    valid, and where it stopped (None: more to walk, or the end). The one rule of what recovery
    keeps, for :meth:`LogSegment.recover` and :func:`scan_for_recovery` alike."""
    w = walk(mm, scan.valid, size, expect_next=scan.expect_next, contiguous=contiguous,
             segment_base=base, max_batches=_RECOVERY_WINDOW, max_timestamp=scan.max_ts,
             offset_of_max_timestamp=scan.max_ts_offset, latest_epoch=scan.latest_epoch)
    n, finding = w.count, w.finding
    if contiguous and w.legacy_batches:
        n, finding = _legacy_contiguity(mm, w, scan.expect_next, n, finding)
    return w, n, finding


def scan_for_recovery(path: str, base_offset: int, contiguous: bool) -> SegmentRecovery:
    """What :meth:`LogSegment.recover` would keep of the segment ``.log`` at ``path``, read-only
    (nothing opened for writing, no index touched): ``valid_bytes``, the bytes it would cut
    (``truncated_bytes``) and why (``kind``, ``reason``, ``position``), the batches kept and the
    ``next_offset`` after them (``kafkalog recover --dry-run``)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        scan = _RecoveryScan(base_offset, None)
        stop: Tuple[Optional[str], Optional[int], str, Optional[bool], Optional[int]] = \
            (None, None, "clean", None, None)
        if size > 0:
            mm = mmap.mmap(fd, size, access=mmap.ACCESS_READ)
            try:
                finding = None
                while finding is None and scan.valid < size:
                    before = scan.valid
                    w, n, finding = _walk_window(mm, size, scan, base_offset, contiguous)
                    if n:
                        row = w.batch(n - 1)
                        scan.max_ts = row[F_MAX_TIMESTAMP_SO_FAR]
                        scan.max_ts_offset = row[F_OFFSET_OF_MAX_TIMESTAMP_SO_FAR]
                        scan.expect_next = row[F_LAST_OFFSET] + 1
                        scan.valid = row[F_POSITION] + row[F_SIZE]
                        scan.batches += n
                    if finding is None and scan.valid == before:   # pragma: no cover - walker bug
                        raise KafkalogError("recovery walk made no progress", file=path, position=before)
                if finding is not None:
                    stop = _classify_stop(mm, size, finding, base_offset)
            finally:
                mm.close()
    finally:
        os.close(fd)
    reason, bad_pos, kind, follows, next_valid = stop
    return SegmentRecovery(path, scan.valid, size - scan.valid, reason, bad_pos, kind, follows,
                           next_valid, scan.batches, scan.expect_next)


def _legacy_contiguity(mm: bytes | mmap.mmap, w: HeaderWalk, expect_next: int, n: int,
                       finding: Optional[Finding]) -> Tuple[int, Optional[Finding]]:
    """``contiguous`` for compressed v0/v1 wrappers: their first offset (inside the wrapper) must
    be the previous batch's next offset. Cuts the walk at the first that is not."""
    for i in range(n):
        row = w.batch(i)
        if row[F_MAGIC] < 2 and row[F_ATTRIBUTES] & 0x07:
            pos, last = row[F_POSITION], row[F_LAST_OFFSET]
            first = _legacy_first_offset(mm[pos:pos + row[F_SIZE]], last)
            if first != expect_next:
                return i, Finding(FindingKind.OFFSET_OVERLAP, pos, row[F_BASE_OFFSET], last, expect_next)
        expect_next = row[F_LAST_OFFSET] + 1
    return n, finding


def _classify_stop(mm: bytes | mmap.mmap, size: int, f: Finding, base: int
                   ) -> Tuple[Optional[str], Optional[int], str, Optional[bool], Optional[int]]:
    """``(reason, position, kind, valid data follows, next valid position)`` of a recovery stop:
    a torn tail, a zero-filled tail, or corruption (then the bytes after it are probed)."""
    k, pos = f.kind, f.position
    if k is FindingKind.SHORT_TAIL:
        return f"{size - pos} trailing bytes too short for a batch header", pos, "partial-tail", False, None
    if k is FindingKind.PARTIAL_TAIL:
        reason = f"partial batch of {f.a} bytes with only {size - pos} bytes left"
        if 0 <= f.b <= 2 and f.c >= base:      # a torn write keeps a real header
            return reason, pos, "partial-tail", False, None
    elif k is FindingKind.BAD_SIZE:
        reason = f"Found record size {f.a} smaller than minimum record overhead ({RECORD_OVERHEAD_V0})"
    elif k is FindingKind.OFFSET_RANGE:
        reason = f"batch offsets {f.a}..{f.b} outside the range of segment with base offset {base}"
    else:
        reason = f.message
    if all_zero(mm, pos, size):
        return reason, pos, "zero-filled-tail", False, None
    next_valid = _probe_valid_batch(mm, pos + 1, size)
    return reason, pos, "corruption", next_valid is not None, next_valid


def _probe_valid_batch(buf: bytes | bytearray | mmap.mmap, start: int, end: int) -> Optional[int]:
    """Look for a valid batch (plausible header + matching CRC, by the header walker) in
    ``buf[start:end]``, within ``_CORRUPTION_PROBE_WINDOW`` bytes. Returns its position or None."""
    stop = min(end - HEADER_SIZE_UP_TO_MAGIC, start + _CORRUPTION_PROBE_WINDOW)
    for magic_byte in (b"\x02", b"\x01", b"\x00"):
        p = start + MAGIC_OFFSET
        while True:
            p = buf.find(magic_byte, p, stop + MAGIC_OFFSET)
            if p < 0:
                break
            pos = p - MAGIC_OFFSET
            p += 1
            if pos < start:
                continue
            w = walk(buf, pos, end, verify_crc=True, max_batches=1)
            if w.count and w.batch(0)[F_BASE_OFFSET] >= 0:
                return pos
    return None


def _legacy_first_offset(entry: Buffer, last: int) -> int:
    """First offset of a compressed v0/v1 wrapper whose (outer) offset is ``last``; -1 when its
    inner messages cannot be read (the wrapper offset is outside the CRC-32)."""
    from kafkalog.log._encode import legacy_wrapper_inner_offsets
    try:
        n = len(legacy_wrapper_inner_offsets(bytes(entry)))
    except KafkalogError:
        return -1
    return last - n + 1 if n else -1


def delete_segments_later(scheduler: Optional[Scheduler], delay_ms: int, segments: Sequence[LogSegment],
                          other_files: Sequence[str] = ()) -> None:
    """Delete segments already renamed ``.deleted`` (and ``other_files``) after ``delay_ms`` via
    ``scheduler``, or now when there is none (Kafka's asynchronous segment deletion)."""
    segs = list(segments)
    files = list(other_files)

    def delete() -> None:
        for s in segs:
            s.delete()
        for p in files:
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass
    if scheduler is not None and delay_ms > 0:
        scheduler(delay_ms / 1000.0, delete)
    else:
        delete()


