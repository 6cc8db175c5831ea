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
from dataclasses import dataclass, field
from typing import Callable, List, Optional

from kafkalog.errors import KafkalogError, LogDirError
from kafkalog.log.file_records import INT64, INT_MAX, RECORD_BATCH_OVERHEAD
from kafkalog.log.fsutil import fsync_dir
from kafkalog.log.producer_state import ORIGIN_REPLICATION, ProducerStateManager
from kafkalog.log.segment import LogSegment, _cfg, _now_ms, segment_file_name

from kafkalog.log.naming import (CLEANED_FILE_SUFFIX as CLEANED, DELETED_FILE_SUFFIX as DELETED, INDEX_FILE_SUFFIX as INDEX, INDEX_SUFFIXES, LOG_FILE_SUFFIX as LOG, SEGMENT_SUFFIXES, SWAP_FILE_SUFFIX as SWAP, TIME_INDEX_FILE_SUFFIX as TIMEINDEX, TXN_INDEX_FILE_SUFFIX as TXNINDEX)  # noqa: E501


@dataclass
class RecoveryReport:
    """What opening a partition directory found and did. ``to_json()`` uses Kafka-style camelCase."""

    dir: str
    had_clean_shutdown: bool
    recovery_point: int = 0
    log_end_offset: int = 0
    recovered_segments: List[dict] = field(default_factory=list)
    truncations: List[dict] = field(default_factory=list)
    corruptions: List[dict] = field(default_factory=list)
    deleted_segments: List[dict] = field(default_factory=list)
    deleted_files: List[str] = field(default_factory=list)
    rebuilt_indexes: List[dict] = field(default_factory=list)
    completed_swaps: List[str] = field(default_factory=list)
    split_segments: List[dict] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        """True when nothing was truncated, deleted for damage, or rebuilt."""
        return not (self.truncations or self.corruptions or self.rebuilt_indexes)

    def to_json(self) -> dict:
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


def _offset_of(name: str) -> Optional[int]:
    prefix = name.split(".", 1)[0]
    if not prefix.isdigit() or not prefix.isascii():
        return None
    return int(prefix)


def _unlink(path: str, report: RecoveryReport) -> None:
    try:
        os.unlink(path)
        report.deleted_files.append(path)
    except FileNotFoundError:
        pass


