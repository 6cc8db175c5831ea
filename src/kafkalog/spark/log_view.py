"""A read-only view of a Kafka data directory for the Spark source, on the log layer's primitives.

Planners and executors only *read* a data directory, which may be live (a broker or a kafkalog
writer has it open) or a copy: this view never takes the ``.lock``, never recovers, never writes.
That is why it does not open :class:`kafkalog.log.log.Log` (whose loader recovers and rewrites
files). It is a thin adapter: partition-directory names come from :mod:`kafkalog.log.naming`,
index lookups from read-only :class:`~kafkalog.log.offset_index.OffsetIndex` /
:class:`~kafkalog.log.time_index.TimeIndex`, checkpoints from
:class:`~kafkalog.log.checkpoint.OffsetCheckpointFile`, and batches from
:func:`kafkalog.record.records.iter_batches` over a read-only memory map of each ``.log``.

A preallocated active index (a live broker's, or one left by a crash) ends in all-zero slots;
lookups here only consider the valid prefix. An index entry pointing past the end of its ``.log``
(a log truncated by a crash) is ignored: the walk starts at the segment's first byte instead.
"""

from __future__ import annotations

import bisect
import mmap
import os
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional, Tuple

from kafkalog.errors import KafkalogError, LogDirError
from kafkalog.log.checkpoint import (CLEANER_OFFSET_CHECKPOINT_FILE, LOG_START_OFFSET_CHECKPOINT_FILE,
                                     OffsetCheckpointFile)
from kafkalog.log.naming import (is_log_file, log_file, offset_from_file_name, offset_index_file,
                                 parse_partition_dir_name, time_index_file)
from kafkalog.log.offset_index import OffsetIndex
from kafkalog.log.time_index import TimeIndex
from kafkalog.record.records import iter_batches

TopicPartition = Tuple[str, int]


@dataclass(frozen=True)
class PartitionDir:
    """One ``<topic>-<partition>`` directory of a data directory."""
    topic: str
    partition: int
    path: str


def list_partitions(data_dir: str) -> List[PartitionDir]:
    """Partition directories of ``data_dir`` sorted by topic then partition; ``-delete`` /
    ``-future`` / ``-stray`` directories, hidden entries and anything that is not
    ``<topic>-<partition>`` are skipped."""
    if not os.path.isdir(data_dir):
        raise LogDirError("data directory does not exist or is not a directory", file=data_dir)
    found = []
    for name in os.listdir(data_dir):
        path = os.path.join(data_dir, name)
        if name.startswith(".") or not os.path.isdir(path):
            continue
        try:
            parsed = parse_partition_dir_name(name)
        except KafkalogError:
            continue
        if not parsed.kind:
            found.append(PartitionDir(parsed.topic, parsed.partition, path))
    found.sort(key=lambda p: (p.topic, p.partition))
    return found


def segment_bases(partition_dir: str) -> List[int]:
    """Sorted base offsets of the ``.log`` segments of a partition directory."""
    bases = []
    for name in os.listdir(partition_dir):
        if is_log_file(name):
            try:
                bases.append(offset_from_file_name(name))
            except KafkalogError:
                continue
    bases.sort()
    return bases


def segment_path(partition_dir: str, base: int) -> str:
    return log_file(partition_dir, base)


def _valid_entries(idx) -> int:
    return max(0, idx.entries - idx.zero_filled_tail_entries())


def index_position(partition_dir: str, base: int, target: int) -> int:
    """Byte position in segment ``base`` of the largest ``.index`` entry <= ``target`` (0 when
    none, or when the segment has no index)."""
    path = offset_index_file(partition_dir, base)
    if not os.path.exists(path):
        return 0
    try:
        idx = OffsetIndex.open_read_only(path, base)
    except KafkalogError:
        return 0  # unreadable index: scanning from the segment start is always correct
    try:
        lo, hi = 0, _valid_entries(idx)
        while lo < hi:  # first entry with offset > target
            mid = (lo + hi) // 2
            if idx.entry(mid).offset <= target:
                lo = mid + 1
            else:
                hi = mid
        return idx.entry(lo - 1).position if lo else 0
    finally:
        idx.close_handler()


def time_index_lookup(partition_dir: str, base: int, timestamp: int) -> Tuple[int, Optional[int]]:
    """``(offset to start scanning from, largest indexed timestamp or None)`` for ``timestamp``
    in segment ``base``: the offset of the largest ``.timeindex`` entry with a timestamp <=
    ``timestamp`` (the segment base when none)."""
    path = time_index_file(partition_dir, base)
    if not os.path.exists(path):
        return base, None
    try:
        idx = TimeIndex.open_read_only(path, base)
    except KafkalogError:
        return base, None
    try:
        n = _valid_entries(idx)
        if not n:
            return base, None
        lo, hi = 0, n
        while lo < hi:
            mid = (lo + hi) // 2
            if idx.entry(mid).timestamp <= timestamp:
                lo = mid + 1
            else:
                hi = mid
        start = idx.entry(lo - 1).offset if lo else base
        return start, idx.entry(n - 1).timestamp
    finally:
        idx.close_handler()


