"""A segment as a reader sees it (:class:`ViewSegment`): its batches from a byte position, its
offset-index and time-index lookups and the aborted transactions of its ``.txnindex``. Two
suppliers, one protocol:

- :class:`LiveSegment`: a segment of a writable :class:`~kafkalog.log.log.Log`, read up to the
  log end of the reader's moment (``pread`` windows; its own indexes);
- :class:`SegmentSnapshot`: the files of one segment as a reader found them
  (:class:`~kafkalog.log.read.view_files.ViewFiles`: a memory map, or ranged reads of an object
  store), indexes read whole and used read-only, ignoring a preallocated all-zero tail and
  entries past the snapshot.
"""

from __future__ import annotations

from typing import Iterator, List, Optional, Protocol, cast

from kafkalog.errors import KafkalogError, OffsetOutOfRangeError
from kafkalog.log.file_records import segment_next_offset
from kafkalog.log.index._mmap_index import first_zero_slot
from kafkalog.log.index.offset_index import OffsetIndex
from kafkalog.log.index.time_index import TimeIndex
from kafkalog.log.index.txn_index import (
    AbortedTxn,
    TxnIndexSearchResult,
    collect_aborted_txns,
    parse_txn_index,
)
from kafkalog.log.naming import log_file, offset_index_file, time_index_file, transaction_index_file
from kafkalog.log.read.view_files import SegmentBytes, ViewFiles
from kafkalog.log.read.walk import ViewBatch, walk_batches, walk_ranges
from kafkalog.log.segment import LogSegment
from kafkalog.record.constants import INT64_MAX, LOG_OVERHEAD, RECORD_OVERHEAD_V0

__all__ = ["ViewSegment", "LiveSegment", "SegmentSnapshot"]

#: the smallest entry of a ``.log`` (a v0 message): a segment of ``n`` bytes has at most
#: ``n // _MIN_ENTRY_BYTES + 1`` index entries that point into it
_MIN_ENTRY_BYTES = LOG_OVERHEAD + RECORD_OVERHEAD_V0
#: index bytes up to which a reader reads the candidate entries whole instead of binary-searching
#: the start of the zero tail first
_INDEX_READ_WHOLE_BYTES = 1 << 16


class ViewSegment(Protocol):
    """A segment as the read rules see it (live, or a snapshot of files)."""

    @property
    def base_offset(self) -> int: ...

    @property
    def log_path(self) -> str: ...

    @property
    def size(self) -> int:
        """The bytes of the ``.log`` a reader may read."""
        ...

    def index_position(self, offset: int) -> int:
        """A byte position at or below the batch holding ``offset`` (its offset-index floor)."""
        ...

    def end_position(self, end_offset: int) -> Optional[int]:
        """A byte position from which the segment holds only offsets >= ``end_offset``, when its
        index tells (None otherwise)."""
        ...

    def walk(self, position: int, end_offset: Optional[int] = None, *,
             whole: bool = False) -> Iterator[ViewBatch]:
        """The batches from byte ``position`` (not CRC-checked; errors name the file). With
        ``end_offset``, no bytes past :meth:`end_position` need be read; ``whole``: the caller
        reads every batch below ``end_offset`` (object stores: large requests at once)."""
        ...

    def batches_from(self, offset: int) -> Iterator[ViewBatch]:
        """Batches from the one holding ``offset`` (from an index position at or below it)."""
        ...

    def time_index_offset(self, timestamp: int) -> int:
        """The offset of the largest ``.timeindex`` entry with a timestamp <= ``timestamp`` (the
        base offset when none)."""
        ...

    def may_hold_timestamp(self, timestamp: int) -> bool:
        """False only when the segment certainly holds no record with timestamp >=
        ``timestamp``."""
        ...

    def collect_aborted_txns(self, start: int, upper: int) -> TxnIndexSearchResult:
        """Kafka's ``collectAbortedTxns`` over this segment's ``.txnindex``."""
        ...


class LiveSegment:
    """A :class:`ViewSegment` over a segment of a writable log, read up to ``limit`` bytes (the
    log end of the reader's moment for the active segment, the size of a sealed one)."""

    __slots__ = ("limit", "segment")

    def __init__(self, segment: LogSegment, limit: int) -> None:
        self.segment = segment
        self.limit = limit

    @property
    def base_offset(self) -> int:
        return self.segment.base_offset

    @property
    def log_path(self) -> str:
        return self.segment.log_path

    @property
    def size(self) -> int:
        return self.limit

    def index_position(self, offset: int) -> int:
        # the fetch path's lookup (index, then the batch holding ``offset``; a damaged or foreign
        # index is scanned past); none holds it below the limit: nothing to read
        h = self.segment.translate_offset(offset)
        return self.limit if h is None or h.position >= self.limit else h.position

    def end_position(self, end_offset: int) -> Optional[int]:
        return None

    def walk(self, position: int, end_offset: Optional[int] = None, *,
             whole: bool = False) -> Iterator[ViewBatch]:
        return cast(Iterator[ViewBatch], self.segment.log.batches(position, self.limit))

    def batches_from(self, offset: int) -> Iterator[ViewBatch]:
        return self.walk(self.index_position(offset))

    def time_index_offset(self, timestamp: int) -> int:
        return int(self.segment.time_index.lookup(timestamp).offset)

    def may_hold_timestamp(self, timestamp: int) -> bool:
        return bool(self.segment.size) and self.segment.largest_timestamp() >= timestamp

    def collect_aborted_txns(self, start: int, upper: int) -> TxnIndexSearchResult:
        found: TxnIndexSearchResult = self.segment.txn_index.collect_aborted_txns(start, upper)
        return found