def load_log(dir_path, config=None, *, log_start_offset: int = 0, recovery_point: int = 0,
             had_clean_shutdown: bool = False, clock: Callable[[], int] = _now_ms,
             producer_state_manager=None, leader_epoch_cache=None, scheduler=None) -> LoadedLog:
    """Load (and if needed recover) the partition directory ``dir_path`` (spec §4.8). Segments
    the load deletes are renamed ``.deleted`` and removed after ``file.delete.delay.ms`` through
    ``scheduler`` (``scheduler(delay_seconds, fn)``), or at once when there is none."""
    d = os.fspath(dir_path)
    report = RecoveryReport(d, had_clean_shutdown)
    get = _cfg(config)
    doomed: List[LogSegment] = []

    def delete_segment(seg: LogSegment, reason: str) -> None:
        report.deleted_segments.append({"file": seg.log_path, "baseOffset": seg.base_offset,
                                        "sizeInBytes": seg.size, "reason": reason})
        seg.change_file_suffixes("", DELETED)
        doomed.append(seg)
    try:
        names = os.listdir(d)
    except OSError as e:
        raise LogDirError(f"cannot list partition directory: {e.strerror}", file=d) from e

    # 1. temp-file pass
    swap_files: List[str] = []
    cleaned_files: List[str] = []
    min_cleaned = None
    for name in sorted(names):
        path = os.path.join(d, name)
        if name.endswith(DELETED) and not name.endswith(".checkpoint.deleted"):
            _unlink(path, report)
        elif name.endswith(CLEANED):
            off = _offset_of(name)
            if off is not None and (min_cleaned is None or off < min_cleaned):
                min_cleaned = off
            cleaned_files.append(path)
        elif name.endswith(SWAP):
            swap_files.append(path)
    for path in list(swap_files):
        off = _offset_of(os.path.basename(path))
        if min_cleaned is not None and off is not None and off >= min_cleaned:
            _unlink(path, report)           # incomplete split: discard
            swap_files.remove(path)
    for path in cleaned_files:
        _unlink(path, report)

    # 2. swap completion
    swap_logs = [p for p in swap_files if p.endswith(LOG + SWAP)]
    if swap_logs:
        min_base = None
        max_next = None
        swap_bases = set()
        for p in swap_logs:
            base = _offset_of(os.path.basename(p))
            seg = LogSegment(d, base, file_already_exists=True, file_suffix=SWAP,
                             index_interval_bytes=int(get("index.interval.bytes")),
                             max_index_size=int(get("segment.index.bytes")), clock=clock)
            try:
                nxt = _read_next_offset_by_scan(seg)
            finally:
                seg.close_handlers()
            min_base = base if min_base is None else min(min_base, base)
            max_next = nxt if max_next is None else max(max_next, nxt)
            swap_bases.add(base)
        for name in sorted(os.listdir(d)):
            if name.endswith(SWAP):
                continue
            if not any(name.endswith(s) for s in SEGMENT_SUFFIXES):
                continue
            off = _offset_of(name)
            # an empty .swap segment (next offset = its base) still replaces the old files at its
            # base offset: none of them, e.g. a .txnindex, may survive the swap
            if off is not None and (min_base <= off < max_next or off in swap_bases):
                _unlink(os.path.join(d, name), report)
        for p in swap_files:
            if os.path.exists(p):
                os.rename(p, p[: -len(SWAP)])
                report.completed_swaps.append(p)
        fsync_dir(d)

    # 3. segment pass
    names = sorted(os.listdir(d))
    logs = {}
    for name in names:
        off = _offset_of(name)
        if off is None:
            continue
        if name.endswith(LOG):
            logs[off] = name
    for name in names:
        off = _offset_of(name)
        if off is None:
            continue
        if any(name.endswith(s) for s in INDEX_SUFFIXES) and off not in logs:
            _unlink(os.path.join(d, name), report)           # orphaned index file
    opened: List[LogSegment] = []      # every segment this load opens: released if it fails

    def open_segment(*args, **kwargs) -> LogSegment:
        seg = LogSegment.open(*args, **kwargs)
        opened.append(seg)
        return seg
    try:
        segments: List[LogSegment] = []
        recovered_ids = set()
        tmp_psm = []
        split_ids = set()           # segments made by an overflow split: offset gaps between them are real

        def recovery_psm(before: List[LogSegment], seg: LogSegment):
            """Kafka recovers a segment with a producer-state manager of its own, rebuilt up to the
            segment's base offset (so aborted transactions starting earlier are indexed right)."""
            if producer_state_manager is None:
                return None
            if not tmp_psm:
                tmp_psm.append(ProducerStateManager(d, producer_state_manager.producer_id_expiration_ms))
            psm = tmp_psm[0]
            if psm.map_end_offset != seg.base_offset or not before:
                rebuild_producer_state(psm, before, log_start_offset, seg.base_offset, clock())
            return psm
        policy = get("cleanup.policy")
        contiguous = "compact" not in (policy if isinstance(policy, str) else ",".join(policy))
        for base in sorted(logs):
            seg = open_segment(d, base, config, file_already_exists=True, clock=clock, preallocate=False)
            try:
                seg_next = seg.read_next_offset() if seg.size else base
                later = [b for b in logs if b > base]
                # Offsets overflow a segment only where compaction left gaps (KAFKA-6264: legacy data,
                # or a compacted log), and still stay below the next segment; otherwise a damaged
                # baseOffset (outside the CRC) looks like an overflow: recovery below truncates it.
                legacy = seg.size > 16 and seg.log.pread(16, 1)[0] < 2    # magic of the first batch
                overflow = (seg_next - 1 - base > INT_MAX and (legacy or not contiguous)
                            and (not later or seg_next <= min(later)))
            except (KafkalogError, OSError):
                overflow = False        # damaged data or index: the recovery below deals with it
            if overflow:
                # legacy data whose offsets overflow the segment (KAFKA-6264): split, spec §4.12
                parts = split_overflowed_segment(seg, config, clock)
                opened.extend(parts)
                delete_segment(seg, f"split into {len(parts)} segments (offset overflow)")
                fsync_dir(d)
                _finish_split(parts)
                report.split_segments.append({"file": seg.log_path, "into": [p.base_offset for p in parts]})
                for p in parts:
                    logs[p.base_offset] = segment_file_name(p.base_offset, LOG)
                    split_ids.add(id(p))
                segments.extend(parts)
                continue
            idx_missing = not os.path.exists(seg.offset_index_path)
            if not idx_missing and not os.path.exists(seg.time_index_path):
                fd = os.open(seg.time_index_path, os.O_RDWR | os.O_CREAT, 0o644)
                os.close(fd)                                      # recreated empty (spec §2.8)
            reason = None
            if idx_missing:
                reason = "offset index file missing"
            else:
                try:
                    if os.path.exists(seg.txn_index_path):
                        seg.txn_index.sanity_check()
                except KafkalogError as e:
                    reason = f"corrupt transaction index: {e.message}"
            if reason is None and (had_clean_shutdown or base < _floor_base(logs, recovery_point)):
                reason = _validate_indexes(seg)
            if reason is not None:
                _recover_segment(seg, report, reason, recovery_psm(segments, seg), leader_epoch_cache,
                                 contiguous)
                recovered_ids.add(id(seg))
            segments.append(seg)

        # a segment truncated by the index-triggered recovery above ends the log there, as in step 4
        # (recovery keeps the valid prefix; never a silent gap of offsets)
        for i, seg in enumerate(segments):
            r = seg.last_recovery
            if id(seg) in recovered_ids and r is not None and r.truncated_bytes > 0:
                for later in segments[i + 1:]:
                    delete_segment(later, f"follows truncated segment {seg.log_path}")
                del segments[i + 1:]
                break

        # 4. recovery after an unclean shutdown
        if not had_clean_shutdown and segments:
            floor = _floor_base(logs, recovery_point)
            for i, seg in enumerate(segments):
                if seg.base_offset < floor:
                    continue
                if id(seg) in recovered_ids:
                    truncated = seg.last_recovery.truncated_bytes if seg.last_recovery else 0
                else:
                    truncated = _recover_segment(seg, report, "unclean shutdown",
                                                 recovery_psm(segments[:i], seg), leader_epoch_cache,
                                                 contiguous)
                gap = None
                if contiguous and i + 1 < len(segments) and truncated == 0 and id(seg) not in split_ids:
                    nxt = seg.read_next_offset()
                    if seg.size and nxt != segments[i + 1].base_offset:
                        # a never-compacted log has no offset gaps: a whole-batch cut or a damaged
                        # baseOffset at the end of this segment (fields outside the CRC)
                        gap = (f"segment ends at offset {nxt} but the next segment starts at "
                               f"{segments[i + 1].base_offset}")
                        entry = {"file": seg.log_path, "position": seg.size, "bytes": 0,
                                 "kind": "corruption", "reason": gap}
                        report.truncations.append(entry)
                        report.corruptions.append(dict(entry, validDataFollows=True,
                                                       nextValidPosition=None))
                if truncated > 0 or gap is not None:
                    for later in segments[i + 1:]:
                        delete_segment(later, f"follows truncated segment {seg.log_path}")
                    del segments[i + 1:]
                    break

        next_offset = segments[-1].read_next_offset() if segments else log_start_offset
        if segments and next_offset < log_start_offset:
            for seg in segments:
                delete_segment(seg, f"log end offset {next_offset} is below the log start offset "
                                    f"{log_start_offset}")
            segments = []
            c = leader_epoch_cache
            if c is not None and callable(getattr(c, "clear", None)):
                c.clear()
        if not segments:
            segments = [open_segment(d, log_start_offset, config, clock=clock)]
            next_offset = log_start_offset
        if had_clean_shutdown:
            new_recovery_point = next_offset
        else:
            new_recovery_point = min(recovery_point, next_offset)
        segments[-1].resize_indexes(int(get("segment.index.bytes")))
        # 6. leader epochs, 7. log start offset, 8. producer state (spec §4.8)
        if leader_epoch_cache is not None:
            leader_epoch_cache.truncate_from_end(next_offset)
            leader_epoch_cache.truncate_from_start(log_start_offset)
        new_log_start = max(log_start_offset, segments[0].base_offset)
        if producer_state_manager is not None:
            psm = producer_state_manager
            psm.snapshots = psm._load_snapshots()          # recovery may have written some
            psm.remove_stray_snapshots([s.base_offset for s in segments])
            rebuild_producer_state(psm, segments, new_log_start, next_offset, clock(),
                                   reload_from_clean_shutdown=had_clean_shutdown)
        if doomed:
            fsync_dir(d)
            from kafkalog.log.log import delete_segments_later
            delete_segments_later(scheduler, int(get("file.delete.delay.ms")), doomed)
        report.recovery_point = new_recovery_point
        report.log_end_offset = next_offset
        return LoadedLog(segments, new_log_start, new_recovery_point, next_offset, report)
    except BaseException:
        # a load that fails (a typed error: damage it must not repair, a full disk...) leaves no
        # file open behind it, and writes nothing more while closing
        for seg in opened:
            seg.close_handlers()
        raise


