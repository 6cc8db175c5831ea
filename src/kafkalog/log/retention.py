"""Retention: Kafka's ``UnifiedLog.deleteOldSegments`` for one :class:`~kafkalog.log.log.Log`
(spec §4.10, §7.18-19).

``delete_old_segments(log)`` applies, in Kafka's order, the log-start-offset breach, then (when
``cleanup.policy`` contains ``delete``) the ``retention.bytes`` breach and the ``retention.ms``
breach. Candidates are walked oldest first and the walk stops at the first segment that is not
deletable; a segment is deletable only when the high watermark is at or above its upper bound (the
next segment's base offset, or the log end offset for the last one) and it is not the last segment
while empty. Deletion goes through :meth:`Log.delete_segments`: roll first when every segment
goes, rename to ``.deleted``, physical removal after ``file.delete.delay.ms``.

Future timestamps (kafkalog does better than Kafka here)
--------------------------------------------------------
A record timestamp in the future (a clock-skewed producer, microseconds sent as milliseconds,
KAFKA-6482) makes ``now - largestTimestamp`` negative, so Kafka never deletes that segment by time,
and because the walk stops at the first non-deletable segment, nothing after it either. Kafka
(before KAFKA-18929) says nothing about it. kafkalog:

* always detects segments whose largest timestamp lies more than a tolerance in the future,
  logs a warning through :mod:`logging` (logger ``kafkalog.retention``) and lists them in
  :attr:`RetentionResult.future_timestamp_segments`;
* offers the kafkalog-specific topic setting ``retention.future.timestamp.policy``:
  ``warn`` (default: Kafka's behaviour plus the warning) or ``mtime`` (for such segments the time
  check uses the ``.log`` file's modification time instead, as Kafka does for tiered storage since
  KAFKA-20609 and Redpanda does, redpanda-data/redpanda#9820);
* the tolerance is ``retention.future.timestamp.tolerance.ms`` (default 3 600 000 = 1 h, the
  value Kafka 4.0 uses for ``message.timestamp.after.max.ms``).

Both keys are kafkalog extensions; a Kafka broker does not know them (they live only in
kafkalog's per-topic properties, never in Kafka's files).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Protocol, Sequence, Set

from kafkalog.log.config import LogConfig
from kafkalog.log.segment import LogSegment
from kafkalog.record.constants import INT64_MAX

__all__ = ["DeletedSegment", "FutureTimestampSegment", "RetentionResult", "deletable_segments",
           "future_timestamp_segments", "delete_old_segments"]

logger = logging.getLogger("kafkalog.retention")


@dataclass
class DeletedSegment:
    """One segment removed by retention."""

    base_offset: int
    next_offset: int
    size_in_bytes: int
    largest_timestamp: int
    reason: str                       # log-start-offset | retention-size | retention-time

    def to_json(self) -> Dict[str, Any]:
        return {"baseOffset": self.base_offset, "nextOffset": self.next_offset,
                "sizeInBytes": self.size_in_bytes, "largestTimestamp": self.largest_timestamp,
                "reason": self.reason}


@dataclass
class FutureTimestampSegment:
    """A segment whose largest timestamp is in the future beyond the tolerance."""

    file: str
    base_offset: int
    largest_timestamp: int
    now: int
    ahead_ms: int
    policy: str                       # warn: pinned as in Kafka; mtime: judged by the file mtime

    def to_json(self) -> Dict[str, Any]:
        return {"file": self.file, "baseOffset": self.base_offset,
                "largestTimestamp": self.largest_timestamp, "now": self.now,
                "aheadMs": self.ahead_ms, "policy": self.policy}


@dataclass
class RetentionResult:
    """What one :func:`delete_old_segments` call did."""

    partition: str
    deleted: List[DeletedSegment] = field(default_factory=list)
    future_timestamp_segments: List[FutureTimestampSegment] = field(default_factory=list)
    log_start_offset: int = 0

    @property
    def num_deleted(self) -> int:
        return len(self.deleted)

    @property
    def bytes_deleted(self) -> int:
        return sum(d.size_in_bytes for d in self.deleted)

    def to_json(self) -> Dict[str, Any]:
        return {"partition": self.partition, "deletedSegments": [d.to_json() for d in self.deleted],
                "futureTimestampSegments": [f.to_json() for f in self.future_timestamp_segments],
                "logStartOffset": self.log_start_offset}



class RetainedLog(Protocol):
    """What retention reads and deletes of a :class:`kafkalog.log.log.Log` (which calls it)."""

    config: LogConfig
    clock: Callable[[], int]
    log_start_offset: int

    @property
    def segments(self) -> Sequence[LogSegment]: ...

    @property
    def high_watermark(self) -> int: ...

    @property
    def log_end_offset(self) -> int: ...

    @property
    def size(self) -> int: ...

    @property
    def dir_name(self) -> str: ...

    def delete_segments(self, segments: Sequence[LogSegment], reason: str = "") -> int: ...

def deletable_segments(log: RetainedLog, predicate: Callable[[LogSegment, Optional[LogSegment]], bool], *,
                       high_watermark: Optional[int] = None) -> List[LogSegment]:
    """Kafka's ``deletableSegments``: leading segments for which ``predicate(segment, next)``
    holds, whose upper bound is <= the high watermark, excluding an empty last segment."""
    segs: Sequence[LogSegment] = log.segments
    hw = log.high_watermark if high_watermark is None else high_watermark
    leo = log.log_end_offset
    out: List[LogSegment] = []
    for i, seg in enumerate(segs):
        nxt = segs[i + 1] if i + 1 < len(segs) else None
        if nxt is None and seg.size == 0:
            break
        upper = nxt.base_offset if nxt is not None else leo
        if hw >= upper and predicate(seg, nxt):
            out.append(seg)
        else:
            break
    return out


def future_timestamp_segments(log: RetainedLog, now: Optional[int] = None) -> List[FutureTimestampSegment]:
    """Segments whose largest timestamp is more than the tolerance ahead of ``now``."""
    now = log.clock() if now is None else now
    tolerance = log.config.retention_future_timestamp_tolerance_ms
    policy = log.config.retention_future_timestamp_policy
    out = []
    for seg in log.segments:
        if seg.size == 0:
            continue
        ts = seg.max_timestamp_so_far
        if ts >= 0 and ts - now > tolerance:
            out.append(FutureTimestampSegment(seg.log.path, seg.base_offset, ts, now, ts - now, policy))
    return out


def delete_old_segments(log: RetainedLog, *, now: Optional[int] = None, high_watermark: Optional[int] = None,
                        ignore_policy: bool = False) -> RetentionResult:
    """Kafka's ``deleteOldSegments``: log-start-offset breach, then (``cleanup.policy`` contains
    ``delete``, or ``ignore_policy``) size breach and time breach. ``now`` defaults to the log's
    clock, ``high_watermark`` to the log's (the log end offset for an embedded single replica)."""
    now = log.clock() if now is None else now
    result = RetentionResult(log.dir_name)
    result.future_timestamp_segments = future_timestamp_segments(log, now)
    for f in result.future_timestamp_segments:
        logger.warning(
            "Segment %s of partition %s has largest timestamp %d, %d ms in the future: %s",
            f.file, log.dir_name, f.largest_timestamp, f.ahead_ms,
            "time-based retention uses the file modification time for it "
            "(retention.future.timestamp.policy=mtime)" if f.policy == "mtime" else
            "it and every later segment are kept by time-based retention until then "
            "(set retention.future.timestamp.policy=mtime to use the file modification time)")
    future_bases = {f.base_offset for f in result.future_timestamp_segments}

    _delete_log_start_offset_breached(log, result, high_watermark)
    if ignore_policy or log.config.delete:
        _delete_size_breached(log, result, high_watermark)
        _delete_time_breached(log, now, future_bases, result, high_watermark)
    result.log_start_offset = log.log_start_offset
    return result


