"""The one read pipeline of a partition: :class:`PartitionReader`, Kafka's read-side rules over a
list of segment views (:class:`~kafkalog.log.read.segments.ViewSegment`).

Two suppliers of segments, one reader:

- a writable :class:`~kafkalog.log.log.Log` (:meth:`~kafkalog.log.log.Log.reader`): its segments
  as :class:`~kafkalog.log.read.segments.LiveSegment` s up to the log end of that moment, and
  its last stable offset from the producer state;
- a read-only snapshot of a partition directory
  (:class:`~kafkalog.log.read.partition_view.PartitionView`, itself a reader): its
  :class:`~kafkalog.log.read.segments.SegmentSnapshot` s, the last stable offset found from the
  end-transaction markers.

Every reader of records goes through here: the embedded consumer, ``DataLog.consume``, the
offsets store's replay of ``__consumer_offsets``, the Spark source and the CLI (through the
consumer). What it does: batches between offsets (CRC-checked, errors naming the ``.log`` and
the position), the last stable offset, the aborted transactions (the ``.txnindex`` files; a
snapshot adds those its markers show), the ``read_committed`` filter (one
:class:`~kafkalog.log.read.rules.AbortedTxnFilter`), and the offset for a timestamp. The
broker's Fetch is the other path: :meth:`~kafkalog.log.log.Log.read` returns byte slices
(Kafka's ``LocalLog.read``) and the client filters.
"""

from __future__ import annotations

from typing import Dict, Iterator, List, Optional, Protocol, Sequence, Tuple

from kafkalog.errors import CorruptRecordError, KafkalogError
from kafkalog.log.file_records import TimestampAndOffset
from kafkalog.log.index.txn_index import AbortedTxn
from kafkalog.log.read.rules import (
    AbortedTxnFilter,
    TransactionState,
    collect_aborted_transactions,
    find_offset_for_timestamp,
    floor_index,
    scan_transactions,
)
from kafkalog.log.read.segments import ViewSegment
from kafkalog.log.read.walk import ViewBatch
from kafkalog.record.constants import IsolationLevel

__all__ = ["PartitionReader", "ReadablePartition"]