def rebuild_producer_state(psm, segments, log_start_offset: int, last_offset: int, now: int,
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


def _replay_producer_batches(psm, seg: LogSegment, start: int, end: int) -> None:
    """Feed the producer batches of ``seg`` holding offsets in ``[start, end)`` to ``psm``
    (replication origin; header bytes only, except for transaction markers)."""
    h0 = seg.translate_offset(start)
    if h0 is None:
        return
    log = seg.log
    for h in log.iter_headers(h0.position):
        if h.base_offset >= end:
            break
        if h.magic < 2 or h.last_offset < start or h.size < RECORD_BATCH_OVERHEAD:
            continue
        head = log.pread(h.position, RECORD_BATCH_OVERHEAD)
        if INT64.unpack_from(head, 43)[0] == -1:
            continue
        psm.update_from_batch(log.read_entry(h.position, h.size) if h.is_control else head,
                              ORIGIN_REPLICATION)


def split_overflowed_segment(seg: LogSegment, config, clock: Callable[[], int] = _now_ms,
                             chunk_bytes: int = 1 << 20) -> List[LogSegment]:
    """Kafka's ``LocalLog.splitOverflowedSegment`` (spec §4.12): copy the batches of ``seg``
    unchanged into new segments ``<first offset>.*.cleaned`` (a new one whenever a batch's last
    offset does not fit the current one), make them inactive, flush them, give them the old mtime,
    then swap them in (``.cleaned`` -> ``.swap`` -> final names; the directory fsynced after each
    step). The caller renames ``seg`` to ``.deleted`` after the returned segments are in place
    (between the ``.swap`` and the final renames a crash is completed by the loader's swap pass)."""
    from kafkalog.log.log import CLEANED_FILE_SUFFIX, SWAP_FILE_SUFFIX
    from kafkalog.log.segment import _legacy_first_offset
    d = seg.dir
    parts: List[LogSegment] = []
    cur: Optional[LogSegment] = None
    pending: list = []          # (header) of the batches waiting to be appended to ``cur``

    def flush_pending() -> None:
        if not pending:
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
    from kafkalog.log.log import SWAP_FILE_SUFFIX
    for p in sorted(parts, key=lambda s: s.base_offset, reverse=True):
        p.change_file_suffixes(SWAP_FILE_SUFFIX, "")
    if parts:
        fsync_dir(parts[0].dir)


def _floor_base(logs: dict, recovery_point: int) -> int:
    """Base offset of the segment that contains the recovery point (0 if none)."""
    best = None
    for base in logs:
        if base <= recovery_point and (best is None or base > best):
            best = base
    return best if best is not None else (min(logs) if logs else 0)


def _recover_segment(seg: LogSegment, report: RecoveryReport, why: str, psm, lec,
                     contiguous: bool = False) -> int:
    truncated = seg.recover(psm, lec, contiguous=contiguous)
    if psm is not None:
        psm.update_map_end_offset(seg.read_next_offset())
        psm.take_snapshot()
    r = seg.last_recovery
    info = r.to_json() if r is not None else {"file": seg.log_path}
    info["why"] = why
    report.recovered_segments.append(info)
    report.rebuilt_indexes.append({"file": seg.offset_index_path, "reason": why}) if why != "unclean shutdown" else None
    if r is not None and r.kind != "clean":
        entry = {"file": r.file, "position": r.position, "bytes": r.truncated_bytes, "kind": r.kind,
                 "reason": r.reason}
        report.truncations.append(entry)
        if r.kind == "corruption":
            report.corruptions.append(dict(entry, validDataFollows=r.valid_data_follows,
                                           nextValidPosition=r.next_valid_position))
    return truncated


def _validate_indexes(seg: LogSegment) -> Optional[str]:
    """Cheap O(1) validation of a trusted segment's ``.index`` / ``.timeindex`` files."""
    size = seg.size
    for path, esz in ((seg.offset_index_path, 8), (seg.time_index_path, 12)):
        try:
            length = os.path.getsize(path)
        except OSError:
            continue
        if length % esz:
            return f"{os.path.basename(path)}: length {length} is not a multiple of {esz}"
        if length == 0:
            continue
        n = length // esz
        with open(path, "rb") as f:
            f.seek((n - 2) * esz if n >= 2 else 0)
            tail = f.read(2 * esz if n >= 2 else esz)
        if esz == 8:
            last_rel, last_pos = struct.unpack_from(">ii", tail, len(tail) - 8)
            if last_pos >= size or last_pos < 0 or last_rel < 0:
                return f"{os.path.basename(path)}: last entry position {last_pos} outside the log ({size} bytes)"
            if n >= 2:
                prev_rel, prev_pos = struct.unpack_from(">ii", tail, 0)
                if last_rel <= prev_rel or last_pos < prev_pos:
                    return (f"{os.path.basename(path)}: entries not increasing at the end "
                            f"(zero-filled or garbage tail)")
        else:
            last_ts, last_rel = struct.unpack_from(">qi", tail, len(tail) - 12)
            if last_rel < 0 or (n >= 1 and last_ts == 0 and last_rel == 0 and n >= 2):
                return f"{os.path.basename(path)}: zero-filled tail"
            if n >= 2:
                prev_ts, prev_rel = struct.unpack_from(">qi", tail, 0)
                if last_ts <= prev_ts or last_rel < prev_rel:
                    return (f"{os.path.basename(path)}: entries not increasing at the end "
                            f"(zero-filled or garbage tail)")
    return None


def _read_next_offset_by_scan(seg: LogSegment) -> int:
    nxt = seg.base_offset
    for h in seg.log.iter_headers(0):
        nxt = h.last_offset + 1
    return nxt
