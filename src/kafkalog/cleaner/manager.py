"""Choosing what to clean: Kafka's ``LogCleanerManager`` (spec §4.11 "Choosing a log", "Cleaner
checkpoint maintenance").

Keeps the clean/dirty boundary of every compacted partition in the data directory's
``cleaner-offset-checkpoint`` (reset to the log start offset, and rewritten, when it is below the
log start offset or beyond the log end offset), computes each log's first uncleanable offset (last
stable offset, active segment, ``min.compaction.lag.ms``), its dirty ratio and whether
``max.compaction.lag.ms`` forces a cleaning, and hands out the filthiest log.

Uncleanable partitions - better than Kafka, where a partition that failed once stays uncleanable
until the broker restarts (KAFKA-7215; LinkedIn added 3 retries): a failure marks the partition
uncleanable with the error, and it becomes eligible again after an exponential backoff
(``log.cleaner.backoff.ms`` x 4 doubling per failure, capped at one hour); a successful cleaning
clears the record. An unreadable checkpoint file is treated as empty (the partitions are simply
cleaned from their log start again, which is safe) instead of failing the log directory.
"""
from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Optional, Set, Tuple

from kafkalog.cleaner.cleaner import LogToClean
from kafkalog.errors import KafkalogError
from kafkalog.log.checkpoint import OffsetCheckpointFile
from kafkalog.log.log import Log
from kafkalog.log.naming import CLEANER_OFFSET_CHECKPOINT_FILE, TopicPartition, parse_topic_partition
from kafkalog.log.segment import LogSegment
from kafkalog.record.constants import INT64_MAX

__all__ = ["LogCleanerManager", "UncleanablePartition", "cleanable_offsets",
           "calculate_cleanable_bytes", "max_compaction_delay", "log_to_clean", "tp_of_log"]

logger = logging.getLogger("kafkalog.cleaner")

MAX_RETRY_BACKOFF_MS = 3_600_000


@dataclass
class UncleanablePartition:
    """A partition whose last cleaning failed: the error, how many times in a row, and when it may
    be retried (ms since the epoch)."""

    topic_partition: TopicPartition
    error: str
    failures: int
    retry_at_ms: int

    def to_json(self) -> Dict[str, Any]:
        return {"topic": self.topic_partition.topic, "partition": self.topic_partition.partition,
                "error": self.error, "failures": self.failures, "retryAtMs": self.retry_at_ms}


def _non_active_from(log: Log, offset: int) -> List[LogSegment]:
    """Non-active segments from the one containing ``offset`` (Kafka's nonActiveLogSegmentsFrom)."""
    segs = log.segments
    active = segs[-1]
    out = []
    for i, s in enumerate(segs[:-1]):
        nxt = segs[i + 1].base_offset
        if nxt > offset and s is not active:
            out.append(s)
    return out


def _segments_overlapping(log: Log, start: int, end: int) -> List[LogSegment]:
    """Kafka's ``logSegments(from, to)``: segments with base < ``end`` from the floor of ``start``."""
    segs = log.segments
    out = []
    for i, s in enumerate(segs):
        nxt = segs[i + 1].base_offset if i + 1 < len(segs) else None
        if s.base_offset >= end:
            break
        if nxt is not None and nxt <= start:
            continue
        out.append(s)
    return out


def cleanable_offsets(log: Log, last_clean_offset: Optional[int], now: int) -> Tuple[int, int, bool]:
    """``(first_dirty_offset, first_uncleanable_dirty_offset, force_update_checkpoint)``."""
    lso_start = log.log_start_offset
    checkpoint = lso_start if last_clean_offset is None else last_clean_offset
    force = False
    if checkpoint < lso_start or checkpoint > log.log_end_offset:
        first_dirty, force = lso_start, True
    else:
        first_dirty = checkpoint
    candidates = [log.last_stable_offset, log.active_segment.base_offset]
    lag = max(log.config.min_compaction_lag_ms, 0)
    if lag > 0:
        for s in _non_active_from(log, first_dirty):
            if s.largest_timestamp() > now - lag:
                candidates.append(s.base_offset)
                break
    return first_dirty, max(first_dirty, min(candidates)), force


