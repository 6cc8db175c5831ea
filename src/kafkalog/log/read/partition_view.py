"""The read path of one partition: Kafka's read-side rules written once, for every reader.

Every reader of kafkalog's logs goes through this module: the writable
:class:`~kafkalog.log.log.Log` (over its live segments), the read-only mode of the Python client
and the Spark source (over a :class:`PartitionView`, a snapshot of a partition directory that may
be live). What is here:

- the one batch walk of the readers (:func:`walk_batches`);
- a segment seen by a reader (:class:`ViewSegment`): offset-index and time-index lookups, the
  aborted transactions of its ``.txnindex``, its batches from an offset. :class:`LiveSegment`
  adapts a segment of a writable log; :class:`SegmentSnapshot` reads segment files through
  :class:`~kafkalog.log.read.view_files.ViewFiles` (indexes read whole and used read-only, ignoring a
  preallocated all-zero tail and entries past the snapshot);
- Kafka's rules over a segment list: the aborted transactions of a fetch
  (:func:`collect_aborted_transactions`, from the ``.txnindex`` files), the consumer's
  ``read_committed`` filter (:class:`AbortedTxnFilter`), the last stable offset and the aborted
  transactions found from the end-transaction markers (:func:`scan_transactions`), and
  ListOffsets by timestamp (:func:`find_offset_for_timestamp`);
- :class:`PartitionView`: a read-only snapshot of one partition directory (segment list, log
  start and log end offset, last stable offset, aborted transactions, batches, offset for a
  timestamp). It never locks, recovers or writes.
"""

from __future__ import annotations

import logging
from bisect import bisect_right
from typing import (
    Any,
    Dict,
    Iterable,
    Iterator,
    List,
    NamedTuple,
    Optional,
    Protocol,
    Sequence,
    Set,
    Tuple,
    cast,
)

from kafkalog.errors import (
    CorruptRecordError,
    DataLossError,
    KafkalogError,
    OffsetOutOfRangeError,
)
from kafkalog.log.index._mmap_index import first_zero_slot
from kafkalog.log.index.offset_index import OffsetIndex
from kafkalog.log.index.time_index import TimeIndex
from kafkalog.log.index.txn_index import (
    AbortedTxn,
    TxnIndexSearchResult,
    collect_aborted_txns,
    parse_txn_index,
)
from kafkalog.log.naming import (
    is_log_file,
    log_file,
    offset_from_file_name,
    offset_index_file,
    time_index_file,
    transaction_index_file,
)
from kafkalog.log.read.ranged_read import ChunkedBatches
from kafkalog.log.read.view_files import Buffer, LocalFiles, RangeSource, SegmentBytes, ViewFiles
from kafkalog.log.segment import LogSegment, TimestampAndOffset
from kafkalog.record.batch import DefaultRecordBatch
from kafkalog.record.constants import LOG_OVERHEAD, RECORD_OVERHEAD_V0, ControlRecordType
from kafkalog.record.control import control_record_type
from kafkalog.record.header_walk import F_MAGIC, F_POSITION, F_SIZE, FindingKind
from kafkalog.record.header_walk import walk as header_walk
from kafkalog.record.legacy import LegacyRecordBatch

__all__ = ["ViewRecord", "ViewBatch", "ViewSegment", "walk_batches", "is_abort_marker",
           "AbortedTxnFilter", "TransactionState", "scan_transactions",
           "collect_aborted_transactions", "find_offset_for_timestamp", "LiveSegment",
           "SegmentSnapshot", "PartitionView"]

_log = logging.getLogger(__name__)

#: an offset above every offset a log can hold
MAX_OFFSET = (1 << 63) - 1

#: batches found by the first header walk of :func:`walk_batches`, and at most per walk
_FIRST_WALK_WINDOW = 16
_MAX_WALK_WINDOW = 4096

