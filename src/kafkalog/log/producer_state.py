"""Producer state: idempotence and transaction bookkeeping of a partition, and ``.snapshot`` files
(Kafka's ``ProducerStateManager``, ``ProducerAppendInfo``, ``ProducerStateEntry``; spec §3.5,
§4.2, §2.4).

The update method takes plain v2 batch-header values; :meth:`ProducerStateManager.update_from_batch`
parses a batch header with ``struct`` for callers that hold raw batch bytes, and
:meth:`ProducerStateManager.replay_walk` replays the producer batches of a header walk (recovery,
a rebuild from a snapshot) applying only those that leave a trace.
"""

from __future__ import annotations

import os
import struct
from bisect import bisect_left
from collections import deque
from dataclasses import dataclass, field
from typing import Deque, Dict, Iterable, List, NamedTuple, Optional, Protocol, Sequence

from crc32c import crc32c

from kafkalog.errors import (
    CorruptSnapshotError,
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTxnStateError,
    KafkalogError,
    OutOfOrderSequenceError,
    ProducerStateError,
    TransactionCoordinatorFencedError,
)
from kafkalog.log.file_records import BatchHeader, FileRecords
from kafkalog.log.fsutil import atomic_rename, atomic_write, delete_if_exists, io_error, read_bytes, read_file
from kafkalog.log.index.txn_index import AbortedTxn
from kafkalog.log.kernel import producer_rows
from kafkalog.log.naming import (
    DELETED_FILE_SUFFIX,
    PRODUCER_SNAPSHOT_FILE_SUFFIX,
    offset_from_file_name,
    producer_snapshot_file,
)
from kafkalog.log.protocols import ProducerStateLike
from kafkalog.record.constants import (
    ATTRIBUTES_OFFSET,
    CONTROL_FLAG_MASK,
    INT32_MAX,
    LAST_OFFSET_DELTA_OFFSET,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    PRODUCER_ID_OFFSET,
    RECORD_BATCH_OVERHEAD,
    RECORDS_OFFSET,
    SIZE_OFFSET,
    decrement_sequence,
    increment_sequence,
    java_long,
)
from kafkalog.record.crc import Buffer
from kafkalog.record.header_walk import (
    F_ATTRIBUTES,
    F_BASE_OFFSET,
    F_LAST_OFFSET,
    F_POSITION,
    F_SIZE,
    NF,
    HeaderWalk,
)

__all__ = [
    "ProducerStateManager", "ProducerStateEntry", "BatchMetadata", "TxnMetadata", "CompletedTxn",
    "OutOfOrderSequenceError", "InvalidProducerEpochError", "InvalidTxnStateError",
    "TransactionCoordinatorFencedError", "read_snapshot", "write_snapshot", "snapshot_bytes",
    "parse_snapshot", "ORIGIN_CLIENT", "ORIGIN_REPLICATION", "ORIGIN_COORDINATOR", "ORIGIN_COORDINATOR_TV2",
    "rebuild_producer_state",
]

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NUM_BATCHES_TO_RETAIN = 5
CONTROL_ABORT = 0
CONTROL_COMMIT = 1

ORIGIN_CLIENT = "client"
ORIGIN_REPLICATION = "replication"
ORIGIN_COORDINATOR = "coordinator"
#: the coordinator writing the marker of a transactions v2 transaction (KIP-890; Kafka passes the
#: transaction version beside its COORDINATOR origin): the marker's epoch must be above the
#: producer's (the end bumped it), except a marker written again after its transaction ended
ORIGIN_COORDINATOR_TV2 = "coordinator-tv2"

SNAPSHOT_VERSION = 1
_HEADER = struct.Struct(">hIi")
_ENTRY = struct.Struct(">qhiqiqiq")
ENTRY_SIZE = _ENTRY.size  # 46
#: the low byte of a v2 batch's attributes (its flags)
_FLAGS = ATTRIBUTES_OFFSET + 1
HEADER_SIZE = _HEADER.size  # 10


#: ``seq - dec`` with Kafka's int wrap (DefaultRecordBatch.decrementSequence)
decrease_sequence = decrement_sequence


@dataclass
class BatchMetadata:
    """Metadata of one appended batch of a producer."""
    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_seq(self) -> int:
        return decrease_sequence(self.last_seq, self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


@dataclass
class ProducerStateEntry:
    """State of one producer id."""
    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    coordinator_epoch: int = -1
    last_timestamp: int = -1
    current_txn_first_offset: Optional[int] = None
    batch_metadata: Deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))

    @property
    def is_empty(self) -> bool:
        return not self.batch_metadata

    @property
    def first_seq(self) -> int:
        return NO_SEQUENCE if self.is_empty else self.batch_metadata[0].first_seq

    @property
    def last_seq(self) -> int:
        return NO_SEQUENCE if self.is_empty else self.batch_metadata[-1].last_seq

    @property
    def first_data_offset(self) -> int:
        return -1 if self.is_empty else self.batch_metadata[0].first_offset

    @property
    def last_data_offset(self) -> int:
        return -1 if self.is_empty else self.batch_metadata[-1].last_offset

    @property
    def last_offset_delta(self) -> int:
        return 0 if self.is_empty else self.batch_metadata[-1].offset_delta

    def maybe_update_producer_epoch(self, epoch: int) -> bool:
        if self.producer_epoch != epoch:
            self.batch_metadata.clear()
            self.producer_epoch = epoch
            return True
        return False

    def add_batch(self, epoch: int, last_seq: int, last_offset: int, offset_delta: int,
                  timestamp: int) -> None:
        self.maybe_update_producer_epoch(epoch)
        self.batch_metadata.append(BatchMetadata(last_seq, last_offset, offset_delta, timestamp))
        self.last_timestamp = timestamp

    def find_duplicate_batch(self, epoch: int, first_seq: int, last_seq: int) -> Optional[BatchMetadata]:
        """The retained batch with the same epoch and sequence range (a retried produce)."""
        if epoch != self.producer_epoch:
            return None
        for b in self.batch_metadata:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
        return None


