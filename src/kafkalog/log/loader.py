"""Opening a partition directory (Kafka's ``LogLoader``; spec §4.8, §2.8, §3.2).

Steps: temp-file pass (``.deleted`` removed, ``.cleaned`` removed, ``.swap`` files at or above the
smallest ``.cleaned`` offset discarded), swap completion, orphan index deletion, per-segment open,
recovery after an unclean shutdown from the segment holding the recovery point, LEO below the log
start offset -> all segments deleted, an empty segment when none is left, active indexes resized.

Where kafkalog does better than Kafka (each is reported in the :class:`RecoveryReport`):

(a) the load returns a JSON-able :class:`RecoveryReport` listing every truncation (file, byte
    position, bytes), deleted segment and file, and rebuilt index;
(b) a corrupt batch followed by further valid batches (mid-segment corruption rather than a torn
    tail) is reported as ``corruption`` with file and position and ``validDataFollows: true``.
    Recovery still truncates there, as Kafka does, but never silently;
(c) the indexes of segments that are *not* recovered (below the recovery point, or every segment
    after a clean shutdown) get a cheap O(1) validation - length a multiple of the entry size,
    last entry inside the ``.log`` and after the previous one, no zero-filled tail (KAFKA-10207) -
    and are rebuilt when wrong. Kafka trusts them blindly since 2.3.

After a clean shutdown no data is scanned: the open costs a few syscalls per segment.
"""

from __future__ import annotations

import os
import struct
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any, Callable, ContextManager, Dict, List, Mapping, Optional, Set, Tuple

from kafkalog.errors import KafkalogError, LogDirError
from kafkalog.log.config import LogConfig, as_log_config
from kafkalog.log.file_records import BatchHeader, segment_next_offset
from kafkalog.log.fsutil import READ_FLAGS, forget_preread, fsync_dir, preread_file, preread_length, preread_names
from kafkalog.log.naming import (
    CLEANED_FILE_SUFFIX,
    DELETED_FILE_SUFFIX,
    INDEX_FILE_SUFFIX,
    INDEX_SUFFIXES,
    LOG_FILE_SUFFIX,
    PARTITION_METADATA_FILE,
    SEGMENT_SUFFIXES,
    SWAP_FILE_SUFFIX,
    TIME_INDEX_FILE_SUFFIX,
    TXN_INDEX_FILE_SUFFIX,
)
from kafkalog.log.producer_state import ProducerStateManager, rebuild_producer_state
from kafkalog.log.protocols import LeaderEpochCacheLike, ProducerStateLike, Scheduler
from kafkalog.log.segment import LogSegment, _now_ms, delete_segments_later, segment_file_name
from kafkalog.record.constants import INT32_MAX

LOG = LOG_FILE_SUFFIX
DELETED = DELETED_FILE_SUFFIX
CLEANED = CLEANED_FILE_SUFFIX
SWAP = SWAP_FILE_SUFFIX
#: the suffixes of the files the load's first step removes or completes
_TEMP_SUFFIXES = (DELETED, CLEANED, SWAP)

#: one entry of a :class:`RecoveryReport` list, as it goes into the JSON report
ReportEntry = Dict[str, object]


@dataclass
class RecoveryReport:
    """What opening a partition directory found and did. ``to_json()`` uses Kafka-style camelCase."""

    dir: str
    had_clean_shutdown: bool
    recovery_point: int = 0
    log_end_offset: int = 0
    recovered_segments: List[ReportEntry] = field(default_factory=list)
    truncations: List[ReportEntry] = field(default_factory=list)
    corruptions: List[ReportEntry] = field(default_factory=list)
    deleted_segments: List[ReportEntry] = field(default_factory=list)
    deleted_files: List[str] = field(default_factory=list)
    rebuilt_indexes: List[ReportEntry] = field(default_factory=list)
    completed_swaps: List[str] = field(default_factory=list)
    split_segments: List[ReportEntry] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        """True when nothing was truncated, deleted for damage, or rebuilt."""
        return not (self.truncations or self.corruptions or self.rebuilt_indexes)

    def to_json(self) -> Dict[str, object]:
        return {"dir": self.dir, "hadCleanShutdown": self.had_clean_shutdown,
                "recoveryPoint": self.recovery_point, "logEndOffset": self.log_end_offset,
                "recoveredSegments": self.recovered_segments, "truncations": self.truncations,
                "corruptions": self.corruptions, "deletedSegments": self.deleted_segments,
                "deletedFiles": self.deleted_files, "rebuiltIndexes": self.rebuilt_indexes,
                "completedSwaps": self.completed_swaps, "splitSegments": self.split_segments}