#: the smallest entry of a ``.log`` (a v0 message): a segment of ``n`` bytes has at most
#: ``n // _MIN_ENTRY_BYTES + 1`` index entries that point into it
_MIN_ENTRY_BYTES = LOG_OVERHEAD + RECORD_OVERHEAD_V0
#: index bytes up to which a reader reads the candidate entries whole instead of binary-searching
#: the start of the zero tail first
_INDEX_READ_WHOLE_BYTES = 1 << 16


class ViewRecord(Protocol):
    """The fields of a record a reader's rules look at."""

    @property
    def offset(self) -> int: ...

    @property
    def timestamp(self) -> int: ...

    @property
    def key(self) -> Optional[bytes]: ...


class ViewBatch(Protocol):
    """The fields of a batch (any magic) a reader's rules look at
    (:class:`kafkalog.record.batch.RecordBatch` and its legacy sibling)."""

    position: int
    size_in_bytes: int
    magic: int

    @property
    def base_offset(self) -> int: ...

    @property
    def last_offset(self) -> int: ...

    @property
    def max_timestamp(self) -> int: ...

    @property
    def producer_id(self) -> int: ...

    @property
    def partition_leader_epoch(self) -> int: ...

    @property
    def is_transactional(self) -> bool: ...

    @property
    def is_control(self) -> bool: ...

    def ensure_valid(self) -> None: ...

    def records(self) -> Sequence[ViewRecord]: ...


def walk_batches(buf: Buffer, position: int = 0) -> Iterator[ViewBatch]:
    """The batches of ``buf`` from byte ``position`` (file rules: a partial batch at the end
    ends the walk; a bad length, magic or v2 batch size is a :class:`CorruptRecordError` at its
    position). Every reader's batch iteration goes through here: the compiled header walker
    (:func:`kafkalog.record.header_walk.walk`) finds the batches a window at a time (readers
    often stop after a few); CRCs are the reader's ``ensure_valid``."""
    window = _FIRST_WALK_WINDOW
    while True:
        found = header_walk(buf, position, verify_crc=False, max_batches=window)
        for pos, size, magic in zip(found.column(F_POSITION), found.column(F_SIZE),
                                    found.column(F_MAGIC), strict=True):
            # a v0/v1 batch reads a mapped segment like bytes
            yield cast(ViewBatch, LegacyRecordBatch(cast(bytes, buf), pos, size, magic) if magic < 2
                       else DefaultRecordBatch(buf, pos, size, magic))
        finding = found.finding
        if finding is not None:
            if finding.kind in (FindingKind.SHORT_TAIL, FindingKind.PARTIAL_TAIL):
                return                      # a batch being written, or the end of the snapshot
            raise CorruptRecordError(finding.message, position=finding.position)
        if found.count < window:
            return
        position = found.end
        window = min(window * 4, _MAX_WALK_WINDOW)


class _AtPosition:
    """A batch read from a chunk of a file, with :attr:`position` in the file."""

    __slots__ = ("_batch", "_shift")

    def __init__(self, batch: ViewBatch, shift: int) -> None:
        self._batch = batch
        self._shift = shift

    @property
    def position(self) -> int:
        return self._batch.position + self._shift

    @property
    def end_position(self) -> int:
        return self._batch.position + self._batch.size_in_bytes + self._shift

    def ensure_valid(self) -> None:
        try:
            self._batch.ensure_valid()
        except KafkalogError as e:
            raise e.at(None, self._shift) from None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._batch, name)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._batch)  # type: ignore[call-overload,no-any-return]

    def __len__(self) -> int:
        return len(self._batch)  # type: ignore[arg-type]


