"""Reading an offset range of one partition directory as Arrow record batches.

``read_range`` is what a Spark task runs for each topic-partition range it was given:

1. find the floor segment of the start offset and its byte position via the ``.index``
   (spec §4.6), so a small range of a big log touches a small part of the files;
2. walk batch headers, verify each batch's CRC, skip control batches (always) and, with
   ``read_committed``, batches of aborted transactions (and everything from the first offset of
   a transaction still open at the log end, Kafka's last stable offset);
3. decode records with offsets in ``[start, end)`` column-wise (:mod:`.arrow_batches`) and yield
   ``pa.RecordBatch``es of at most ``max_rows`` rows.

v0/v1 messages, including compressed wrapper messages, are decoded here too (spec §1.3-1.4).
"""

from __future__ import annotations

import bisect
import struct
import zlib
from typing import Dict, Iterator, List, Optional, Set, Tuple

import crc32c as _crc32c
import pyarrow as pa

from kafkalog.errors import CorruptRecordError, InvalidRecordError, KafkalogError
from kafkalog.spark.arrow_batches import MAX_DATA_BYTES, ColumnBuilder, decode_columns_v2
from kafkalog.spark.log_files import (
    BatchHeader, MappedSegment, PartitionDir, iter_headers, offset_index_position, segment_bases,
    segment_path,
)

_V2_FIELDS = struct.Struct(">qiibIhiqqqhii")
_LEGACY_MIN_DECOMPRESS = 16 << 20
_LEGACY_MAX_DECOMPRESS = 1 << 30

CREATE_TIME, LOG_APPEND_TIME, NO_TIMESTAMP_TYPE = 0, 1, -1
MAX_OFFSET = (1 << 63) - 1


def _decompress(codec: int, data, magic: int, path: str, position: int) -> bytes:
    from kafkalog.record.compression import decompress
    limit = min(_LEGACY_MAX_DECOMPRESS, max(_LEGACY_MIN_DECOMPRESS, 255 * len(data)))
    try:
        return decompress(codec, data, magic=magic, max_size=limit)
    except KafkalogError as err:
        raise err.at(path, position) from None


def verify_crc(buf, h: BatchHeader, path: str) -> None:
    """Raise CorruptRecordError if the stored CRC of the batch/message at ``h`` is wrong."""
    if h.magic >= 2:
        stored = struct.unpack_from(">I", buf, h.position + 17)[0]
        computed = _crc32c.crc32c(memoryview(buf)[h.position + 21:h.position + h.size])
    else:
        stored = struct.unpack_from(">I", buf, h.position + 12)[0]
        computed = zlib.crc32(memoryview(buf)[h.position + 16:h.position + h.size])
    if stored != computed:
        raise CorruptRecordError(f"Record is corrupt (stored crc = {stored}, computed crc = "
                                 f"{computed})", file=path, position=h.position)


def decode_entry(buf, h: BatchHeader, builder: ColumnBuilder, min_offset: int, max_offset: int,
                 path: str) -> int:
    """Decode the records of one batch (any magic) with offsets in ``[min_offset, max_offset)``
    into ``builder``; returns the number of rows added."""
    if h.magic >= 2:
        (_b, _l, _e, _m, _crc, attrs, _ld, base_ts, max_ts, _pid, _pe, _bs,
         count) = _V2_FIELDS.unpack_from(buf, h.position)
        if count < 0:
            raise InvalidRecordError(f"Found invalid record count {count}", file=path,
                                     position=h.position + 57)
        body = memoryview(buf)[h.position + 61:h.position + h.size]
        codec = attrs & 0x07
        if codec:
            body = _decompress(codec, body, 2, path, h.position + 61)
        log_append = bool(attrs & 0x08)
        try:
            return builder.add_v2_batch(body, count, h.base_offset, base_ts,
                                        max_ts if log_append else -1,
                                        LOG_APPEND_TIME if log_append else CREATE_TIME,
                                        min_offset, max_offset)
        except KafkalogError as err:
            raise err.at(path, h.position + 61 if not codec else h.position) from None
    return _decode_legacy(buf, h, builder, min_offset, max_offset, path)