class MappedSegment:
    """A read-only memory map of one ``.log`` file (an empty file maps to ``b""``)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._file = open(path, "rb")
        size = os.fstat(self._file.fileno()).st_size
        self.buf = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ) if size else b""

    def close(self) -> None:
        if isinstance(self.buf, mmap.mmap):
            try:
                self.buf.close()
            except BufferError:  # an Arrow array still references it; the GC unmaps it
                pass
        self._file.close()

    def __enter__(self) -> "MappedSegment":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def iter_segment_batches(pdir: PartitionDir, start: int) -> Iterator[Tuple[MappedSegment, object]]:
    """``(segment, batch)`` for every batch from the floor segment of offset ``start`` on (the
    first segment starts at its ``.index`` position for ``start``). Codec errors name the file."""
    bases = segment_bases(pdir.path)
    i = max(0, bisect.bisect_right(bases, start) - 1)
    for base in bases[i:]:
        path = segment_path(pdir.path, base)
        with MappedSegment(path) as seg:
            pos = index_position(pdir.path, base, start) if base < start else 0
            if pos > len(seg.buf):
                pos = 0
            try:
                for batch in iter_batches(seg.buf, pos):
                    yield seg, batch
            except KafkalogError as err:
                if err.file is None:
                    raise err.at(path, 0) from None
                raise


def read_offset_checkpoint(data_dir: str, name: str) -> Dict[TopicPartition, int]:
    """An offset checkpoint file of ``data_dir`` as ``{(topic, partition): offset}`` (empty when
    missing)."""
    path = os.path.join(data_dir, name)
    if not os.path.exists(path):
        return {}
    return {(tp[0], tp[1]): off for tp, off in OffsetCheckpointFile(path, create=False).read().items()}


def read_log_start_checkpoint(data_dir: str) -> Dict[TopicPartition, int]:
    return read_offset_checkpoint(data_dir, LOG_START_OFFSET_CHECKPOINT_FILE)


def read_cleaner_checkpoint(data_dir: str) -> Dict[TopicPartition, int]:
    """``cleaner-offset-checkpoint``: the first dirty offset of each compacted partition."""
    return read_offset_checkpoint(data_dir, CLEANER_OFFSET_CHECKPOINT_FILE)


@dataclass(frozen=True)
class PartitionBounds:
    """Log start offset and log end offset of one partition as found on disk."""
    log_start_offset: int
    log_end_offset: int


def log_end_offset(pdir: PartitionDir, bases: Optional[List[int]] = None) -> int:
    """Last batch's last offset + 1, walking only the tail of the last non-empty segment (from
    its last ``.index`` entry)."""
    bases = segment_bases(pdir.path) if bases is None else bases
    for base in reversed(bases):
        path = segment_path(pdir.path, base)
        with MappedSegment(path) as seg:
            pos = index_position(pdir.path, base, 1 << 62)
            if pos > len(seg.buf):
                pos = 0
            last = None
            try:
                for last in iter_batches(seg.buf, pos):
                    pass
            except KafkalogError as err:
                raise err.at(path, 0) if err.file is None else err
            if last is not None:
                return last.last_offset + 1
            if base == bases[-1]:
                return base  # an empty active segment: the log end offset is its base offset
    return bases[-1] if bases else 0


def partition_bounds(pdir: PartitionDir, checkpoint: Optional[Dict[TopicPartition, int]] = None
                     ) -> PartitionBounds:
    """Log start offset (first segment base, raised by ``log-start-offset-checkpoint``) and log
    end offset."""
    bases = segment_bases(pdir.path)
    cp = (checkpoint or {}).get((pdir.topic, pdir.partition))
    if not bases:
        start = cp or 0
        return PartitionBounds(start, start)
    leo = max(log_end_offset(pdir, bases), bases[-1])
    start = max(bases[0], cp if cp is not None else bases[0])
    return PartitionBounds(min(start, leo), leo)


def offset_for_timestamp(pdir: PartitionDir, timestamp: int, start_offset: int) -> Optional[int]:
    """Kafka's ListOffsets for ``timestamp`` (spec §4.7): the first offset >= ``start_offset``
    of a record with a timestamp >= ``timestamp``; None when there is none. Segments whose
    ``.timeindex`` proves they hold no such timestamp are skipped (not the last one, whose
    index may lag)."""
    from kafkalog.spark.segment_reader import first_record_at_or_after  # avoids an import cycle
    bases = segment_bases(pdir.path)
    first = max(0, bisect.bisect_right(bases, start_offset) - 1)
    for base in bases[first:]:
        lookup, largest = time_index_lookup(pdir.path, base, timestamp)
        if largest is not None and largest < timestamp and base != bases[-1]:
            continue
        path = segment_path(pdir.path, base)
        target = max(lookup, start_offset)
        with MappedSegment(path) as seg:
            pos = index_position(pdir.path, base, target) if base < target else 0
            if pos > len(seg.buf):
                pos = 0
            for batch in iter_batches(seg.buf, pos):
                if batch.last_offset < start_offset or batch.max_timestamp < timestamp:
                    continue
                found = first_record_at_or_after(batch, timestamp, start_offset, path)
                if found is not None:
                    return found
    return None