@dataclass
class LoadedLog:
    """The loader's result, handed to :class:`kafkalog.log.log.Log`."""

    segments: List[LogSegment]
    log_start_offset: int
    recovery_point: int
    next_offset: int
    report: RecoveryReport
    #: whether the load's listing of the directory held ``partition.metadata`` (a file the load
    #: neither writes nor removes): the topic's ID is then known to be on disk without a stat
    partition_metadata_listed: bool = False


def _offset_of(name: str) -> Optional[int]:
    prefix = name.split(".", 1)[0]
    if not prefix.isdigit() or not prefix.isascii():
        return None
    return int(prefix)


def _unlink(path: str, report: RecoveryReport) -> None:
    forget_preread()
    try:
        os.unlink(path)
        report.deleted_files.append(path)
    except FileNotFoundError:
        pass


def load_log(dir_path: str | os.PathLike[str], config: LogConfig | Mapping[str, Any] | None = None,
             *, log_start_offset: int = 0, recovery_point: int = 0,
             had_clean_shutdown: bool = False, clock: Callable[[], int] = _now_ms,
             producer_state_manager: Optional[ProducerStateLike] = None,
             leader_epoch_cache: Optional[LeaderEpochCacheLike] = None,
             scheduler: Optional[Scheduler] = None,
             snapshot_files_later: bool = False) -> LoadedLog:
    """Load (and if needed recover) the partition directory ``dir_path`` (spec §4.8). Segments
    the load deletes are renamed ``.deleted`` and removed after ``file.delete.delay.ms`` through
    ``scheduler`` (``scheduler(delay_seconds, fn)``), or at once when there is none.
    ``snapshot_files_later``: stray producer snapshots are left in the producer state's
    ``stray_files`` for the caller to delete (:meth:`ProducerStateManager.delete_stray_files`),
    and the snapshots the load takes (a recovery's, at each partition's log end after a crash) in
    its ``unwritten`` for the caller to write (:meth:`ProducerStateManager.write_unwritten`)."""
    return LogLoader(dir_path, config, log_start_offset=log_start_offset,
                     recovery_point=recovery_point, had_clean_shutdown=had_clean_shutdown,
                     clock=clock, producer_state_manager=producer_state_manager,
                     leader_epoch_cache=leader_epoch_cache, scheduler=scheduler,
                     snapshot_files_later=snapshot_files_later).load()


