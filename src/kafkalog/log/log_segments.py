"""``LogSegments``: a log's segment list as it is published (Kafka's ``LogSegments``)."""

from __future__ import annotations

from bisect import bisect_right
from typing import NamedTuple, Optional, Sequence, Tuple

from kafkalog.log.fetch_data_info import LogOffsetMetadata
from kafkalog.log.segment import LogSegment

__all__ = ["LogSegments"]


class LogSegments(NamedTuple):
    """The segments of a :class:`~kafkalog.log.log.Log` at one moment, oldest first, with their
    base offsets and the log end (its offset and its position in the active segment). Immutable:
    the log publishes a new one on every append, roll, truncation or deletion, and a reader
    holding one is never blocked by the writer."""

    segments: Tuple[LogSegment, ...]
    bases: Tuple[int, ...]
    end: LogOffsetMetadata

    @classmethod
    def of(cls, segments: Sequence[LogSegment], next_offset: int) -> LogSegments:
        """The list of ``segments`` (sorted) whose log end offset is ``next_offset``."""
        segs = tuple(segments)
        active = segs[-1]
        return cls(segs, tuple(s.base_offset for s in segs),
                   LogOffsetMetadata(next_offset, active.base_offset, active.size))

    @property
    def active(self) -> LogSegment:
        return self.segments[-1]

    def floor_index(self, offset: int) -> int:
        """The index of the last segment whose base offset is <= ``offset`` (-1 when none)."""
        return bisect_right(self.bases, offset) - 1

    def floor(self, offset: int) -> Optional[LogSegment]:
        """The segment holding ``offset``: the last one whose base offset is <= it."""
        i = bisect_right(self.bases, offset) - 1
        return self.segments[i] if i >= 0 else None

    def readable_size(self, index: int) -> int:
        """The bytes of segment ``index`` a reader of this moment may read: the log end position
        for the active segment, the size of a sealed one."""
        if index == len(self.segments) - 1:
            return self.end.relative_position_in_segment
        return self.segments[index].size
