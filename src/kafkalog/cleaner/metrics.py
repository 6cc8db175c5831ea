"""The cleaner's figures as Kafka's ``LogCleaner`` and ``LogCleanerManager`` gauges (over the last
cleaning of each cleaner thread, as Kafka's), and :func:`register_storage_metrics`: a data
directory's whole storage figures (the logs' and the cleaner's) in a
:class:`~kafkalog.log.metrics.MetricsRegistry`, for the broker's endpoint or an application's."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kafkalog.log.log_metrics import register_log_metrics
from kafkalog.log.metrics import Family, MetricsRegistry, Sample

if TYPE_CHECKING:
    from kafkalog.cleaner.threads import LogCleaner
    from kafkalog.log.manager import LogManager

__all__ = ["cleaner_families", "register_storage_metrics"]


def _gauge(name: str, help: str, value: float, labels: dict[str, str] | None = None) -> Family:
    return Family(name, "gauge", help, [Sample("", labels or {}, value)])


def cleaner_families(cleaner: LogCleaner, data_dir: str) -> list[Family]:
    """Kafka's cleaner gauges, read now: ``max-buffer-utilization-percent``,
    ``cleaner-recopy-percent``, ``max-clean-time-secs`` over the last cleaning of each thread,
    ``DeadThreadCount``, and the manager's ``uncleanable-partitions-count`` and
    ``max-dirty-percent`` of ``data_dir``."""
    with cleaner._results_lock:
        done = [r for r in cleaner.results if r.error is None]
    last = [r.stats for r in done[-max(cleaner.config.num_threads, 1):]]
    read = sum(s.bytes_read for s in last)
    written = sum(s.bytes_written for s in last)
    manager = cleaner.manager
    dirs = {"logDirectory": data_dir}
    threads = len(cleaner._threads)
    return [
        _gauge("kafka_log_logcleaner_max_buffer_utilization_percent",
               "The largest offset map utilization of the last cleanings, in percent",
               max((s.buffer_utilization * 100.0 for s in last), default=0.0)),
        _gauge("kafka_log_logcleaner_cleaner_recopy_percent",
               "Bytes written over bytes read by the last cleanings, in percent",
               100.0 * written / read if read else 0.0),
        _gauge("kafka_log_logcleaner_max_clean_time_secs", "The longest of the last cleanings, in seconds",
               max((s.elapsed_secs for s in last), default=0.0)),
        _gauge("kafka_log_logcleaner_deadthreadcount", "Cleaner threads that died",
               threads - cleaner.alive_threads),
        _gauge("kafka_log_logcleanermanager_uncleanable_partitions_count",
               "Partitions marked uncleanable after a cleaning failed", len(manager.uncleanable), dirs),
        _gauge("kafka_log_logcleanermanager_max_dirty_percent",
               "The dirtiest compacted log's cleanable ratio at the last choice, in percent",
               manager.dirtiest_log_cleanable_ratio * 100.0),
    ]


def register_storage_metrics(registry: MetricsRegistry, manager: LogManager) -> Callable[[], None]:
    """Add ``manager``'s figures to ``registry``: every log's (:mod:`kafkalog.log.log_metrics`) and,
    while it runs, its cleaner's (:func:`cleaner_families`). Returns the function removing them."""
    remove_logs = register_log_metrics(registry, manager.logs)

    def cleaner() -> list[Family]:
        c: Any = manager.cleaner
        from kafkalog.cleaner.threads import LogCleaner
        return cleaner_families(c, manager.data_dir) if isinstance(c, LogCleaner) else []

    remove_cleaner = registry.add_collector(cleaner)

    def remove() -> None:
        remove_logs()
        remove_cleaner()
    return remove