class LogLoader:
    """Kafka's ``LogLoader``: the steps of :meth:`load` are methods named after Kafka's
    (``remove_temp_files_and_collect_swap_files``, ``complete_swap_operations``,
    ``load_segment_files``, ``recover_log``, ...), sharing the load's state here."""

    def __init__(self, dir_path: str | os.PathLike[str],
                 config: LogConfig | Mapping[str, Any] | None = None, *, log_start_offset: int = 0,
                 recovery_point: int = 0,
                 had_clean_shutdown: bool = False, clock: Callable[[], int] = _now_ms,
                 producer_state_manager: Optional[ProducerStateLike] = None,
                 leader_epoch_cache: Optional[LeaderEpochCacheLike] = None,
                 scheduler: Optional[Scheduler] = None, snapshot_files_later: bool = False) -> None:
        self.dir = os.fspath(dir_path)
        self.config: LogConfig = as_log_config(config)
        self.log_start_offset = log_start_offset
        self.recovery_point = recovery_point
        self.had_clean_shutdown = had_clean_shutdown
        self.clock = clock
        self.psm = producer_state_manager
        self.cache = leader_epoch_cache
        self.scheduler = scheduler
        self.snapshot_files_later = snapshot_files_later
        self.report = RecoveryReport(self.dir, had_clean_shutdown)
        self.doomed: List[LogSegment] = []       # renamed .deleted, removed after the delay
        self.opened: List[LogSegment] = []       # every segment this load opens: released if it fails
        self.logs: Dict[int, str] = {}           # base offset -> .log name
        self.segments: List[LogSegment] = []
        self.recovered_ids: Set[int] = set()
        self.split_ids: Set[int] = set()         # made by an overflow split: offset gaps are real
        self._tmp_psm: Optional[ProducerStateManager] = None
        self.contiguous = not self.config.compact
        #: the directory's file names (sorted) as last listed: valid while :meth:`_dir_changed` is false
        self.names: List[str] = []
        #: :attr:`names` as a set, for :meth:`_index_problem`'s look-ups
        self._listed: Set[str] = set()
        #: segment (id) -> its next offset, read by :meth:`_overflows`, then as its recovery (if
        #: any) found it: the log end offset and the gap checks read no segment again
        self._next_offsets: Dict[int, int] = {}

    def load(self) -> LoadedLog:
        """Run the steps; a load that fails (a typed error: damage it must not repair, a full
        disk...) leaves no file open behind it, and writes nothing more while closing."""
        swap_files = self.remove_temp_files_and_collect_swap_files()
        self.complete_swap_operations(swap_files)
        if self.psm is not None and self.snapshot_files_later:
            self.psm.defer_writes = True
        try:
            with self._cache_writes_deferred():
                self.load_segment_files()
                next_offset = self.recover_log()
                return self.finish(next_offset)
        except BaseException:
            for seg in self.opened:
                seg.close_handlers()
            raise
        finally:
            if self.psm is not None:
                self.psm.defer_writes = False
            for seg in self.opened:                 # a read-ahead's bytes: the load's only
                seg.log.forget_tail()

    def _cache_writes_deferred(self) -> ContextManager[None]:
        """The leader-epoch cache's writes held back for the load (written once at its end when
        the file would be wrong: :meth:`LeaderEpochFileCache.deferred_writes`)."""
        return self.cache.deferred_writes() if self.cache is not None else nullcontext()

    # --- steps ---------------------------------------------------------------------------------

    def remove_temp_files_and_collect_swap_files(self) -> List[str]:
        """``.deleted`` files removed, ``.cleaned`` files removed, ``.swap`` files at or above the
        smallest ``.cleaned`` offset discarded (an incomplete split); returns the other swaps."""
        names = preread_names(self.dir)        # (a read-ahead's listing, when it made one)
        if names is None:
            try:
                names = os.listdir(self.dir)
            except OSError as e:
                raise LogDirError(f"cannot list partition directory: {e.strerror}", file=self.dir) from e
        swap_files: List[str] = []
        cleaned_files: List[str] = []
        min_cleaned = None
        names.sort()
        self.names = names
        for name in names:
            if not name.endswith(_TEMP_SUFFIXES):        # (most names: one test)
                continue
            path = os.path.join(self.dir, name)
            if name.endswith(DELETED):
                if not name.endswith(".checkpoint.deleted"):
                    _unlink(path, self.report)
            elif name.endswith(CLEANED):
                off = _offset_of(name)
                if off is not None and (min_cleaned is None or off < min_cleaned):
                    min_cleaned = off
                cleaned_files.append(path)
            else:
                swap_files.append(path)
        for path in list(swap_files):
            off = _offset_of(os.path.basename(path))
            if min_cleaned is not None and off is not None and off >= min_cleaned:
                _unlink(path, self.report)           # incomplete split: discard
                swap_files.remove(path)
        for path in cleaned_files:
            _unlink(path, self.report)
        return swap_files

    def complete_swap_operations(self, swap_files: List[str]) -> None:
        """Finish an interrupted swap: the files the ``.swap`` segments replace are deleted (every
        offset they cover), then the swaps are renamed into place and the directory fsynced."""
        swap_logs = [p for p in swap_files if p.endswith(LOG + SWAP)]
        if not swap_logs:
            return
        forget_preread()
        bases = [_offset_of(os.path.basename(p)) for p in swap_logs]
        min_base = min(b for b in bases if b is not None)
        max_next = max(self._swap_next_offset(b) for b in bases if b is not None)
        swap_bases = set(bases)
        for name in sorted(os.listdir(self.dir)):
            if name.endswith(SWAP) or not name.endswith(SEGMENT_SUFFIXES):
                continue
            off = _offset_of(name)
            # an empty .swap segment (next offset = its base) still replaces the old files at its
            # base offset: none of them, e.g. a .txnindex, may survive the swap
            if off is not None and (min_base <= off < max_next or off in swap_bases):
                _unlink(os.path.join(self.dir, name), self.report)
        for p in swap_files:
            if os.path.exists(p):
                os.rename(p, p[: -len(SWAP)])
                self.report.completed_swaps.append(p)
        fsync_dir(self.dir)

    def _names_moved(self) -> bool:
        """Whether this load deleted, renamed or split files since :attr:`names` was listed."""
        r = self.report
        return bool(r.deleted_files or r.completed_swaps or self.split_ids or self.doomed)

    def _dir_changed(self) -> bool:
        """Whether this load deleted, renamed or wrote files since :attr:`names` was listed
        (then the directory is listed again)."""
        return self._names_moved() or bool(self.report.recovered_segments)

    def _snapshot_names(self) -> Optional[List[str]]:
        """The directory's file names for the producer snapshots: :attr:`names` with the
        snapshots the recovery's manager wrote (it deletes none), None (list again) when the load
        deleted, renamed or split anything."""
        if self._names_moved():
            return None
        if self._tmp_psm is None:
            return self.names
        return self.names + [os.path.basename(p) for p in self._tmp_psm.snapshots.values()]

    def _swap_next_offset(self, base: int) -> int:
        seg = LogSegment(self.dir, base, file_already_exists=True, file_suffix=SWAP,
                         index_interval_bytes=self.config.index_interval_bytes,
                         max_index_size=self.config.segment_index_bytes, clock=self.clock)
        try:
            return _read_next_offset_by_scan(seg)
        finally:
            seg.close_handlers()

    def load_segment_files(self) -> None:
        """Orphan index files deleted; every segment opened, split when its offsets overflow, its
        indexes checked (rebuilt by a recovery when missing or wrong); the log ends at a segment
        that such a recovery truncated."""
        # the first step's listing, when it and the swaps changed nothing
        names = self.names if not self._dir_changed() else sorted(os.listdir(self.dir))
        self.names = names
        self._listed = set(names)
        for name in names:
            if name.endswith(LOG):
                off = _offset_of(name)
                if off is not None:
                    self.logs[off] = name
        for name in names:
            if name.endswith(INDEX_SUFFIXES):
                off = _offset_of(name)
                if off is not None and off not in self.logs:
                    _unlink(os.path.join(self.dir, name), self.report)       # orphaned index file
        for base in sorted(self.logs):
            seg = self._open_segment(base, file_already_exists=True, preallocate=False)
            if self._overflows(seg, base):
                self._split_overflowed(seg)
                continue
            reason = self._index_problem(seg, base)
            if reason is not None:
                self._recover(seg, reason, self.segments)
                self.recovered_ids.add(id(seg))
            seg.index_files_exist = True        # found, made empty or rebuilt: a flush loads none
            self.segments.append(seg)
        # a segment truncated by the index-triggered recovery above ends the log there, as after
        # an unclean shutdown (recovery keeps the valid prefix; never a silent gap of offsets)
        for i, seg in enumerate(self.segments):
            r = seg.last_recovery
            if id(seg) in self.recovered_ids and r is not None and r.truncated_bytes > 0:
                self._delete_after(i, f"follows truncated segment {seg.log_path}")
                break

    def recover_log(self) -> int:
        """After an unclean shutdown: recover every segment from the one holding the recovery
        point; the first truncation (or, for a never-compacted log, an offset gap between
        segments) ends the log. Returns the next offset (log end offset)."""
        segments = self.segments
        if not self.had_clean_shutdown and segments:
            floor = _floor_base(self.logs, self.recovery_point)
            for i, seg in enumerate(segments):
                if seg.base_offset < floor:
                    continue
                if id(seg) in self.recovered_ids:
                    truncated = seg.last_recovery.truncated_bytes if seg.last_recovery else 0
                else:
                    truncated = self._recover(seg, "unclean shutdown", segments[:i],
                                              active=i == len(segments) - 1)
                gap = self._gap_after(i) if truncated == 0 else None
                if truncated > 0 or gap is not None:
                    self._delete_after(i, f"follows truncated segment {seg.log_path}")
                    break
        if not self.segments:
            return self.log_start_offset
        last = self.segments[-1]
        known = self._next_offsets.get(id(last))
        return known if known is not None else last.read_next_offset()

    def finish(self, next_offset: int) -> LoadedLog:
        """A log end offset below the log start offset deletes every segment; an empty log gets
        one segment; the recovery point, leader epochs (spec §4.8 step 6), log start offset
        (step 7) and producer state (step 8); deleted segments scheduled for removal."""
        if self.segments and next_offset < self.log_start_offset:
            for seg in self.segments:
                self._delete_segment(seg, f"log end offset {next_offset} is below the log start "
                                          f"offset {self.log_start_offset}")
            self.segments = []
            if self.cache is not None:
                self.cache.clear()
        if not self.segments:
            self.segments = [self._open_segment(self.log_start_offset)]
            next_offset = self.log_start_offset
        segments = self.segments
        recovery_point = next_offset if self.had_clean_shutdown else min(self.recovery_point, next_offset)
        if segments[-1].index_files_exist:        # grown before their first entry (idle: never)
            segments[-1].resize_indexes_before_first_entry(self.config.segment_index_bytes)
        else:                                     # made here: its files made now, empty, as Kafka's
            segments[-1].create_indexes_before_first_entry(self.config.segment_index_bytes)
        if self.cache is not None:
            self.cache.truncate_from_end(next_offset)
            self.cache.truncate_from_start(self.log_start_offset)
        new_log_start = max(self.log_start_offset, segments[0].base_offset)
        if self.psm is not None:
            tmp = self._tmp_psm
            if tmp is not None and tmp.unwritten:
                if self._names_moved():             # (the directory is listed again: written now)
                    tmp.write_unwritten()
                else:                               # (the load's manager reads them from there)
                    self.psm.unwritten.update(tmp.unwritten)
            # listed again when recovery may have written some
            self.psm.load_snapshots(self._snapshot_names())
            if tmp is not None and not self._names_moved():
                self.psm.know_snapshot_bytes(tmp.known_bytes)
            self.psm.remove_stray_snapshots([s.base_offset for s in segments],
                                            later=self.snapshot_files_later)
            rebuild_producer_state(self.psm, segments, new_log_start, next_offset, self.clock(),
                                   reload_from_clean_shutdown=self.had_clean_shutdown)
            self.psm.know_snapshot_bytes(None)
        if self.doomed:
            fsync_dir(self.dir)
            delete_segments_later(self.scheduler, self.config.file_delete_delay_ms, self.doomed)
        self.report.recovery_point = recovery_point
        self.report.log_end_offset = next_offset
        return LoadedLog(segments, new_log_start, recovery_point, next_offset, self.report,
                         PARTITION_METADATA_FILE in self._listed)

    # --- helpers of the steps ------------------------------------------------------------------

    def _open_segment(self, base: int, *, file_already_exists: bool = False,
                      preallocate: Optional[bool] = None) -> LogSegment:
        seg = LogSegment.open(self.dir, base, self.config, clock=self.clock,
                              file_already_exists=file_already_exists, preallocate=preallocate)
        self.opened.append(seg)
        return seg

    def _delete_segment(self, seg: LogSegment, reason: str) -> None:
        forget_preread()
        self.report.deleted_segments.append({"file": seg.log_path, "baseOffset": seg.base_offset,
                                             "sizeInBytes": seg.size, "reason": reason})
        seg.change_file_suffixes("", DELETED)
        self.doomed.append(seg)

    def _delete_after(self, i: int, reason: str) -> None:
        for later in self.segments[i + 1:]:
            self._delete_segment(later, reason)
        del self.segments[i + 1:]

    def _recover(self, seg: LogSegment, why: str, before: List[LogSegment], active: bool = False) -> int:
        """:func:`_recover_segment` of ``seg`` (the segments ``before`` it rebuild the producer
        state it starts from); its next offset as the recovery found it noted. Returns the bytes
        truncated. The lengths of its index files as the read-ahead found them (the directory
        as this load began, unchanged until the first change forgets them) are handed on: an
        index reset to the length its file already has sets none (after a crash, two truncates
        of every partition recovered, ~30 us each here)."""
        lengths = (preread_length(seg.offset_index_path), preread_length(seg.time_index_path))
        forget_preread()
        truncated, self._next_offsets[id(seg)] = _recover_segment(
            seg, self.report, why, self._recovery_psm(before, seg), self.cache, self.contiguous,
            active=active, index_lengths=lengths)
        return truncated

    def _overflows(self, seg: LogSegment, base: int) -> bool:
        """Offsets overflow a segment only where compaction left gaps (KAFKA-6264: legacy data,
        or a compacted log), and still stay below the next segment; otherwise a damaged baseOffset
        (outside the CRC) looks like an overflow: recovery truncates it."""
        try:
            seg_next = seg.read_next_offset() if seg.size else base
            self._next_offsets[id(seg)] = seg_next
            if seg_next - 1 - base <= INT32_MAX:
                return False
            later = [b for b in self.logs if b > base]
            legacy = seg.size > 16 and seg.log.pread(16, 1)[0] < 2    # magic of the first batch
            return (legacy or not self.contiguous) and (not later or seg_next <= min(later))
        except (KafkalogError, OSError):
            return False        # damaged data or index: the recovery deals with it

    def _split_overflowed(self, seg: LogSegment) -> None:
        """Legacy data whose offsets overflow the segment (KAFKA-6264): split, spec §4.12."""
        forget_preread()
        parts = split_overflowed_segment(seg, self.config, self.clock)
        self.opened.extend(parts)
        self._delete_segment(seg, f"split into {len(parts)} segments (offset overflow)")
        fsync_dir(self.dir)
        _finish_split(parts)
        self.report.split_segments.append({"file": seg.log_path, "into": [p.base_offset for p in parts]})
        for p in parts:
            self.logs[p.base_offset] = segment_file_name(p.base_offset, LOG)
            self.split_ids.add(id(p))
        self.segments.extend(parts)

    def _index_problem(self, seg: LogSegment, base: int) -> Optional[str]:
        """Why the segment's indexes must be rebuilt (missing offset index, corrupt transaction
        index, or a failed sanity check of a segment that is not recovered anyway), or None."""
        listed = self._listed if not self._dir_changed() else None
        stem = segment_file_name(base, "")

        def exists(suffix: str) -> bool:         # by the listing while it holds: no stat per file
            name = stem + suffix + seg.file_suffix
            return name in listed if listed is not None else os.path.exists(os.path.join(seg.dir, name))

        if not exists(INDEX_FILE_SUFFIX):
            return "offset index file missing"
        if not exists(TIME_INDEX_FILE_SUFFIX):
            fd = os.open(seg.time_index_path, os.O_RDWR | os.O_CREAT, 0o644)
            os.close(fd)                                      # recreated empty (spec §2.8)
        try:
            if exists(TXN_INDEX_FILE_SUFFIX):
                seg.txn_index.sanity_check()
            else:
                seg.note_txn_index_absent()
        except KafkalogError as e:
            return f"corrupt transaction index: {e.message}"
        if self.had_clean_shutdown or base < _floor_base(self.logs, self.recovery_point):
            return _validate_indexes(seg)
        return None

    def _gap_after(self, i: int) -> Optional[str]:
        """A never-compacted log has no offset gaps: a segment ending before the next one starts
        is a whole-batch cut or a damaged baseOffset at its end (fields outside the CRC)."""
        segments = self.segments
        seg = segments[i]
        if not (self.contiguous and i + 1 < len(segments) and id(seg) not in self.split_ids):
            return None
        nxt = self._next_offsets.get(id(seg))
        if nxt is None:
            nxt = seg.read_next_offset()
        if not seg.size or nxt == segments[i + 1].base_offset:
            return None
        gap = f"segment ends at offset {nxt} but the next segment starts at {segments[i + 1].base_offset}"
        entry = {"file": seg.log_path, "position": seg.size, "bytes": 0, "kind": "corruption",
                 "reason": gap}
        self.report.truncations.append(entry)
        self.report.corruptions.append(dict(entry, validDataFollows=True, nextValidPosition=None))
        return gap

    def _recovery_psm(self, before: List[LogSegment], seg: LogSegment) -> Optional[ProducerStateManager]:
        """Kafka recovers a segment with a producer-state manager of its own, rebuilt up to the
        segment's base offset (so aborted transactions starting earlier are indexed right)."""
        if self.psm is None:
            return None
        if self._tmp_psm is None:
            self._tmp_psm = ProducerStateManager(self.dir, self.psm.producer_id_expiration_ms,
                                                 list_snapshots=False, keep_files=True)
            self._tmp_psm.defer_writes = self.snapshot_files_later
            self._tmp_psm.load_snapshots(self._snapshot_names())
        psm = self._tmp_psm
        if psm.map_end_offset != seg.base_offset or not before:
            rebuild_producer_state(psm, before, self.log_start_offset, seg.base_offset, self.clock())
        return psm


