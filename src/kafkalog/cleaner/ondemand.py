"""Compaction on demand (``kafkalog compact DATA_DIR [TOPIC]``): clean a log, or every compacted log
of a data directory, now, regardless of ``min.cleanable.dirty.ratio``, repeating rounds until the
whole cleanable range is done (a round stops early when the offset map is full)."""
from __future__ import annotations

from typing import Any, Callable, List, Mapping, Optional, Tuple

from kafkalog.cleaner.config import CleanerConfig
from kafkalog.cleaner.threads import CleanResult, LogCleaner
from kafkalog.errors import KafkalogError
from kafkalog.log.config import BrokerConfig
from kafkalog.log.log import Log
from kafkalog.log.manager import LogManager
from kafkalog.log.naming import TopicPartition

__all__ = ["compact_log", "compact_data_dir", "ProgressFn"]

#: ``progress(tp, log, result_or_None)``: called before (None) and after each round of a partition
ProgressFn = Callable[[TopicPartition, Log, Optional[CleanResult]], None]


def compact_log(cleaner: LogCleaner, tp: TopicPartition, log: Log, *, max_rounds: int = 1000,
                progress: Optional[ProgressFn] = None) -> List[CleanResult]:
    """Clean ``log`` until its first dirty offset reaches its first uncleanable offset."""
    results: List[CleanResult] = []
    c = cleaner.new_cleaner(cleaner.config.dedupe_buffer_size
                            if cleaner.config.num_threads <= 1 else None)
    for _ in range(max_rounds):
        ltc = cleaner.manager.log_to_clean_now(tp, log)
        if ltc is None:
            break
        if progress is not None:
            progress(tp, log, None)
        r = cleaner.run_cleaning(c, ltc)
        results.append(r)
        if progress is not None:
            progress(tp, log, r)
        if r.end_offset is None or r.end_offset >= ltc.first_uncleanable_offset \
                or r.end_offset <= ltc.first_dirty_offset:
            break
    return results


def compact_data_dir(data_dir: str, topic: Optional[str] = None, *,
                     broker_config: Optional[BrokerConfig | Mapping[str, Any]] = None,
                     force: bool = False, progress: Optional[ProgressFn] = None,
                     on_open: Optional[Callable[[List[Tuple[TopicPartition, Log]]], None]] = None
                     ) -> List[CleanResult]:
    """Open ``data_dir`` (taking its lock; no background threads), clean every log whose
    ``cleanup.policy`` contains ``compact`` (only ``topic``'s when given; ``force`` also cleans a
    topic whose policy is ``delete``), close it cleanly. Returns every round's result.

    ``on_open(selected)`` receives the ``(tp, log)`` pairs about to be cleaned (for progress bars).
    """
    mgr = LogManager(data_dir, broker_config, background=False)
    try:
        selected: List[Tuple[TopicPartition, Log]] = []
        for tp, log in mgr.logs():
            if topic is not None and tp.topic != topic:
                continue
            if not (force and topic is not None) and not log.config.compact:
                continue
            selected.append((tp, log))
        if topic is not None and not any(True for tp, _ in mgr.logs() if tp.topic == topic):
            raise KafkalogError(f"Topic '{topic}' does not exist in {data_dir}", file=data_dir)
        if topic is not None and not selected:
            raise KafkalogError(f"Topic '{topic}' has cleanup.policy without 'compact'; use "
                                f"--force to compact it anyway", file=data_dir)
        if on_open is not None:
            on_open(selected)
        cfg = CleanerConfig.from_broker(mgr.broker_config)
        cleaner = LogCleaner(logs=lambda: list(selected), config=cfg, clock=mgr.clock)
        results: List[CleanResult] = []
        for tp, log in selected:
            results.extend(compact_log(cleaner, tp, log, progress=progress))
        return results
    finally:
        mgr.close()
