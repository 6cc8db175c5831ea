"""A read-only snapshot of one partition directory (:class:`PartitionView`): the segment files
present when it was opened, read through :class:`~kafkalog.log.read.view_files.ViewFiles` (a
local directory or an object store), with, when tiered storage holds the older ones, the remote
segments below the local ones. It is a :class:`~kafkalog.log.read.reader.PartitionReader` over
:class:`~kafkalog.log.read.segments.SegmentSnapshot` s: the same read rules as a live log's. It
never locks, recovers or writes.
"""

from __future__ import annotations

import logging
from typing import List, NamedTuple, Optional, Protocol, Tuple

from kafkalog.errors import DataLossError, KafkalogError
from kafkalog.log.naming import is_log_file, log_file, offset_from_file_name
from kafkalog.log.read.reader import PartitionReader
from kafkalog.log.read.rules import floor_index
from kafkalog.log.read.segments import SegmentSnapshot
from kafkalog.log.read.view_files import LocalFiles, ViewFiles

__all__ = ["PartitionView", "RemoteSegments", "RemoteSegmentsSource", "segment_bases",
           "open_partition_view"]

_log = logging.getLogger(__name__)


class RemoteSegments(Protocol):
    """A partition's segments in remote storage
    (:class:`kafkalog.tiered.remote_segments.RemotePartition`): where to read them, their base
    offsets, and the offset after each one's last when its remote storage manager recorded it."""

    @property
    def files(self) -> ViewFiles: ...

    @property
    def directory(self) -> str: ...

    @property
    def bases(self) -> List[int]: ...

    @property
    def next_offsets(self) -> List[Optional[int]]: ...


def segment_bases(files: ViewFiles, directory: str) -> List[int]:
    """Sorted base offsets of the ``.log`` segments of a partition directory."""
    bases = []
    for name in files.list_dir(directory):
        if is_log_file(name):
            try:
                bases.append(offset_from_file_name(name))
            except KafkalogError:
                continue
    bases.sort()
    return bases


class RemoteSegmentsSource(Protocol):
    """Where a data directory's remote (tiered) segments are
    (:class:`kafkalog.tiered.remote_segments.RemoteStorage`): the remote segments of one
    partition below ``local_start`` (the base offset of its first local segment), None when
    remote storage holds none of it."""

    def remote_partition(self, topic: str, partition: int, *, local_files: ViewFiles,
                         local_dir: Optional[str],
                         local_start: Optional[int]) -> Optional[RemoteSegments]: ...