def split_overflowed_segment(seg: LogSegment, config: LogConfig, clock: Callable[[], int] = _now_ms,
                             chunk_bytes: int = 1 << 20) -> List[LogSegment]:
    """Kafka's ``LocalLog.splitOverflowedSegment`` (spec §4.12): copy the batches of ``seg``
    unchanged into new segments ``<first offset>.*.cleaned`` (a new one whenever a batch's last
    offset does not fit the current one), make them inactive, flush them, give them the old mtime,
    then swap them in (``.cleaned`` -> ``.swap`` -> final names; the directory fsynced after each
    step). The caller renames ``seg`` to ``.deleted`` after the returned segments are in place
    (between the ``.swap`` and the final renames a crash is completed by the loader's swap pass)."""
    from kafkalog.log.segment import _legacy_first_offset
    d = seg.dir
    parts: List[LogSegment] = []
    cur: Optional[LogSegment] = None
    pending: List[BatchHeader] = []          # (header) of the batches waiting to be appended to ``cur``

    def flush_pending() -> None:
        if not pending or cur is None:      # (nothing is pending before the first part is open)
            return
        start = pending[0].position
        data = seg.log.pread(start, pending[-1].position + pending[-1].size - start)
        cur.append_batches(data, [h.position - start for h in pending], [h.last_offset for h in pending],
                           [h.max_timestamp for h in pending])
        pending.clear()

    try:
        for h in seg.log.iter_headers(0):
            first = h.base_offset
            if h.magic < 2 and h.attributes & 0x07:
                first = _legacy_first_offset(seg.log.read_entry(h.position, h.size), h.last_offset)
            if cur is None or not cur.can_convert_to_relative_offset(h.last_offset):
                flush_pending()
                cur = LogSegment.open(d, first, config, file_suffix=CLEANED_FILE_SUFFIX,
                                      preallocate=False, clock=clock)
                parts.append(cur)
            pending.append(h)
            if h.position + h.size - pending[0].position >= chunk_bytes:
                flush_pending()
        flush_pending()
        total = sum(p.size for p in parts)
        if total != seg.size:
            raise KafkalogError(f"Inconsistent segment sizes after split: before {seg.size}, "
                                f"after {total}", file=seg.log_path)
        mtime = seg.last_modified_ms()
        for p in parts:
            p.on_become_inactive_segment()
            p.flush()
            p.set_last_modified_ms(mtime)
        for p in sorted(parts, key=lambda s: s.base_offset, reverse=True):
            p.change_file_suffixes(CLEANED_FILE_SUFFIX, SWAP_FILE_SUFFIX)
        fsync_dir(d)
    except BaseException:
        # nothing of a failed split stays (the segment being split is untouched until the caller
        # renames it): its parts are closed and deleted, whatever suffix they have reached
        for p in parts:
            p.delete()
        raise
    return parts