def _parse_legacy(buf, pos: int, end: int, path: str):
    """One v0/v1 message at ``pos`` -> (offset, size, magic, attrs, timestamp, key, value)."""
    if pos + 12 + 14 > end:
        raise InvalidRecordError("premature end of legacy message", file=path, position=pos)
    offset, size, _crc, magic, attrs = struct.unpack_from(">qiIbb", buf, pos)
    msg_end = pos + 12 + size
    if size < 14 or msg_end > end:
        raise InvalidRecordError(f"invalid legacy message size {size}", file=path, position=pos)
    p = pos + 18
    ts = -1
    if magic == 1:
        ts = struct.unpack_from(">q", buf, p)[0]
        p += 8
    fields = []
    for _ in range(2):
        if p + 4 > msg_end:
            raise InvalidRecordError("premature end of legacy message", file=path, position=p)
        n = struct.unpack_from(">i", buf, p)[0]
        p += 4
        if n < 0:
            fields.append(None)
        else:
            if p + n > msg_end:
                raise InvalidRecordError(f"legacy field length {n} exceeds the message",
                                         file=path, position=p - 4)
            fields.append(bytes(buf[p:p + n]))
            p += n
    return offset, size + 12, magic, attrs, ts, fields[0], fields[1]


def _decode_legacy(buf, h: BatchHeader, builder: ColumnBuilder, min_offset: int,
                   max_offset: int, path: str) -> int:
    offset, _size, magic, attrs, ts, key, value = _parse_legacy(buf, h.position,
                                                                 h.position + h.size, path)
    ts_type = NO_TIMESTAMP_TYPE if magic == 0 else (LOG_APPEND_TIME if attrs & 0x08 else CREATE_TIME)
    codec = attrs & 0x07
    if not codec:
        if min_offset <= offset < max_offset:
            builder.add_record(offset, ts, ts_type, key, value)
            return 1
        return 0
    if value is None:
        raise InvalidRecordError("Found invalid compressed record set with null value",
                                 file=path, position=h.position)
    inner = _decompress(codec, value, magic, path, h.position)
    messages = []
    pos = 0
    while pos < len(inner) - 12 + 1 and len(inner) - pos >= 12 + 14:
        m = _parse_legacy(inner, pos, len(inner), path)
        messages.append(m)
        pos += m[1]
    if not messages:
        raise InvalidRecordError("Found invalid compressed record set with no inner records",
                                 file=path, position=h.position)
    if magic == 1:
        last_rel = messages[-1][0]
        if offset != 0 and offset < last_rel:
            raise InvalidRecordError("wrapper offset below its last inner relative offset",
                                     file=path, position=h.position)
        base = 0 if offset == 0 else offset - last_rel
    else:
        base = 0
    added = 0
    for (ioff, _s, _m, _a, its, ikey, ival) in messages:
        absolute = base + ioff
        if magic == 1 and attrs & 0x08:
            its = ts
        if min_offset <= absolute < max_offset:
            builder.add_record(absolute, its if magic == 1 else -1, ts_type, ikey, ival)
            added += 1
    return added


def control_type(buf, h: BatchHeader, path: str) -> Optional[int]:
    """The control record type of a control batch (0 ABORT, 1 COMMIT, ...), None when empty."""
    (_b, _l, _e, _m, _crc, attrs, _ld, _bts, _mts, _pid, _pe, _bs,
     count) = _V2_FIELDS.unpack_from(buf, h.position)
    if count <= 0:
        return None
    body = memoryview(buf)[h.position + 61:h.position + h.size]
    if attrs & 0x07:
        body = _decompress(attrs & 0x07, body, 2, path, h.position + 61)
    probe = ColumnBuilder("", 0)
    try:
        decode_columns_v2(body, count, 0, 0, -1, 0, 1, probe.cols, None)
    except KafkalogError as err:
        raise err.at(path, h.position + 61) from None
    key = bytes(probe.cols[2])
    if len(key) < 4:
        raise InvalidRecordError("control record key shorter than 4 bytes", file=path,
                                 position=h.position)
    version, ctype = struct.unpack(">hh", key[:4])
    if version < 0:
        raise InvalidRecordError(f"invalid control record version {version}", file=path,
                                 position=h.position)
    return ctype