@dataclass
class TxnMetadata:
    """An ongoing (``last_offset`` None) or completed-but-unreplicated transaction."""
    producer_id: int
    first_offset: int
    last_offset: Optional[int] = None


class CompletedTxn(NamedTuple):
    """A transaction completed by a marker at ``last_offset``."""
    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


# --- snapshot files -------------------------------------------------------------------------------

def snapshot_bytes(entries: Iterable[ProducerStateEntry]) -> bytes:
    """The ``.snapshot`` bytes (version 1, CRC-32C of bytes [6, EOF)) of ``entries``."""
    entries = list(entries)
    body = bytearray(4 + ENTRY_SIZE * len(entries))
    struct.pack_into(">i", body, 0, len(entries))
    pos = 4
    for e in entries:
        _ENTRY.pack_into(body, pos, e.producer_id, e.producer_epoch, e.last_seq, e.last_data_offset,
                         e.last_offset_delta, e.last_timestamp, e.coordinator_epoch,
                         -1 if e.current_txn_first_offset is None else e.current_txn_first_offset)
        pos += ENTRY_SIZE
    return struct.pack(">hI", SNAPSHOT_VERSION, crc32c(bytes(body))) + bytes(body)


def parse_snapshot(data: bytes, file: Optional[str] = None) -> List[ProducerStateEntry]:
    """Parse ``.snapshot`` bytes; :class:`CorruptSnapshotError` (with file and byte position) on an
    unknown version, a truncated file or a CRC mismatch."""
    if len(data) < 2:
        raise CorruptSnapshotError("Snapshot file is truncated (no version)", file=file, position=0)
    version = struct.unpack_from(">h", data, 0)[0]
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"Snapshot contained an unknown file version {version}",
                                   file=file, position=0)
    if len(data) < HEADER_SIZE:
        raise CorruptSnapshotError("Snapshot file is truncated (header)", file=file, position=len(data))
    _, crc, count = _HEADER.unpack_from(data, 0)
    computed = crc32c(memoryview(data)[6:])
    if crc != computed:
        raise CorruptSnapshotError(f"Snapshot is corrupt (CRC is no longer valid. Stored crc: {crc}. "
                                   f"Computed crc: {computed})", file=file, position=2)
    if count < 0 or count * ENTRY_SIZE > len(data) - HEADER_SIZE:
        raise CorruptSnapshotError(f"Snapshot declares {count} producer entries but only "
                                   f"{len(data) - HEADER_SIZE} bytes follow", file=file, position=6)
    out = []
    pos = HEADER_SIZE
    for _ in range(count):
        (pid, epoch, seq, offset, delta, ts, coord, txn_first) = _ENTRY.unpack_from(data, pos)
        e = ProducerStateEntry(pid, epoch, coord, ts, txn_first if txn_first >= 0 else None)
        if offset >= 0:
            e.batch_metadata.append(BatchMetadata(seq, offset, delta, ts))
        out.append(e)
        pos += ENTRY_SIZE
    return out


def read_snapshot(path: os.PathLike[str] | str) -> List[ProducerStateEntry]:
    """Read a ``.snapshot`` file."""
    p = os.fspath(path)
    return parse_snapshot(read_bytes(p, "read producer snapshot"), p)


def write_snapshot(path: os.PathLike[str] | str, entries: Iterable[ProducerStateEntry], sync: bool = True) -> None:
    """Write a ``.snapshot`` file atomically."""
    atomic_write(path, snapshot_bytes(entries), sync=sync)


def _holds(path: str, data: bytes) -> bool:
    """Whether the file ``path`` holds exactly ``data`` (False when it cannot be read)."""
    try:
        return read_file(path, len(data) + 1) == data
    except OSError:
        return False


# --- the manager ----------------------------------------------------------------------------------