def _finish_split(parts: List[LogSegment]) -> None:
    for p in sorted(parts, key=lambda s: s.base_offset, reverse=True):
        p.change_file_suffixes(SWAP_FILE_SUFFIX, "")
    if parts:
        fsync_dir(parts[0].dir)


def _floor_base(logs: Mapping[int, str], recovery_point: int) -> int:
    """Base offset of the segment that contains the recovery point (0 if none)."""
    best = None
    for base in logs:
        if base <= recovery_point and (best is None or base > best):
            best = base
    return best if best is not None else (min(logs) if logs else 0)


def _recover_segment(seg: LogSegment, report: RecoveryReport, why: str,
                     psm: Optional[ProducerStateLike], lec: Optional[LeaderEpochCacheLike],
                     contiguous: bool = False, active: bool = False,
                     index_lengths: Tuple[Optional[int], Optional[int]] = (None, None)) -> Tuple[int, int]:
    """Recover ``seg``; returns the bytes truncated and the segment's next offset after it (as
    the recovery found it)."""
    truncated = seg.recover(psm, lec, contiguous=contiguous, active=active, index_lengths=index_lengths)
    r = seg.last_recovery
    nxt = r.next_offset if r is not None and r.next_offset is not None else seg.read_next_offset()
    if psm is not None:
        psm.update_map_end_offset(nxt)
        # not fsynced (nor its directory): the state is the log's, a lost or torn snapshot is
        # found by its CRC and rebuilt from the log, as the snapshots rebuild_producer_state takes;
        # after a crash, two fsyncs per partition made the restart wait on the disk 10,000 times;
        # in a load of many partitions not even written (``defer_writes``): the file made by the
        # log manager's background once the broker answers (a create each: 36-700 us here)
        psm.take_snapshot(sync=False)
    info: dict[str, object] = r.to_json() if r is not None else {"file": seg.log_path}
    info["why"] = why
    report.recovered_segments.append(info)
    report.rebuilt_indexes.append({"file": seg.offset_index_path, "reason": why}) if why != "unclean shutdown" else None
    if r is not None and r.kind != "clean":
        entry: ReportEntry = {"file": r.file, "position": r.position, "bytes": r.truncated_bytes, "kind": r.kind,
                 "reason": r.reason}
        report.truncations.append(entry)
        if r.kind == "corruption":
            report.corruptions.append(dict(entry, validDataFollows=r.valid_data_follows,
                                           nextValidPosition=r.next_valid_position))
    return truncated, nxt


