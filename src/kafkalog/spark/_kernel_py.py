"""Pure-Python twin of the Spark kernel (kafkalog.spark): decode v2 record bodies into Arrow column
buffers, encode Arrow columns into v2 record bodies, and Kafka's murmur2 partitioner over a whole
binary column.

Same API and behaviour as the compiled ``_kernel.pyx`` (tests/spark/test_kernel_columns.py);
:mod:`kafkalog.spark.kernel` selects one of the two.
"""
from __future__ import annotations

import struct as _struct

from kafkalog.errors import InvalidRecordError
from kafkalog.record._kernel_py import (
    _encode_one,
    _murmur2,
    _record_head,
    _record_headers,
    _to_int64,
)
from kafkalog.record.constants import INT32_MAX

__all__ = ["IMPLEMENTATION", "decode_columns_v2", "encode_columns_v2", "murmur2_partitions",
           "partition_groups"]

IMPLEMENTATION = "python"

_COL_Q = _struct.Struct("=q")
_COL_I = _struct.Struct("=i")


def decode_columns_v2(body, count: int, base_offset: int, base_timestamp: int,
                      log_append_time: int, min_offset: int, max_offset: int, cols,
                      headers) -> int:
    """Append the records of one v2 batch body whose offsets are in ``[min_offset, max_offset)``
    to Arrow-style column buffers; returns the number of rows appended.

    ``cols = [offsets, timestamps, key_data, key_ends, key_valid, value_data, value_ends,
    value_valid]`` (bytearrays: native int64 offsets, native int64 ms timestamps, key bytes,
    native int32 cumulative end of each key in ``key_data``, one byte 1/0 per row, and the same for
    values). ``log_append_time >= 0`` replaces every timestamp. When ``headers`` is a list, one
    entry per appended row is added: None or a list of ``(str, bytes | None)``. Raises
    :class:`InvalidRecordError` with ``position`` relative to ``body``.
    """
    offsets, timestamps, kdata, kends, kvalid, vdata, vends, vvalid = cols
    if count < 0:
        raise InvalidRecordError(f"Invalid negative record count {count}", position=0)
    buf = memoryview(body)
    end = len(buf)
    if count > end // 7:
        raise InvalidRecordError(f"Found invalid record structure: expected {count} records in "
                                 f"{end} bytes", position=end)
    pos = 0
    appended = 0
    for _ in range(count):
        (rec_end, length, _ts_pos, ts_delta, _after_ts, off_delta, kpos, klen, vpos, vlen,
         pos) = _record_head(buf, pos, end)
        hdrs, pos = _record_headers(buf, pos, rec_end)
        if pos != rec_end:
            raise InvalidRecordError(f"Invalid record size: expected to read {length} bytes in "
                                     f"record payload, but instead read {pos - (rec_end - length)}",
                                     position=pos)
        offset = base_offset + off_delta
        if offset < min_offset or offset >= max_offset:
            continue
        offsets += _COL_Q.pack(offset)
        ts = log_append_time if log_append_time >= 0 else _to_int64(base_timestamp + ts_delta)
        timestamps += _COL_Q.pack(ts)
        if klen >= 0:
            kdata += buf[kpos:kpos + klen]
            kvalid.append(1)
        else:
            kvalid.append(0)
        kends += _COL_I.pack(len(kdata))
        if vlen >= 0:
            vdata += buf[vpos:vpos + vlen]
            vvalid.append(1)
        else:
            vvalid.append(0)
        vends += _COL_I.pack(len(vdata))
        if headers is not None:
            headers.append(hdrs)
        appended += 1
    if pos != end:
        raise InvalidRecordError("Incorrect declared batch size, records still remaining in file",
                                 position=pos)
    return appended


def _col_get(col, i: int):
    """Row ``i`` of a binary column ``(validity_bitmap | None, int32 offsets, data, offset)``."""
    if col is None:
        return None
    validity, offs, data, base = col
    j = base + i
    if validity is not None and not (validity[j >> 3] >> (j & 7)) & 1:
        return None
    start = _COL_I.unpack_from(offs, 4 * j)[0]
    end = _COL_I.unpack_from(offs, 4 * j + 4)[0]
    return bytes(data[start:end])


def _col_ts(col, i: int, default: int) -> int:
    """Row ``i`` of a timestamp column ``(validity | None, int64 microseconds, offset)`` in ms."""
    if col is None:
        return default
    validity, micros, base = col
    j = base + i
    if validity is not None and not (validity[j >> 3] >> (j & 7)) & 1:
        return default
    return _COL_Q.unpack_from(micros, 8 * j)[0] // 1000


