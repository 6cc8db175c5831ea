"""Grouping segments for one cleaning pass (Kafka's ``Cleaner.groupSegmentsBySize``; spec §4.11
step 3, §7.20).

Consecutive segments are merged into one output segment while the group's total ``.log`` size stays
<= ``segment.bytes``, its offset-index and time-index bytes each stay <= ``segment.index.bytes``, and
the offset span (next segment's base - 1, or firstUncleanableOffset - 1 for the last segment, minus
the group's first base offset) fits a 32-bit relative offset. An empty candidate skips the span
check (so empty segments left every 2^31 offsets are absorbed).
"""
from __future__ import annotations

import os
from typing import List, Sequence, Tuple

from kafkalog.log.index._mmap_index import AbstractIndex
from kafkalog.log.segment import LogSegment
from kafkalog.record.constants import INT32_MAX

__all__ = ["group_segments_by_size", "index_size_bytes"]



def _valid_bytes(index: AbstractIndex, path: str) -> int:
    """The bytes of ``index``'s entries (Kafka's ``sizeInBytes``): from the mapped index when it
    is loaded (a preallocated active index is longer), else from the file, which is not opened."""
    try:
        size = os.path.getsize(path)
    except OSError:
        size = 0
    if index.is_loaded:
        n = index.entries * index.entry_size
        return min(size, n) if size else n
    return size - size % index.entry_size


def index_size_bytes(seg: LogSegment) -> Tuple[int, int]:
    """``(offset index bytes, time index bytes)`` of a segment (the valid entries; for an inactive
    segment that is the trimmed file length)."""
    return (_valid_bytes(seg.offset_index, seg.offset_index_path),
            _valid_bytes(seg.time_index, seg.time_index_path))


def _last_offset_for_first(segs: Sequence[LogSegment], i: int, first_uncleanable_offset: int) -> int:
    if i + 1 < len(segs):
        return segs[i + 1].base_offset - 1
    return first_uncleanable_offset - 1


def group_segments_by_size(segments: Sequence[LogSegment], max_size: int, max_index_size: int,
                           first_uncleanable_offset: int) -> List[List[LogSegment]]:
    """Split ``segments`` (oldest first) into groups; see the module docstring."""
    segs = list(segments)
    sizes = [index_size_bytes(s) for s in segs]
    groups: List[List[LogSegment]] = []
    i = 0
    while i < len(segs):
        group = [segs[i]]
        log_size = segs[i].size
        index_size, time_index_size = sizes[i]
        i += 1
        while i < len(segs):
            s = segs[i]
            oi, ti = sizes[i]
            if not (log_size + s.size <= max_size
                    and index_size + oi <= max_index_size
                    and time_index_size + ti <= max_index_size
                    and (s.size == 0 or _last_offset_for_first(segs, i, first_uncleanable_offset)
                         - group[0].base_offset <= INT32_MAX)):
                break
            group.append(s)
            log_size += s.size
            index_size += oi
            time_index_size += ti
            i += 1
        groups.append(group)
    return groups