def calculate_cleanable_bytes(log: Log, first_dirty: int, uncleanable_offset: int) -> Tuple[int, int]:
    """``(first_uncleanable_offset, cleanable_bytes)`` with segment alignment."""
    non_active = _non_active_from(log, uncleanable_offset)
    first_uncleanable = non_active[0].base_offset if non_active else log.active_segment.base_offset
    cleanable = sum(s.size for s in _segments_overlapping(log, min(first_dirty, first_uncleanable),
                                                          first_uncleanable))
    return first_uncleanable, cleanable


def max_compaction_delay(log: Log, first_dirty: int, now: int) -> int:
    """How far ``max.compaction.lag.ms`` is breached (0 = not)."""
    ts = [t for t in (s.get_first_batch_timestamp() for s in _non_active_from(log, first_dirty))
          if t > 0]
    earliest = min(ts) if ts else INT64_MAX
    lag = max(log.config.max_compaction_lag_ms, 0)
    clean_until = now - lag
    return clean_until - earliest if earliest < clean_until else 0


def log_to_clean(tp: TopicPartition, log: Log, first_dirty: int, uncleanable: int,
                 need_now: bool = False) -> LogToClean:
    clean_bytes = sum(s.size for s in _segments_overlapping(log, -1, first_dirty))
    first_uncleanable, cleanable = calculate_cleanable_bytes(log, first_dirty, uncleanable)
    return LogToClean(tp, log, first_dirty, first_uncleanable, clean_bytes, cleanable, need_now)


def _tp_of(log: Log) -> TopicPartition:
    return parse_topic_partition(os.path.basename(os.path.normpath(log.dir)))