class ProducerStateManager:
    """Producer state of one partition.

    Args:
        log_dir: the partition directory (holds the ``.snapshot`` files).
        producer_id_expiration_ms: ``producer.id.expiration.ms``.
    """

    def __init__(self, log_dir: os.PathLike[str] | str, producer_id_expiration_ms: int = 86_400_000,
                 topic_partition: Optional[object] = None, *, list_snapshots: bool = True,
                 keep_files: bool = False) -> None:
        self.log_dir = os.fspath(log_dir)
        #: a recovery's own manager (:meth:`LogLoader._recovery_psm`): a snapshot it drops is
        #: forgotten, its file left to the load's own manager, which deletes what is stale when
        #: the load ends; a snapshot it takes is not written again where the file holds its bytes
        #: (after a crash every partition's recovery deleted the snapshot at its log end offset
        #: and wrote the same bytes back: an unlink, a create and a rename a partition)
        self.keep_files = keep_files
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.topic_partition = topic_partition
        self.producers: Dict[int, ProducerStateEntry] = {}
        self.ongoing_txns: Dict[int, TxnMetadata] = {}
        self.unreplicated_txns: Dict[int, TxnMetadata] = {}
        self.last_map_offset = 0
        self.last_snap_offset = 0
        self.snapshots: Dict[int, str] = {}
        #: stray snapshots' files left for :meth:`delete_stray_files` (offset -> path)
        self.stray_files: Dict[int, str] = {}
        #: the bytes of snapshot files as this manager wrote or found them (``keep_files``), or as
        #: another's passed on (:meth:`know_snapshot_bytes`): a load reads those from here, not the
        #: file (after a crash every partition's recovery checked the file at its log end offset,
        #: and the load's own manager read the same file again)
        self.known_bytes: Dict[str, bytes] = {}
        #: while True, a snapshot taken without ``sync`` is not written: its bytes wait in
        #: :attr:`unwritten` (a load of many partitions: after a crash each partition's recovery
        #: takes one at its log end, a file made per partition before the broker could answer)
        self.defer_writes = False
        #: snapshots taken and not written yet (path -> bytes): read from here, written by
        #: :meth:`write_unwritten` (a log's background step, or a snapshot taken again at the same
        #: offset), forgotten when the snapshot is removed
        self.unwritten: Dict[str, bytes] = {}
        if list_snapshots:      # (False: the loader lists them, from its listing of the directory)
            self.load_snapshots()

    def load_snapshots(self, names: Optional[Iterable[str]] = None) -> Dict[int, str]:
        """(Re)list the ``.snapshot`` files of the log directory into :attr:`snapshots` (offset ->
        path, ascending) and return them (Kafka's ``loadSnapshots``; the loader calls it after
        recovery, which may have written some). ``names``: the directory's file names as the
        caller just listed them (not listed again)."""
        self.snapshots = self._list_snapshots(names)
        return self.snapshots

    def _list_snapshots(self, names: Optional[Iterable[str]] = None) -> Dict[int, str]:
        out: Dict[int, str] = {}
        if names is None:
            try:
                names = os.listdir(self.log_dir)
            except FileNotFoundError:
                return out
            except OSError as err:
                raise io_error(err, self.log_dir, "list snapshots") from err
        d = self.log_dir
        sep = "" if d.endswith("/") else "/"
        for n in names:
            if n.endswith(PRODUCER_SNAPSHOT_FILE_SUFFIX):
                try:
                    out[offset_from_file_name(n)] = f"{d}{sep}{n}"
                except KafkalogError:
                    continue
        return dict(sorted(out.items())) if len(out) > 1 else out

    # --- state updates ---------------------------------------------------------------------------

    def last_entry(self, producer_id: int) -> Optional[ProducerStateEntry]:
        return self.producers.get(producer_id)

    def _check_epoch(self, entry: ProducerStateEntry, epoch: int, offset: int, origin: str) -> None:
        if epoch < entry.producer_epoch and origin != ORIGIN_REPLICATION:
            raise InvalidProducerEpochError(
                f"Epoch of producer {entry.producer_id} at offset {offset} in "
                f"{self.topic_partition} is {epoch}, which is smaller than the last seen epoch "
                f"{entry.producer_epoch}")

    def _check_marker_epoch_v2(self, entry: ProducerStateEntry, epoch: int, offset: int) -> None:
        """Kafka's ``checkProducerEpoch`` of a transactions v2 marker: its epoch is above the last
        one seen, or equal to it once that transaction has ended (a marker written again)."""
        current = entry.producer_epoch
        if epoch <= current and not (epoch == current and (entry.current_txn_first_offset is None
                                                            or epoch == 32767)):
            raise InvalidProducerEpochError(
                f"Epoch of producer {entry.producer_id} at offset {offset} in {self.topic_partition} "
                f"is {epoch}, which is <= the last seen epoch {current} (TV2)")

    def _check_sequence(self, entry: ProducerStateEntry, epoch: int, first_seq: int, offset: int) -> None:
        if epoch != entry.producer_epoch:
            if first_seq != 0 and entry.producer_epoch != NO_PRODUCER_EPOCH:
                raise OutOfOrderSequenceError(
                    f"Invalid sequence number for new epoch of producer {entry.producer_id} at offset "
                    f"{offset} in partition {self.topic_partition}: {epoch} (request epoch), "
                    f"{first_seq} (seq. number), {entry.producer_epoch} (current producer epoch)")
        else:
            last = entry.last_seq
            if not (entry.producer_epoch == NO_PRODUCER_EPOCH
                    or first_seq == last + 1 or (first_seq == 0 and last == INT32_MAX)):
                raise OutOfOrderSequenceError(
                    f"Out of order sequence number for producer {entry.producer_id} at offset "
                    f"{offset} in partition {self.topic_partition}: {first_seq} (incoming seq. "
                    f"number), {last} (current end sequence number)")

    def update(self, producer_id: int, producer_epoch: int, base_sequence: int, last_sequence: int,
               first_offset: int, last_offset: int, max_timestamp: int, is_transactional: bool,
               is_control: bool = False, control_type: Optional[int] = None,
               coordinator_epoch: int = 0, origin: str = ORIGIN_CLIENT) -> Optional[CompletedTxn]:
        """Apply one v2 batch of ``producer_id``: a data batch, or (``is_control``) a transaction
        marker with ``control_type`` (0 ABORT, 1 COMMIT; ``None`` = empty control batch).

        Checks are done before anything changes (a raised error leaves the state untouched).
        Returns the :class:`CompletedTxn` a marker completes (then call :meth:`complete_txn`,
        after computing :meth:`last_stable_offset` for the txn index), else ``None``.
        """
        if producer_id == NO_PRODUCER_ID:
            return None
        existing = self.producers.get(producer_id)
        new = existing is None
        entry = ProducerStateEntry(producer_id) if existing is None else existing
        if last_offset + 1 > self.last_map_offset:
            pass  # map end offset is advanced by update_map_end_offset (Kafka) -- and below
        completed = None
        if is_control:
            if control_type is None:
                return None
            if origin == ORIGIN_COORDINATOR_TV2:
                self._check_marker_epoch_v2(entry, producer_epoch, last_offset)
            else:
                self._check_epoch(entry, producer_epoch, last_offset, origin)
            if entry.coordinator_epoch > coordinator_epoch and origin != ORIGIN_REPLICATION:
                raise TransactionCoordinatorFencedError(
                    f"Invalid coordinator epoch for producer {producer_id} at offset {last_offset} in "
                    f"partition {self.topic_partition}: {coordinator_epoch} (zombie), "
                    f"{entry.coordinator_epoch} (current)")
            if entry.current_txn_first_offset is not None:
                completed = CompletedTxn(producer_id, entry.current_txn_first_offset, last_offset,
                                         control_type == CONTROL_ABORT)
            entry.maybe_update_producer_epoch(producer_epoch)
            entry.current_txn_first_offset = None
            entry.coordinator_epoch = coordinator_epoch
            entry.last_timestamp = max_timestamp
        else:
            self._check_epoch(entry, producer_epoch, first_offset, origin)
            if origin == ORIGIN_CLIENT:
                self._check_sequence(entry, producer_epoch, base_sequence, first_offset)
            if entry.current_txn_first_offset is not None and not is_transactional:
                raise InvalidTxnStateError(
                    f"Expected transactional write from producer {producer_id} at offset "
                    f"{first_offset} in partition {self.topic_partition}")
            entry.add_batch(producer_epoch, last_sequence, last_offset, last_offset - first_offset,
                            max_timestamp)
            if entry.current_txn_first_offset is None and is_transactional:
                entry.current_txn_first_offset = first_offset
                self.ongoing_txns[first_offset] = TxnMetadata(producer_id, first_offset)
                if len(self.ongoing_txns) > 1 and first_offset < max(self.ongoing_txns):
                    self.ongoing_txns = dict(sorted(self.ongoing_txns.items()))
        if new:
            self.producers[producer_id] = entry
        if last_offset + 1 > self.last_map_offset:
            self.last_map_offset = last_offset + 1
        return completed

    def update_from_batch(self, batch: Buffer, origin: str = ORIGIN_REPLICATION) -> List[AbortedTxn]:
        """Apply one raw v2 batch (bytes-like, starting at its base offset) and complete the
        transaction its marker ends. Returns the aborted transactions to add to the txn index.
        Batches without a producer id, and v0/v1 batches, are ignored."""
        mv = memoryview(batch)
        if len(mv) < RECORD_BATCH_OVERHEAD or mv[MAGIC_OFFSET] != 2:
            return []
        (base_offset, _len, _ple, _magic, _crc, attrs, last_delta, _bts, max_ts, pid, epoch,
         base_seq, _count) = struct.unpack_from(">qiibIhiqqqhii", mv, 0)
        if pid == NO_PRODUCER_ID:
            return []
        is_control = bool(attrs & 0x20)
        control_type = None
        coordinator_epoch = 0
        if is_control and _count > 0:
            control_type, coordinator_epoch = _parse_marker(mv)
        last_seq = NO_SEQUENCE if base_seq == NO_SEQUENCE else \
            increment_sequence(base_seq, last_delta)
        completed = self.update(pid, epoch, base_seq, last_seq, base_offset, java_long(base_offset + last_delta),
                                max_ts, bool(attrs & 0x10), is_control, control_type,
                                coordinator_epoch, origin)
        if completed is None:
            return []
        out = []
        if completed.is_aborted:
            out.append(self.aborted_txn(completed))
        self.complete_txn(completed)
        return out

    def replay_walk(self, buf: Buffer, found: HeaderWalk, first: int = 0, end: Optional[int] = None,
                    base: int = 0) -> List[AbortedTxn]:
        """Replay (replication origin) the v2 producer batches of rows ``first``..``end - 1`` of a
        header walk of ``buf`` (whose first byte is at file position ``base``), as
        :meth:`update_from_batch` of each would, in compiled code but for the few batches that
        leave a trace (:func:`~kafkalog.log.kernel.producer_rows`: a producer's last
        ``NUM_BATCHES_TO_RETAIN`` batches, every batch of a transaction). Returns the aborted
        transactions their markers complete, in order."""
        end = found.count if end is None else end
        rows = producer_rows(found.facts, first, end, NUM_BATCHES_TO_RETAIN,
                             [t.producer_id for t in self.ongoing_txns.values()])
        if not rows:
            return []
        cols = memoryview(found.facts).cast("q")
        aborted: List[AbortedTxn] = []
        mv = memoryview(buf)
        try:
            for i in rows:
                r = i * NF
                pos = cols[r + F_POSITION] - base
                size = cols[r + F_SIZE] if cols[r + F_ATTRIBUTES] & CONTROL_FLAG_MASK \
                    else RECORD_BATCH_OVERHEAD     # a data batch: its header says it all
                aborted.extend(self.update_from_batch(mv[pos:pos + size], ORIGIN_REPLICATION))
        finally:
            mv.release()
            cols.release()
        return aborted

    def check_append(self, batches: Iterable[tuple[int, Buffer]],
                     origin: str = ORIGIN_CLIENT) -> Optional[BatchMetadata]:
        """Run the checks of :meth:`update_from_batch` for ``batches`` (``(position, batch bytes)``
        pairs of raw v2 batches with their final offsets, in append order) against a scratch copy
        of the state: nothing here changes. Raises the first :class:`ProducerStateError`, located
        at the batch's position. For ``ORIGIN_CLIENT`` returns the :class:`BatchMetadata` (original
        offsets) of the first exact duplicate of one of its producer's retained batches (same
        epoch and sequence range, spec §4.1 step 4.4): then nothing of the append may be written.
        Returns ``None`` when the whole append may go ahead."""
        batches = list(batches)
        if not batches:
            return None
        scratch = ProducerStateManager.__new__(ProducerStateManager)
        scratch.__dict__.update(self.__dict__)
        scratch.producers = dict(self.producers)
        scratch.ongoing_txns = {k: TxnMetadata(t.producer_id, t.first_offset, t.last_offset)
                                for k, t in self.ongoing_txns.items()}
        scratch.unreplicated_txns = dict(self.unreplicated_txns)
        copied = set()
        for pos, batch in batches:
            mv = memoryview(batch)
            pid, epoch, base_seq = struct.unpack_from(">qhi", mv, PRODUCER_ID_OFFSET)
            entry = scratch.producers.get(pid)
            if entry is not None and pid not in copied:
                entry = _copy_entry(entry)
                scratch.producers[pid] = entry
                copied.add(pid)
            if origin == ORIGIN_CLIENT and base_seq < 0 and not mv[_FLAGS] & CONTROL_FLAG_MASK:
                raise InvalidRecordError(f"Invalid sequence number {base_seq} in record batch with "
                                         f"producerId {pid}", position=pos)
            if origin == ORIGIN_CLIENT and entry is not None and not mv[_FLAGS] & CONTROL_FLAG_MASK:
                last_delta = struct.unpack_from(">i", mv, LAST_OFFSET_DELTA_OFFSET)[0]
                last_seq = NO_SEQUENCE if base_seq == NO_SEQUENCE else \
                    increment_sequence(base_seq, last_delta)
                dup = entry.find_duplicate_batch(epoch, base_seq, last_seq)
                if dup is not None:
                    return dup
            try:
                scratch.update_from_batch(mv, origin)
            except KafkalogError as e:
                raise type(e)(e.message, file=e.file,
                              position=pos if e.position is None else e.position + pos) from None
            copied.add(pid)
        return None

    def is_next_in_sequence(self, producer_id: int, epoch: int, base_sequence: int) -> bool:
        """Whether a non-transactional data batch of ``producer_id`` is simply its next one, as
        nearly every batch of an idempotent producer is: a producer known at this epoch, with no
        open transaction, and ``base_sequence`` right after its last batch's (not across the wrap
        at Int.MAX). :meth:`check_append` passes such a batch and finds no duplicate of it (the
        retained batches' sequences are all below it), so the log appends it without that
        method's scratch copy of the state; anything else (a new producer or epoch, a retry, a
        gap, a transaction) goes through :meth:`check_append`."""
        entry = self.producers.get(producer_id)
        if entry is None or entry.producer_epoch != epoch or entry.current_txn_first_offset is not None:
            return False
        meta = entry.batch_metadata
        return bool(meta) and base_sequence == meta[-1].last_seq + 1

    def last_stable_offset(self, completed: CompletedTxn) -> int:
        """The LSO written to the txn index for ``completed``: first offset of the earliest
        ongoing transaction of another producer, else ``completed.last_offset + 1``."""
        for txn in self.ongoing_txns.values():
            if txn.producer_id != completed.producer_id:
                return txn.first_offset
        return completed.last_offset + 1

    def aborted_txn(self, completed: CompletedTxn) -> AbortedTxn:
        """The txn-index entry for an aborted ``completed`` transaction (call before
        :meth:`complete_txn`)."""
        return AbortedTxn(completed.producer_id, completed.first_offset, completed.last_offset,
                          self.last_stable_offset(completed))

    def complete_txn(self, completed: CompletedTxn) -> None:
        """Move the transaction from ongoing to completed-but-unreplicated."""
        txn = self.ongoing_txns.pop(completed.first_offset, None)
        if txn is None:
            raise ProducerStateError(f"Attempted to complete transaction {completed} on partition "
                                     f"{self.topic_partition} which was not started")
        txn.last_offset = completed.last_offset
        self.unreplicated_txns[completed.first_offset] = txn
        if len(self.unreplicated_txns) > 1:
            self.unreplicated_txns = dict(sorted(self.unreplicated_txns.items()))

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        """Forget completed transactions whose marker is below the high watermark."""
        if not self.unreplicated_txns:      # (after every append: no new dict when there are none)
            return
        self.unreplicated_txns = {k: t for k, t in self.unreplicated_txns.items()
                                  if t.last_offset is None or t.last_offset >= high_watermark}

    def first_unstable_offset(self) -> Optional[int]:
        """min(first offset of an ongoing txn, first offset of a completed txn whose marker is not
        yet below the high watermark), or ``None``. Readers call it without the log's lock (every
        fetch's last stable offset): an append in another thread that begins or completes a
        transaction meanwhile makes the first step of an iterator fail, and the read is taken
        again."""
        while True:
            ongoing, unreplicated = self.ongoing_txns, self.unreplicated_txns
            try:
                if not unreplicated:
                    return next(iter(ongoing)) if ongoing else None     # no list made
                first = next(iter(unreplicated))
                return min(next(iter(ongoing)), first) if ongoing else first
            except (RuntimeError, StopIteration):   # changed (or emptied) under the iterator
                continue

    def update_map_end_offset(self, offset: int) -> None:
        self.last_map_offset = offset

    @property
    def map_end_offset(self) -> int:
        return self.last_map_offset

    def is_empty(self) -> bool:
        return not self.producers and not self.unreplicated_txns

    # --- expiration -----------------------------------------------------------------------------

    def is_producer_expired(self, now_ms: int, entry: ProducerStateEntry) -> bool:
        return entry.current_txn_first_offset is None and \
            now_ms - entry.last_timestamp >= self.producer_id_expiration_ms

    def remove_expired_producers(self, now_ms: int) -> List[int]:
        gone = [pid for pid, e in self.producers.items() if self.is_producer_expired(now_ms, e)]
        for pid in gone:
            del self.producers[pid]
        return gone

    # --- snapshots ------------------------------------------------------------------------------

    def take_snapshot(self, sync: bool = True) -> Optional[str]:
        """Write ``<last_map_offset>.snapshot`` unless the offset did not advance (a snapshot at
        that offset still unwritten is written now); returns its path. With :attr:`defer_writes`
        and not ``sync``, the bytes wait in :attr:`unwritten` instead."""
        if self.last_map_offset == self.last_snap_offset:
            if self.unwritten and not self.defer_writes:
                self.write_unwritten(sync=sync)
            return None
        path = producer_snapshot_file(self.log_dir, self.last_map_offset)
        data = snapshot_bytes(self.producers.values())
        if self.defer_writes and not sync:
            self.unwritten[path] = data
        else:
            self.unwritten.pop(path, None)
            if not (self.keep_files and _holds(path, data)):
                atomic_write(path, data, sync=sync)
        if self.keep_files:
            self.known_bytes[path] = data
        self.snapshots[self.last_map_offset] = path
        self.snapshots = dict(sorted(self.snapshots.items()))
        self.last_snap_offset = self.last_map_offset
        return path

    def write_unwritten(self, sync: bool = False) -> int:
        """Write the snapshots :attr:`unwritten` still lists (a file already holding a snapshot's
        bytes is left as it is; the caller serializes this with the other snapshot writes: the
        log's lock); returns how many files it wrote."""
        pending, self.unwritten = self.unwritten, {}
        written = 0
        try:
            for path, data in list(pending.items()):
                if not _holds(path, data):
                    atomic_write(path, data, sync=sync)
                    written += 1
                del pending[path]
        finally:
            pending.update(self.unwritten)      # (what a failure left, and any taken since)
            self.unwritten = pending
        return written

    def know_snapshot_bytes(self, known: Optional[Dict[str, bytes]]) -> None:
        """The bytes of snapshot files another manager of the same directory just wrote or found
        there (a recovery's, :attr:`known_bytes`): read from here once, instead of the files.
        None: forget those not read."""
        if known is None:
            self.known_bytes.clear()
        else:
            self.known_bytes.update(known)

    def latest_snapshot_offset(self) -> Optional[int]:
        return next(reversed(self.snapshots)) if self.snapshots else None

    def oldest_snapshot_offset(self) -> Optional[int]:
        return next(iter(self.snapshots)) if self.snapshots else None

    def snapshot_file(self, offset: int) -> Optional[str]:
        return self.snapshots.get(offset)

    def _load_producer_entry(self, e: ProducerStateEntry) -> None:
        self.producers[e.producer_id] = e
        if e.current_txn_first_offset is not None:
            self.ongoing_txns[e.current_txn_first_offset] = TxnMetadata(e.producer_id,
                                                                        e.current_txn_first_offset)

    def _load_from_snapshot(self, log_start_offset: int, now_ms: int) -> None:
        while True:
            latest = self.latest_snapshot_offset()
            if latest is None:
                self.last_snap_offset = self.last_map_offset = log_start_offset
                return
            path = self.snapshots[latest]
            try:
                known = self.known_bytes.pop(path, None)
                if known is None:
                    known = self.unwritten.get(path)
                entries = read_snapshot(path) if known is None else parse_snapshot(known, path)
            except (CorruptSnapshotError, KafkalogError):
                self.remove_and_delete_snapshot(latest)
                continue
            for e in entries:
                if not self.is_producer_expired(now_ms, e):
                    self._load_producer_entry(e)
            self.ongoing_txns = dict(sorted(self.ongoing_txns.items()))
            self.last_snap_offset = self.last_map_offset = latest
            return

    def truncate_and_reload(self, log_start_offset: int, log_end_offset: int, now_ms: int) -> None:
        """Delete snapshots outside ``(log_start_offset, log_end_offset]`` and reload the state from
        the latest remaining (valid) snapshot unless the map end offset already equals LEO."""
        for off in list(self.snapshots):
            if off > log_end_offset or off <= log_start_offset:
                self.remove_and_delete_snapshot(off)
        if log_end_offset != self.last_map_offset:
            self.producers.clear()
            self.ongoing_txns.clear()
            self.unreplicated_txns.clear()
            self._load_from_snapshot(log_start_offset, now_ms)
        else:
            self.on_log_start_offset_incremented(log_start_offset)

    def load(self, log_start_offset: int, now_ms: int) -> None:
        """Load the latest valid snapshot (corrupt ones are deleted, older ones tried)."""
        self.producers.clear()
        self.ongoing_txns.clear()
        self.unreplicated_txns.clear()
        self._load_from_snapshot(log_start_offset, now_ms)

    def on_log_start_offset_incremented(self, log_start_offset: int) -> None:
        self.unreplicated_txns = {k: t for k, t in self.unreplicated_txns.items()
                                  if t.last_offset is None or t.last_offset >= log_start_offset}
        if self.last_map_offset < log_start_offset:
            self.last_map_offset = log_start_offset
        latest = self.latest_snapshot_offset()
        self.last_snap_offset = latest if latest is not None else log_start_offset

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Forget everything, delete every snapshot, restart at ``offset``."""
        self.producers.clear()
        self.ongoing_txns.clear()
        self.unreplicated_txns.clear()
        for off in list(self.snapshots):
            self.remove_and_delete_snapshot(off)
        self.last_snap_offset = self.last_map_offset = offset

    def remove_and_delete_snapshot(self, offset: int) -> bool:
        path = self._forget_snapshot(offset)
        if path is None:
            return False
        return True if self.keep_files else delete_if_exists(path)

    def _forget_snapshot(self, offset: int) -> Optional[str]:
        """Drop the snapshot at ``offset`` from :attr:`snapshots` (and its bytes from
        :attr:`unwritten`: a dropped snapshot is never written); returns its path, None when
        there is none. Its file is the caller's."""
        path = self.snapshots.pop(offset, None)
        if path is not None:
            self.unwritten.pop(path, None)
        return path

    def delete_snapshots_before(self, offset: int) -> None:
        for off in [o for o in self.snapshots if o < offset]:
            self.remove_and_delete_snapshot(off)

    def remove_and_mark_snapshot_for_deletion(self, offset: int) -> Optional[str]:
        """Rename ``<offset>.snapshot`` to ``.snapshot.deleted`` (deleted later); returns the new
        path or ``None`` when there is no such snapshot."""
        path = self._forget_snapshot(offset)
        if path is None or not os.path.exists(path):
            return None
        new = path + DELETED_FILE_SUFFIX
        atomic_rename(path, new, sync=False)
        return new

    def remove_stray_snapshots(self, segment_base_offsets: Iterable[int], *, later: bool = False) -> None:
        """Delete snapshots matching no segment base offset, except the largest stray one if it is
        above the largest segment base offset (the clean-shutdown snapshot at LEO). ``later``: the
        strays leave :attr:`snapshots` now and their files wait in :attr:`stray_files` for
        :meth:`delete_stray_files` (a load of many partitions leaves the unlinks to the
        background)."""
        bases = set(segment_base_offsets)
        max_base = max(bases) if bases else None
        strays = [off for off in self.snapshots if off not in bases]
        if strays and (max_base is None or strays[-1] > max_base):
            strays.pop()                  # (snapshots are in ascending order)
        for off in strays:
            if later:
                self.stray_files[off] = self.snapshots[off]
                self._forget_snapshot(off)
            else:
                self.remove_and_delete_snapshot(off)

    def delete_stray_files(self) -> int:
        """Delete the files :meth:`remove_stray_snapshots` left for later, except one taken again
        at the same offset since (the caller serializes this with the snapshots' writes: the log's
        lock); returns how many it deleted."""
        strays, self.stray_files = self.stray_files, {}
        return sum(delete_if_exists(path) for off, path in strays.items() if off not in self.snapshots)