class PartitionView(PartitionReader):
    """A read-only snapshot of one partition directory: never locks, never recovers, never
    writes (no index is created, trimmed or rebuilt, no file is opened for writing).

    The ``.log`` files present when the view is opened are read as they were then; reads stop at
    that snapshot (the log end offset is that of the last complete batch in it), so a writer
    appending meanwhile is never observed half way. A segment deleted by the writer later stays
    readable. A partial batch at the end of the last segment (an append in progress, or a crash
    not yet recovered) ends the log; a partial batch in an older segment raises
    :class:`CorruptRecordError`. ``log_start_checkpoint`` is this partition's entry of the
    ``log-start-offset-checkpoint`` (it raises the log start offset above the first segment's
    base offset).

    ``open_all=False`` (a reader of a range, such as a Spark task) opens a segment's ``.log`` only
    when it is read; one deleted by retention before that raises
    :class:`~kafkalog.errors.OffsetOutOfRangeError`.

    ``log_end_offset``: the log end offset the caller already found (a Spark task: its planner
    did, and it reads below it): the view takes it instead of walking the tail of the last
    segment for it, and reads no further."""

    def __init__(self, path: str, log_start_checkpoint: Optional[int] = None, *,
                 files: Optional[ViewFiles] = None, open_all: bool = True,
                 remote: Optional[RemoteSegments] = None, fail_on_data_loss: bool = True,
                 log_end_offset: Optional[int] = None) -> None:
        self.dir = path
        self.files: ViewFiles = files if files is not None else LocalFiles()
        self._segs: List[SegmentSnapshot] = []
        for base in segment_bases(self.files, path):
            seg = SegmentSnapshot(self.files, path, base)
            if not open_all or seg.open():
                self._segs.append(seg)
        last = len(self._segs) - 1
        while last >= 0 and not self._segs[last].open():  # (open_all=False: deleted meanwhile)
            del self._segs[last]
            last -= 1
        #: the remote (tiered) segments below the local ones, and the offset after each one's
        #: last when its remote storage manager recorded it
        self.remote_count = 0
        self._remote_next: List[Optional[int]] = []
        self.fail_on_data_loss = fail_on_data_loss
        self._gaps: Optional[List[Tuple[int, int]]] = None
        if remote is not None:
            first_local = self._segs[0].base_offset if self._segs else None
            below = [(b, n) for b, n in zip(remote.bases, remote.next_offsets, strict=True)
                     if first_local is None or b < first_local]
            self._segs[:0] = [SegmentSnapshot(remote.files, remote.directory, b) for b, _ in below]
            self._remote_next = [n for _, n in below]
            self.remote_count = len(below)
        bases = [s.base_offset for s in self._segs]
        leo = self._find_log_end_offset(bases) if log_end_offset is None else log_end_offset
        for s in self._segs:
            s.end_offset = leo
        first = bases[0] if bases else (log_start_checkpoint or 0)
        start = max(first, log_start_checkpoint if log_start_checkpoint is not None else first)
        #: offsets from the log start offset (the checkpoint) to the first segment, with remote
        #: storage: its first segments were deleted from there, so they are a gap, not retention
        self._leading_gap: Optional[Tuple[int, int]] = None
        if remote is not None and log_start_checkpoint is not None and log_start_checkpoint < first:
            start = log_start_checkpoint
            self._leading_gap = (log_start_checkpoint, first)
        PartitionReader.__init__(self, self._segs, min(start, leo), leo, name=path)

    # --- offsets ---------------------------------------------------------------------------------

    @property
    def segments(self) -> List[SegmentSnapshot]:
        return list(self._segs)

    @property
    def size(self) -> int:
        return sum(s.size for s in self._segs)

    @property
    def gaps(self) -> List[Tuple[int, int]]:
        """``[first, last + 1)`` offset ranges missing before the first remote segment (from the
        ``log-start-offset-checkpoint``'s log start offset) or after a remote segment: the
        segment that held them was deleted from remote storage (not moved there), so no reader
        can have them. Found from the manifests' end offsets, or by walking each remote
        segment's last batch."""
        if self._gaps is None:
            self._gaps = [] if self._leading_gap is None else [self._leading_gap]
            for k in range(self.remote_count):
                if k + 1 >= len(self._segs):
                    break
                nxt = self._remote_next[k]
                if nxt is None:
                    nxt = self._segs[k].next_offset()
                following = self._segs[k + 1].base_offset
                if nxt < following:
                    self._gaps.append((nxt, following))
        return self._gaps

    def missing_offsets(self, start: int, end: int) -> List[Tuple[int, int]]:
        """The :attr:`gaps` overlapping ``[start, end)``, clipped to it."""
        if not self.remote_count and self._leading_gap is None:
            return []
        return [(max(a, start), min(b, end)) for a, b in self.gaps if a < end and b > start]

    def data_loss(self, missing: List[Tuple[int, int]]) -> None:
        """A read across offsets deleted from remote storage: :class:`DataLossError` naming
        them, or, without ``failOnDataLoss``, a warning (the read skips them)."""
        what = ", ".join(f"{a}..{b - 1}" for a, b in missing)
        if self.fail_on_data_loss:
            raise DataLossError(f"offsets {what} are neither in the local log nor in remote "
                                "storage (a remote segment was deleted)",
                                file=self.log_path_of(missing[0][0]))
        _log.warning("%s: skipping offsets %s, deleted from remote storage", self.dir, what)

    def _find_log_end_offset(self, bases: List[int]) -> int:
        for k in range(len(self._segs) - 1, -1, -1):
            seg = self._segs[k]
            found = seg.next_offset()
            if found > seg.base_offset or k == len(self._segs) - 1:
                return found            # (an empty active segment: its base offset)
        return bases[-1] if bases else 0

    def log_path_of(self, offset: int) -> str:
        """The ``.log`` file of the segment holding ``offset`` (for errors)."""
        return log_file(self.dir, self.bases[floor_index(self.bases, offset)] if self.bases else 0)

    # --- lifecycle -------------------------------------------------------------------------------

    def close(self) -> None:
        for s in self._segs:
            s.close()

    def __enter__(self) -> PartitionView:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"PartitionView(dir={self.dir}, logStartOffset={self.log_start_offset}, "
                f"logEndOffset={self.log_end_offset}, segments={len(self._segs)})")


def open_partition_view(path: str, topic: str, partition: int, *, files: ViewFiles,
                        log_start_checkpoint: Optional[int] = None, open_all: bool = True,
                        remote: Optional[RemoteSegmentsSource] = None,
                        fail_on_data_loss: bool = True,
                        log_end_offset: Optional[int] = None) -> PartitionView:
    """The read-only :class:`PartitionView` of a partition directory, with, when ``remote`` is
    given, its segments in remote storage below the local ones (offsets continuous across both;
    offsets deleted from remote storage are :attr:`PartitionView.gaps`: reading across one
    raises :class:`~kafkalog.errors.DataLossError` naming them, or, with
    ``fail_on_data_loss=False``, skips them with a warning). ``log_end_offset``: as
    :class:`PartitionView` takes it."""
    found: Optional[RemoteSegments] = None
    if remote is not None:
        local = segment_bases(files, path) if files.is_dir(path) else []
        found = remote.remote_partition(topic, partition, local_files=files, local_dir=path,
                                        local_start=local[0] if local else None)
        if found is None:       # none there: offsets below the local ones can only be a gap
            found = _NoRemoteSegments(files, path, [], [])
    return PartitionView(path, log_start_checkpoint, files=files, open_all=open_all,
                         remote=found, fail_on_data_loss=fail_on_data_loss,
                         log_end_offset=log_end_offset)


class _NoRemoteSegments(NamedTuple):
    files: ViewFiles
    directory: str
    bases: List[int]
    next_offsets: List[Optional[int]]
