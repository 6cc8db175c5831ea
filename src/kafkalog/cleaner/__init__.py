"""Log compaction (spec §4.11): Kafka's cleaner for ``cleanup.policy=compact``.

Public API: :class:`LogCleaner` (background threads of a data directory),
:func:`compact_data_dir` / :func:`compact_log` (on demand), :class:`SkimpyOffsetMap`,
:class:`Cleaner`, :class:`LogCleanerManager`, :class:`CleanerConfig`, :class:`CleanerStats`.
"""
from kafkalog.cleaner.cleaner import Cleaner, CleaningAbortedError, LogToClean
from kafkalog.cleaner.config import CleanerConfig
from kafkalog.cleaner.manager import LogCleanerManager
from kafkalog.cleaner.offset_map import SkimpyOffsetMap
from kafkalog.cleaner.ondemand import compact_data_dir, compact_log
from kafkalog.cleaner.stats import CleanerStats, Throttler
from kafkalog.cleaner.threads import CleanResult, LogCleaner

__all__ = ["LogCleaner", "CleanResult", "Cleaner", "CleaningAbortedError", "LogToClean",
           "CleanerConfig", "LogCleanerManager", "SkimpyOffsetMap", "CleanerStats", "Throttler",
           "compact_data_dir", "compact_log"]