class PartitionReader:
    """Kafka's read-side rules over one partition's segments (oldest first).

    ``last_stable_offset``: the partition's, when the supplier knows it (a live log's producer
    state; its ``.txnindex`` files are then complete); None: found, with the aborted
    transactions, from the end-transaction markers (a snapshot). ``contiguous``: the offsets of
    consecutive v2 batches follow each other (a log that is never compacted), checked by
    :meth:`batches` with ``check_offsets`` (the baseOffset is outside the CRC)."""

    def __init__(self, segments: Sequence[ViewSegment], log_start_offset: int, log_end_offset: int,
                 *, last_stable_offset: Optional[int] = None, contiguous: bool = False,
                 name: str = "") -> None:
        self._segs: Sequence[ViewSegment] = segments
        self.bases: List[int] = [s.base_offset for s in segments]
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset
        self._lso = last_stable_offset
        self.contiguous = contiguous
        #: the partition directory (errors that name no segment)
        self.name = name
        self._txn_states: Dict[Tuple[int, int], TransactionState] = {}

    # --- offsets ---------------------------------------------------------------------------------

    @property
    def high_watermark(self) -> int:
        return self.log_end_offset

    @property
    def last_stable_offset(self) -> int:
        if self._lso is not None:
            return self._lso
        return self.transaction_state().last_stable_offset

    def stable_end(self, isolation: IsolationLevel) -> int:
        """Where a reader of ``isolation`` stops: the last stable offset or the high watermark."""
        return (self.last_stable_offset if isolation is IsolationLevel.READ_COMMITTED
                else self.high_watermark)

    def reader(self, from_offset: Optional[int] = None) -> PartitionReader:
        """A reader from ``from_offset``: this one (a live log makes one per read)."""
        return self

    def log_path_of(self, offset: int) -> str:
        """The ``.log`` of the segment holding ``offset`` (for errors)."""
        segs = self._segs
        return segs[floor_index(self.bases, offset)].log_path if segs else self.name

    def missing_offsets(self, start: int, end: int) -> List[Tuple[int, int]]:
        """Offset ranges in ``[start, end)`` that no segment can hold (none here; a snapshot with
        remote storage may have some)."""
        return []

    def data_loss(self, missing: List[Tuple[int, int]]) -> None:
        """What a read across ``missing`` offsets does (a snapshot decides)."""

    # --- batches ---------------------------------------------------------------------------------

    def batches(self, start: int, end: int, *, whole: bool = False,
                check_offsets: bool = False) -> Iterator[ViewBatch]:
        """CRC-checked batches holding offsets in ``[start, end)``, across segments; corrupt data
        raises :class:`~kafkalog.errors.CorruptRecordError` naming the ``.log`` and position, and
        so does a partial batch inside an older segment. ``whole``: the caller reads them all (a
        scan; object stores are then read in large requests from the start). ``check_offsets``:
        the first batch must not start above ``start`` and each must start where the previous
        one ended (only offsets going backwards when the log may be compacted)."""
        start = max(start, self.log_start_offset)
        missing = self.missing_offsets(start, end)
        if missing:
            self.data_loss(missing)
        segs = self._segs
        i = floor_index(self.bases, start)
        expect: Optional[int] = None
        for k in range(i, len(segs)):
            seg = segs[k]
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
                    if check_offsets:
                        expect = self._check_offsets(b, start, expect)
                except KafkalogError as e:
                    raise (e.at(seg.log_path, 0) if e.file is None else e) from None
                yield b
                if b.last_offset >= end - 1:
                    return
            if walked < seg.size and k < len(segs) - 1:
                limit = seg.end_position(end)
                if limit is not None and walked >= limit:
                    return              # stopped at the .index position past ``end``
                raise CorruptRecordError(f"partial or invalid batch at the end of the segment "
                                         f"({seg.size - walked} bytes)", file=seg.log_path,
                                         position=walked)

    def _check_offsets(self, b: ViewBatch, start: int, expect: Optional[int]) -> int:
        """The offset after ``b``, once its first offset is checked against ``expect`` (the one
        after the previous batch, None for the first)."""
        first = b.base_offset
        if b.magic < 2:
            recs = b.records()
            first = recs[0].offset if recs else (start if expect is None else expect)
        if expect is None:
            if self.contiguous and first > max(start, self.log_start_offset):
                raise CorruptRecordError(f"batch base offset {first} is above the requested "
                                         f"offset {start}", position=b.position)
        elif first < expect or (self.contiguous and first != expect and b.magic >= 2):
            # a never-compacted v2 log has no gaps (legacy data may: pre-0.11 compaction, split
            # overflowed segments)
            raise CorruptRecordError(f"batch base offset {first} where offset {expect} was "
                                     f"expected", position=b.position)
        return b.last_offset + 1

    def read(self, start: int, end: int, isolation: IsolationLevel, *, whole: bool = False,
             scan_from: Optional[int] = None,
             check_offsets: bool = False) -> Iterator[Tuple[ViewBatch, bool]]:
        """``(batch, visible)`` for every batch holding offsets in ``[start, end)`` (Kafka's
        consumer rules): ``visible`` is False for control batches and, with ``read_committed``,
        for the batches of aborted transactions (:class:`AbortedTxnFilter` over
        :meth:`aborted_transactions`; ``scan_from``: where markers are followed from when the
        last stable offset is not known, default the log start offset). ``whole`` and
        ``check_offsets``: as :meth:`batches` takes them."""
        skip: Optional[AbortedTxnFilter] = None
        if isolation is IsolationLevel.READ_COMMITTED:
            upto = None if scan_from is None else end
            skip = AbortedTxnFilter(self.aborted_transactions(start, end, scan_from, upto))
        for batch in self.batches(start, end, whole=whole, check_offsets=check_offsets):
            if skip is not None:
                yield batch, not skip.skip(batch)
            else:
                yield batch, not batch.is_control

    def visible_batches(self, start: Optional[int] = None, end: Optional[int] = None,
                        isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
                        check_offsets: bool = False) -> Iterator[ViewBatch]:
        """The batches a consumer of ``isolation`` sees from ``start`` (default: the log start
        offset) to ``end`` (default, and at most: where that isolation stops)."""
        stop = self.stable_end(isolation)
        end = stop if end is None else min(end, stop)
        first = self.log_start_offset if start is None else start
        for batch, visible in self.read(first, end, isolation, check_offsets=check_offsets):
            if visible:
                yield batch

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

    def collect_aborted_transactions(self, start: int, upper: int) -> List[AbortedTxn]:
        """The aborted transactions of the ``.txnindex`` files overlapping ``[start, upper)``
        (Kafka's ``collectAbortedTransactions``)."""
        return collect_aborted_transactions(self._segs, start, upper)

    def aborted_transactions(self, start: int, upper: int, scan_from: Optional[int] = None,
                             upto: Optional[int] = None) -> List[Tuple[int, int]]:
        """``(producer id, first offset)`` of the aborted transactions overlapping ``[start,
        upper)``: those of the ``.txnindex`` files (Kafka's) and, when the last stable offset is
        not known, those found from the markers (a directory without ``.txnindex`` files, or a
        marker written after the index was read), once each."""
        found = self.collect_aborted_transactions(start, upper)
        if self._lso is not None:
            return sorted(((t.producer_id, t.first_offset) for t in found), key=lambda a: a[1])
        state = self.transaction_state(scan_from, upto)
        seen: Dict[Tuple[int, int], int] = {}
        for t in found:
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

    def offset_for_timestamp_from(self, timestamp: int,
                                  start_offset: int) -> Optional[TimestampAndOffset]:
        """The first record at or above ``start_offset`` (and the log start offset), below the
        log end offset, with a timestamp >= ``timestamp``."""
        found = find_offset_for_timestamp(self._segs, timestamp,
                                          max(start_offset, self.log_start_offset))
        return found if found is not None and found.offset < self.log_end_offset else None

    def offset_for_timestamp(self, timestamp: int) -> Optional[TimestampAndOffset]:
        """The first record at or above the log start offset with a timestamp >= ``timestamp``."""
        return self.offset_for_timestamp_from(timestamp, self.log_start_offset)


class ReadablePartition(Protocol):
    """A partition as a reader of records asks for it: a writable
    :class:`~kafkalog.log.log.Log` or a read-only
    :class:`~kafkalog.log.read.partition_view.PartitionView`."""

    dir: str
    log_start_offset: int

    @property
    def log_end_offset(self) -> int: ...

    @property
    def high_watermark(self) -> int: ...

    @property
    def last_stable_offset(self) -> int: ...

    def reader(self, from_offset: Optional[int] = None) -> PartitionReader:
        """The partition's reader from ``from_offset`` (that of this moment, for a live log)."""
        ...

    def offset_for_timestamp(self, timestamp: int) -> Optional[TimestampAndOffset]: ...
