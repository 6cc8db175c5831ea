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
import random
import time as _time
import zlib
from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence

from crc32c import crc32c

from kafkalog.errors import (CorruptRecordError, InvalidOffsetError, KafkalogError, KafkalogIOError,
                             LogSegmentOffsetOverflowError)
from kafkalog.log.offset_index import OffsetIndex
from kafkalog.log.time_index import TimeIndex
from kafkalog.log.txn_index import TransactionIndex
from kafkalog.log.fetch import FetchDataInfo, FileSlice, LogOffsetMetadata, EMPTY_SLICE
from kafkalog.log.file_records import (INT_MAX, LOG_OVERHEAD, PREFIX, PREFIX_SIZE,
                                       RECORD_BATCH_OVERHEAD, RECORD_OVERHEAD_V0, UINT32, V1_TIMESTAMP,
                                       V2_FIELDS, BatchHeader, FileRecords)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
NO_TIMESTAMP = -1
# how far past a corrupt entry recovery looks for further valid batches (report only)
_CORRUPTION_PROBE_WINDOW = 1 << 20


def segment_file_name(base_offset: int, suffix: str) -> str:
    """``%020d`` + suffix (spec §3.2)."""
    return f"{base_offset:020d}{suffix}"


def _now_ms() -> int:
    return int(_time.time() * 1000)


LONG_MAX = 2**63 - 1
# Kafka's defaults (spec §4.13) for the keys the log layer reads, used when a config lacks a key.
DEFAULTS = {
    "segment.bytes": 1073741824, "segment.ms": 604800000, "segment.jitter.ms": 0,
    "segment.index.bytes": 10485760, "index.interval.bytes": 4096, "flush.messages": LONG_MAX,
    "flush.ms": LONG_MAX, "max.message.bytes": 1048588, "file.delete.delay.ms": 60000,
    "preallocate": False, "message.timestamp.type": "CreateTime",
    "message.timestamp.before.max.ms": LONG_MAX, "message.timestamp.after.max.ms": LONG_MAX,
    "cleanup.policy": "delete", "max.compaction.lag.ms": LONG_MAX, "compression.type": "producer",
    "producer.id.expiration.ms": 86400000,
}


def _cfg(config) -> Callable[[str], object]:
    """A getter for Kafka config keys over a ``LogConfig``, a mapping, or None (defaults)."""
    def get(key: str):
        if config is None:
            return DEFAULTS[key]
        attr = key.replace(".", "_")
        if hasattr(config, attr):
            return getattr(config, attr)
        getter = getattr(config, "get", None)
        if callable(getter):
            try:
                v = getter(key)
            except KafkalogError:        # a key that is not a topic config (broker-level)
                return DEFAULTS[key]
            if v is not None:
                return v
        try:
            return config[key]
        except (KeyError, TypeError, IndexError):
            return DEFAULTS[key]
    return get


@dataclass(frozen=True)
class RollParams:
    """Inputs of :meth:`LogSegment.should_roll` (Kafka's ``RollParams``)."""

    max_segment_ms: int
    max_segment_bytes: int
    max_timestamp_in_messages: int
    max_offset_in_messages: int
    messages_size: int
    now: int


