"""How a reader walks the batches of a ``.log``: the compiled header walker
(:func:`kafkalog.record.header_walk.walk`) finds them, and each is handed out as a batch view
(:class:`~kafkalog.record.batch.DefaultRecordBatch`, or the legacy sibling) whose
:attr:`position` is the file's. Three sources of bytes, one walk:

- a buffer holding the file from its first byte (a memory map of a snapshot):
  :func:`walk_batches`;
- a live segment read by ``pread`` windows of whole batches
  (:meth:`kafkalog.log.file_records.FileRecords.batches`, the same views);
- a file in object storage read in ranged requests
  (:class:`~kafkalog.log.read.ranged_read.ChunkedBatches`): :func:`walk_ranges`.

The file rules are Kafka's ``FileLogInputStream``: a partial batch at the end ends the walk; a
bad length, magic or v2 batch size is a :class:`~kafkalog.errors.CorruptRecordError` at its
position. CRCs are the reader's (``ensure_valid``).
"""

from __future__ import annotations

from typing import Iterator, Optional, Protocol, Sequence, Tuple, cast

from kafkalog.errors import CorruptRecordError, KafkalogError
from kafkalog.log.read.ranged_read import ChunkedBatches
from kafkalog.log.read.view_files import Buffer, RangeSource
from kafkalog.record.header_walk import FindingKind, HeaderWalk
from kafkalog.record.header_walk import walk as header_walk
from kafkalog.record.records import batch_views

__all__ = ["ViewRecord", "ViewBatch", "walk_batches", "walk_ranges"]

#: batches found by the first header walk of :func:`walk_batches`, and at most per walk
_FIRST_WALK_WINDOW = 16
_MAX_WALK_WINDOW = 4096
#: findings that end a walk without an error: a batch being written, the end of a snapshot
_TAILS = (FindingKind.SHORT_TAIL, FindingKind.PARTIAL_TAIL)


class ViewRecord(Protocol):
    """The fields of a record a reader's rules look at."""

    @property
    def offset(self) -> int: ...

    @property
    def timestamp(self) -> int: ...

    @property
    def key(self) -> Optional[bytes]: ...

    @property
    def value(self) -> Optional[bytes]: ...

    @property
    def headers(self) -> Sequence[Tuple[str, Optional[bytes]]]: ...


class ViewBatch(Protocol):
    """The fields of a batch (any magic) a reader's rules look at
    (:class:`kafkalog.record.batch.RecordBatch` and its legacy sibling); ``position`` is the
    batch's position in its ``.log``."""

    position: int
    size_in_bytes: int
    magic: int

    @property
    def base_offset(self) -> int: ...

    @property
    def last_offset(self) -> int: ...

    @property
    def max_timestamp(self) -> int: ...

    @property
    def producer_id(self) -> int: ...

    @property
    def partition_leader_epoch(self) -> int: ...

    @property
    def is_transactional(self) -> bool: ...

    @property
    def is_control(self) -> bool: ...

    def ensure_valid(self) -> None: ...

    def records(self) -> Sequence[ViewRecord]: ...


def _stop(found: HeaderWalk) -> bool:
    """True when the walk ended at a tail (a batch being written, the end of a snapshot); raises
    :class:`CorruptRecordError` when it ended at damage."""
    finding = found.finding
    if finding is None or finding.kind is FindingKind.NEED_MORE:
        return False
    if finding.kind in _TAILS:
        return True
    raise CorruptRecordError(finding.message, position=finding.position)


def walk_batches(buf: Buffer, position: int = 0, *, base: int = 0) -> Iterator[ViewBatch]:
    """The batches of ``buf`` (the bytes of a file from its position ``base``) from file
    position ``position``: header walks of a few batches first (readers often stop after a few),
    growing."""
    window = _FIRST_WALK_WINDOW
    end = base + len(buf)
    while True:
        found = header_walk(buf, position, end, verify_crc=False, max_batches=window, base=base)
        yield from cast(Iterator[ViewBatch], batch_views(buf, found, base))
        if _stop(found) or found.finding is not None or found.count < window:
            return
        position = found.end
        window = min(window * 4, _MAX_WALK_WINDOW)


def walk_ranges(read: RangeSource, position: int, size: int, path: str, *,
                limit: Optional[int] = None, whole: bool = False) -> Iterator[ViewBatch]:
    """The batches of a file read in ranged requests (object stores): chunks of whole batches
    from byte ``position`` of a file of ``size`` bytes, up to byte ``limit`` (from the
    ``.index``: no batch past it is wanted) or the end, small first and growing with the next
    ones prefetched, or, ``whole`` (the caller reads every batch up to ``limit``), large from the
    start (:class:`~kafkalog.log.read.ranged_read.ChunkedBatches`)."""
    hi = size if limit is None else min(limit, size)
    for start, chunk in ChunkedBatches(read, position, hi, path, whole=whole,
                                       partial_tail=hi == size):
        try:
            yield from walk_batches(chunk, start, base=start)
        except KafkalogError as e:
            raise (e.at(path, 0) if e.file is None else e) from None
