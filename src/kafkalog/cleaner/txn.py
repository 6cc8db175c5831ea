"""Transactions during cleaning: Kafka's ``CleanedTransactionMetadata`` (spec §4.11 "Record/batch
retention rules", "Compaction + transactions summary").

Aborted transactions come from the segments' ``.txnindex`` files
(:meth:`kafkalog.log.log.Log.collect_aborted_transactions`, as Kafka's cleaner does). While the
cleaner walks batches in offset order, the aborted list (ordered by first offset) is consumed as
the walk passes each first offset; data batches of an aborted transaction are discarded, ABORT
markers are kept while any batch of their transaction was still seen in this pass (and then
re-indexed in the cleaned segment's ``.txnindex``), COMMIT markers while any data batch of their
transaction was seen.
"""
from __future__ import annotations

import heapq
from typing import Dict, Iterable, List, Optional, Set, Tuple

from kafkalog.errors import KafkalogError
from kafkalog.log.index.txn_index import AbortedTxn
from kafkalog.record.batch import RecordBatch
from kafkalog.record.constants import ControlRecordType
from kafkalog.record.control import control_record_type

__all__ = ["CleanedTransactionMetadata"]

class _AbortedTxnMetadata:
    __slots__ = ("txn", "last_observed_batch_offset")

    def __init__(self, txn: AbortedTxn) -> None:
        self.txn = txn
        self.last_observed_batch_offset: Optional[int] = None


class CleanedTransactionMetadata:
    """Tracks ongoing committed / aborted transactions during one pass over the log."""

    def __init__(self) -> None:
        self._ongoing_committed: Set[int] = set()
        self._ongoing_aborted: Dict[int, _AbortedTxnMetadata] = {}
        self._heap: List[Tuple[int, AbortedTxn]] = []   # by first offset
        self._added: Set[AbortedTxn] = set()
        #: entries to write to the current cleaned segment's ``.txnindex`` (the cleaner drains it)
        self.cleaned_index: Optional[List[AbortedTxn]] = None

    def add_aborted_transactions(self, txns: Iterable[AbortedTxn]) -> None:
        for t in txns:
            if t not in self._added:
                self._added.add(t)
                heapq.heappush(self._heap, (t.first_offset, t))

    def _consume_up_to(self, offset: int) -> None:
        h = self._heap
        while h and h[0][0] <= offset:
            _, t = heapq.heappop(h)
            if t.producer_id not in self._ongoing_aborted:
                self._ongoing_aborted[t.producer_id] = _AbortedTxnMetadata(t)

    def on_control_batch_read(self, batch: RecordBatch) -> bool:
        """Returns True when the control batch may be discarded (its transaction has no data left
        in this pass)."""
        self._consume_up_to(batch.last_offset)
        recs = batch.records()
        if not recs:
            return True                      # an empty control batch: already cleaned
        try:
            ctype = control_record_type(recs[0].key)
        except KafkalogError as e:
            raise e.at(None, batch.position) from None
        pid = batch.producer_id
        if ctype == ControlRecordType.ABORT:
            meta = self._ongoing_aborted.pop(pid, None)
            if meta is not None and meta.last_observed_batch_offset is not None:
                if self.cleaned_index is not None:
                    self.cleaned_index.append(meta.txn)
                return False
            return True
        if ctype == ControlRecordType.COMMIT:
            if pid in self._ongoing_committed:
                self._ongoing_committed.discard(pid)
                return False
            return True
        return False

    def on_batch_read(self, batch: RecordBatch) -> bool:
        """Returns True when the data batch belongs to an aborted transaction (discard it)."""
        self._consume_up_to(batch.last_offset)
        if batch.magic >= 2 and batch.is_transactional:
            meta = self._ongoing_aborted.get(batch.producer_id)
            if meta is not None:
                meta.last_observed_batch_offset = batch.last_offset
                return True
            self._ongoing_committed.add(batch.producer_id)
        return False