def encode_columns_v2(rows, n: int, key, value, timestamps, default_timestamp: int, headers,
                      max_batch_bytes: int, out: bytearray | None = None) -> list:
    """Encode ``n`` rows of Arrow columns as v2 record bodies, split into producer-sized chunks.

    ``rows``: None (rows ``0..n-1``) or a buffer of ``n`` native int64 row indices, in output
    order. ``key`` / ``value``: None (all null) or ``(validity_bitmap | None, int32 offsets buffer,
    data buffer, array offset)`` of an Arrow binary array. ``timestamps``: None (every record gets
    ``default_timestamp``) or ``(validity_bitmap | None, int64 microseconds buffer, array offset)``;
    null timestamps get ``default_timestamp``; microseconds are floored to milliseconds.
    ``headers``: None or a list indexed by row of None / list of ``(str | bytes, bytes | None)``.
    A chunk ends before the record that would take its body over ``max_batch_bytes`` (a chunk
    always holds at least one record). Returns ``[(body, count, base_timestamp, max_timestamp)]``
    with offset deltas ``0..count-1`` and timestamp deltas from the chunk's first timestamp.
    With a ``bytearray`` ``out`` the bodies are written into it one after the other (it is grown
    as needed, never shrunk) and returned as memoryviews of it, so a caller that reuses ``out``
    allocates nothing per call (the views must be released before the next call).
    """
    if out is not None and not isinstance(out, bytearray):
        raise TypeError("out must be a bytearray")
    chunks = []
    body = bytearray()
    count = 0
    base_ts = max_ts = 0
    for i in range(n):
        r = i if rows is None else _COL_Q.unpack_from(rows, 8 * i)[0]
        k = _col_get(key, r)
        v = _col_get(value, r)
        ts = _col_ts(timestamps, r, default_timestamp)
        hdrs = headers[r] if headers is not None else None
        rec = bytearray()
        if count == 0:
            base_ts = max_ts = ts
        _encode_one(rec, k, v, ts - base_ts, count, hdrs)
        if count and len(body) + len(rec) > max_batch_bytes:
            chunks.append((bytes(body), count, base_ts, max_ts))
            body = bytearray()
            count = 0
            base_ts = max_ts = ts
            rec = bytearray()
            _encode_one(rec, k, v, 0, 0, hdrs)
        body += rec
        count += 1
        max_ts = max(max_ts, ts)
    if count:
        chunks.append((bytes(body), count, base_ts, max_ts))
    if out is None:
        return chunks
    total = sum(len(c[0]) for c in chunks)
    if len(out) < total:
        out.extend(bytes(total - len(out)))
    view = memoryview(out)
    result, pos = [], 0
    for chunk, count, base_ts, max_ts in chunks:
        view[pos:pos + len(chunk)] = chunk
        result.append((view[pos:pos + len(chunk)], count, base_ts, max_ts))
        pos += len(chunk)
    return result


def partition_groups(parts, n: int, num_partitions: int):
    """Group ``n`` rows by partition: ``parts`` is a buffer of native int32 partitions (each in
    ``[0, num_partitions)``, else ``ValueError``). Returns ``(order, bounds)``: ``order`` a bytes
    buffer of int64 row indices sorted by partition (rows of one partition in their original
    order) and ``bounds`` a list of ``num_partitions + 1`` positions in it: the rows of partition
    ``p`` are ``order[bounds[p]:bounds[p + 1]]`` (in int64 units)."""
    if num_partitions < 1:
        raise ValueError(f"num_partitions must be >= 1, got {num_partitions}")
    view = memoryview(parts).cast("B")
    if len(view) < 4 * n:
        raise ValueError(f"parts buffer holds {len(view) // 4} partitions, need {n}")
    groups: list[list[int]] = [[] for _ in range(num_partitions)]
    for i in range(n):
        q = _COL_I.unpack_from(view, 4 * i)[0]
        if not 0 <= q < num_partitions:
            raise ValueError(f"row {i}: partition {q} is not in [0, {num_partitions})")
        groups[q].append(i)
    bounds = [0]
    for g in groups:
        bounds.append(bounds[-1] + len(g))
    return _struct.pack(f"={n}q", *(i for g in groups for i in g)), bounds


def murmur2_partitions(key, n: int, num_partitions: int) -> bytes:
    """Kafka's keyed partitioner over a binary column: native int32 per row,
    ``toPositive(murmur2(key)) % num_partitions``, or -1 for a null key. ``key`` is
    ``(validity_bitmap | None, int32 offsets, data, array offset)`` as in :func:`encode_columns_v2`."""
    if num_partitions < 1:
        raise ValueError(f"num_partitions must be >= 1, got {num_partitions}")
    out = bytearray()
    for i in range(n):
        k = _col_get(key, i)
        out += _COL_I.pack(-1 if k is None else (_murmur2(k) & INT32_MAX) % num_partitions)
    return bytes(out)
