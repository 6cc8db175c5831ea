"""Admission control of the streaming source: how far the next micro-batch may read.

With Spark's Kafka source semantics (``KafkaMicroBatchStream.latestOffset``):

* ``maxOffsetsPerTrigger``: at most that many offsets per micro-batch, split across the
  topic-partitions in proportion to their lag (:func:`limit_offsets`);
* ``minOffsetsPerTrigger`` with ``maxTriggerDelay``: a trigger is skipped (the end offsets stay the
  start offsets, so no batch runs) while fewer new offsets than the minimum are available and less
  than the delay has passed since the last batch; the first trigger of a query always runs
  (:class:`TriggerDelay`).

Beyond Spark's source, ``maxBytesPerTrigger`` caps a micro-batch by the bytes of ``.log`` batches
it reads (:func:`limit_bytes`): kafkalog knows where each batch lies in its segment.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable

from kafkalog.log.read.partition_view import PartitionView
from kafkalog.spark.log_view import PartitionDir, open_partition

Key = tuple[str, str]                  # (topic, partition as a string): the offsets' JSON keys
Lags = dict[Key, tuple[int, int]]      # start offset, end offset the batch could read up to


def limit_offsets(lags: Lags, budget: int) -> dict[Key, int]:
    """End offsets reading at most ``budget`` offsets in all, each partition's share in
    proportion to its lag (a partition with lag gets at least one offset while the budget lasts)."""
    total = sum(max(0, e - s) for s, e in lags.values())
    out: dict[Key, int] = {}
    for key, (s, e) in sorted(lags.items()):
        lag = max(0, e - s)
        share = lag if total <= budget else (lag * budget) // total
        if lag and share == 0 and total > 0:
            share = 1 if budget >= len(lags) else 0
        out[key] = min(e, s + share) if lag else s
    return out


def _byte_position(view: PartitionView, offset: int) -> int:
    """Estimated byte position of ``offset`` in the partition's segments laid end to end: the
    sizes of the segments before its floor segment plus its ``.index`` position there."""
    segments = view.segments
    i = bisect.bisect_right(view.bases, offset) - 1
    if i < 0:
        return 0
    return sum(s.size for s in segments[:i]) + segments[i].index_position(offset)


def _end_within(view: PartitionView, start: int, end: int, budget: int, at_least_one: bool
                ) -> int:
    """The end offset of the whole batches from ``start`` whose sizes add up to at most
    ``budget`` (one batch regardless with ``at_least_one``), never past ``end``."""
    taken = 0
    reached = start
    segments = view.segments
    first = max(0, bisect.bisect_right(view.bases, start) - 1)
    for k in range(first, len(segments)):
        seg = segments[k]
        for batch in seg.walk(seg.index_position(start) if k == first else 0):
            if batch.last_offset < start:
                continue
            if reached >= end:
                return reached
            size = batch.size_in_bytes
            if taken + size > budget and not (at_least_one and taken == 0):
                return reached
            taken += size
            reached = min(end, batch.last_offset + 1)
    return reached


def limit_bytes(pdirs: dict[Key, PartitionDir], lags: Lags, budget: int) -> dict[Key, int]:
    """End offsets reading at most ``budget`` bytes of ``.log`` batches in all, each partition's
    share in proportion to its lag in bytes (estimated through the ``.index``), in whole batches.
    When no partition's share holds its next batch, the partition with the largest lag reads one
    batch, so a batch larger than the limit cannot stall the query."""
    views = {k: open_partition(pdirs[k]) for k, (s, e) in lags.items() if e > s and k in pdirs}
    try:
        byte_lags = {k: max(0, _byte_position(v, lags[k][1]) - _byte_position(v, lags[k][0]))
                     for k, v in views.items()}
        total = sum(byte_lags.values())
        out = {k: s for k, (s, _e) in lags.items()}
        for key, view in sorted(views.items()):
            s, e = lags[key]
            share = budget if total <= budget else (byte_lags[key] * budget) // max(1, total)
            out[key] = _end_within(view, s, e, share, False)
        if views and all(out[k] == lags[k][0] for k in views):
            key = max(views, key=lambda k: (byte_lags[k], lags[k][1] - lags[k][0]))
            out[key] = _end_within(views[key], lags[key][0], lags[key][1], budget, True)
        return out
    finally:
        for v in views.values():
            v.close()


class TriggerDelay:
    """``minOffsetsPerTrigger`` / ``maxTriggerDelay``: whether a trigger should wait for data."""

    def __init__(self, min_offsets: int, max_delay_ms: int,
                 clock_ms: Callable[[], float]) -> None:
        self.min_offsets = min_offsets
        self.max_delay_ms = max_delay_ms
        self.clock_ms = clock_ms
        self.last_trigger_ms: float | None = None  # Spark's starts at 0: the first batch runs

    def skip(self, new_offsets: int) -> bool:
        """True to skip this trigger: fewer than ``min_offsets`` new offsets and the delay since
        the last batch not yet over. A trigger that runs restarts the delay."""
        now = self.clock_ms()
        if self.last_trigger_ms is None or now - self.last_trigger_ms >= self.max_delay_ms:
            self.last_trigger_ms = now
            return False
        if new_offsets < self.min_offsets:
            return True
        self.last_trigger_ms = now
        return False