def rebuild_producer_state(psm: ProducerStateLike, segments: Sequence[_SegmentLike],
                           log_start_offset: int, last_offset: int, now: int,
                           reload_from_clean_shutdown: bool = False) -> None:
    """Kafka's ``UnifiedLog.rebuildProducerState`` (spec §4.8 step 8, §4.9): load the latest valid
    snapshot <= ``last_offset`` (deleting corrupt and out-of-range ones) and replay the v2 batches
    from its offset to ``last_offset``, taking snapshots at the last two segment base offsets on
    the way and at ``last_offset``. Without snapshots after a clean shutdown: empty snapshots only
    (Kafka's upgrade shortcut)."""
    bases = [s.base_offset for s in segments]
    to_snapshot = ([bases[-2]] if len(bases) >= 2 else []) + bases[-1:] + [last_offset]
    if not psm.snapshots and reload_from_clean_shutdown:
        for off in to_snapshot:
            psm.truncate_and_reload(log_start_offset, off, now)
            psm.update_map_end_offset(off)
            psm.take_snapshot(sync=False)
        return
    empty_before = psm.is_empty() and psm.map_end_offset >= last_offset
    psm.truncate_and_reload(log_start_offset, last_offset, now)
    if last_offset > psm.map_end_offset and not empty_before:
        for i, seg in enumerate(segments):
            nxt = bases[i + 1] if i + 1 < len(bases) else None
            if seg.base_offset >= last_offset or (nxt is not None and nxt <= psm.map_end_offset):
                continue
            start = max(seg.base_offset, psm.map_end_offset, log_start_offset)
            psm.update_map_end_offset(start)
            if seg.base_offset in to_snapshot:
                psm.take_snapshot(sync=False)
            _replay_producer_batches(psm, seg, start, last_offset)
    psm.update_map_end_offset(last_offset)
    psm.take_snapshot(sync=False)


