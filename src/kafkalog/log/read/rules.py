"""Kafka's read-side rules over a partition's segments, written once: the aborted transactions of
a fetch (:func:`collect_aborted_transactions`, from the ``.txnindex`` files), the consumer's
``read_committed`` filter (:class:`AbortedTxnFilter`), the last stable offset and the aborted
transactions found from the end-transaction markers (:func:`scan_transactions`), and ListOffsets
by timestamp (:func:`find_offset_for_timestamp`)."""

from __future__ import annotations

from bisect import bisect_right
from typing import Dict, Iterable, List, NamedTuple, Optional, Sequence, Set, Tuple

from kafkalog.errors import KafkalogError
from kafkalog.log.file_records import TimestampAndOffset, first_record_with_timestamp
from kafkalog.log.index.txn_index import AbortedTxn
from kafkalog.log.read.segments import ViewSegment
from kafkalog.log.read.walk import ViewBatch
from kafkalog.record.constants import ControlRecordType
from kafkalog.record.control import control_record_type

__all__ = ["is_abort_marker", "collect_aborted_transactions", "AbortedTxnFilter",
           "TransactionState", "scan_transactions", "find_offset_for_timestamp", "floor_index"]


def floor_index(bases: Sequence[int], offset: int) -> int:
    """The index of the segment (by sorted base offsets) that holds ``offset``: the last one
    whose base offset is <= it (the first when none is)."""
    return max(bisect_right(bases, offset) - 1, 0)


def is_abort_marker(batch: ViewBatch) -> bool:
    """Whether a control batch is an ABORT marker (its first record's key)."""
    for rec in batch.records():
        return rec.key is not None and control_record_type(bytes(rec.key)) == ControlRecordType.ABORT
    return False


def collect_aborted_transactions(segments: Sequence[ViewSegment], start: int,
                                 upper: int) -> List[AbortedTxn]:
    """The aborted transactions overlapping ``[start, upper)``, from the ``.txnindex`` of the
    segment holding ``start`` and the following ones until a search is complete (Kafka's
    ``LocalLog.collectAbortedTransactions``)."""
    bases = [s.base_offset for s in segments]
    out: List[AbortedTxn] = []
    for seg in segments[floor_index(bases, start):]:
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

    __slots__ = ("_next", "_pending", "_pids")

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
        if pending:
            k = self._next
            last = batch.last_offset
            while k < len(pending) and pending[k][1] <= last:
                self._pids.add(pending[k][0])
                k += 1
            self._next = k
        if batch.is_control:
            pid = batch.producer_id
            if pid in self._pids and is_abort_marker(batch):
                self._pids.discard(pid)
            return True
        return bool(self._pids) and batch.is_transactional and batch.producer_id in self._pids


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
    for k in range(floor_index(bases, start_offset), len(segments)):
        seg = segments[k]
        if k < len(segments) - 1 and not seg.may_hold_timestamp(timestamp):
            continue
        target = max(seg.time_index_offset(timestamp), start_offset, seg.base_offset)
        try:
            found = first_record_with_timestamp(seg.batches_from(target), timestamp, start_offset)
        except KafkalogError as e:
            raise (e.at(seg.log_path, 0) if e.file is None else e) from None
        if found is not None:
            return found
    return None
