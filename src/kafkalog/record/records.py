"""Iterating the batches of a record set: a log segment, a file slice or a produce payload.

``iter_batches(buf, start=0, end=None, *, strict=False, max_message_size=None)`` implements the
file iteration rules of Kafka's ``FileLogInputStream`` (spec §1.2) and, with ``strict=True``, the
in-memory rules of ``ByteBufferLogInputStream``, over the compiled header walker
(:func:`kafkalog.record.header_walk.walk`, the one batch walker of every layer). It yields
:class:`~kafkalog.record.batch.RecordBatch` views (any magic, :func:`batch_views`) and never
validates CRCs (call ``ensure_valid()``); it stops silently at a partial trailing batch.
:func:`scan_batches` also reports where iteration stopped.
"""
from __future__ import annotations

from typing import Any, Iterator, Optional, cast

from kafkalog.errors import CorruptRecordError
from kafkalog.record.batch import DefaultRecordBatch, RecordBatch, read_batch_header, read_entry_header
from kafkalog.record.constants import LOG_OVERHEAD, MAGIC_OFFSET, RECORD_OVERHEAD_V0, SIZE_OFFSET
from kafkalog.record.crc import Buffer
from kafkalog.record.header_walk import F_MAGIC, F_POSITION, F_SIZE, FindingKind, HeaderWalk, walk
from kafkalog.record.legacy import LegacyRecordBatch

__all__ = ["iter_batches", "scan_batches", "iter_records", "batch_views", "read_batch_header",
           "read_entry_header", "batch_at", "RecordBatch"]

#: batches found by the first header walk of :func:`iter_batches`, and at most per walk
_FIRST_WINDOW = 16
_MAX_WINDOW = 4096


def batch_at(buf: Buffer, position: int = 0, size: Optional[int] = None) -> RecordBatch:
    """The batch view of the entry starting at ``position`` (magic < 2: legacy, else v2).

    ``size`` (the entry size incl. the 12-byte log overhead) is read from the buffer when omitted.
    Raises :class:`CorruptRecordError` when fewer than 17 bytes or fewer than ``size`` bytes remain.
    """
    n = len(buf)
    if position < 0 or n - position < MAGIC_OFFSET + 1:
        raise CorruptRecordError("Batch header is truncated", position=position)
    if size is None:
        size = _size_at(buf, position)
    if size > n - position or size < LOG_OVERHEAD:
        raise CorruptRecordError(f"Batch of {size} bytes does not fit in the {n - position} bytes "
                                 f"that remain", position=position)
    magic = _magic_at(buf, position)
    if magic < 2:
        return LegacyRecordBatch(buf, position, size, magic)
    return DefaultRecordBatch(buf, position, size, magic)



def batch_views(buf: Buffer, found: HeaderWalk, base: int = 0) -> Iterator[RecordBatch]:
    """The batch views of the batches a header walk found in ``buf``, whose first byte is at
    position ``base`` of its file (the views' positions are the file's)."""
    for pos, size, magic in zip(found.column(F_POSITION), found.column(F_SIZE),
                                found.column(F_MAGIC), strict=True):
        # a v0/v1 batch reads a mapped segment like bytes
        yield (LegacyRecordBatch(cast(bytes, buf), pos - base, size, magic, base) if magic < 2
               else DefaultRecordBatch(buf, pos - base, size, magic, base))