class _SegmentLike(Protocol):
    """What a producer-state rebuild reads of a segment
    (:class:`~kafkalog.log.segment.LogSegment`)."""

    base_offset: int
    log: FileRecords

    def translate_offset(self, offset: int) -> Optional[BatchHeader]: ...


def _replay_producer_batches(psm: ProducerStateLike, seg: _SegmentLike, start: int,
                             end: int) -> None:
    """Feed the producer batches of ``seg`` holding offsets in ``[start, end)`` to ``psm``
    (replication origin): windows of the ``.log`` walked by the header walker, only the batches
    that leave a trace applied (:meth:`ProducerStateManager.replay_walk`)."""
    h0 = seg.translate_offset(start)
    if h0 is None:
        return
    for win in seg.log.windows(h0.position, whole=True, first=1 << 16, largest=1 << 20):
        found = win.walk
        first = bisect_left(found.column(F_LAST_OFFSET), start)
        stop = bisect_left(found.column(F_BASE_OFFSET), end, first)
        psm.replay_walk(win.buf, found, first, stop, win.base)
        if stop < found.count:
            return


def _copy_entry(e: ProducerStateEntry) -> ProducerStateEntry:
    c = ProducerStateEntry(e.producer_id, e.producer_epoch, e.coordinator_epoch, e.last_timestamp,
                           e.current_txn_first_offset)
    c.batch_metadata.extend(BatchMetadata(b.last_seq, b.last_offset, b.offset_delta, b.timestamp)
                            for b in e.batch_metadata)
    return c