#: what :func:`index_tails` read of an index file: its length and last entry as stored
IndexTail = Tuple[int, Optional[Tuple[int, int]]]


def _validate_indexes(seg: LogSegment) -> Optional[str]:
    """Cheap O(1) validation of a trusted segment's ``.index`` / ``.timeindex`` files
    (:func:`index_tails`); when both pass, each index is seeded with the length and last entry read
    (:meth:`~kafkalog.log.index._mmap_index.AbstractIndex.seed`: a first append writing no index
    entry then opens neither file)."""
    problem, tails = index_tails(seg.size, seg.offset_index_path, seg.time_index_path)
    if problem is None:
        for index, tail in ((seg.offset_index, tails[0]), (seg.time_index, tails[1])):
            if tail is not None:
                index.seed(*tail)
    return problem


def index_tails(size: int, offset_index_path: str, time_index_path: str
                ) -> Tuple[Optional[str], Tuple[Optional[IndexTail], Optional[IndexTail]]]:
    """Cheap O(1) validation of a segment's ``.index`` / ``.timeindex`` files (the ``.log`` of
    ``size`` bytes): why they need a rebuild, or None; and what was read of each file present."""
    tails: List[Optional[IndexTail]] = []
    for path, esz in ((offset_index_path, 8), (time_index_path, 12)):
        # a time index of a segment with records (its clean close wrote an entry, so it is rarely
        # empty) is read from its start; an offset index (mostly empty) is stat'ed first
        read = _length_and_tail(path, esz, head_first=esz == 12 and size > 0)
        if read is None:
            tails.append(None)
            continue
        length, tail = read
        if length % esz:
            return f"{os.path.basename(path)}: length {length} is not a multiple of {esz}", (None, None)
        if length == 0:
            tails.append((0, None))
            continue
        n = length // esz
        want = 2 * esz if n >= 2 else esz
        tail = tail[-want:]
        if len(tail) < want:                # shrunk since the stat: nothing to seed from
            tails.append(None)
            continue
        layout = ">ii" if esz == 8 else ">qi"     # (offset, position) / (timestamp, offset)
        last = struct.unpack_from(layout, tail, len(tail) - esz)
        prev = struct.unpack_from(layout, tail, 0) if n >= 2 else None
        if esz == 8:
            last_rel, last_pos = last
            if last_pos >= size or last_pos < 0 or last_rel < 0:
                return (f"{os.path.basename(path)}: last entry position {last_pos} outside the log ({size} bytes)",
                        (None, None))
            increasing = prev is None or (last_rel > prev[0] and last_pos >= prev[1])
        else:
            last_ts, last_rel = last
            if last_rel < 0 or (n >= 1 and last_ts == 0 and last_rel == 0 and n >= 2):
                return f"{os.path.basename(path)}: zero-filled tail", (None, None)
            increasing = prev is None or (last_ts > prev[0] and last_rel >= prev[1])
        if not increasing:
            return (f"{os.path.basename(path)}: entries not increasing at the end (zero-filled or garbage tail)",
                    (None, None))
        tails.append((length, (last[0], last[1])))
    return None, (tails[0], tails[1])