class SegmentSnapshot:
    """A :class:`ViewSegment` over the files of one segment as a reader found them: the ``.log``
    bytes present when it was opened; the ``.index``, ``.timeindex`` and ``.txnindex`` read whole
    on first use, their entries beyond those bytes (or, once :attr:`end_offset` is known, beyond
    the snapshot's log end offset) ignored, a missing or unreadable index meaning a walk from the
    segment's first byte."""

    def __init__(self, files: ViewFiles, directory: str, base_offset: int) -> None:
        self.files = files
        self.directory = directory
        self._base = base_offset
        self._data: Optional[SegmentBytes] = None
        #: the offset after the last batch of the snapshot, when known (set by the partition view)
        self.end_offset = INT64_MAX
        self._offset_index: Optional[OffsetIndex] = None
        self._time_index: Optional[TimeIndex] = None
        self._txns: Optional[List[AbortedTxn]] = None

    @property
    def base_offset(self) -> int:
        return self._base

    @property
    def log_path(self) -> str:
        return log_file(self.directory, self._base)

    def open(self) -> bool:
        """Take the snapshot of the ``.log`` now (False when the file no longer exists)."""
        if self._data is None:
            self._data = self.files.open_segment(self.log_path)
        return self._data is not None

    @property
    def data(self) -> SegmentBytes:
        """The ``.log`` bytes, snapshotted on first use unless :meth:`open` was called."""
        if not self.open():
            raise OffsetOutOfRangeError("the segment was deleted (retention or compaction) "
                                        "after the partition was listed", file=self.log_path)
        assert self._data is not None
        return self._data

    @property
    def size(self) -> int:
        return self.data.size

    def _index(self) -> Optional[OffsetIndex]:
        if self._offset_index is None:
            path = offset_index_file(self.directory, self._base)
            raw = self._read_index(path, OffsetIndex.entry_size)
            if raw is None:
                return None
            try:
                self._offset_index = OffsetIndex.from_bytes(path, self._base, raw, max_position=self.size)
            except KafkalogError:
                return None                 # scanning from the segment start is always correct
        return self._offset_index

    def _read_index(self, path: str, entry_size: int) -> Optional[bytes]:
        """The entry bytes of an ``.index`` / ``.timeindex`` that a reader of this snapshot can
        use, without its preallocated zero tail (10 MiB on an active segment): at most one entry
        per batch of the ``.log`` snapshot, and, on a large file, the slots before the first
        all-zero one (binary search). None when the file (or the ``.log``) is missing."""
        size = self.files.size(path)
        if size is None or not self.open():
            return None
        slots = min(size, (self.size // _MIN_ENTRY_BYTES + 1) * entry_size) // entry_size
        if slots * entry_size > _INDEX_READ_WHOLE_BYTES:
            slots = first_zero_slot(
                lambda n: self.files.read_range(path, n * entry_size, entry_size), slots,
                entry_size)
        return self.files.read_range(path, 0, slots * entry_size) if slots else b""

    def index_position(self, offset: int) -> int:
        """Byte position of the largest valid ``.index`` entry <= ``offset`` (0 when none)."""
        idx = self._index()
        if idx is None or offset <= self._base:
            return 0
        return int(idx.lookup(offset).position)

    def end_position(self, end_offset: int) -> Optional[int]:
        idx = self._index()
        return None if idx is None else idx.end_position(end_offset)

    def walk(self, position: int, end_offset: Optional[int] = None, *, whole: bool = False
             ) -> Iterator[ViewBatch]:
        try:
            data = self.data
            if data.ranges is None:
                yield from walk_batches(data.buf, position)
            else:
                limit = None if end_offset is None else self.end_position(end_offset)
                yield from walk_ranges(data.ranges, position, data.size, self.log_path,
                                       limit=limit, whole=whole)
        except KafkalogError as e:
            raise (e.at(self.log_path, 0) if e.file is None else e) from None

    def batches_from(self, offset: int) -> Iterator[ViewBatch]:
        return self.walk(self.index_position(offset))

    def next_offset(self) -> int:
        """The offset after the last batch of the snapshot (Kafka's ``readNextOffset``)."""
        return segment_next_offset(lambda pos: self.walk(pos, whole=True),
                                   self.index_position(INT64_MAX), self._base)

    def _times(self) -> Optional[TimeIndex]:
        if self._time_index is None:
            path = time_index_file(self.directory, self._base)
            raw = self._read_index(path, TimeIndex.entry_size)
            if raw is None:
                return None
            try:
                self._time_index = TimeIndex.from_bytes(path, self._base, raw)
            except KafkalogError:
                return None
        return self._time_index

    def time_index_offset(self, timestamp: int) -> int:
        idx = self._times()
        if idx is None:
            return self._base
        found = int(idx.lookup(timestamp).offset)
        return found if found < self.end_offset else self._base

    def may_hold_timestamp(self, timestamp: int) -> bool:
        """A sealed segment whose largest indexed timestamp is below ``timestamp`` holds none
        (the caller does not ask this of the last segment, whose index may lag)."""
        idx = self._times()
        if idx is None or not idx.entries:
            return True
        return int(idx.last_entry.timestamp) >= timestamp

    def aborted_txns(self) -> List[AbortedTxn]:
        """The ``.txnindex`` entries whose ABORT marker is in the snapshot."""
        if self._txns is None:
            path = transaction_index_file(self.directory, self._base)
            raw = self.files.read_small(path)
            self._txns = [] if raw is None else parse_txn_index(raw, path)
        return [t for t in self._txns if t.last_offset < self.end_offset]

    def collect_aborted_txns(self, start: int, upper: int) -> TxnIndexSearchResult:
        return collect_aborted_txns(self.aborted_txns(), start, upper)

    def close(self) -> None:
        if self._data is not None:
            self._data.close()
