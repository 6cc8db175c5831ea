"""Iterating the batches of a record set: a log segment, a file slice or a produce payload.

``iter_batches(buf, start=0, end=None, *, strict=False, max_message_size=None)`` implements the
file iteration rules of Kafka's ``FileLogInputStream`` (spec §1.2) and, with ``strict=True``, the
in-memory rules of ``ByteBufferLogInputStream``. It yields :class:`~kafkalog.record.batch.RecordBatch`
views (any magic) and never validates CRCs (call ``ensure_valid()``); it stops silently at a partial
trailing batch. :func:`scan_batches` also reports where iteration stopped.
"""
from __future__ import annotations

import struct
from typing import Any, Iterator, Optional

from kafkalog.errors import CorruptRecordError
from kafkalog.record.batch import DefaultRecordBatch, RecordBatch, batch_at, read_batch_header, read_entry_header
from kafkalog.record.constants import LOG_OVERHEAD, MAGIC_OFFSET, MIN_ENTRY_HEADER, RECORD_OVERHEAD_V0
from kafkalog.record.crc import Buffer

__all__ = ["iter_batches", "scan_batches", "valid_bytes_end", "iter_records",
           "read_batch_header", "read_entry_header", "batch_at", "RecordBatch"]

_QIB = struct.Struct(">qi")
_B = struct.Struct(">b")


def iter_batches(buf: Buffer, start: int = 0, end: Optional[int] = None, *, strict: bool = False,
                 max_message_size: Optional[int] = None) -> Iterator[RecordBatch]:
    """Yield the batches of ``buf[start:end]``.

    File rules (default): stop when 17 or fewer bytes remain or the next batch is incomplete;
    a length below 14 raises :class:`CorruptRecordError`; any magic < 2 is legacy, anything else
    is v2. In-memory rules (``strict=True``): also a magic outside 0..2 raises
    :class:`CorruptRecordError`. A batch larger than ``max_message_size`` (whole batch, incl. the
    log overhead) raises :class:`CorruptRecordError` in both modes.
    """
    from kafkalog.record.legacy import LegacyRecordBatch
    n = len(buf)
    end = n if end is None else min(end, n)
    pos = start
    unpack = _QIB.unpack_from
    unpack_magic = _B.unpack_from
    while True:
        if pos >= end - MIN_ENTRY_HEADER:
            return
        length = unpack(buf, pos)[1]
        if length < RECORD_OVERHEAD_V0:
            raise CorruptRecordError(f"Record size {length} is less than the minimum record "
                                     f"overhead ({RECORD_OVERHEAD_V0})", position=pos)
        size = length + LOG_OVERHEAD
        if max_message_size is not None and size > max_message_size:
            raise CorruptRecordError(f"Record size {size} exceeds the largest allowable message "
                                     f"size ({max_message_size}).", position=pos)
        if pos + size > end:
            return
        magic = unpack_magic(buf, pos + MAGIC_OFFSET)[0]
        if magic < 2:
            if strict and magic < 0:
                raise CorruptRecordError(f"Invalid magic found in record: {magic}", position=pos)
            yield LegacyRecordBatch(buf, pos, size, magic)
        else:
            if strict and magic > 2:
                raise CorruptRecordError(f"Invalid magic found in record: {magic}", position=pos)
            yield DefaultRecordBatch(buf, pos, size, magic)
        pos += size


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


def valid_bytes_end(buf: Buffer, start: int = 0, end: Optional[int] = None) -> int:
    """Position after the last complete batch (header walk only, no CRC checks)."""
    pos = start
    for b in iter_batches(buf, start, end):
        pos = b.position + b.size_in_bytes
    return pos


def iter_records(buf: Buffer, start: int = 0, end: Optional[int] = None, *, strict: bool = False,
                 verify: bool = True) -> Iterator[Any]:
    """Yield every record of every batch of ``buf[start:end]`` (deep iteration); with ``verify``
    each batch's CRC is checked first."""
    for b in iter_batches(buf, start, end, strict=strict):
        if verify:
            b.ensure_valid()
        yield from b.records()
