"""``Log``: the partition log of one partition directory (Kafka's ``UnifiedLog`` + ``LocalLog``).

Concurrency: the segment list is published copy-on-write as one immutable
:class:`~kafkalog.log.log_segments.LogSegments` (segments, base offsets, log end); readers take
it (:meth:`Log.reader`) and are never blocked by appends, rolls or deletions. A lock serialises
writers (append, roll, flush, truncate, delete).

Append is one validation pass over the caller's buffer at batch granularity (header fields, CRC,
sizes, record count vs lastOffsetDelta), offsets assigned in place, then one ``pwrite`` and per-batch
index upkeep. Many batches per call are accepted (Kafka's leader path accepts one v2 batch per
produce request; an embedded log is fed whole buffers from bulk loads and Spark commits).
"""

from __future__ import annotations

import mmap
import os
import socket
import struct
import threading
from bisect import bisect_right
from time import perf_counter
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple

from kafkalog.errors import (
    KafkalogError,
    KafkalogIOError,
    OffsetOutOfRangeError,
    RecordBatchTooLargeError,
)
from kafkalog.log.checkpoint import LEADER_EPOCH_CHECKPOINT_FILE, EpochEntry, LeaderEpochCheckpointFile
from kafkalog.log.config import LogConfig, as_log_config
from kafkalog.log.fetch_data_info import FetchDataInfo, LogOffsetMetadata
from kafkalog.log.file_records import TimestampAndOffset
from kafkalog.log.fsutil import fsync_dir, io_error, wrap_os_errors
from kafkalog.log.index.txn_index import AbortedTxn
from kafkalog.log.leader_epoch import LeaderEpochFileCache
from kafkalog.log.loader import load_log
from kafkalog.log.log_append_info import AppendInfo
from kafkalog.log.log_metrics import LOG_STATS
from kafkalog.log.log_segments import LogSegments
from kafkalog.log.log_validator import AppendRules, NeedsConversion, ValidatedAppend, validate_append
from kafkalog.log.naming import (
    CLEANED_FILE_SUFFIX,
    DELETED_FILE_SUFFIX,
    INDEX_FILE_SUFFIX,
    LOG_FILE_SUFFIX,
    SWAP_FILE_SUFFIX,
    TIME_INDEX_FILE_SUFFIX,
    filename_prefix_from_offset,
)
from kafkalog.log.producer_state import (
    ORIGIN_CLIENT,
    ORIGIN_REPLICATION,
    ProducerStateManager,
    rebuild_producer_state,
)
from kafkalog.log.protocols import LeaderEpochCacheLike, ProducerStateLike
from kafkalog.log.read.reader import PartitionReader
from kafkalog.log.read.segments import LiveSegment
from kafkalog.log.read.walk import ViewBatch
from kafkalog.log.segment import (
    LogSegment,
    RollParams,
    _now_ms,
    delete_segments_later,
    segment_file_name,
)
from kafkalog.record.constants import (
    ATTRIBUTES_OFFSET,
    INT32_MAX,
    INT64_MAX,
    PRODUCER_EPOCH_OFFSET,
    TRANSACTIONAL_FLAG_MASK,
    IsolationLevel,
)
from kafkalog.record.crc import Buffer
from kafkalog.record.header_walk import one_v2_data_batch

#: what the entry points take as configuration (see :func:`~kafkalog.log.config.as_log_config`)
ConfigArg = LogConfig | Mapping[str, Any] | None
#: ``scheduler(delay_seconds, task)``: runs ``task`` later (Kafka's asynchronous deletions)
Scheduler = Callable[[float, Callable[[], None]], object]

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5
READ_UNCOMMITTED = IsolationLevel.READ_UNCOMMITTED.config_name
READ_COMMITTED = IsolationLevel.READ_COMMITTED.config_name
#: an isolation level as the log's methods take it: the enum, its id or its config name
IsolationArg = IsolationLevel | int | str

_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_pack_q = _INT64.pack_into
#: a v2 batch's producer epoch and base sequence (from ``PRODUCER_EPOCH_OFFSET``)
_EPOCH_SEQUENCE = struct.Struct(">hi")
#: the low byte of a v2 batch's attributes (its flags, the transactional one among them)
_ATTRIBUTE_FLAGS = ATTRIBUTES_OFFSET + 1
#: a LogSegments from its three fields at C speed (the one-batch append publishes one per call)
_new_log_segments = tuple.__new__