@dataclass(frozen=True)
class TimestampAndOffset:
    """A ListOffsets answer: record timestamp, offset and the batch's leader epoch (None if < 0)."""

    timestamp: int
    offset: int
    leader_epoch: Optional[int] = None


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

    def to_json(self) -> dict:
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
                 clock: Callable[[], int] = _now_ms) -> None:
        self.dir = os.fspath(dir_path)
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.max_index_size = max_index_size
        self.roll_jitter_ms = roll_jitter_ms
        self.clock = clock
        self.file_suffix = file_suffix
        self.log = FileRecords.open(self._path(LOG_SUFFIX), file_already_exists=file_already_exists,
                                    init_file_size=init_file_size, preallocate=preallocate)
        self._offset_index = None
        self._time_index = None
        self._txn_index = None
        self.bytes_since_last_index_entry = 0
        self.created_ms = clock()
        self.rolling_based_timestamp: Optional[int] = None
        self._max_ts: Optional[int] = None       # None = not loaded yet (lazy, from the time index)
        self._max_ts_offset = base_offset
        self.last_recovery: Optional[SegmentRecovery] = None
        self._indexes_touched = False

    @classmethod
    def open(cls, dir_path: str, base_offset: int, config, *, file_already_exists: bool = False,
             file_suffix: str = "", preallocate: Optional[bool] = None,
             clock: Callable[[], int] = _now_ms) -> "LogSegment":
        """Open or create a segment using a ``LogConfig`` (``index.interval.bytes``,
        ``segment.index.bytes``, ``preallocate``, ``segment.bytes``, jitter)."""
        g = _cfg(config)
        pre = g("preallocate") if preallocate is None else preallocate
        jitter = g("segment.jitter.ms")
        seg_ms = g("segment.ms")
        roll_jitter = 0
        if jitter and jitter > 0:
            roll_jitter = random.randint(0, 2**31 - 1) % min(jitter, seg_ms)
        return cls(dir_path, base_offset, index_interval_bytes=g("index.interval.bytes"),
                   max_index_size=g("segment.index.bytes"), roll_jitter_ms=roll_jitter,
                   file_already_exists=file_already_exists,
                   init_file_size=g("segment.bytes") if pre else 0, preallocate=bool(pre),
                   file_suffix=file_suffix, clock=clock)

    # --- files -----------------------------------------------------------------------------------

    def _path(self, suffix: str) -> str:
        return os.path.join(self.dir, segment_file_name(self.base_offset, suffix) + self.file_suffix)

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
    def offset_index(self):
        """The offset index, created/mapped on first access."""
        if self._offset_index is None:
            self._offset_index = OffsetIndex(self.offset_index_path, self.base_offset, self.max_index_size)
        return self._offset_index

    @property
    def time_index(self):
        """The time index, created/mapped on first access."""
        if self._time_index is None:
            self._time_index = TimeIndex(self.time_index_path, self.base_offset, self.max_index_size)
        return self._time_index

    @property
    def txn_index(self):
        """The transaction index (the file itself appears only with the first entry)."""
        if self._txn_index is None:
            self._txn_index = TransactionIndex(self.base_offset, self.txn_index_path)
        return self._txn_index

    def touch_indexes(self) -> None:
        """Create/map both index files now (Kafka touches them on the first append/flush/roll), so a
        segment with data always has its ``.index``/``.timeindex`` on disk."""
        if not self._indexes_touched:
            self.time_index.entries        # maps (creating) the files
            self.offset_index.entries
            self._indexes_touched = True

    @property
    def size(self) -> int:
        """Logical size of the ``.log`` in bytes."""
        return self.log.size

    def __repr__(self) -> str:
        return f"LogSegment(baseOffset={self.base_offset}, size={self.size}, file={self.log.path})"

    # --- timestamps ------------------------------------------------------------------------------

    def _load_max_ts(self) -> None:
        if self._max_ts is None:
            ts, off = self.time_index.last_entry
            self._max_ts = ts
            self._max_ts_offset = off

    @property
    def max_timestamp_so_far(self) -> int:
        self._load_max_ts()
        return self._max_ts  # type: ignore[return-value]

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
        """The first batch's max timestamp, or ``Long.MAX`` (2**63-1) when the segment is empty."""
        for h in self.log.iter_headers(0):
            return h.max_timestamp
        return 2**63 - 1

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
        return 0 <= offset - self.base_offset <= INT_MAX

    # --- append ----------------------------------------------------------------------------------

    def append(self, largest_offset: int, largest_timestamp: int,
               shallow_offset_of_max_timestamp: int, records) -> None:
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
        self.log.append(records)
        self._load_max_ts()
        if largest_timestamp > self._max_ts:  # type: ignore[operator]
            self._max_ts = largest_timestamp
            self._max_ts_offset = shallow_offset_of_max_timestamp
        if self.bytes_since_last_index_entry > self.index_interval_bytes:
            self._append_index_entries(largest_offset, pos)
            self.bytes_since_last_index_entry = 0
        self.bytes_since_last_index_entry += n

    def append_batches(self, data, positions: Sequence[int], last_offsets: Sequence[int],
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
        self.log.append(data)
        self._index_batches(pos0, n, positions, last_offsets, max_timestamps)

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
        self._load_max_ts()
        mts = self._max_ts
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

    def try_append_one(self, data, size: int, last_offset: int, max_timestamp: int,
                       max_segment_bytes: int, max_segment_ms: int) -> bool:
        """Fast path of ``Log.append`` for one batch (offsets already assigned in ``data``): the
        :meth:`should_roll` checks, then exactly what :meth:`append_batches` does for one batch.
        Returns False, having done nothing, when the general path is needed: empty segment, indexes
        not yet mapped, first-batch timestamp or max timestamp not loaded yet, or a roll is due."""
        pos0 = self.log.size
        t = self.rolling_based_timestamp
        mts = self._max_ts
        if (pos0 == 0 or pos0 > max_segment_bytes - size or not self._indexes_touched
                or t is None or mts is None or not 0 <= last_offset - self.base_offset <= INT_MAX):
            return False
        waited = max_timestamp - t if t >= 0 else self.clock() - self.created_ms
        if waited > max_segment_ms - self.roll_jitter_ms:
            return False
        oi = self._offset_index
        ti = self._time_index
        if oi.is_full() or ti.is_full():
            return False
        self.log.append(data)
        if max_timestamp > mts:
            self._max_ts = max_timestamp
            self._max_ts_offset = last_offset
        since = self.bytes_since_last_index_entry
        if since > self.index_interval_bytes:
            oi.append(last_offset, pos0)
            ti.maybe_append(self._max_ts, self._max_ts_offset)
            since = 0
        self.bytes_since_last_index_entry = since + size
        return True

    def _append_index_entries(self, offset: int, position: int) -> None:
        oi = self.offset_index
        ti = self.time_index
        if oi.is_full() or ti.is_full():
            return
        oi.append(offset, position)
        ti.maybe_append(self._max_ts, self._max_ts_offset)

    def _ensure_offset_in_range(self, offset: int) -> None:
        if not self.can_convert_to_relative_offset(offset):
            raise LogSegmentOffsetOverflowError(
                f"Detected offset overflow at offset {offset} in segment with base offset "
                f"{self.base_offset}", file=self.log.path)

    def update_txn_index(self, aborted_txns) -> None:
        """Append completed aborted transactions to the ``.txnindex``."""
        for txn in aborted_txns:
            self.txn_index.append(txn)

    # --- read ------------------------------------------------------------------------------------

    def translate_offset(self, offset: int, starting_file_position: int = 0) -> Optional[BatchHeader]:
        """Index lookup (largest entry <= offset) then a forward header walk to the first batch whose
        last offset is >= ``offset``; None when the segment holds no such batch."""
        pos = 0
        if self.log.size > 0 and (self._offset_index is not None
                                  or os.path.exists(self.offset_index_path)):
            pos = self.offset_index.lookup(offset).position
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
        return FetchDataInfo(meta, FileSlice(self.log.path, self.log.fd, start.position, max(fetch_size, 0)),
                             adjusted < start.size)

    def read_next_offset(self) -> int:
        """The next offset after the last batch (walk from the last offset-index entry)."""
        if self.log.size == 0:
            return self.base_offset
        pos = 0
        if self._offset_index is not None or os.path.exists(self.offset_index_path):
            oi = self.offset_index
            pos = oi.last_entry.position
        nxt = self.base_offset
        for h in self.log.iter_headers(pos):
            nxt = h.last_offset + 1
        return nxt

    def find_offset_by_timestamp(self, timestamp: int, starting_offset: Optional[int] = None
                                 ) -> Optional[TimestampAndOffset]:
        """The first record with timestamp >= ``timestamp`` and offset >= ``starting_offset``
        (spec §4.7), by the read path's rule
        (:func:`kafkalog.log.partition_view.find_offset_for_timestamp`)."""
        from kafkalog.log.partition_view import LiveSegment, find_offset_for_timestamp
        start = self.base_offset if starting_offset is None else starting_offset
        return find_offset_for_timestamp([LiveSegment(self, self.size)], timestamp, start)

    # --- recovery --------------------------------------------------------------------------------

    def recover(self, producer_state_manager=None, leader_epoch_cache=None, contiguous: bool = False) -> int:
        """Rebuild the indexes from the data, CRC-check every batch and truncate at the first bad
        or partial entry (spec §4.8). Returns the truncated bytes; details in ``last_recovery``.

        ``contiguous`` (logs that are never compacted): every v2 batch must start right after the
        previous one, so a damaged baseOffset (outside the CRC) is caught even when it grows.

        Better than Kafka: the stop is classified (partial tail, zero-filled tail, or corruption)
        and, for corruption, the bytes after the bad entry are probed for further valid batches so
        that mid-segment damage is reported instead of passing for a torn tail.
        """
        oi = self.offset_index
        ti = self.time_index
        oi.reset()
        ti.reset()
        txn = self.txn_index
        txn.reset()
        size = self.log.size
        valid = 0
        last_index_pos = 0
        mts = NO_TIMESTAMP
        moff = self.base_offset
        base = self.base_offset
        interval = self.index_interval_bytes
        reason = None
        bad_pos = None
        kind = "clean"
        batches = 0
        first_ts: Optional[int] = None
        latest_epoch = leader_epoch_cache.latest_epoch() if leader_epoch_cache is not None else None
        mm = None
        expect_next = base      # offsets must increase from batch to batch (fields outside the CRC)
        if size > 0:
            mm = mmap.mmap(self.log.fd, size, access=mmap.ACCESS_READ)
        buf = mm if mm is not None else b""
        mv = memoryview(buf)
        try:
            pos = 0
            limit = size - PREFIX_SIZE
            while pos < limit:
                offset, length, ple, magic = PREFIX.unpack_from(buf, pos)
                if length < RECORD_OVERHEAD_V0:
                    reason = (f"Found record size {length} smaller than minimum record overhead "
                              f"({RECORD_OVERHEAD_V0})")
                    bad_pos = pos
                    break
                sz = length + LOG_OVERHEAD
                if pos + sz > size:
                    reason = f"partial batch of {sz} bytes with only {size - pos} bytes left"
                    bad_pos = pos
                    # a torn write keeps a real header; an impossible magic means damage
                    kind = "partial-tail" if 0 <= magic <= 2 and offset >= base else "corruption"
                    break
                if magic > 2:
                    reason = f"Invalid magic found in record: {magic}"   # magic is outside the CRC
                    bad_pos = pos
                    break
                if magic >= 2:
                    if sz < RECORD_BATCH_OVERHEAD:
                        reason = f"Record batch size {sz} is smaller than the minimum allowed overhead 61"
                        bad_pos = pos
                        break
                    stored, attrs, lod, _bts, ts = V2_FIELDS.unpack_from(buf, pos + 17)
                    computed = crc32c(mv[pos + 21:pos + sz])
                    last = offset + lod
                else:
                    stored = UINT32.unpack_from(buf, pos + 12)[0]
                    computed = zlib.crc32(mv[pos + 16:pos + sz])
                    last = offset
                    ts = V1_TIMESTAMP.unpack_from(buf, pos + 18)[0] if magic == 1 and sz >= 34 else -1
                if stored != computed:
                    reason = f"Record is corrupt (stored crc = {stored}, computed crc = {computed})"
                    bad_pos = pos
                    break
                if not (0 <= last - base <= INT_MAX) or (magic >= 2 and lod < 0):
                    reason = (f"batch offsets {offset}..{last} outside the range of segment with base "
                              f"offset {base}")
                    bad_pos = pos
                    break
                first = offset if magic >= 2 else last
                if contiguous and magic < 2 and buf[pos + 17] & 0x07:
                    first = _legacy_first_offset(mv[pos:pos + sz], last)
                if first < expect_next or (contiguous and first != expect_next):
                    reason = (f"batch offsets {offset}..{last} are not above the previous batch's "
                              f"(next offset {expect_next})")
                    bad_pos = pos
                    break
                expect_next = last + 1
                if first_ts is None:
                    first_ts = ts
                if ts > mts:
                    mts = ts
                    moff = last
                if valid - last_index_pos > interval:
                    if not (oi.is_full() or ti.is_full()):
                        oi.append(last, valid)
                        ti.maybe_append(mts, moff)
                    last_index_pos = valid
                if magic >= 2:
                    if leader_epoch_cache is not None and ple >= 0 and (latest_epoch is None or ple > latest_epoch):
                        leader_epoch_cache.assign(ple, offset)
                        latest_epoch = ple
                    if producer_state_manager is not None:
                        aborted = producer_state_manager.update_from_batch(mv[pos:pos + sz])
                        for a in aborted:
                            txn.append(a)
                elif leader_epoch_cache is not None:
                    pass
                valid += sz
                pos += sz
                batches += 1
            if bad_pos is None and valid < size:
                bad_pos = valid
                reason = f"{size - valid} trailing bytes too short for a batch header"
                kind = "partial-tail"
            follows = None
            next_valid = None
            if bad_pos is not None and kind != "partial-tail":
                if not any(buf[i:min(i + 65536, size)].strip(b"\0") for i in range(bad_pos, size, 65536)):
                    kind = "zero-filled-tail"
                    follows = False
                else:
                    kind = "corruption"
                    next_valid = _probe_valid_batch(buf, bad_pos + 1, size)
                    follows = next_valid is not None
            elif bad_pos is not None:
                follows = False
        finally:
            mv.release()
            if mm is not None:
                mm.close()
        truncated = self.log.truncate_to(valid) if valid < size else 0
        if self.rolling_based_timestamp is None and first_ts is not None:
            self.rolling_based_timestamp = first_ts
        self._max_ts = mts
        self._max_ts_offset = moff
        self.bytes_since_last_index_entry = valid - last_index_pos
        oi.trim_to_valid_size()
        ti.maybe_append(mts, moff, skip_full_check=True)
        ti.trim_to_valid_size()
        self.last_recovery = SegmentRecovery(self.log.path, valid, truncated, reason,
                                             bad_pos, kind, follows, next_valid, batches)
        return truncated

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
        self._load_max_ts()
        self.time_index.maybe_append(self._max_ts, self._max_ts_offset, skip_full_check=True)
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()
        self.log.trim()

    def flush(self) -> None:
        """fsync the ``.log``, force both index mmaps, fsync the ``.txnindex``."""
        self.touch_indexes()
        self.log.flush()
        self.offset_index.flush()
        self.time_index.flush()
        if self._txn_index is not None:
            self._txn_index.flush()

    def resize_indexes(self, size: int) -> None:
        self.offset_index.resize(size)
        self.time_index.resize(size)

    def close(self) -> None:
        """Final time-index entry (if the max timestamp was ever loaded), trim and close the indexes,
        trim and close the ``.log``."""
        if self.log.fd < 0:
            return
        try:
            if self._max_ts is not None:
                self.time_index.maybe_append(self._max_ts, self._max_ts_offset, skip_full_check=True)
        except KafkalogError:
            pass
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
                except Exception:  # noqa: BLE001 - closing before deletion must not fail it
                    pass
        if self.log.fd >= 0:
            os.close(self.log.fd)
            self.log.fd = -1

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


def _probe_valid_batch(buf, start: int, end: int) -> Optional[int]:
    """Look for a valid batch (plausible header + matching CRC) in ``buf[start:end]``, within
    ``_CORRUPTION_PROBE_WINDOW`` bytes. Returns its position or None."""
    stop = min(end - PREFIX_SIZE, start + _CORRUPTION_PROBE_WINDOW)
    mv = memoryview(buf)
    try:
        for magic_byte in (b"\x02", b"\x01", b"\x00"):
            p = start + 16
            while True:
                p = buf.find(magic_byte, p, stop + 16)
                if p < 0:
                    break
                pos = p - 16
                p += 1
                if pos < start:
                    continue
                offset, length, _x, magic = PREFIX.unpack_from(buf, pos)
                sz = length + LOG_OVERHEAD
                if length < RECORD_OVERHEAD_V0 or pos + sz > end or offset < 0:
                    continue
                if magic == 2:
                    if sz < RECORD_BATCH_OVERHEAD:
                        continue
                    if UINT32.unpack_from(buf, pos + 17)[0] == crc32c(mv[pos + 21:pos + sz]):
                        return pos
                elif UINT32.unpack_from(buf, pos + 12)[0] == zlib.crc32(mv[pos + 16:pos + sz]):
                    return pos
        return None
    finally:
        mv.release()


def _legacy_first_offset(entry, last: int) -> int:
    """First offset of a compressed v0/v1 wrapper whose (outer) offset is ``last``; -1 when its
    inner messages cannot be read (the wrapper offset is outside the CRC-32)."""
    from kafkalog.log._encode import legacy_wrapper_inner_offsets
    try:
        n = len(legacy_wrapper_inner_offsets(bytes(entry)))
    except KafkalogError:
        return -1
    return last - n + 1 if n else -1
