"""The background cleaner: Kafka's ``LogCleaner`` with its ``CleanerThread``s (spec §4.11 "Threads
and buffers").

``LogCleaner(log_manager)`` is what :class:`kafkalog.log.manager.LogManager` starts when
``log.cleaner.enable`` is true: ``log.cleaner.threads`` threads, each with its own offset map of
``log.cleaner.dedupe.buffer.size / threads`` bytes, repeatedly clean the filthiest compacted log,
then run retention on it (``compact,delete``), and sleep ``log.cleaner.backoff.ms`` when there is
nothing to do. All threads share one I/O throttler (``log.cleaner.io.max.bytes.per.second``).

The cleaner never dies globally: an error in one partition marks only that partition uncleanable
(retried after a growing backoff - Kafka keeps it uncleanable until a restart) and the thread goes
on with the others; an unexpected error in the thread loop itself is logged and the loop continues.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

from kafkalog.cleaner.cleaner import Cleaner, CleaningAbortedError, LogToClean
from kafkalog.cleaner.config import CleanerConfig
from kafkalog.cleaner.manager import LogCleanerManager
from kafkalog.cleaner.offset_map import SkimpyOffsetMap
from kafkalog.cleaner.stats import CleanerStats, Throttler
from kafkalog.errors import CleanerError, KafkalogError
from kafkalog.log.log import Log
from kafkalog.log.manager import LogManager
from kafkalog.log.naming import TopicPartition
from kafkalog.log.retention import delete_old_segments

__all__ = ["LogCleaner", "CleanResult"]

logger = logging.getLogger("kafkalog.cleaner")


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class CleanResult:
    """The outcome of cleaning one partition once."""

    topic_partition: TopicPartition
    first_dirty_offset: int
    end_offset: Optional[int]          # new first dirty offset; None when aborted / failed
    size_before: int
    size_after: int
    stats: CleanerStats
    error: Optional[str] = None

    def to_json(self) -> Dict[str, Any]:
        tp = self.topic_partition
        d: Dict[str, Any] = {"topic": tp.topic, "partition": tp.partition,
             "firstDirtyOffset": self.first_dirty_offset, "endOffset": self.end_offset,
             "sizeBefore": self.size_before, "sizeAfter": self.size_after, "error": self.error}
        d.update(self.stats.to_json())
        return d


class LogCleaner:
    """Background compaction of every compacted log of a :class:`~kafkalog.log.manager.LogManager`
    (implements :class:`kafkalog.log.protocols.Cleaner`; pass the class as the manager's
    ``cleaner_factory``).

    Args:
        log_manager: the data directory: its ``logs()``, ``broker_config`` and ``clock``.
        logs: instead of a manager, a callable returning ``(TopicPartition, Log)`` pairs.
        config: cleaner settings (default: from the manager's broker config).
        clock: milliseconds since the epoch.
    """

    def __init__(self, log_manager: Optional[LogManager] = None, *,
                 logs: Optional[Callable[[], Iterable[Tuple[TopicPartition, Log]]]] = None,
                 config: Optional[CleanerConfig] = None,
                 clock: Optional[Callable[[], int]] = None) -> None:
        if logs is None:
            if log_manager is None:
                raise CleanerError("LogCleaner needs a log manager or a logs() callable")
            logs = log_manager.compacted_logs    # (a pass walks the compacted topics' logs only)
        if config is None:
            config = CleanerConfig.from_broker(log_manager.broker_config if log_manager else None)
        self.config = config
        if clock is None:
            clock = log_manager.clock if log_manager is not None else _now_ms
        self.clock: Callable[[], int] = clock
        self.manager = LogCleanerManager(logs, clock=self.clock, backoff_ms=config.backoff_ms)
        self.throttler = Throttler(config.max_io_bytes_per_second)
        self._stop = threading.Event()
        self._threads: List[threading.Thread] = []
        self.results: List[CleanResult] = []
        self._results_lock = threading.Lock()

    # --- lifecycle --------------------------------------------------------------------------------
    def startup(self) -> None:
        """Start ``log.cleaner.threads`` cleaner threads."""
        if self._threads:
            return
        self._stop.clear()
        for i in range(max(self.config.num_threads, 0)):
            t = threading.Thread(target=self._run, name=f"kafka-log-cleaner-thread-{i}", daemon=True)
            self._threads.append(t)
            t.start()

    def shutdown(self, timeout: Optional[float] = None) -> None:
        """Stop the threads (an in-progress cleaning is aborted at its next batch) and join them."""
        self._stop.set()
        self.manager.abort_all()
        for t in self._threads:
            t.join(timeout)
        self._threads = []

    @property
    def alive_threads(self) -> int:
        return sum(1 for t in self._threads if t.is_alive())

    def abort_cleaning(self, tp: TopicPartition) -> None:
        """Abort the cleaning of ``tp`` (partition deleted or truncated)."""
        self.manager.abort_cleaning(tp)

    # --- cleaning ---------------------------------------------------------------------------------
    def new_cleaner(self, map_memory: Optional[int] = None) -> Cleaner:
        """A :class:`Cleaner` with its own offset map (``map_memory`` bytes; default per thread)."""
        mem = self.config.map_memory_per_thread if map_memory is None else map_memory
        m = SkimpyOffsetMap(mem, self.config.dedupe_buffer_load_factor)
        if int(m.slots * m.load_factor) < 1:
            raise CleanerError("log.cleaner.dedupe.buffer.size is too small: the offset map must "
                               "hold at least one entry (slots x load factor > 1)")
        return Cleaner(m, io_buffer_size=self.config.io_buffer_per_thread,
                       max_io_buffer_size=self.config.max_message_size, throttler=self.throttler,
                       check_done=self._check_done, clock=self.clock)

    def _check_done(self, tp: TopicPartition) -> None:
        if self.manager.is_aborted(tp):
            raise CleaningAbortedError(f"Cleaning of {tp} aborted")

    def run_cleaning(self, cleaner: Cleaner, ltc: LogToClean) -> CleanResult:
        """Clean one chosen log and record the outcome with the manager (never raises for a
        partition-level failure: the partition is marked uncleanable and the error returned)."""
        log = ltc.log
        size_before = log.size
        result = CleanResult(ltc.topic_partition, ltc.first_dirty_offset, None, size_before,
                             size_before, CleanerStats())
        try:
            end, stats = cleaner.clean(ltc)
            result.stats = stats
            if end <= ltc.first_dirty_offset < ltc.first_uncleanable_offset:
                raise CleanerError(
                    f"The offset map ({cleaner.offset_map.memory} bytes, "
                    f"{cleaner.offset_map.max_entries} keys) cannot hold a single record of the "
                    f"dirty section starting at offset {ltc.first_dirty_offset}; raise "
                    f"log.cleaner.dedupe.buffer.size", file=log.dir)
            result.end_offset = end
            self.manager.done_cleaning(ltc, end)
            self._after_clean(log)
        except CleaningAbortedError as e:
            result.error = str(e)
            self.manager.done_cleaning(ltc, None)
        except Exception as e:
            result.error = f"{type(e).__name__}: {e}"
            self.manager.mark_uncleanable(ltc.topic_partition, e)
        result.size_after = log.size
        with self._results_lock:
            self.results.append(result)
            del self.results[:-1000]
        return result

    def _after_clean(self, log: Log) -> None:
        """Retention for compacted logs after cleaning (Kafka's ``deleteOldSegments``). A log of
        another policy (``kafkalog compact --force``) gets its retention from the log manager."""
        if not log.config.compact:
            return
        try:
            delete_old_segments(log, now=self.clock())
        except KafkalogError as e:
            logger.warning("Retention after cleaning %s failed: %s", log.dir, e)

    def clean_filthiest(self, cleaner: Cleaner) -> Optional[CleanResult]:
        """Grab and clean the filthiest log once; None when nothing is eligible."""
        ltc = self.manager.grab_filthiest_compacted_log()
        if ltc is None:
            return None
        return self.run_cleaning(cleaner, ltc)

    def _run(self) -> None:
        cleaner: Optional[Cleaner] = None
        while not self._stop.is_set():
            did = None
            try:
                if cleaner is None:
                    cleaner = self.new_cleaner()
                did = self.clean_filthiest(cleaner)
            except Exception:
                logger.exception("Unexpected error in the log cleaner thread; continuing")
            if did is None:
                self._stop.wait(self.config.backoff_ms / 1000.0)