class Log:
    """One partition's log. Open with :meth:`Log.open` (runs the loader); create segments, append,
    read, roll, flush, truncate. Retention and compaction live elsewhere and use
    :attr:`segments`, :meth:`delete_segments`, :meth:`maybe_increment_log_start_offset`.
    """

    def __init__(self, dir_path: str | os.PathLike[str], config: ConfigArg = None, *, segments: Sequence[LogSegment],
                 log_start_offset: int, recovery_point: int, next_offset: int,
                 scheduler: Optional[Callable[[float, Callable[[], None]], object]] = None,
                 clock: Callable[[], int] = _now_ms,
                 producer_state_manager: Optional[ProducerStateLike] = None,
                 leader_epoch_cache: Optional[LeaderEpochCacheLike] = None,
                 recovery_report: Any = None) -> None:
        self.dir = os.fspath(dir_path)
        self.config: LogConfig = as_log_config(config)
        self.clock = clock
        self.scheduler = scheduler
        self.producer_state_manager = producer_state_manager
        self.leader_epoch_cache = leader_epoch_cache
        self.recovery_report = recovery_report
        self._lock = threading.RLock()
        self.log_start_offset = log_start_offset
        self.recovery_point = recovery_point
        self.last_flush_time = clock()
        self._closed = False
        # truncation hooks for the cleaner / manager (spec §4.9): called before / after
        self.cleaner_abort_hook: Optional[Callable[[Log], None]] = None
        self.on_truncate: List[Callable[[Log, int], None]] = []
        self._reload_config()
        segs = tuple(sorted(segments, key=lambda s: s.base_offset))
        self._publish(segs, next_offset)

    # --- construction ----------------------------------------------------------------------------

    @classmethod
    def open(cls, dir_path: str | os.PathLike[str], config: ConfigArg = None, *,
             log_start_offset: int = 0, recovery_point: int = 0, had_clean_shutdown: bool = False,
             scheduler: Optional[Scheduler] = None, clock: Callable[[], int] = _now_ms,
             producer_state_manager: Optional[ProducerStateLike] = None,
             leader_epoch_cache: Optional[LeaderEpochCacheLike] = None,
             snapshot_files_later: bool = False, dir_exists: bool = False) -> Log:
        """Open (creating when missing) a partition directory and run the loader (spec §4.8). The
        loader's :class:`kafkalog.log.loader.RecoveryReport` is kept in :attr:`recovery_report`.
        ``snapshot_files_later``: the stray producer snapshots the load finds are deleted, and
        the snapshots it takes written, by :meth:`finish_snapshot_files` (the log manager's
        background), not during the load.
        ``dir_exists``: the caller found the directory (a data directory's listing): no stat."""
        if not dir_exists and not os.path.isdir(dir_path):
            os.makedirs(os.fspath(dir_path), exist_ok=True)
        if producer_state_manager is None:
            producer_state_manager = ProducerStateManager(dir_path)
        if leader_epoch_cache is None:
            # (the file read, then made empty when it was missing: no stat before the read)
            leader_epoch_cache = LeaderEpochFileCache(LeaderEpochCheckpointFile(
                os.path.join(dir_path, LEADER_EPOCH_CHECKPOINT_FILE), create=False))
            leader_epoch_cache.ensure_file()
        config = as_log_config(config)
        loaded = load_log(dir_path, config, log_start_offset=log_start_offset,
                          recovery_point=recovery_point, had_clean_shutdown=had_clean_shutdown,
                          clock=clock, producer_state_manager=producer_state_manager,
                          leader_epoch_cache=leader_epoch_cache, scheduler=scheduler,
                          snapshot_files_later=snapshot_files_later)
        log = cls(dir_path, config, segments=loaded.segments,
                  log_start_offset=loaded.log_start_offset, recovery_point=loaded.recovery_point,
                  next_offset=loaded.next_offset, scheduler=scheduler, clock=clock,
                  producer_state_manager=producer_state_manager,
                  leader_epoch_cache=leader_epoch_cache, recovery_report=loaded.report)
        log.partition_metadata_listed = loaded.partition_metadata_listed
        return log

    @classmethod
    def create(cls, dir_path: str | os.PathLike[str], config: ConfigArg = None, *,
               scheduler: Optional[Scheduler] = None, clock: Callable[[], int] = _now_ms,
               producer_state_manager: Optional[ProducerStateLike] = None,
               files_made: Optional[Sequence[EpochEntry]] = None) -> Log:
        """A new partition: its directory made here (it must not exist: ``FileExistsError``,
        the caller opens what is there instead) with an empty active segment at offset 0, as
        :meth:`open` leaves an empty directory, without the loader's listing, reads and checks of
        a directory known to be empty (issue 35: a topic of thousands of partitions). The
        ``leader-epoch-checkpoint`` is written by the first epoch assigned, or made empty by
        :meth:`LeaderEpochFileCache.ensure_file` (as Kafka's checkpoint file makes itself).

        ``files_made``: the caller has just made the directory and the files :meth:`new_files`
        names, its ``leader-epoch-checkpoint`` holding these entries (a topic's partitions made a
        chunk at a time without the interpreter lock, :func:`kafkalog.log.kernel.make_dirs`):
        nothing is made or opened here (the ``.log`` is opened at its first use)."""
        path = os.fspath(dir_path)
        config = as_log_config(config)
        if files_made is None:
            try:
                os.mkdir(path)
            except FileExistsError:
                raise
            except OSError as err:
                raise io_error(err, path, "create partition directory") from err
        if producer_state_manager is None:
            producer_state_manager = ProducerStateManager(path, list_snapshots=False)
        cache = LeaderEpochFileCache(LeaderEpochCheckpointFile(
            f"{path}/{LEADER_EPOCH_CHECKPOINT_FILE}", create=False), read=False)
        if files_made is not None:
            if config.preallocate:
                raise ValueError("files made by the caller are not preallocated: preallocate=true "
                                 "needs Log.create to make them")
            cache.made_with(list(files_made))
            seg = LogSegment.open(path, 0, config, clock=clock, files_made=True)
        else:
            seg = LogSegment.open(path, 0, config, clock=clock)
            try:
                seg.create_indexes_before_first_entry(config.segment_index_bytes)
            except BaseException:
                seg.close_handlers()
                raise
        return cls(path, config, segments=[seg], log_start_offset=0, recovery_point=0, next_offset=0,
                   scheduler=scheduler, clock=clock, producer_state_manager=producer_state_manager,
                   leader_epoch_cache=cache)

    @staticmethod
    def new_files(leader_epochs: Sequence[EpochEntry] = ()) -> List[Tuple[str, bytes]]:
        """The files of a new partition's directory, ``(name, bytes)``, for a caller that makes
        them itself before :meth:`create` with ``files_made``: the empty segment at offset 0 (not
        preallocated) and the ``leader-epoch-checkpoint`` holding ``leader_epochs`` (empty when
        there are none, as Kafka's checkpoint file makes itself)."""
        stem = filename_prefix_from_offset(0)
        return [(stem + LOG_FILE_SUFFIX, b""), (stem + INDEX_FILE_SUFFIX, b""),
                (stem + TIME_INDEX_FILE_SUFFIX, b""),
                (LEADER_EPOCH_CHECKPOINT_FILE,
                 LeaderEpochCheckpointFile.encode(leader_epochs) if leader_epochs else b"")]

    def _reload_config(self) -> None:
        c = self.config
        self.segment_bytes = c.segment_bytes
        self.max_message_bytes = c.max_message_bytes
        self.flush_messages = c.flush_messages
        self.flush_ms = c.flush_ms
        self.file_delete_delay_ms = c.file_delete_delay_ms
        self.log_append_time_type = c.log_append_time
        self.ts_before_max = c.message_timestamp_before_max_ms
        self.ts_after_max = c.message_timestamp_after_max_ms
        self.compact = c.compact
        self.max_segment_ms = c.max_segment_ms
        # single-batch fast path of append(): CreateTime without timestamp bounds
        self._fast_append = (not self.log_append_time_type and self.ts_before_max == INT64_MAX
                             and self.ts_after_max == INT64_MAX)
        self._rules = AppendRules(self.max_message_bytes, self.log_append_time_type,
                                  self.ts_before_max, self.ts_after_max)

    def update_config(self, config: ConfigArg) -> None:
        """Swap the configuration (Kafka's dynamic topic config update)."""
        with self._lock:
            self.config = as_log_config(config)
            self._reload_config()

    def _publish(self, segs: Tuple[LogSegment, ...], next_offset: int) -> None:
        self._log_segments = LogSegments.of(segs, next_offset)
        if self.offsets_changed is not None:
            self.offsets_changed(self)
        self._notify_published()

    # --- publish listeners (readers waiting for new data: the consumer's wake-up) -----------------

    #: called as ``listener(log)`` after every publish of the log end offset (appends, rolls,
    #: truncations, retention), under the log's lock: a listener must be cheap and must not block
    _publish_listeners: Tuple[Callable[[Log], None], ...] = ()
    #: whether ``partition.metadata`` is known to be on disk (the load listed it, or the topic's
    #: ID was written): the manager then reads or writes it without a stat first
    partition_metadata_listed: bool = False
    #: called with the log after its end, recovery point or start offset may have moved (the
    #: manager's offset checkpoints then rewrite only the logs that changed)
    offsets_changed: Optional[Callable[[Log], None]] = None

    def add_publish_listener(self, listener: Callable[[Log], None]) -> None:
        with self._lock:
            self._publish_listeners = self._publish_listeners + (listener,)

    def remove_publish_listener(self, listener: Callable[[Log], None]) -> None:
        with self._lock:
            self._publish_listeners = tuple(x for x in self._publish_listeners if x != listener)

    def _notify_published(self) -> None:
        for listener in self._publish_listeners:
            listener(self)

    # --- offsets and segments --------------------------------------------------------------------

    @property
    def segments(self) -> Tuple[LogSegment, ...]:
        """An immutable snapshot of the segments, oldest first."""
        return self._log_segments.segments

    @property
    def active_segment(self) -> LogSegment:
        return self._log_segments.segments[-1]

    @property
    def active_descriptor_open(self) -> bool:
        """Whether the active segment's ``.log`` descriptor is open now (an append opens no file;
        evicted by the process's bound, or not opened since a load handed it over, it is opened
        by the next use). Read without the lock: what it was a moment ago."""
        return self._log_segments.segments[-1].log.fd >= 0

    @property
    def log_end_offset(self) -> int:
        return self._log_segments.end.message_offset

    @property
    def log_end_offset_metadata(self) -> LogOffsetMetadata:
        return self._log_segments.end

    @property
    def high_watermark(self) -> int:
        """Single-replica embedded log: the high watermark is the log end offset."""
        return self.log_end_offset

    @property
    def last_stable_offset(self) -> int:
        """min(first unstable offset, HW) (spec §4.2); the HW when no producer state is tracked."""
        return self.fetch_offset_snapshot()[2]

    def fetch_offset_snapshot(self) -> tuple[int, int, int]:
        """(log start offset, high watermark, last stable offset) read together, as a fetch
        answers them (Kafka's ``fetchOffsetSnapshot``)."""
        hw = self._log_segments.end.message_offset
        psm = self.producer_state_manager
        if psm is not None:
            v = psm.first_unstable_offset()
            if v is not None and v < hw:
                return self.log_start_offset, hw, v
        return self.log_start_offset, hw, hw

    @property
    def size(self) -> int:
        return sum(s.size for s in self.segments)

    @property
    def dir_name(self) -> str:
        return os.path.basename(self.dir)

    def floor_segment(self, offset: int) -> Optional[LogSegment]:
        segs, bases, _ = self._log_segments
        i = bisect_right(bases, offset) - 1
        return segs[i] if i >= 0 else None

    def segments_in_range(self, from_offset: int, to_offset: int) -> List[LogSegment]:
        """Segments holding offsets in [from, to), including the floor segment of ``from``."""
        segs, bases, _ = self._log_segments
        i = max(bisect_right(bases, from_offset) - 1, 0)
        j = bisect_right(bases, to_offset - 1) if to_offset > from_offset else i
        return list(segs[i:max(j, i)])

    # --- append ----------------------------------------------------------------------------------

    def current_leader_epoch(self) -> int:
        """The partition's leader epoch as this node leads it: the latest of its
        ``leader-epoch-checkpoint`` (a directory Kafka wrote may be past 0), else 0 (a new
        partition's first epoch in Kafka)."""
        cache = self.leader_epoch_cache
        latest = cache.latest_epoch() if cache is not None else None
        return latest if latest is not None and latest > 0 else 0

    def append(self, records: Buffer, *, assign_offsets: bool = True,
               leader_epoch: Optional[int] = None, origin: Optional[str] = None) -> AppendInfo:
        """Append a buffer of one or more whole batches (any magic).

        With ``assign_offsets`` (Kafka's appendAsLeader) every batch is validated (size, CRC,
        ``max.message.bytes``, v2 record count == lastOffsetDelta + 1, no control batches, no
        LogAppendTime from producers) and given consecutive offsets from the log end offset, in place
        (a ``bytearray`` argument is modified; other buffers are copied once). ``message.timestamp.type
        = LogAppendTime`` rewrites the batch max timestamp. Without it (follower semantics) offsets are
        kept and must start at >= the log end offset and increase.
        A trailing partial batch is ignored (spec §4.1 step 7). The whole buffer lands in one segment
        unless it is larger than ``segment.bytes``; then it is split at batch boundaries.

        Producer state (spec §4.1 step 4, §4.2): ``origin`` is ``"client"`` (default with
        ``assign_offsets``: epoch, sequence and transaction checks, raising
        :class:`~kafkalog.log.producer_state.OutOfOrderSequenceError`,
        :class:`~kafkalog.log.producer_state.InvalidProducerEpochError`,
        :class:`~kafkalog.log.producer_state.InvalidTxnStateError`; an exact duplicate of one of a
        producer's last 5 batches is not appended and its original offsets are returned with
        ``duplicate=True``), ``"coordinator"`` (may write transaction markers) or
        ``"replication"`` (default without ``assign_offsets``: no sequence checks).
        """
        if isinstance(records, bytearray):
            buf = records
        else:
            buf = bytearray(records)
        started = perf_counter()
        if assign_offsets and self._fast_append and origin is None:
            info = self._append_one_v2(buf, leader_epoch)
            if info is not None:
                LOG_STATS.appended(info, started)
                return info
        with self._lock:
            self._check_open()
            try:
                info = self._append_locked(buf, assign_offsets, leader_epoch, origin)
            except NeedsConversion:
                from kafkalog.log._encode import convert_legacy_wrappers
                info = self._append_locked(bytearray(convert_legacy_wrappers(buf)), assign_offsets,
                                           leader_epoch, origin)
        LOG_STATS.appended(info, started)
        return info

    def _append_one_v2(self, buf: bytearray, leader_epoch: Optional[int] = None) -> Optional[AppendInfo]:
        """Fast path of :meth:`append` for the common leader case: ``buf`` is exactly one valid v2
        data batch, without a producer or its producer's next non-transactional batch in sequence
        (:meth:`~kafkalog.log.producer_state.ProducerStateManager.is_next_in_sequence`: no
        scratch copy of the producer state to check it), its leader epoch (``leader_epoch`` stamped
        in, as Kafka's leader does, else the batch's own) already the cache's latest, and the
        active segment takes it without a roll. Same checks, bytes, indexes, producer state and result as
        :meth:`_append_locked`; returns None when the general path must run (including whenever
        that path would raise)."""
        facts = one_v2_data_batch(buf, self.max_message_bytes)
        if facts is None:
            return None
        lod, mts, pid, ple = facts
        if leader_epoch is not None:
            ple = leader_epoch
        cache = self.leader_epoch_cache
        if ple >= 0 and cache is not None:
            latest = cache.latest_epoch()
            if latest is None or ple > latest:
                return None             # a new epoch: the general path records it
        if leader_epoch is not None:
            _INT32.pack_into(buf, 12, leader_epoch)     # outside the CRC, as the general path does
        psm = self.producer_state_manager if pid != -1 else None
        if psm is not None and buf[_ATTRIBUTE_FLAGS] & TRANSACTIONAL_FLAG_MASK:
            return None
        n = len(buf)
        lock = self._lock
        lock.acquire()          # (cheaper than ``with`` on this per-call path)
        try:
            if self._closed:
                return None
            if psm is not None and not psm.is_next_in_sequence(
                    pid, *_EPOCH_SEQUENCE.unpack_from(buf, PRODUCER_EPOCH_OFFSET)):
                return None
            segs, bases, end = self._log_segments
            seg = segs[-1]
            first = end.message_offset
            last = first + lod
            _pack_q(buf, 0, first)
            if not seg.try_append_one(buf, n, last, mts, self.segment_bytes, self.max_segment_ms):
                return None
            self._log_segments = _new_log_segments(
                LogSegments, (segs, bases, LogOffsetMetadata(last + 1, seg.base_offset, seg.log.size)))
            if self.offsets_changed is not None:
                self.offsets_changed(self)
            if self._publish_listeners:
                self._notify_published()
            if psm is not None:
                self._update_producer_state(psm, ((0, buf),), ORIGIN_CLIENT)
            if last + 1 - self.recovery_point >= self.flush_messages:
                self.flush(last + 1)
            if mts > -1:
                return AppendInfo(first, last, mts, last, -1, self.log_start_offset, n, lod + 1, 1)
            return AppendInfo(first, last, -1, -1, -1, self.log_start_offset, n, lod + 1, 1)
        finally:
            lock.release()

    def append_file(self, path: str, *, move: bool = False, verify_crc: bool = True) -> AppendInfo:
        """Append the whole batches of the file ``path`` exactly as :meth:`append` appends a buffer
        holding its bytes (leader semantics: same validation and CRC checks, offsets assigned,
        same segment rolls, indexes and result), without reading the file into Python memory.
        A trailing partial batch is ignored, as by :meth:`append`: compare ``valid_bytes`` of the
        result with the file size to detect one. Used for bulk loads from staged files (Spark).

        Copy (default): the file is mapped copy-on-write (``MAP_PRIVATE``): validation reads it in
        place, the base-offset rewrites copy only the pages holding batch headers, and each segment
        write is a ``pwrite`` straight from the mapping (one kernel copy). ``path`` is not modified.

        ``move=True``: the file itself becomes a new segment when it can (nothing but whole
        batches, at most ``segment.bytes``, offsets within a segment's range): the offsets are
        assigned by rewriting each batch's ``baseOffset`` in the file (8 bytes, outside the CRC),
        the file is ``fdatasync``-ed, the log rolls at the log end offset and the file is renamed
        over the new segment's ``.log``; its indexes are built from the validation pass. No data is
        copied and nothing is written twice. Otherwise it is copied as above. Either way ``path``
        belongs to the log afterwards: it may be gone or modified. It must be on the log's file
        system. :meth:`flush` makes the result durable, as after any append.

        ``verify_crc=False`` trusts the batches' payload checksums (CRC-32C of v2 batches, CRC-32 of
        v0/v1 messages): every other check of :meth:`append` still runs on every batch header
        (sizes, magic, record counts, attributes, timestamps, producer state), the file must hold
        whole batches and nothing else (a partial batch at the end raises
        :class:`~kafkalog.errors.CorruptRecordError`: without the checksums, a damaged length
        field could otherwise pass for a torn tail), and with ``move`` the file is mapped for random
        access, so only the pages holding batch headers are read. It is
        meant for files whose batches were built by kafkalog itself and whose checksums were
        computed from the very bytes written (the Spark commit's staging files, written out and
        dropped from the page cache by their task: checking them again would read every byte back
        from disk). Readers, ``kafkalog verify`` and recovery check the checksums as always."""
        flags = os.O_RDWR if move else os.O_RDONLY
        try:
            fd = os.open(path, flags)
        except OSError as e:
            raise KafkalogIOError(f"cannot open file: {e.strerror}", file=path) from e
        try:
            size = os.fstat(fd).st_size
            if size == 0:
                return AppendInfo(first_offset=-1, last_offset=-1, log_start_offset=self.log_start_offset)
            if move:
                # offsets are assigned straight into the file's pages
                m = mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
            else:
                # (no MAP_POPULATE: on a writable private mapping it would copy every page)
                m = mmap.mmap(fd, size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
            if hasattr(m, "madvise"):
                # a trusted move reads the batch headers only; anything else reads every byte
                m.madvise(mmap.MADV_RANDOM if move and not verify_crc else mmap.MADV_SEQUENTIAL)
            try:
                with self._lock:
                    self._check_open()
                    try:
                        return self._append_locked(m, True, None, adopt=(path, fd) if move else None,
                                                   verify_crc=verify_crc)
                    except NeedsConversion:
                        from kafkalog.log._encode import convert_legacy_wrappers
                        with memoryview(m) as mv:
                            converted = bytearray(convert_legacy_wrappers(mv))
                        return self._append_locked(converted, True, None)
            except KafkalogError as err:
                if err.file is None:  # a validation error: name the file (positions are the file's)
                    raise err.at(path) from None
                raise
            finally:
                try:
                    m.close()
                except BufferError:  # a view is still alive (an exception traceback): the GC unmaps it
                    pass
        finally:
            os.close(fd)

    def append_as_follower(self, records: Buffer) -> AppendInfo:
        """Append batches keeping their offsets (Kafka's appendAsFollower); the first offset must be
        >= the log end offset."""
        return self.append(records, assign_offsets=False)

    def append_records(self, records: Iterable[Any], *, compression: str = "none", timestamp: Optional[int] = None,
                       producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
                       transactional: bool = False) -> AppendInfo:
        """Encode Python records into one v2 batch and append it.

        ``records`` is a sequence of values (bytes), ``(key, value)`` pairs, ``(key, value,
        headers)`` or ``(key, value, headers, timestamp)`` tuples, or objects with
        ``key``/``value``/``headers``/``timestamp`` attributes."""
        from kafkalog.log._encode import encode_v2_batch
        now = self.clock() if timestamp is None else timestamp
        data = encode_v2_batch(records, compression=compression, default_timestamp=now,
                               producer_id=producer_id, producer_epoch=producer_epoch,
                               base_sequence=base_sequence, transactional=transactional)
        return self.append(data)

    def _check_open(self) -> None:
        if self._closed:
            raise KafkalogError("log is closed", file=self.dir)

    def _append_locked(self, buf: Any, assign: bool, leader_epoch: Optional[int],
                       origin: Optional[str] = None, adopt: Optional[Tuple[str, int]] = None,
                       verify_crc: bool = True) -> AppendInfo:
        """The append steps (Kafka's ``UnifiedLog.append``): validate (per-batch facts, offsets
        assigned in place), producer-state checks, leader epochs, write, producer-state update,
        the ``flush.messages`` policy."""
        if origin is None:
            origin = ORIGIN_CLIENT if assign else ORIGIN_REPLICATION
        rules = self._rules
        now = self.clock() if rules.needs_clock else -1
        v = validate_append(buf, self._log_segments.end.message_offset, rules, now, assign=assign,
                            origin=origin, leader_epoch=leader_epoch, verify_crc=verify_crc)
        if not v.positions:
            return AppendInfo(first_offset=-1, last_offset=-1, log_start_offset=self.log_start_offset)
        # producer state (spec §4.1 step 4.4): checks before anything is written; a retried batch
        psm = self.producer_state_manager
        pbatches: List[Tuple[int, memoryview]] = []
        if psm is not None:
            pbatches = v.producer_batches(buf)
            dup = psm.check_append(pbatches, origin) if pbatches else None
            if dup is not None:
                return AppendInfo(first_offset=dup.first_offset, last_offset=dup.last_offset,
                                  max_timestamp=dup.timestamp, log_start_offset=self.log_start_offset,
                                  valid_bytes=v.valid_bytes, duplicate=True)
        self._record_leader_epochs(v)
        self._write_validated(buf, v, adopt)
        if psm is not None:
            self._update_producer_state(psm, pbatches, origin)
        if self.log_end_offset - self.recovery_point >= self.flush_messages:
            self.flush(self.log_end_offset)
        return AppendInfo(first_offset=v.first_offset, last_offset=v.last_offset,
                          max_timestamp=v.max_timestamp, offset_of_max_timestamp=v.offset_of_max_timestamp,
                          log_append_time=v.log_append_time, log_start_offset=self.log_start_offset,
                          valid_bytes=v.valid_bytes, num_records=v.num_records,
                          num_batches=v.num_batches)

    def _record_leader_epochs(self, v: ValidatedAppend) -> None:
        """Leader-epoch cache: one assign per epoch change; legacy data clears it (spec §4.1 step
        4.1)."""
        cache = self.leader_epoch_cache
        if cache is None:
            return
        if v.legacy:
            cache.clear_and_flush()
            return
        latest = cache.latest_epoch()
        for e, start in v.epochs:
            if latest is None or e > latest:
                cache.assign(e, start)
                latest = e

    def _write_validated(self, buf: Any, v: ValidatedAppend, adopt: Optional[Tuple[str, int]]) -> None:
        """Write the validated batches: the moved file becomes a segment (``adopt``), else chunks
        of at most ``segment.bytes`` each go to the (maybe rolled) active segment."""
        positions, lasts, mtss, valid = v.positions, v.last_offsets, v.max_timestamps, v.valid_bytes
        start_i = 0
        count_b = len(positions)
        if (adopt is not None and valid == len(buf) and valid <= self.segment_bytes
                and v.last_offset - v.first_offset <= INT32_MAX):
            self._adopt_segment_file(adopt, valid, positions, lasts, mtss, v.first_offset)
            return
        if adopt is not None:
            buf.madvise(mmap.MADV_SEQUENTIAL)   # not moved after all: copied, every byte read
        with memoryview(buf) as mvb:
            while start_i < count_b:
                j = self._chunk_end(positions, valid, start_i)
                chunk_start = positions[start_i]
                chunk_end = positions[j] if j < count_b else valid
                c_pos = positions[start_i:j]
                if chunk_start:
                    c_pos = [p - chunk_start for p in c_pos]
                first_in_chunk = v.first_offset if start_i == 0 else lasts[start_i - 1] + 1
                segment = self._maybe_roll(chunk_end - chunk_start, max(mtss[start_i:j]),
                                           first_in_chunk, lasts[j - 1])
                segment.append_batches(mvb[chunk_start:chunk_end], c_pos, lasts[start_i:j],
                                       mtss[start_i:j])
                self._publish(self._log_segments.segments, lasts[j - 1] + 1)
                start_i = j

    def _chunk_end(self, positions: List[int], valid: int, start_i: int) -> int:
        """The end (exclusive batch index) of the chunk of at most ``segment.bytes`` starting at
        batch ``start_i``; a single batch larger than a segment cannot be stored."""
        count_b = len(positions)
        chunk_start = positions[start_i]
        j = start_i
        while j < count_b:
            nxt = positions[j + 1] if j + 1 < count_b else valid
            if nxt - chunk_start > self.segment_bytes:
                break
            j += 1
        if j == start_i:
            size1 = (positions[j + 1] if j + 1 < count_b else valid) - chunk_start
            raise RecordBatchTooLargeError(
                f"Message batch size is {size1} bytes in append to partition {self.dir_name} "
                f"which exceeds the maximum configured segment size of {self.segment_bytes}.",
                position=chunk_start)
        return j

    def _adopt_segment_file(self, adopt: Tuple[str, int], size: int, positions: List[int],
                            lasts: List[int], mtss: List[int], first_offset: int) -> None:
        """:meth:`append_file` ``move=True``: the validated file (offsets already assigned in its
        pages) becomes the new active segment. Order: the file's data is made durable, then the
        log rolls at ``first_offset`` (the log end offset) and the file replaces the new segment's
        empty ``.log`` by a rename; :meth:`flush` fsyncs the directory, as for any roll."""
        path, fd = adopt
        with wrap_os_errors(path, "fdatasync"):
            os.fdatasync(fd)
        segment = self.roll(first_offset)
        segment.adopt_log_file(path, size, positions, lasts, mtss)
        self._publish(self._log_segments.segments, lasts[-1] + 1)

    def _update_producer_state(self, psm: ProducerStateLike, pbatches: Optional[Iterable[Tuple[int, Any]]],
                               origin: str) -> None:
        """Apply the appended producer batches (already checked); an aborted transaction's entry
        goes to the ``.txnindex`` of the segment holding its marker (spec §4.1 step 4.6)."""
        leo = self.log_end_offset
        for _pos, batch in pbatches or ():
            for a in psm.update_from_batch(batch, origin):
                seg = self.floor_segment(a.last_offset)
                assert seg is not None, "a marker is always inside the log"
                seg.txn_index.append(a)
        psm.update_map_end_offset(leo)
        psm.on_high_watermark_updated(leo)     # single replica: HW = LEO

    # --- roll ------------------------------------------------------------------------------------

    def _maybe_roll(self, messages_size: int, max_ts: int, first_offset: int, last_offset: int) -> LogSegment:
        segment = self.active_segment
        now = self.clock()
        params = RollParams(self.max_segment_ms, self.segment_bytes, max_ts, last_offset,
                            messages_size, now)
        if segment.should_roll(params):
            roll_offset = first_offset if first_offset >= 0 else last_offset - INT32_MAX
            return self.roll(roll_offset)
        return segment

    def roll(self, expected_next_offset: Optional[int] = None) -> LogSegment:
        """Roll to a new active segment at ``max(expected_next_offset, LEO)`` (spec §4.3). The old
        active segment is made inactive (final time-index entry, trims) and flushed."""
        with self._lock:
            self._check_open()
            segs, bases, end = self._log_segments
            leo = end.message_offset
            new_base = max(expected_next_offset or 0, leo)
            active = segs[-1]
            if new_base in bases:
                if active.base_offset == new_base and active.size == 0:
                    # replace the empty active segment
                    self._remove_and_delete([active], async_delete=True)
                    segs = segs[:-1]
                else:
                    raise KafkalogError(f"Trying to roll a new log segment with start offset {new_base} "
                                        f"=max(provided offset = {expected_next_offset}, LEO = {leo}) "
                                        f"while it already exists", file=self.dir)
            elif new_base < active.base_offset:
                raise KafkalogError(f"Trying to roll a new log segment with start offset {new_base} lower "
                                    f"than start offset of the active segment {active.base_offset}",
                                    file=self.dir)
            for suffix in (".log", ".index", ".timeindex", ".txnindex"):
                p = os.path.join(self.dir, segment_file_name(new_base, suffix))
                if os.path.exists(p):
                    os.unlink(p)
            if segs and segs[-1] is active:
                active.on_become_inactive_segment()
            new = LogSegment.open(self.dir, new_base, self.config, clock=self.clock)
            segs = segs + (new,)
            self._publish(segs, leo)
            self._take_producer_snapshot(new_base)
            if self.scheduler is not None:
                self.scheduler(0, lambda: self.flush(new_base))
            else:
                self.flush(new_base)
            return new

    def _take_producer_snapshot(self, offset: int) -> None:
        psm = self.producer_state_manager
        if psm is None:
            return
        psm.update_map_end_offset(offset)
        psm.take_snapshot()

    # --- flush -----------------------------------------------------------------------------------

    def flush(self, up_to: Optional[int] = None, include_active: bool = False) -> None:
        """fsync every segment overlapping ``[recovery_point, up_to)`` (``.log``, index mmaps,
        ``.txnindex``), fsync the directory when a new segment was involved, and move the recovery
        point forward to ``up_to`` (default: the log end offset)."""
        with self._lock:
            if self._closed:
                return
            leo = self.log_end_offset
            if up_to is None:
                up_to = leo
            up_to = min(up_to, leo)
            if up_to <= self.recovery_point and not include_active:
                return
            started = perf_counter()
            segs, bases, _ = self._log_segments
            i = max(bisect_right(bases, self.recovery_point) - 1, 0)
            new_segment = False
            flushed = False
            # (a close of a log flushed to its end: the active segment's records are below the
            # recovery point, on disk; it is flushed when something was written to it since it was
            # opened. A partition left idle since a clean load costs no fsync, of its .log nor of
            # its directory: 200,000 of them at 100,000 partitions)
            durable = up_to <= self.recovery_point
            for s in segs[i:]:
                if s.base_offset >= up_to and not (include_active and s is segs[-1]):
                    break
                if durable and not s.written_since_open():
                    continue
                s.flush()
                flushed = True
                if s.base_offset >= self.recovery_point:
                    new_segment = True
            if self.leader_epoch_cache is not None:     # (written unsynced: a new partition's epoch)
                self.leader_epoch_cache.flush_if_unsynced()
            if new_segment or (include_active and flushed):
                fsync_dir(self.dir)   # raises: a failed fsync fails the flush
            if up_to > self.recovery_point:
                self.recovery_point = up_to
                if self.offsets_changed is not None:
                    self.offsets_changed(self)
            self.last_flush_time = self.clock()
            LOG_STATS.flushed(started)

    def flush_if_due(self, now: Optional[int] = None) -> bool:
        """The ``flush.ms`` policy (Kafka's log flusher task); returns True when it flushed."""
        now = self.clock() if now is None else now
        if self.flush_ms < INT64_MAX and now - self.last_flush_time >= self.flush_ms:
            self.flush()
            return True
        return False

    # --- read ------------------------------------------------------------------------------------

    def read(self, start_offset: int, max_bytes: int, *, min_one_message: bool = True,
             max_offset: Optional[int] = None, isolation: IsolationArg = READ_UNCOMMITTED) -> FetchDataInfo:
        """Read raw batches from ``start_offset`` (spec §4.6). ``max_offset`` bounds the read;
        default is the log end offset (= the high watermark of this single-replica log).
        ``isolation="read_committed"`` bounds it by the last stable offset and lists the aborted
        transactions overlapping the result in ``aborted_transactions``. Raises
        :class:`OffsetOutOfRangeError` below the log start offset or above the log end offset."""
        if (isolation is not IsolationLevel.READ_UNCOMMITTED and isolation != READ_UNCOMMITTED
                and IsolationLevel.of(isolation) is IsolationLevel.READ_COMMITTED):
            lso = self.last_stable_offset
            info = self.read(start_offset, max_bytes, min_one_message=min_one_message,
                             max_offset=lso if max_offset is None else min(max_offset, lso))
            info.aborted_transactions = self._aborted_for_fetch(start_offset, info)
            return info
        segs, bases, end = self._log_segments
        leo = end.message_offset
        if start_offset < self.log_start_offset or start_offset > leo:
            raise OffsetOutOfRangeError(
                f"Received request for offset {start_offset} for partition {self.dir_name}, but we only "
                f"have log segments in the range {self.log_start_offset} to {leo}.", file=self.dir)
        bound = leo if max_offset is None else min(max_offset, leo)
        if start_offset >= bound:
            return FetchDataInfo(LogOffsetMetadata(start_offset, end.segment_base_offset,
                                                   end.relative_position_in_segment))
        if bound == leo:
            bound_base, bound_pos = end.segment_base_offset, end.relative_position_in_segment
        else:
            bseg = segs[bisect_right(bases, bound) - 1]
            h = bseg.translate_offset(bound)
            bound_base = bseg.base_offset
            bound_pos = h.position if h is not None else bseg.size
        i = bisect_right(bases, start_offset) - 1
        if i < 0:
            raise OffsetOutOfRangeError(f"no segment holds offset {start_offset}", file=self.dir)
        while i < len(segs):
            seg = segs[i]
            if seg.base_offset > bound_base:
                break
            max_pos = bound_pos if seg.base_offset == bound_base else seg.size
            got = seg.read(start_offset, max_bytes, max_pos, min_one_message)
            if got is not None:
                position = got.fetch_offset_metadata.relative_position_in_segment
                if seg.base_offset == bound_base and position >= bound_pos:
                    break
                return got
            i += 1
        return FetchDataInfo(LogOffsetMetadata(start_offset, end.segment_base_offset,
                                               end.relative_position_in_segment))

    def _aborted_for_fetch(self, start_offset: int, info: FetchDataInfo) -> List[AbortedTxn]:
        """Spec §4.6 step 7: the upper bound is the first offset-index entry at or after the end
        of the returned slice, else the next segment's base offset, else the log end offset."""
        if not info.records.size:
            return []
        segs, bases, end = self._log_segments
        meta = info.fetch_offset_metadata
        i = bisect_right(bases, meta.segment_base_offset) - 1
        seg = segs[i]
        upper = seg.offset_index.fetch_upper_bound_offset(meta.relative_position_in_segment,
                                                          info.records.size)
        if upper is not None:
            bound = upper.offset
        elif i + 1 < len(segs):
            bound = segs[i + 1].base_offset
        else:
            bound = end.message_offset
        return self.collect_aborted_transactions(start_offset, bound)

    def collect_aborted_transactions(self, start_offset: int, upper_bound_offset: int) -> List[AbortedTxn]:
        """The aborted transactions (:class:`~kafkalog.log.index.txn_index.AbortedTxn`) overlapping
        ``[start_offset, upper_bound_offset)``, from the ``.txnindex`` of the segment holding
        ``start_offset`` and the following ones until a search is complete (spec §2.4)."""
        return self.reader(start_offset).collect_aborted_transactions(start_offset,
                                                                      upper_bound_offset)

    def reader(self, from_offset: Optional[int] = None) -> PartitionReader:
        """The log as the read pipeline sees it at this moment
        (:class:`~kafkalog.log.read.reader.PartitionReader`): its segments from the one holding
        ``from_offset`` up to the log end, its log start offset and its last stable offset (from
        the producer state)."""
        view = self._log_segments
        segs, bases, end = view
        first = 0 if from_offset is None else max(bisect_right(bases, from_offset) - 1, 0)
        live = [LiveSegment(segs[k], view.readable_size(k)) for k in range(first, len(segs))]
        leo = end.message_offset
        lso = leo
        psm = self.producer_state_manager
        if psm is not None:
            unstable = psm.first_unstable_offset()
            if unstable is not None and unstable < leo:
                lso = unstable
        return PartitionReader(live, self.log_start_offset, leo, last_stable_offset=lso,
                               contiguous=not self.compact, name=self.dir)

    def send_to(self, sock_or_fd: int | socket.socket, start_offset: int, max_bytes: int) -> int:
        """Zero-copy: ``os.sendfile`` the slice :meth:`read` would return to a socket or fd; returns
        the bytes sent."""
        fd = sock_or_fd if isinstance(sock_or_fd, int) else sock_or_fd.fileno()
        info = self.read(start_offset, max_bytes)
        return info.records.send_to(fd)

    def batches(self, from_offset: Optional[int] = None,
                isolation: IsolationArg = "read_uncommitted") -> Iterator[ViewBatch]:
        """CRC-checked batch views from ``from_offset`` (default: the log start offset) to the
        log end offset, control batches included, their offsets checked (a never-compacted log
        has no gaps; no log goes backwards). With ``isolation="read_committed"``: only below the
        last stable offset, without control batches and without the batches of aborted
        transactions (Kafka's consumer rules)."""
        iso = IsolationLevel.of(isolation)
        reader = self.reader(from_offset)
        start = reader.log_start_offset if from_offset is None else from_offset
        if iso is IsolationLevel.READ_COMMITTED:
            return reader.visible_batches(start, None, iso, check_offsets=True)
        return reader.batches(start, reader.log_end_offset, check_offsets=True)

    def records(self, from_offset: Optional[int] = None,
                isolation: IsolationArg = "read_uncommitted") -> Iterator[Any]:
        """Decoded records with offset >= ``from_offset``, across segments, skipping control
        records; ``isolation="read_committed"`` as in :meth:`batches`."""
        start = self.log_start_offset if from_offset is None else from_offset
        for batch in self.batches(from_offset, isolation):
            if batch.is_control:
                continue
            for rec in batch.records():
                if rec.offset >= start:
                    yield rec

    # --- offsets by timestamp --------------------------------------------------------------------

    def offset_for_timestamp(self, timestamp: int) -> Optional[TimestampAndOffset]:
        """Kafka's fetchOffsetByTimestamp (spec §4.7): -2 earliest, -1 latest, -3 max timestamp,
        -4 earliest local, -5 latest tiered, or the first record with timestamp >= ``timestamp``."""
        segs, bases, end = self._log_segments
        if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            return TimestampAndOffset(-1, self.log_start_offset, self._earliest_epoch())
        if timestamp == LATEST_TIMESTAMP:
            return TimestampAndOffset(-1, end.message_offset, self._latest_epoch())
        if timestamp == LATEST_TIERED_TIMESTAMP:
            return TimestampAndOffset(-1, -1, None)
        if timestamp == MAX_TIMESTAMP:
            best = None
            for s in segs:
                if s.size and (best is None or s.max_timestamp_so_far > best.max_timestamp_so_far):
                    best = s
            if best is None or best.max_timestamp_so_far < 0:
                return None
            target = best.max_timestamp_so_far
            return best.find_offset_by_timestamp(target, max(best.base_offset, self.log_start_offset))
        return self.reader(self.log_start_offset).offset_for_timestamp(timestamp)

    def _earliest_epoch(self) -> Optional[int]:
        c = self.leader_epoch_cache
        if c is None:
            return None
        e = c.earliest_entry()
        if e is None:
            return None
        return e.epoch if e.start_offset <= self.log_start_offset else None

    def _latest_epoch(self) -> Optional[int]:
        return None if self.leader_epoch_cache is None else self.leader_epoch_cache.latest_epoch()

    # --- truncation ------------------------------------------------------------------------------

    def truncate_to(self, target_offset: int) -> bool:
        """Remove every offset >= ``target_offset`` (spec §4.9). Returns True when data changed."""
        if target_offset < 0:
            raise KafkalogError(f"Cannot truncate partition {self.dir_name} to a negative offset "
                                f"({target_offset}).", file=self.dir)
        with self._lock:
            self._check_open()
            segs, bases, end = self._log_segments
            if target_offset >= end.message_offset:
                self._truncate_epochs_from_end(end.message_offset)
                return False
            self._abort_cleaning()
            if segs[0].base_offset > target_offset:
                self._truncate_fully(target_offset)
            else:
                self._truncate_segments(target_offset)
            self._notify_truncated()
            return True

    def _truncate_segments(self, target_offset: int) -> None:
        segs, _bases, _end = self._log_segments
        keep = tuple(s for s in segs if s.base_offset <= target_offset)
        drop = [s for s in segs if s.base_offset > target_offset]
        self._publish(keep, target_offset)
        if drop:
            self._remove_and_delete(drop, async_delete=True)
        keep[-1].truncate_to(target_offset)
        self._publish(keep, target_offset)
        self.recovery_point = min(self.recovery_point, target_offset)
        self.log_start_offset = min(self.log_start_offset, target_offset)
        if self.offsets_changed is not None:
            self.offsets_changed(self)
        self._truncate_epochs_from_end(target_offset)
        self._reset_producer_state(target_offset, truncate=True)

    def _abort_cleaning(self) -> None:
        """Kafka's LogManager aborts (and pauses) the cleaning of a partition before truncating it:
        a cleaning in progress must not swap in segments built from the removed data."""
        hook = self.cleaner_abort_hook
        if hook is not None:
            hook(self)

    def _notify_truncated(self) -> None:
        """After a truncation: ``on_truncate`` callbacks get ``(log, active_segment_base_offset)``
        (the cleaner checkpoint is lowered to that offset when above it, spec §4.9, §4.11)."""
        base = self.active_segment.base_offset
        for fn in list(self.on_truncate):
            fn(self, base)

    def truncate_fully_and_start_at(self, new_offset: int) -> None:
        """Delete every segment and start an empty log at ``new_offset``."""
        with self._lock:
            self._check_open()
            self._abort_cleaning()
            self._truncate_fully(new_offset)
            self._notify_truncated()

    def _truncate_fully(self, new_offset: int) -> None:
        segs, _, _ = self._log_segments
        self._remove_and_delete(list(segs), async_delete=True)
        new = LogSegment.open(self.dir, new_offset, self.config, clock=self.clock)
        self._publish((new,), new_offset)
        self.log_start_offset = new_offset
        self.recovery_point = new_offset
        if self.offsets_changed is not None:
            self.offsets_changed(self)
        c = self.leader_epoch_cache
        if c is not None:
            c.clear()
        self._reset_producer_state(new_offset, truncate=False)

    def _truncate_epochs_from_end(self, offset: int) -> None:
        c = self.leader_epoch_cache
        if c is not None:
            c.truncate_from_end(offset)

    def _reset_producer_state(self, offset: int, truncate: bool) -> None:
        psm = self.producer_state_manager
        if psm is None:
            return
        if truncate:
            rebuild_producer_state(psm, self.segments, self.log_start_offset, offset, self.clock())
        else:
            psm.truncate_fully_and_start_at(offset)

    def remove_expired_producers(self, now_ms: int) -> List[int]:
        """Forget the producers whose last batch is older than ``producer.id.expiration.ms`` and
        that have no open transaction (Kafka's ``UnifiedLog.removeExpiredProducers``, run by the
        ``PeriodicProducerExpirationCheck`` task); returns their ids."""
        psm = self.producer_state_manager
        if psm is None:
            return []
        with self._lock:
            return psm.remove_expired_producers(now_ms)

    def last_records_of_active_producers(self) -> Dict[int, Tuple[int, int]]:
        """Producer id -> (offset of its last data record or -1, its epoch), read under the
        log's lock (Kafka's ``UnifiedLog.lastRecordsOfActiveProducers``, for the cleaner's
        thread): an append in another thread adds producers to the map, expiry takes some out."""
        psm = self.producer_state_manager
        if psm is None:
            return {}
        with self._lock:
            return {pid: (e.last_data_offset, e.producer_epoch) for pid, e in psm.producers.items()}

    # --- deletion (used by retention) ------------------------------------------------------------

    def delete_segments(self, segments: Sequence[LogSegment], reason: str = "") -> int:
        """Remove leading ``segments`` from the log: rename their files to ``.deleted`` and delete them
        after ``file.delete.delay.ms`` via the scheduler (immediately when there is none). When every
        segment is to be deleted, roll first so an empty active segment remains. The log start
        offset moves up to the new first segment. Returns the number deleted."""
        with self._lock:
            self._check_open()
            segs, _, _ = self._log_segments
            targets = [s for s in segments if s in segs]
            if not targets:
                return 0
            if len(targets) == len(segs):
                self.roll()
                segs, _, _ = self._log_segments
            ids = {id(s) for s in targets}
            keep = tuple(s for s in segs if id(s) not in ids)
            # Raise the log start offset before readers can see the shorter segment list, so a
            # reader never finds the first remaining batch above the log start offset it read.
            self.maybe_increment_log_start_offset(keep[0].base_offset, reason)
            self._publish(keep, self.log_end_offset)
            self._remove_and_delete(targets, async_delete=True)
            return len(targets)

    def maybe_increment_log_start_offset(self, new_log_start_offset: int, reason: str = "") -> bool:
        """Raise the log start offset (never beyond the high watermark); returns True if it moved."""
        with self._lock:
            if new_log_start_offset > self.high_watermark:
                raise OffsetOutOfRangeError(f"Cannot increment the log start offset to "
                                            f"{new_log_start_offset} of partition {self.dir_name} since "
                                            f"it is larger than the high watermark {self.high_watermark}",
                                            file=self.dir)
            if new_log_start_offset > self.log_start_offset:
                self.log_start_offset = new_log_start_offset
                if self.offsets_changed is not None:
                    self.offsets_changed(self)
                c = self.leader_epoch_cache
                if c is not None:
                    c.truncate_from_start(new_log_start_offset)
                if self.producer_state_manager is not None:
                    self.producer_state_manager.on_log_start_offset_incremented(new_log_start_offset)
                return True
            return False

    def _remove_and_delete(self, segments: Sequence[LogSegment], async_delete: bool) -> None:
        """Rename the segments' files (and their producer snapshots) to ``.deleted`` and delete
        them after ``file.delete.delay.ms`` (spec §4.10)."""
        psm = self.producer_state_manager
        snapshots = []
        for s in segments:
            s.change_file_suffixes("", DELETED_FILE_SUFFIX)
            if psm is not None:
                p = psm.remove_and_mark_snapshot_for_deletion(s.base_offset)
                if p is not None:
                    snapshots.append(p)
        delete_segments_later(self.scheduler if async_delete else None, self.file_delete_delay_ms,
                              segments, snapshots)

    # --- segment replacement (cleaner, split) -----------------------------------------------------

    def replace_segments(self, new_segments: Sequence[LogSegment], old_segments: Sequence[LogSegment],
                         *, abort_if_missing: bool = False,
                         step_hook: Optional[Callable[[str], None]] = None,
                         check: Optional[Callable[[], None]] = None) -> bool:
        """Swap ``new_segments`` (files suffixed ``.cleaned`` or ``.swap``, flushed) in for
        ``old_segments`` with the crash-safe protocol of spec §4.11 (Kafka's
        ``LocalLog.replaceSegments``): ``.cleaned`` -> ``.swap`` highest base offset first; publish
        the new segment list; old files (and their producer snapshots) -> ``.deleted``; ``.swap``
        suffix removed; the directory fsynced after each phase. The old files are deleted after
        ``file.delete.delay.ms`` (readers holding an older segment list keep reading them).

        Old segments no longer in the log are skipped, as by Kafka, unless ``abort_if_missing``:
        then the new segments are deleted, nothing changes and False is returned. ``step_hook`` is
        called with ``swap-partial``, ``swap-renamed``, ``deleted-partial``, ``old-deleted``,
        ``unswap-partial``, ``swapped`` (crash tests).

        ``check`` runs under the writer lock before anything changes (the cleaner's abort check:
        truncation marks a cleaning aborted under this lock too); when it raises, the new segments
        are deleted and the exception propagates."""
        from kafkalog.log.fsutil import fsync_dir
        hook = step_hook if step_hook is not None else (lambda step: None)
        new_desc = sorted(new_segments, key=lambda s: s.base_offset, reverse=True)
        with self._lock:
            if check is not None:
                try:
                    check()
                except BaseException:
                    for s in new_segments:
                        s.delete()
                    raise
            segs = self._log_segments.segments
            present = {id(s) for s in segs}
            if self._closed or (abort_if_missing and any(id(s) not in present for s in old_segments)):
                for s in new_segments:
                    s.delete()
                return False
            old = [s for s in old_segments if id(s) in present]
            for i, s in enumerate(new_desc):
                if not s.has_suffix(SWAP_FILE_SUFFIX):
                    s.change_file_suffixes(CLEANED_FILE_SUFFIX, SWAP_FILE_SUFFIX)
                if i == 0 and len(new_desc) > 1:
                    hook("swap-partial")
            fsync_dir(self.dir)
            hook("swap-renamed")
            old_ids = {id(s) for s in old}
            keep = [s for s in segs if id(s) not in old_ids]
            self._publish(tuple(sorted(keep + list(new_segments), key=lambda s: s.base_offset)),
                          self.log_end_offset)
            new_bases = {s.base_offset for s in new_segments}
            psm = self.producer_state_manager
            snapshots = []
            for i, s in enumerate(old):
                s.change_file_suffixes("", DELETED_FILE_SUFFIX)
                if psm is not None and s.base_offset not in new_bases:
                    p = psm.remove_and_mark_snapshot_for_deletion(s.base_offset)
                    if p is not None:
                        snapshots.append(p)
                if i == 0:
                    hook("deleted-partial")
            fsync_dir(self.dir)
            hook("old-deleted")
            for i, s in enumerate(new_desc):
                s.change_file_suffixes(SWAP_FILE_SUFFIX, "")
                if i == 0:
                    hook("unswap-partial")
            fsync_dir(self.dir)
            hook("swapped")
        delete_segments_later(self.scheduler, self.file_delete_delay_ms, old, snapshots)
        return True

    # --- lifecycle -------------------------------------------------------------------------------

    def close(self) -> None:
        """Clean close: the active segment's final time-index entry, flush everything, producer
        snapshot at the log end offset (and those :meth:`open` left unwritten), final time-index
        entries and trims for every segment, the stray producer snapshots :meth:`open` left
        deleted. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self.active_segment.append_final_time_index_entry()     # (forced by the flush)
            self.flush(include_active=True)
            self._take_producer_snapshot(self.log_end_offset)
            psm = self.producer_state_manager
            if psm is not None and psm.unwritten:     # (a load's, not yet written by the background)
                psm.write_unwritten(sync=True)
            for s in self.segments:
                s.close()
            self._closed = True
            if psm is not None and psm.stray_files:
                try:
                    psm.delete_stray_files()
                except KafkalogError:
                    pass                # (still strays: the next load finds them again)

    def finish_snapshot_files(self) -> int:
        """Write the producer snapshots that :meth:`open` with ``snapshot_files_later`` took and
        left unwritten, then delete the stray ones it found (one taken again at the same offset
        since is kept; :meth:`close` does what is left, and a closed log nothing: its directory
        may be another's by now); returns how many files it wrote or deleted."""
        psm = self.producer_state_manager
        if psm is None or not (psm.unwritten or psm.stray_files):
            return 0
        with self._lock:           # (serialized with the snapshots' writes)
            if self._closed:
                return 0
            return psm.write_unwritten() + psm.delete_stray_files()

    @property
    def closed(self) -> bool:
        """True once :meth:`close` has run (appends and other writes then raise)."""
        return self._closed

    def __enter__(self) -> Log:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"Log(dir={self.dir}, logStartOffset={self.log_start_offset}, "
                f"logEndOffset={self.log_end_offset}, segments={len(self.segments)})")
