"""The storage engine's figures: appends and flushes of every log of the process (Kafka's
``LogFlushStats``, process-wide as Kafka's is JVM-wide), counted as they happen, and each
partition's ``Log`` gauges (Size, NumLogSegments, LogStartOffset, LogEndOffset), read from the logs
when scraped (nothing kept per partition between scrapes).

:func:`register_log_metrics` adds them to a :class:`~kafkalog.log.metrics.MetricsRegistry`; the
broker's registry has them, and so can an application's (docs/server.md, "Metrics")."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Tuple

from kafkalog.log.log_append_info import AppendInfo
from kafkalog.log.metrics import Counter, Family, MetricsRegistry, Sample, Timer
from kafkalog.log.naming import TopicPartition

if TYPE_CHECKING:
    from kafkalog.log.log import Log

__all__ = ["LOG_STATS", "LogStats", "log_families", "register_log_metrics"]


class LogStats:
    """Appends and flushes of every log of this process: the flush timer is Kafka's
    ``kafka.log:type=LogFlushStats,name=LogFlushRateAndTimeMs``; the append figures are kafkalog's."""

    __slots__ = ("append_bytes", "append_records", "append_time", "flush_time")

    def __init__(self) -> None:
        self.flush_time = Timer()
        self.append_time = Timer()
        self.append_bytes = Counter()
        self.append_records = Counter()

    def appended(self, info: AppendInfo, started: float) -> None:
        """One append that returned ``info``, begun at ``time.perf_counter()`` ``started``."""
        self.append_time.update((time.perf_counter() - started) * 1000.0)
        self.append_bytes.value += info.valid_bytes
        self.append_records.value += info.num_records

    def flushed(self, started: float) -> None:
        self.flush_time.update((time.perf_counter() - started) * 1000.0)

    def families(self) -> list[Family]:
        return [
            Family("kafka_log_logflushstats_logflushrateandtimems", "summary",
                   "Log flushes (fsync of segments) and their time in ms (Kafka's LogFlushStats)",
                   self.flush_time.samples({})),
            Family("kafkalog_log_append_time_ms", "summary",
                   "Appends to a log of this process and their time in ms", self.append_time.samples({})),
            Family("kafkalog_log_append_bytes", "counter", "Bytes appended to the logs of this process",
                   [Sample("_total", {}, self.append_bytes.value)]),
            Family("kafkalog_log_append_records", "counter", "Records appended to the logs of this process",
                   [Sample("_total", {}, self.append_records.value)]),
        ]


#: the process's append and flush figures (every ``Log`` counts into it)
LOG_STATS = LogStats()

#: (family name, help, the value of one log) of Kafka's ``kafka.log:type=Log`` gauges
_LOG_GAUGES: Tuple[Tuple[str, str, Callable[[Log], int]], ...] = (
    ("kafka_log_log_size", "Bytes of the partition's segments", lambda log: log.size),
    ("kafka_log_log_numlogsegments", "Segments of the partition", lambda log: len(log.segments)),
    ("kafka_log_log_logstartoffset", "The partition's log start offset",
     lambda log: log.fetch_offset_snapshot()[0]),
    ("kafka_log_log_logendoffset", "The partition's log end offset", lambda log: log.log_end_offset),
)


def log_families(logs: Iterable[Tuple[TopicPartition, Log]]) -> list[Family]:
    """Kafka's per-partition ``Log`` gauges of ``logs``, read now."""
    families = [Family(name, "gauge", doc, []) for name, doc, _f in _LOG_GAUGES]
    for tp, log in logs:
        labels = {"topic": tp.topic, "partition": str(tp.partition)}
        for fam, (_n, _d, value) in zip(families, _LOG_GAUGES):
            fam.samples.append(Sample("", labels, value(log)))
    return families


def register_log_metrics(registry: MetricsRegistry,
                         logs: Callable[[], Iterable[Tuple[TopicPartition, Log]]]) -> Callable[[], None]:
    """Add the process's append and flush figures and the per-partition gauges of ``logs()``
    (e.g. ``LogManager.logs``) to ``registry``; returns the function that removes them."""
    return registry.add_collector(lambda: LOG_STATS.families() + log_families(logs()))