def walk_ranges(read: RangeSource, position: int, size: int, path: str, *,
                limit: Optional[int] = None, whole: bool = False) -> Iterator[ViewBatch]:
    """:func:`walk_batches` over a file read in ranged requests (object stores): chunks of whole
    batches from byte ``position`` of a file of ``size`` bytes, up to byte ``limit`` (from the
    ``.index``: no batch past it is wanted) or the end, small first and growing with the next
    ones prefetched, or, ``whole`` (the caller reads every batch up to ``limit``), large from the
    start (:class:`~kafkalog.log.read.ranged_read.ChunkedBatches`); positions are the file's."""
    hi = size if limit is None else min(limit, size)
    for start, chunk in ChunkedBatches(read, position, hi, path, whole=whole,
                                       partial_tail=hi == size):
        try:
            for b in walk_batches(chunk):
                yield cast(ViewBatch, _AtPosition(b, start))
        except KafkalogError as e:
            raise e.at(None, start) from None


def is_abort_marker(batch: ViewBatch) -> bool:
    """Whether a control batch is an ABORT marker (its first record's key)."""
    for rec in batch.records():
        return rec.key is not None and control_record_type(bytes(rec.key)) == ControlRecordType.ABORT
    return False


# --- segments -------------------------------------------------------------------------------------

class ViewSegment(Protocol):
    """A segment as the read rules see it (live, or a snapshot of files)."""

    @property
    def base_offset(self) -> int: ...

    @property
    def log_path(self) -> str: ...

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
    log end of the reader's snapshot for the active segment)."""

    def __init__(self, segment: LogSegment, limit: int) -> None:
        self.segment = segment
        self.limit = limit

    @property
    def base_offset(self) -> int:
        return self.segment.base_offset

    @property
    def log_path(self) -> str:
        return self.segment.log_path

    def batches_from(self, offset: int) -> Iterator[ViewBatch]:
        seg = self.segment
        h0 = seg.translate_offset(offset)
        if h0 is None:
            return
        for h in seg.log.iter_headers(h0.position, self.limit):
            try:
                yield from walk_batches(seg.log.read_entry(h.position, h.size))
            except KafkalogError as e:
                raise e.at(seg.log_path, h.position) from None

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
        self.end_offset = MAX_OFFSET
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
                self._offset_index = cast(OffsetIndex, OffsetIndex.from_bytes(
                    path, self._base, raw, max_position=self.size))
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
        """A byte position from which the snapshot holds only offsets >= ``end_offset``, from the
        ``.index`` (None when it does not tell)."""
        idx = self._index()
        return None if idx is None else idx.end_position(end_offset)

    def walk(self, position: int, end_offset: Optional[int] = None, *, whole: bool = False
             ) -> Iterator[ViewBatch]:
        """The batches of the snapshot from byte ``position``; errors name the file. With
        ``end_offset``, an object store is not asked for bytes past the ``.index`` position from
        which all offsets are >= it (the walk may stop earlier or later: the caller filters);
        ``whole``: the caller reads every batch below ``end_offset`` (large requests at once)."""
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

    def _times(self) -> Optional[TimeIndex]:
        if self._time_index is None:
            path = time_index_file(self.directory, self._base)
            raw = self._read_index(path, TimeIndex.entry_size)
            if raw is None:
                return None
            try:
                self._time_index = cast(TimeIndex, TimeIndex.from_bytes(path, self._base, raw))
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


# --- Kafka's read-side rules over a segment list ---------------------------------------------------

def _floor(bases: Sequence[int], offset: int) -> int:
    return max(bisect_right(bases, offset) - 1, 0)


def collect_aborted_transactions(segments: Sequence[ViewSegment], start: int,
                                 upper: int) -> List[AbortedTxn]:
    """The aborted transactions overlapping ``[start, upper)``, from the ``.txnindex`` of the
    segment holding ``start`` and the following ones until a search is complete (Kafka's
    ``LocalLog.collectAbortedTransactions``)."""
    bases = [s.base_offset for s in segments]
    out: List[AbortedTxn] = []
    for seg in segments[_floor(bases, start):]:
        r = seg.collect_aborted_txns(start, upper)
        out.extend(r.aborted_transactions)
        if r.is_complete:
            break
    return out