def _read_uvarint(mv: memoryview, pos: int, limit: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= limit or shift > 63:
            raise ProducerStateError("Malformed control record varint", position=pos)
        b = mv[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def _read_varint(mv: memoryview, pos: int, limit: int) -> tuple[int, int]:
    v, pos = _read_uvarint(mv, pos, limit)
    return (v >> 1) ^ -(v & 1), pos


def _parse_marker(mv: memoryview) -> tuple[int, int]:
    """(control_type, coordinator_epoch) of the first record of an (uncompressed) control batch."""
    limit = min(len(mv), LOG_OVERHEAD + struct.unpack_from(">i", mv, SIZE_OFFSET)[0])
    pos = RECORDS_OFFSET
    _, pos = _read_varint(mv, pos, limit)  # record length
    pos += 1  # attributes
    _, pos = _read_varint(mv, pos, limit)  # timestamp delta
    _, pos = _read_varint(mv, pos, limit)  # offset delta
    klen, pos = _read_varint(mv, pos, limit)
    if klen < 4 or pos + klen > limit:
        raise ProducerStateError("Invalid control record key", position=pos)
    _kver, ctype = struct.unpack_from(">hh", mv, pos)
    pos += klen
    vlen, pos = _read_varint(mv, pos, limit)
    coord = 0
    if vlen >= 6 and pos + vlen <= limit:
        _vver, coord = struct.unpack_from(">hi", mv, pos)
    return ctype, coord
