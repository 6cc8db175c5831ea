"""Resolving the topic-partition offset ranges of a read, and grouping them into Spark tasks.

Each Spark task costs ~40 ms, so a read is not split per segment: by default one task reads one
topic-partition range (like Spark's Kafka source), small ranges are packed together until a task
holds ``MIN_TASK_RECORDS`` offsets, and ``minPartitions`` splits large ranges by offset so that
about ``minPartitions`` tasks run. Splitting costs nothing at read time: a task seeks to its start
offset through the ``.index``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

from kafkalog.errors import OffsetOutOfRangeError
from kafkalog.spark.commit import pending_bounds
from kafkalog.spark.log_view import (
    PartitionBounds,
    PartitionDir,
    list_partitions,
    offset_for_timestamp,
    partition_bounds,
    read_log_start_checkpoint,
)
from kafkalog.spark.options import EARLIEST, LATEST, InvalidOptionError, ReadOptions

MIN_TASK_RECORDS = 200_000


@dataclass(frozen=True)
class OffsetRange:
    """Offsets ``[start, end)`` of one topic-partition directory."""
    topic: str
    partition: int
    path: str
    start: int
    end: int

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)

    @property
    def partition_dir(self) -> PartitionDir:
        return PartitionDir(self.topic, self.partition, self.path)


class ReadTask(InputPartition):
    """One Spark task: a list of offset ranges read one after the other."""

    def __init__(self, ranges: list[OffsetRange]) -> None:  # InputPartition wants a value
        super().__init__(None)
        self.ranges = ranges

    def __repr__(self) -> str:
        return "ReadTask(" + ", ".join(f"{r.topic}-{r.partition}[{r.start},{r.end})"
                                       for r in self.ranges) + ")"


def selected_partitions(opts: ReadOptions) -> list[PartitionDir]:
    """The partition directories selected by ``subscribe`` / ``subscribePattern`` / ``assign``."""
    found = [p for p in list_partitions(opts.path) if opts.matches_topic(p.topic)]
    if opts.assign is not None:
        wanted = set(opts.assign)
        have = {(p.topic, p.partition) for p in found}
        missing = sorted(wanted - have)
        if missing:
            raise InvalidOptionError(f"option 'assign': no partition directory for "
                                     f"{', '.join(f'{t}-{p}' for t, p in missing)} in {opts.path}")
        found = [p for p in found if (p.topic, p.partition) in wanted]
    return found


def _data_loss(opts: ReadOptions, message: str) -> None:
    if opts.fail_on_data_loss:
        raise OffsetOutOfRangeError(message + ". Some data may have been lost because it is no "
                                    "longer available in the log (retention or deletion); if you "
                                    "want the query to continue, set the option "
                                    "'failOnDataLoss' to 'false'.")


def resolve_start(opts: ReadOptions, pdir: PartitionDir, bounds: PartitionBounds,
                  default_kind: str = "earliest") -> int:
    """The start offset of one partition for ``startingOffsets`` / ``startingTimestamp`` / ..."""
    kind, value = opts.starting.for_partition((pdir.topic, pdir.partition), default_kind)
    if kind == "timestamp":
        found = offset_for_timestamp(pdir, value, bounds.log_start_offset)
        if found is None:
            if opts.starting_by_timestamp_strategy == "latest":
                return bounds.log_end_offset
            raise OffsetOutOfRangeError(
                f"no offset of {pdir.topic}-{pdir.partition} has a timestamp >= {value} "
                "(set startingOffsetsByTimestampStrategy=latest to start at the latest offset)",
                file=pdir.path)
        return found
    if value == EARLIEST:
        return bounds.log_start_offset
    if value == LATEST:
        return bounds.log_end_offset
    if value < bounds.log_start_offset:
        _data_loss(opts, f"starting offset {value} of {pdir.topic}-{pdir.partition} is below the "
                         f"log start offset {bounds.log_start_offset}")
        return bounds.log_start_offset
    if value > bounds.log_end_offset:
        _data_loss(opts, f"starting offset {value} of {pdir.topic}-{pdir.partition} is beyond the "
                         f"log end offset {bounds.log_end_offset}")
        return bounds.log_end_offset
    return value


def resolve_end(opts: ReadOptions, pdir: PartitionDir, bounds: PartitionBounds) -> int:
    """The (exclusive) end offset of one partition for ``endingOffsets`` / ``endingTimestamp``."""
    kind, value = opts.ending.for_partition((pdir.topic, pdir.partition), "latest")
    if kind == "timestamp":
        found = offset_for_timestamp(pdir, value, bounds.log_start_offset)
        return bounds.log_end_offset if found is None else found
    if value == LATEST:
        return bounds.log_end_offset
    return min(max(value, bounds.log_start_offset), bounds.log_end_offset)


def check_start_not_after_end(pdir: PartitionDir, start: int, end: int) -> None:
    """Spark's check of the resolved offsets of a batch read: the start may not be past the end."""
    if start > end:
        raise InvalidOptionError(
            f"[RESOLVED_START_OFFSET_GREATER_THAN_END_OFFSET] The resolved start offset {start} is "
            f"greater than the resolved end offset {end} for topic {pdir.topic} partition "
            f"{pdir.partition}. There may be multiple reasons: 1. Start offset is set to too big a "
            "value that after resolution, end offset is smaller than it (a start timestamp and an "
            "end offset, a start offset and an end timestamp, or a start offset and the end set to "
            "latest). 2. The topic partition is broken.")