def _length_and_tail(path: str, esz: int, head_first: bool) -> Optional[Tuple[int, bytes]]:
    """The length of the index file ``path`` and the bytes of its last two entries (fewer when it
    holds fewer; none when its length is not whole entries), or None when it cannot be found.
    ``head_first``: an open and one read from its start, its whole when under :data:`_HEAD_READ`
    bytes (no stat); otherwise a stat, and for a file of entries an open and a read of its tail.
    Unbuffered: a buffered open and seek take twice the system calls. None of them when a
    read-ahead read the file (:func:`kafkalog.log.fsutil.preread`: its bytes end at its end)."""
    pre = preread_file(path)
    if pre is not None:
        length, end = pre
        return length, b"" if length == 0 or length % esz else end[-2 * esz:]
    if head_first:
        try:
            fd = os.open(path, READ_FLAGS)
        except OSError:
            return None
        try:
            head = os.pread(fd, _HEAD_READ, 0)
            if len(head) < _HEAD_READ:
                return len(head), head[-2 * esz:]
            length = os.fstat(fd).st_size
            return length, b"" if length % esz else os.pread(fd, 2 * esz, length - 2 * esz)
        finally:
            os.close(fd)
    try:
        length = os.stat(path).st_size
    except OSError:
        return None
    if length == 0 or length % esz:
        return length, b""
    want = min(2 * esz, length)
    fd = os.open(path, READ_FLAGS)
    try:
        return length, os.pread(fd, want, length - want)
    finally:
        os.close(fd)


#: how much of a time index :func:`_length_and_tail` reads from its start
_HEAD_READ = 4096


def _read_next_offset_by_scan(seg: LogSegment) -> int:
    """The offset after the last batch of a segment whose index is not trusted (a walk from its
    first byte)."""
    return segment_next_offset(seg.log.iter_headers, 0, seg.base_offset)