def _segments_from(pdir: PartitionDir, start: int) -> List[int]:
    bases = segment_bases(pdir.path)
    i = max(0, bisect.bisect_right(bases, start) - 1)
    return bases[i:]


def aborted_batches(pdir: PartitionDir, start: int, end: int) -> Tuple[Set[Tuple[int, int]], int]:
    """For ``read_committed``: the ``(producer_id, base_offset)`` of transactional batches in
    ``[start, end)`` whose transaction was aborted, and the last stable offset bound (``end``, or
    the first offset of a transaction still open at the log end if lower).

    Found by walking batch headers from ``start`` and following each producer's transaction to its
    end marker, so it works for directories with or without ``.txnindex`` files.
    """
    aborted: Set[Tuple[int, int]] = set()
    pending: Dict[int, List[int]] = {}
    for base in _segments_from(pdir, start):
        path = segment_path(pdir.path, base)
        with MappedSegment(path) as seg:
            pos = offset_index_position(pdir.path, base, start) if base <= start else 0
            if pos > len(seg.buf):
                pos = 0
            for h in iter_headers(seg.buf, pos, file=path):
                if h.last_offset < start or h.magic < 2 or not h.is_transactional:
                    continue
                if h.base_offset >= end and not pending:
                    return aborted, end
                if h.is_control:
                    ctype = control_type(seg.buf, h, path)
                    batches = pending.pop(h.producer_id, [])
                    if ctype == 0:
                        aborted.update((h.producer_id, b) for b in batches)
                elif h.base_offset < end:
                    pending.setdefault(h.producer_id, []).append(h.base_offset)
    if pending:
        end = min(end, min(b[0] for b in pending.values()))
    return aborted, end


def read_range(pdir: PartitionDir, start: int, end: int, *, include_headers: bool = False,
               read_committed: bool = False, max_rows: int = 65536) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``pdir`` with offsets in ``[start, end)`` as Arrow batches."""
    if start >= end:
        return
    aborted: Set[Tuple[int, int]] = set()
    if read_committed:
        aborted, end = aborted_batches(pdir, start, end)
        if start >= end:
            return
    builder = ColumnBuilder(pdir.topic, pdir.partition, include_headers)
    for base in _segments_from(pdir, start):
        if base >= end:
            break
        path = segment_path(pdir.path, base)
        with MappedSegment(path) as seg:
            pos = offset_index_position(pdir.path, base, start) if base < start else 0
            if pos > len(seg.buf):
                pos = 0
            done = False
            for h in iter_headers(seg.buf, pos, file=path):
                if h.last_offset < start:
                    continue
                if h.magic >= 2 and h.base_offset >= end:
                    done = True
                    break
                verify_crc(seg.buf, h, path)
                if h.is_control or (aborted and (h.producer_id, h.base_offset) in aborted):
                    pass
                else:
                    decode_entry(seg.buf, h, builder, start, end, path)
                    if builder.rows >= max_rows or builder.data_bytes >= MAX_DATA_BYTES:
                        yield builder.flush()
                if h.last_offset >= end - 1:
                    done = True
                    break
        if done:
            break
    last = builder.flush()
    if last is not None:
        yield last


def first_record_at_or_after(buf, h: BatchHeader, timestamp: int, start_offset: int,
                             path: str) -> Optional[int]:
    """Offset of the first record of batch ``h`` with timestamp >= ``timestamp`` and offset >=
    ``start_offset`` (control batches never match), or None."""
    if h.is_control:
        return None
    probe = ColumnBuilder("", 0)
    n = decode_entry(buf, h, probe, start_offset, MAX_OFFSET, path)
    offsets = struct.unpack(f"={n}q", bytes(probe.cols[0]))
    stamps = struct.unpack(f"={n}q", bytes(probe.cols[1]))
    for off, ts in zip(offsets, stamps):
        if ts >= timestamp:
            return off
    return None