def time_breach_due(log: RetainedLog, result: RetentionResult) -> Optional[int]:
    """When a retention pass could next delete a segment of ``log`` (just visited, with
    ``result``), its offsets, segments and configuration unchanged: the first segment's largest
    timestamp + ``retention.ms`` + 1 (segments go in order, so none before it), or ``INT64_MAX``
    for never (no time retention, or only an empty active segment left); a size or log-start
    breach needs a change first. None when it must be visited at every pass: a segment stamped in
    the future is warned of at each."""
    if result.future_timestamp_segments:
        return None
    retention_ms = log.config.retention_ms
    if retention_ms < 0 or not log.config.delete:
        return INT64_MAX
    segs = log.segments
    first = segs[0]
    if len(segs) == 1 and first.size == 0:
        return INT64_MAX
    return first.largest_timestamp() + retention_ms + 1


def _delete(log: RetainedLog, segments: List[LogSegment], reason: str, result: RetentionResult) -> None:
    if not segments:
        return
    segs = log.segments
    infos = []
    for seg in segments:
        i = segs.index(seg)
        nxt = segs[i + 1].base_offset if i + 1 < len(segs) else log.log_end_offset
        infos.append(DeletedSegment(seg.base_offset, nxt, seg.size, seg.largest_timestamp(), reason))
    log.delete_segments(segments, reason)
    result.deleted.extend(infos)
    for d in infos:
        logger.info("Deleting segment %d of partition %s due to %s (%d bytes)", d.base_offset,
                    log.dir_name, reason, d.size_in_bytes)


def _delete_log_start_offset_breached(log: RetainedLog, result: RetentionResult, hw: Optional[int]) -> None:
    start = log.log_start_offset

    def pred(seg: LogSegment, nxt: Optional[LogSegment]) -> bool:
        return nxt is not None and nxt.base_offset <= start
    _delete(log, deletable_segments(log, pred, high_watermark=hw), "log-start-offset", result)


def _delete_size_breached(log: RetainedLog, result: RetentionResult, hw: Optional[int]) -> None:
    retention_bytes = log.config.retention_bytes
    if retention_bytes < 0:
        return
    size = log.size
    if size < retention_bytes:
        return
    diff = [size - retention_bytes]

    def pred(seg: LogSegment, nxt: Optional[LogSegment]) -> bool:
        if diff[0] - seg.size >= 0:
            diff[0] -= seg.size
            return True
        return False
    _delete(log, deletable_segments(log, pred, high_watermark=hw), "retention-size", result)


def _delete_time_breached(log: RetainedLog, now: int, future_bases: Set[int], result: RetentionResult,
                          hw: Optional[int]) -> None:
    retention_ms = log.config.retention_ms
    if retention_ms < 0:
        return
    use_mtime = log.config.retention_future_timestamp_policy == "mtime"

    def pred(seg: LogSegment, nxt: Optional[LogSegment]) -> bool:
        if use_mtime and seg.base_offset in future_bases:
            ts = seg.last_modified_ms()
        else:
            ts = seg.largest_timestamp()
        return bool(now - ts > retention_ms)
    _delete(log, deletable_segments(log, pred, high_watermark=hw), "retention-time", result)