class AbortedTxnFilter:
    """Kafka's consumer rule for ``read_committed`` (``Fetcher``'s aborted-transaction handling):
    batches are seen in offset order; a producer joins the aborted set when a batch reaches the
    first offset of one of its aborted transactions and leaves it at its ABORT marker; its
    transactional batches in between are skipped, and so is every control batch."""

    def __init__(self, aborted: Iterable[Tuple[int, int]]) -> None:
        """``aborted``: ``(producer id, first offset)`` of the aborted transactions."""
        self._pending = sorted(aborted, key=lambda a: a[1])
        self._next = 0
        self._pids: Set[int] = set()

    def skip(self, batch: ViewBatch) -> bool:
        """Whether a ``read_committed`` reader skips ``batch`` (legacy batches never are)."""
        if batch.magic < 2:
            return False
        pending = self._pending
        k = self._next
        last = batch.last_offset
        while k < len(pending) and pending[k][1] <= last:
            self._pids.add(pending[k][0])
            k += 1
        self._next = k
        pid = batch.producer_id
        if batch.is_control:
            if pid in self._pids and is_abort_marker(batch):
                self._pids.discard(pid)
            return True
        return batch.is_transactional and pid in self._pids


class TransactionState(NamedTuple):
    """What the end-transaction markers of a range of batches say."""
    #: the first offset of the earliest transaction still open, else the end of the scan
    last_stable_offset: int
    #: aborted transactions as (producer id, first offset, ABORT-marker offset); a transaction
    #: begun before the scan started has the scan's start as its first offset
    aborted: List[Tuple[int, int, int]]


def scan_transactions(batches: Iterable[ViewBatch], start: int, end: int) -> TransactionState:
    """Follow each producer's transactions through ``batches`` (in offset order, from the one
    holding ``start``): open at its first transactional batch, closed by its marker (Kafka's
    ``ProducerStateManager`` rules for ongoing transactions), up to ``end`` and on past it while
    a transaction begun below ``end`` is open. The last stable offset (at most ``end``) is the
    first offset of the earliest transaction still open when the batches end."""
    open_txns: Dict[int, int] = {}
    aborted: List[Tuple[int, int, int]] = []
    for b in batches:
        if b.magic < 2 or b.last_offset < start:
            continue
        if b.base_offset >= end and not open_txns:
            break                       # (past ``end``, only to see how open ones ended)
        if b.producer_id < 0 or not b.is_transactional:
            continue
        pid = b.producer_id
        if b.is_control:
            first = open_txns.pop(pid, start)
            if is_abort_marker(b):
                aborted.append((pid, max(first, start), b.last_offset))
        else:
            open_txns.setdefault(pid, b.base_offset)
    return TransactionState(min(min(open_txns.values(), default=end), end), aborted)


def find_offset_for_timestamp(segments: Sequence[ViewSegment], timestamp: int,
                              start_offset: int) -> Optional[TimestampAndOffset]:
    """Kafka's ListOffsets for a timestamp (``fetchOffsetByTimestamp``, spec §4.7): the first
    record (control records included, as Kafka) with offset >= ``start_offset`` and timestamp >=
    ``timestamp``. A segment is located through its ``.timeindex`` and ``.index``; segments that
    cannot hold the timestamp are skipped (never the last one, whose index may lag)."""
    bases = [s.base_offset for s in segments]
    first = _floor(bases, start_offset)
    for k in range(first, len(segments)):
        seg = segments[k]
        if k < len(segments) - 1 and not seg.may_hold_timestamp(timestamp):
            continue
        target = max(seg.time_index_offset(timestamp), start_offset, seg.base_offset)
        for batch in seg.batches_from(target):
            if batch.last_offset < start_offset or batch.max_timestamp < timestamp:
                continue
            try:
                records = batch.records()
            except KafkalogError as e:
                raise (e.at(seg.log_path, 0) if e.file is None else e) from None
            for rec in records:
                if rec.timestamp >= timestamp and rec.offset >= start_offset:
                    epoch = batch.partition_leader_epoch
                    return TimestampAndOffset(rec.timestamp, rec.offset,
                                              epoch if epoch >= 0 else None)
    return None