def iter_batches(buf: Buffer, start: int = 0, end: Optional[int] = None, *, strict: bool = False,
                 max_message_size: Optional[int] = None) -> Iterator[RecordBatch]:
    """Yield the batches of ``buf[start:end]``.

    File rules (default): stop when 17 or fewer bytes remain or the next batch is incomplete;
    a length below 14 raises :class:`CorruptRecordError`; any magic < 2 is legacy, anything else
    is v2 (the magic is outside the v2 CRC, as in Kafka). In-memory rules (``strict=True``): also
    a magic outside 0..2 raises :class:`CorruptRecordError`. A batch larger than
    ``max_message_size`` (whole batch, incl. the log overhead) raises :class:`CorruptRecordError`
    in both modes. A v2 batch shorter than its header is yielded (its fields raise).
    """
    n = len(buf)
    end = n if end is None else min(end, n)
    pos = start
    window = _FIRST_WINDOW
    limit = -1 if max_message_size is None else max_message_size
    while True:
        found = walk(buf, pos, end, verify_crc=False, max_batches=window, max_size=limit)
        yield from batch_views(buf, found)
        f = found.finding
        if f is None:
            if found.count < window:
                return
            pos = found.end
            window = min(window * 4, _MAX_WINDOW)
            continue
        if f.kind in (FindingKind.SHORT_TAIL, FindingKind.PARTIAL_TAIL):
            return
        if f.kind is FindingKind.BAD_SIZE:
            raise CorruptRecordError(f"Record size {f.a} is less than the minimum record "
                                     f"overhead ({RECORD_OVERHEAD_V0})", position=f.position)
        if f.kind is FindingKind.TOO_LARGE:
            raise CorruptRecordError(f"Record size {f.a} exceeds the largest allowable message "
                                     f"size ({max_message_size}).", position=f.position)
        if f.kind is FindingKind.BAD_MAGIC and strict:
            raise CorruptRecordError(f.message, position=f.position)
        if f.kind not in (FindingKind.BAD_MAGIC, FindingKind.SMALL_BATCH):   # pragma: no cover
            raise CorruptRecordError(f.message, position=f.position)
        # an entry the walker refuses that the stream still hands out: read as its magic says
        # (a v2 batch shorter than its header, any magic >= 2 as v2, a negative one as legacy)
        pos = f.position
        size = _size_at(buf, pos)
        magic = _magic_at(buf, pos)
        yield (LegacyRecordBatch(cast(bytes, buf), pos, size, magic) if magic < 2
               else DefaultRecordBatch(buf, pos, size, magic))
        pos += size


def _size_at(buf: Buffer, pos: int) -> int:
    return int.from_bytes(buf[pos + SIZE_OFFSET:pos + LOG_OVERHEAD], "big", signed=True) + LOG_OVERHEAD


def _magic_at(buf: Buffer, pos: int) -> int:
    return int.from_bytes(buf[pos + MAGIC_OFFSET:pos + MAGIC_OFFSET + 1], "big", signed=True)


class BatchScan:
    """Result of :func:`scan_batches`: ``batches`` (list), ``valid_end`` (position after the last
    complete batch) and ``end``; ``trailing_bytes = end - valid_end``."""

    __slots__ = ("batches", "valid_end", "end")

    def __init__(self, batches: list[RecordBatch], valid_end: int, end: int) -> None:
        self.batches = batches
        self.valid_end = valid_end
        self.end = end

    @property
    def trailing_bytes(self) -> int:
        return self.end - self.valid_end


def scan_batches(buf: Buffer, start: int = 0, end: Optional[int] = None, *, strict: bool = False,
                 max_message_size: Optional[int] = None) -> BatchScan:
    """All batches of ``buf[start:end]`` plus where iteration stopped (see :func:`iter_batches`)."""
    n = len(buf)
    end = n if end is None else min(end, n)
    batches = list(iter_batches(buf, start, end, strict=strict, max_message_size=max_message_size))
    valid_end = batches[-1].end_position if batches else start
    return BatchScan(batches, valid_end, end)


def iter_records(buf: Buffer, start: int = 0, end: Optional[int] = None, *, strict: bool = False,
                 verify: bool = True) -> Iterator[Any]:
    """Yield every record of every batch of ``buf[start:end]`` (deep iteration); with ``verify``
    each batch's CRC is checked first."""
    for b in iter_batches(buf, start, end, strict=strict):
        if verify:
            b.ensure_valid()
        yield from b.records()