@dataclass
class PushedFilters:
    """What ``pushFilters`` learned: restrictions applied exactly (topic, partition, offset) or
    used to prune (timestamp lower bound)."""
    topics: set[str] | None = None
    partitions: set[int] | None = None
    min_partition: int | None = None
    max_partition: int | None = None
    min_offset: int | None = None
    max_offset: int | None = None      # exclusive
    min_timestamp: int | None = None   # ms, lower bound for pruning only

    def keeps(self, pdir: PartitionDir) -> bool:
        if self.topics is not None and pdir.topic not in self.topics:
            return False
        if self.partitions is not None and pdir.partition not in self.partitions:
            return False
        if self.min_partition is not None and pdir.partition < self.min_partition:
            return False
        return self.max_partition is None or pdir.partition <= self.max_partition


def plan_ranges(opts: ReadOptions, pushed: PushedFilters | None = None) -> list[OffsetRange]:
    """The offset range of every selected partition for a batch read, narrowed by ``pushed``."""
    pushed = pushed or PushedFilters()
    checkpoint = read_log_start_checkpoint(opts.path)
    pending = pending_bounds(opts.path)  # a commit still appending is not visible yet
    ranges = []
    for pdir in selected_partitions(opts):
        if not pushed.keeps(pdir):
            continue
        bounds = partition_bounds(pdir, checkpoint)
        resolved_end = resolve_end(opts, pdir, bounds)
        start = resolve_start(opts, pdir, bounds)  # may report data loss first, as Spark's
        kind, given = opts.starting.for_partition((pdir.topic, pdir.partition), "earliest")
        check_start_not_after_end(pdir, given if kind == "offset" and given >= 0 else start,
                                  resolved_end)
        end = min(resolved_end, pending.get((pdir.topic, pdir.partition), bounds.log_end_offset))
        if pushed.min_offset is not None:
            start = max(start, pushed.min_offset)
        if pushed.max_offset is not None:
            end = min(end, pushed.max_offset)
        if pushed.min_timestamp is not None and start < end:
            found = offset_for_timestamp(pdir, pushed.min_timestamp, start)
            start = end if found is None else max(start, found)
        if start < end:
            ranges.append(OffsetRange(pdir.topic, pdir.partition, pdir.path, start, end))
    return ranges


def _split(r: OffsetRange, parts: int) -> list[OffsetRange]:
    """``r`` cut into ``parts`` ranges of (almost) equal size."""
    if parts <= 1:
        return [r]
    step = math.ceil(r.size / parts)
    return [OffsetRange(r.topic, r.partition, r.path, s, min(r.end, s + step))
            for s in range(r.start, r.end, step)]


def plan_tasks(ranges: Sequence[OffsetRange], min_partitions: int | None = None,
               min_task_records: int = MIN_TASK_RECORDS, *,
               max_records: int | None = None) -> list[ReadTask]:
    """Group ranges into tasks, as Spark's ``KafkaOffsetRangeCalculator``: with ``max_records``
    (``maxRecordsPerPartition``) first cut every range into pieces of at most that many offsets;
    then with ``min_partitions``, split pieces larger than ``total / min_partitions`` offsets;
    then pack consecutive small pieces into one task while the task stays within
    ``min(min_task_records, target, max_records)`` offsets."""
    ranges = [r for r in ranges if r.size > 0]
    if not ranges:
        return []
    if max_records is not None:
        ranges = [p for r in ranges for p in _split(r, math.ceil(r.size / max_records))]
    total = sum(r.size for r in ranges)
    target = math.ceil(total / min_partitions) if min_partitions else None
    pieces: list[OffsetRange] = []
    for r in ranges:
        if target is not None and r.size > target:
            pieces.extend(_split(r, math.ceil(r.size / target)))
        else:
            pieces.append(r)
    pack_limit = min(x for x in (min_task_records, target, max_records) if x is not None)
    tasks: list[ReadTask] = []
    current: list[OffsetRange] = []
    current_size = 0
    for piece in pieces:
        if current and current_size + piece.size > pack_limit:
            tasks.append(ReadTask(current))
            current, current_size = [], 0
        current.append(piece)
        current_size += piece.size
    if current:
        tasks.append(ReadTask(current))
    return tasks