# --- a read-only snapshot of one partition directory ----------------------------------------------

def _segment_next_offset(seg: SegmentSnapshot) -> int:
    """The offset after the last batch of a sealed segment (its base offset when empty)."""
    pos = seg.index_position(MAX_OFFSET)
    last: Optional[ViewBatch] = None
    for last in seg.walk(pos, whole=True):  # noqa: B007 (the last batch is what is wanted)
        pass
    if last is None and pos:
        for last in seg.walk(0, whole=True):  # noqa: B007
            pass
    return seg.base_offset if last is None else max(last.last_offset + 1, seg.base_offset)


class RemoteSegments(Protocol):
    """A partition's segments in remote storage
    (:class:`kafkalog.tiered.remote_segments.RemotePartition`)."""
    files: ViewFiles
    directory: str
    bases: List[int]
    next_offsets: List[Optional[int]]


def segment_bases(files: ViewFiles, directory: str) -> List[int]:
    """Sorted base offsets of the ``.log`` segments of a partition directory."""
    bases = []
    for name in files.list_dir(directory):
        if is_log_file(name):
            try:
                bases.append(offset_from_file_name(name))
            except KafkalogError:
                continue
    bases.sort()
    return bases


class PartitionView:
    """A read-only snapshot of one partition directory: never locks, never recovers, never
    writes (no index is created, trimmed or rebuilt, no file is opened for writing).

    The ``.log`` files present when the view is opened are read as they were then; reads stop at
    that snapshot (the log end offset is that of the last complete batch in it), so a writer
    appending meanwhile is never observed half way. A segment deleted by the writer later stays
    readable. A partial batch at the end of the last segment (an append in progress, or a crash
    not yet recovered) ends the log; a partial batch in an older segment raises
    :class:`CorruptRecordError`. ``log_start_checkpoint`` is this partition's entry of the
    ``log-start-offset-checkpoint`` (it raises the log start offset above the first segment's
    base offset).

    ``open_all=False`` (a reader of a range, such as a Spark task) opens a segment's ``.log`` only
    when it is read; one deleted by retention before that raises
    :class:`~kafkalog.errors.OffsetOutOfRangeError`.

    ``log_end_offset``: the log end offset the caller already found (a Spark task: its planner
    did, and it reads below it): the view takes it instead of walking the tail of the last
    segment for it, and reads no further."""

    def __init__(self, path: str, log_start_checkpoint: Optional[int] = None, *,
                 files: Optional[ViewFiles] = None, open_all: bool = True,
                 remote: Optional[RemoteSegments] = None, fail_on_data_loss: bool = True,
                 log_end_offset: Optional[int] = None) -> None:
        self.dir = path
        self.files: ViewFiles = files if files is not None else LocalFiles()
        self._segs: List[SegmentSnapshot] = []
        for base in segment_bases(self.files, path):
            seg = SegmentSnapshot(self.files, path, base)
            if not open_all or seg.open():
                self._segs.append(seg)
        last = len(self._segs) - 1
        while last >= 0 and not self._segs[last].open():  # (open_all=False: deleted meanwhile)
            del self._segs[last]
            last -= 1
        #: the remote (tiered) segments below the local ones, and the offset after each one's
        #: last when its remote storage manager recorded it
        self.remote_count = 0
        self._remote_next: List[Optional[int]] = []
        self.fail_on_data_loss = fail_on_data_loss
        self._gaps: Optional[List[Tuple[int, int]]] = None
        if remote is not None:
            first_local = self._segs[0].base_offset if self._segs else None
            below = [(b, n) for b, n in zip(remote.bases, remote.next_offsets, strict=True)
                     if first_local is None or b < first_local]
            self._segs[:0] = [SegmentSnapshot(remote.files, remote.directory, b) for b, _ in below]
            self._remote_next = [n for _, n in below]
            self.remote_count = len(below)
        self.bases = [s.base_offset for s in self._segs]
        self.log_end_offset = (self._find_log_end_offset() if log_end_offset is None
                               else log_end_offset)
        for s in self._segs:
            s.end_offset = self.log_end_offset
        first = self.bases[0] if self.bases else (log_start_checkpoint or 0)
        start = max(first, log_start_checkpoint if log_start_checkpoint is not None else first)
        #: offsets from the log start offset (the checkpoint) to the first segment, with remote
        #: storage: its first segments were deleted from there, so they are a gap, not retention
        self._leading_gap: Optional[Tuple[int, int]] = None
        if remote is not None and log_start_checkpoint is not None and log_start_checkpoint < first:
            start = log_start_checkpoint
            self._leading_gap = (log_start_checkpoint, first)
        self.log_start_offset = min(start, self.log_end_offset)
        self._txn_states: Dict[Tuple[int, int], TransactionState] = {}

    # --- offsets ---------------------------------------------------------------------------------

    @property
    def segments(self) -> List[SegmentSnapshot]:
        return list(self._segs)

    @property
    def high_watermark(self) -> int:
        return self.log_end_offset

    @property
    def size(self) -> int:
        return sum(s.size for s in self._segs)

    @property
    def gaps(self) -> List[Tuple[int, int]]:
        """``[first, last + 1)`` offset ranges missing before the first remote segment (from the
        ``log-start-offset-checkpoint``'s log start offset) or after a remote segment: the
        segment that held them was deleted from remote storage (not moved there), so no reader
        can have them. Found from the manifests' end offsets, or by walking each remote
        segment's last batch."""
        if self._gaps is None:
            self._gaps = [] if self._leading_gap is None else [self._leading_gap]
            for k in range(self.remote_count):
                if k + 1 >= len(self._segs):
                    break
                nxt = self._remote_next[k]
                if nxt is None:
                    nxt = _segment_next_offset(self._segs[k])
                following = self._segs[k + 1].base_offset
                if nxt < following:
                    self._gaps.append((nxt, following))
        return self._gaps

    def missing_offsets(self, start: int, end: int) -> List[Tuple[int, int]]:
        """The :attr:`gaps` overlapping ``[start, end)``, clipped to it."""
        return [(max(a, start), min(b, end)) for a, b in self.gaps if a < end and b > start]

    def _find_log_end_offset(self) -> int:
        for k in range(len(self._segs) - 1, -1, -1):
            seg = self._segs[k]
            found = _segment_next_offset(seg)
            if found > seg.base_offset or k == len(self._segs) - 1:
                return found            # (an empty active segment: its base offset)
        return self.bases[-1] if self.bases else 0

    def log_path_of(self, offset: int) -> str:
        """The ``.log`` file of the segment holding ``offset`` (for errors)."""
        return log_file(self.dir, self.bases[_floor(self.bases, offset)] if self.bases else 0)

    # --- batches ---------------------------------------------------------------------------------

    def batches(self, start: int, end: int, *, whole: bool = False) -> Iterator[ViewBatch]:
        """CRC-checked batches holding offsets in ``[start, end)``, across segments. ``whole``:
        the caller reads them all (a scan), so object stores are read in large requests from the
        start instead of small ones first (for a reader that may stop after a few records)."""
        start = max(start, self.log_start_offset)
        missing = (self.missing_offsets(start, end)
                   if self.remote_count or self._leading_gap is not None else [])
        if missing:
            what = ", ".join(f"{a}..{b - 1}" for a, b in missing)
            if self.fail_on_data_loss:
                raise DataLossError(f"offsets {what} are neither in the local log nor in remote "
                                    "storage (a remote segment was deleted)",
                                    file=self.log_path_of(missing[0][0]))
            _log.warning("%s: skipping offsets %s, deleted from remote storage", self.dir, what)
        i = _floor(self.bases, start)
        for k in range(i, len(self._segs)):
            seg = self._segs[k]
            pos = seg.index_position(start) if k == i else 0
            walked = pos
            for b in seg.walk(pos, end, whole=whole):
                walked = b.position + b.size_in_bytes
                if b.last_offset < start:
                    continue
                if b.base_offset >= end and b.magic >= 2:
                    return
                try:
                    b.ensure_valid()
                except KafkalogError as e:
                    raise e.at(seg.log_path, b.position if e.position is None else 0) from None
                yield b
                if b.last_offset >= end - 1:
                    return
            if walked < seg.size and k < len(self._segs) - 1:
                limit = seg.end_position(end)
                if limit is not None and walked >= limit:
                    return              # stopped at the .index position past ``end``
                raise CorruptRecordError(f"partial or invalid batch at the end of the segment "
                                         f"({seg.size - walked} bytes)", file=seg.log_path,
                                         position=walked)

    # --- transactions ----------------------------------------------------------------------------

    def transaction_state(self, scan_from: Optional[int] = None,
                          upto: Optional[int] = None) -> TransactionState:
        """Last stable offset (at most ``upto``, default the log end offset) and aborted
        transactions from the markers of the batches from ``scan_from`` (default: the log start
        offset, which makes them exact). A transaction still open at ``scan_from`` is seen from
        there on."""
        start = self.log_start_offset if scan_from is None else max(scan_from, self.log_start_offset)
        end = self.log_end_offset if upto is None else min(upto, self.log_end_offset)
        state = self._txn_states.get((start, end))
        if state is None:
            state = self._txn_states[(start, end)] = scan_transactions(
                self.batches(start, self.log_end_offset), start, end)
        return state

    @property
    def last_stable_offset(self) -> int:
        return self.transaction_state().last_stable_offset

    def aborted_transactions(self, start: int, upper: int, scan_from: Optional[int] = None,
                             upto: Optional[int] = None) -> List[Tuple[int, int]]:
        """``(producer id, first offset)`` of the aborted transactions overlapping ``[start,
        upper)``: those of the ``.txnindex`` files (Kafka's) and those found from the markers
        (a directory without ``.txnindex`` files, or a marker written after the index was
        read), once each."""
        state = self.transaction_state(scan_from, upto)
        seen: Dict[Tuple[int, int], int] = {}
        for t in collect_aborted_transactions(self._segs, start, upper):
            seen[(t.producer_id, t.last_offset)] = t.first_offset
        for pid, first, last in state.aborted:
            if last >= start and first < upper:
                seen[(pid, last)] = min(first, seen.get((pid, last), first))
        return sorted(((pid, first) for (pid, _last), first in seen.items()), key=lambda a: a[1])

    def committed_view(self, start: int) -> Tuple[int, List[Tuple[int, int]]]:
        """(last stable offset, aborted transactions overlapping ``[start, LSO)``) of a
        ``read_committed`` read from ``start``."""
        lso = self.last_stable_offset
        return lso, self.aborted_transactions(start, lso)

    # --- timestamps ------------------------------------------------------------------------------

    def offset_for_timestamp(self, timestamp: int) -> Optional[TimestampAndOffset]:
        """The first record at or above the log start offset with a timestamp >= ``timestamp``."""
        return self.offset_for_timestamp_from(timestamp, self.log_start_offset)

    def offset_for_timestamp_from(self, timestamp: int,
                                  start_offset: int) -> Optional[TimestampAndOffset]:
        found = find_offset_for_timestamp(self._segs, timestamp,
                                          max(start_offset, self.log_start_offset))
        return found if found is not None and found.offset < self.log_end_offset else None

    # --- lifecycle -------------------------------------------------------------------------------

    def close(self) -> None:
        for s in self._segs:
            s.close()

    def __enter__(self) -> PartitionView:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"PartitionView(dir={self.dir}, logStartOffset={self.log_start_offset}, "
                f"logEndOffset={self.log_end_offset}, segments={len(self._segs)})")