class LogCleanerManager:
    """State shared by the cleaner threads of one or more data directories.

    Args:
        logs: returns the current ``(TopicPartition, Log)`` pairs (e.g. ``LogManager.logs``).
        clock: milliseconds since the epoch.
        backoff_ms: base of the retry backoff of uncleanable partitions.
    """

    def __init__(self, logs: Callable[[], Iterable[Tuple[TopicPartition, Log]]], *,
                 clock: Optional[Callable[[], int]] = None, backoff_ms: int = 15_000) -> None:
        self._logs = logs
        self.clock: Callable[[], int] = clock or (lambda: int(time.time() * 1000))
        self.backoff_ms = max(int(backoff_ms), 1)
        self._lock = threading.RLock()
        self.in_progress: Dict[TopicPartition, str] = {}
        self._watched: weakref.WeakSet[Log] = weakref.WeakSet()  # logs whose hooks we registered
        self._aborted: Set[TopicPartition] = set()
        self.uncleanable: Dict[TopicPartition, UncleanablePartition] = {}
        self.dirtiest_log_cleanable_ratio = 0.0

    # --- checkpoints ------------------------------------------------------------------------------
    @staticmethod
    def checkpoint_path(data_dir: str) -> str:
        return os.path.join(data_dir, CLEANER_OFFSET_CHECKPOINT_FILE)

    def _data_dir(self, log: Log) -> str:
        return os.path.dirname(os.path.abspath(log.dir))

    def read_checkpoint(self, data_dir: str) -> Dict[TopicPartition, int]:
        """The ``cleaner-offset-checkpoint`` of ``data_dir`` (unreadable -> empty, logged)."""
        try:
            return OffsetCheckpointFile(self.checkpoint_path(data_dir), create=False).read()
        except (KafkalogError, OSError) as e:
            logger.warning("Ignoring unreadable cleaner checkpoint in %s: %s", data_dir, e)
            return {}

    def all_cleaner_checkpoints(self, logs: Optional[List[Tuple[TopicPartition, Log]]] = None
                                ) -> Dict[TopicPartition, int]:
        if logs is None:
            logs = list(self._logs())
        dirs = {self._data_dir(log) for _tp, log in logs}
        out: Dict[TopicPartition, int] = {}
        for d in dirs:
            out.update(self.read_checkpoint(d))
        return out

    def update_checkpoints(self, data_dir: str, update: Optional[Tuple[TopicPartition, int]] = None,
                           remove: Optional[TopicPartition] = None) -> None:
        """Rewrite ``data_dir``'s checkpoint with one entry updated or removed (atomic, fsynced)."""
        with self._lock:
            cur = self.read_checkpoint(data_dir)
            if remove is not None:
                cur.pop(remove, None)
            if update is not None:
                cur[update[0]] = update[1]
            OffsetCheckpointFile(self.checkpoint_path(data_dir)).write(
                {(tp.topic, tp.partition): off for tp, off in cur.items()})

    def truncate_checkpoint(self, log: Log, tp: TopicPartition, offset: int) -> None:
        """On truncation below the checkpointed offset, lower it to the active segment's base."""
        d = self._data_dir(log)
        cur = self.read_checkpoint(d).get(tp)
        if cur is not None and cur > offset:
            self.update_checkpoints(d, update=(tp, log.active_segment.base_offset))

    # --- choosing ---------------------------------------------------------------------------------
    def _is_uncleanable(self, tp: TopicPartition, now: int) -> bool:
        u = self.uncleanable.get(tp)
        return u is not None and now < u.retry_at_ms

    def grab_filthiest_compacted_log(self, now: Optional[int] = None) -> Optional[LogToClean]:
        """The compacted log with the highest dirty ratio that is eligible (ratio above
        ``min.cleanable.dirty.ratio``, or ``max.compaction.lag.ms`` breached), marked in progress;
        None when there is none. A failure computing one log's offsets marks that log
        uncleanable and the others are still considered."""
        now = self.clock() if now is None else now
        # Take the log list before our lock: the manager's lock is taken inside ``_logs()``, and the
        # manager calls ``abort_cleaning`` (our lock) while holding its own; one order only.
        logs = list(self._logs())
        with self._lock:
            last_clean = self.all_cleaner_checkpoints(logs)
            candidates = []
            for tp, log in logs:
                self.watch_log(tp, log)
                if log.closed or not log.config.compact:
                    continue
                if tp in self.in_progress or self._is_uncleanable(tp, now):
                    continue
                try:
                    first_dirty, uncleanable, force = cleanable_offsets(log, last_clean.get(tp), now)
                    if force:
                        self.update_checkpoints(self._data_dir(log), update=(tp, first_dirty))
                    delay = max_compaction_delay(log, first_dirty, now)
                    ltc = log_to_clean(tp, log, first_dirty, uncleanable, delay > 0)
                except (KafkalogError, OSError) as e:
                    self.mark_uncleanable(tp, e, now)
                    continue
                if ltc.total_bytes > 0:
                    candidates.append(ltc)
            self.dirtiest_log_cleanable_ratio = max((c.cleanable_ratio for c in candidates),
                                                    default=0.0)
            eligible = [c for c in candidates
                        if (c.need_compaction_now and c.cleanable_bytes > 0)
                        or c.cleanable_ratio > c.log.config.min_cleanable_dirty_ratio]
            if not eligible:
                return None
            best = max(eligible, key=lambda c: c.cleanable_ratio)
            self.in_progress[best.topic_partition] = "in-progress"
            self._aborted.discard(best.topic_partition)
            return best

    def log_to_clean_now(self, tp: TopicPartition, log: Log, now: Optional[int] = None) -> Optional[LogToClean]:
        """On-demand: the cleanable range of one log regardless of its dirty ratio (marked in
        progress), or None when it is being cleaned or has nothing cleanable."""
        now = self.clock() if now is None else now
        with self._lock:
            self.watch_log(tp, log)
            if tp in self.in_progress:
                return None
            first_dirty, uncleanable, force = cleanable_offsets(
                log, self.read_checkpoint(self._data_dir(log)).get(tp), now)
            if force:
                self.update_checkpoints(self._data_dir(log), update=(tp, first_dirty))
            ltc = log_to_clean(tp, log, first_dirty, uncleanable,
                               max_compaction_delay(log, first_dirty, now) > 0)
            if ltc.cleanable_bytes <= 0 and ltc.first_uncleanable_offset <= first_dirty:
                return None
            self.in_progress[tp] = "in-progress"
            self._aborted.discard(tp)
            return ltc

    # --- outcome ----------------------------------------------------------------------------------
    def done_cleaning(self, ltc: LogToClean, end_offset: Optional[int]) -> None:
        """Record the new first dirty offset (None: aborted, checkpoint untouched)."""
        tp = ltc.topic_partition
        with self._lock:
            try:
                if end_offset is not None and tp not in self._aborted:
                    self.update_checkpoints(self._data_dir(ltc.log), update=(tp, end_offset))
                    self.uncleanable.pop(tp, None)
            finally:
                self.in_progress.pop(tp, None)
                self._aborted.discard(tp)

    def mark_uncleanable(self, tp: TopicPartition, error: BaseException, now: Optional[int] = None) -> None:
        now = self.clock() if now is None else now
        with self._lock:
            prev = self.uncleanable.get(tp)
            failures = (prev.failures if prev else 0) + 1
            delay = min(self.backoff_ms * 4 * (2 ** (failures - 1)), MAX_RETRY_BACKOFF_MS)
            self.uncleanable[tp] = UncleanablePartition(tp, f"{type(error).__name__}: {error}",
                                                        failures, now + delay)
            self.in_progress.pop(tp, None)
        logger.error("Cleaning of %s failed (attempt %d); retrying after %d ms: %s", tp, failures,
                     delay, error)

    def abort_cleaning(self, tp: TopicPartition) -> None:
        """Stop an in-progress cleaning of ``tp`` at the next batch (checkpoint not updated)."""
        with self._lock:
            if tp in self.in_progress:
                self._aborted.add(tp)

    def abort_all(self) -> None:
        """Abort every in-progress cleaning (shutdown)."""
        with self._lock:
            self._aborted.update(self.in_progress)

    def is_aborted(self, tp: TopicPartition) -> bool:
        return tp in self._aborted

    # --- truncation (spec §4.9, §4.11 "Cleaner checkpoint maintenance") --------------------------
    def watch_log(self, tp: TopicPartition, log: Log) -> None:
        """Register with ``log``'s truncation hooks (once per log): before a truncation an
        in-progress cleaning of ``tp`` is aborted (``cleaner_abort_hook``, called under the log's
        writer lock - the swap re-checks under the same lock, so swapped segments never bring
        truncated data back); after it the cleaner checkpoint is lowered to the active segment's
        base offset when above it (``on_truncate``) and a cleaning that started meanwhile is
        aborted too."""
        if log in self._watched:
            return
        self._watched.add(log)
        prev = log.cleaner_abort_hook

        def abort(lg: Log, tp: TopicPartition = tp,
                  prev: Optional[Callable[[Log], None]] = prev) -> None:
            if prev is not None:
                prev(lg)
            self.abort_cleaning(tp)

        log.cleaner_abort_hook = abort
        def truncated(lg: Log, active_base: int, tp: TopicPartition = tp) -> None:
            self.on_log_truncated(lg, tp, active_base)

        log.on_truncate.append(truncated)

    def on_log_truncated(self, log: Log, tp: TopicPartition, active_base: int) -> None:
        """After ``log`` was truncated: abort an in-progress cleaning, lower the checkpoint."""
        self.abort_cleaning(tp)
        try:
            self.truncate_checkpoint(log, tp, active_base)
        except (KafkalogError, OSError) as e:
            logger.warning("Could not lower the cleaner checkpoint of %s after truncation: %s",
                           tp, e)

    def remove_partition(self, tp: TopicPartition, data_dir: str) -> None:
        """Partition deleted: abort its cleaning and drop its checkpoint entry."""
        self.abort_cleaning(tp)
        self.uncleanable.pop(tp, None)
        self.update_checkpoints(data_dir, remove=tp)


def tp_of_log(log: Log) -> TopicPartition:
    """The topic-partition named by a log's directory."""
    return _tp_of(log)
