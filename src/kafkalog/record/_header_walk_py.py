"""Pure-Python twin of the compiled batch-header walker ``_header_walk.pyx`` (same API, same
results); ``kafkalog.record.header_walk`` picks one of the two. Java long arithmetic: derived
offsets wrap at 64 bits as ``baseOffset + lastOffsetDelta`` does in Kafka."""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from kafkalog.record.constants import INT32_MAX

IMPLEMENTATION = "python"

__all__ = ["IMPLEMENTATION", "all_zero", "crc32c_of", "walk", "one_v2_data_batch"]

NF = 16
STOP_NONE, STOP_SHORT_TAIL, STOP_PARTIAL, STOP_BAD_SIZE, STOP_BAD_MAGIC, STOP_SMALL_BATCH, \
    STOP_CRC, STOP_OVERLAP, STOP_RANGE, STOP_TOO_LARGE, STOP_NEED_MORE = range(11)
_PREFIX = struct.Struct(">qiib")
_V2 = struct.Struct(">Ihiqqqhii")
_U32 = struct.Struct(">I")
_Q = struct.Struct(">q")
_ROW = struct.Struct(f"={NF}q")


def wrap_long(v: int) -> int:
    """``v`` as a Java long (two's complement, 64 bits)."""
    return ((v + 2**63) % 2**64) - 2**63


def all_zero(buf: Any, start: int, end: int) -> bool:
    """True when ``buf[start:end]`` holds only zero bytes."""
    end = min(end, len(buf))
    return start >= end or not any(memoryview(buf)[start:end])


def crc32c_of(buf: Any, start: int, end: int) -> int:
    from crc32c import crc32c
    return crc32c(memoryview(buf)[start:end])


def walk(buf: Any, start: int, end: int, verify_crc: bool, expect_next: int, check_next: bool,
         contiguous: bool, segment_base: int, check_range: bool, max_batches: int, max_size: int,
         max_ts: int, max_ts_offset: int, latest_epoch: int, crc32c_fn: Callable[[Any], int],
         crc32_fn: Callable[[Any], int], base: int = 0) -> tuple[Any, ...]:
    """See ``kafkalog.record.header_walk.walk``."""
    mv = memoryview(buf)
    blen = base + len(mv)
    if end < 0:
        end = blen
    pos = max(start, base)
    b = -base                       # mv[b + pos]: file position pos
    facts = bytearray()
    n = 0
    stop = STOP_NONE
    stop_pos = 0
    d1 = d2 = d3 = 0
    n_producer = n_legacy = 0
    epoch_starts: list[tuple[int, int]] = []
    pack = _ROW.pack
    try:
        while True:
            if 0 <= max_batches <= n:
                break
            left = end - pos
            if left <= 0:
                break
            if left <= 17:
                stop, stop_pos, d1 = STOP_SHORT_TAIL, pos, left
                break
            if pos + 17 > blen:
                stop, stop_pos = STOP_NEED_MORE, pos
                break
            offset, length, ple, magic = _PREFIX.unpack_from(mv, b + pos)
            if length < 14:
                stop, stop_pos, d1 = STOP_BAD_SIZE, pos, length
                break
            sz = length + 12
            if sz > left:
                stop, stop_pos, d1, d2, d3 = STOP_PARTIAL, pos, sz, magic, offset
                break
            need = sz if verify_crc else min(sz, 61 if magic == 2 else 34)
            if pos + need > blen:
                stop, stop_pos = STOP_NEED_MORE, pos
                break
            if max_size >= 0 and sz > max_size:
                stop, stop_pos, d1 = STOP_TOO_LARGE, pos, sz
                break
            if magic == 2:
                if sz < 61:
                    stop, stop_pos, d1 = STOP_SMALL_BATCH, pos, sz
                    break
                stored, attrs, lod, first_ts, ts, pid, epoch, seq, count = _V2.unpack_from(mv, b + pos + 17)
                computed = crc32c_fn(mv[b + pos + 21:b + pos + sz]) if verify_crc else stored
                last = wrap_long(offset + lod)
                first = offset
                attrs &= 0xFFFF
            elif magic == 0 or magic == 1:
                stored = _U32.unpack_from(mv, b + pos + 12)[0]
                computed = crc32_fn(mv[b + pos + 16:b + pos + sz]) if verify_crc else stored
                attrs = mv[b + pos + 17]
                lod = 0
                ts = _Q.unpack_from(mv, b + pos + 18)[0] if magic == 1 and sz >= 34 else -1
                first_ts = ts
                pid = epoch = seq = ple = -1
                count = -1 if attrs & 0x07 else 1
                last = first = offset
            else:
                stop, stop_pos, d1 = STOP_BAD_MAGIC, pos, magic
                break
            if stored != computed:
                stop, stop_pos, d1, d2, d3 = STOP_CRC, pos, stored, computed, offset
                break
            if check_range and (lod < 0 or offset < segment_base
                                or offset - segment_base > INT32_MAX - lod):
                stop, stop_pos, d1, d2 = STOP_RANGE, pos, offset, last
                break
            if check_next:
                if magic == 2:
                    bad = first < expect_next or (contiguous and first != expect_next)
                else:
                    bad = last < expect_next or (contiguous and not attrs & 0x07 and last != expect_next)
                if bad:
                    stop, stop_pos, d1, d2, d3 = STOP_OVERLAP, pos, offset, last, expect_next
                    break
                expect_next = wrap_long(last + 1)
            if magic < 2:
                n_legacy += 1
            elif pid >= 0:
                n_producer += 1
            if ple >= 0 and ple > latest_epoch:       # (ple is -1 for v0/v1)
                epoch_starts.append((ple, offset))
                latest_epoch = ple
            if ts > max_ts:
                max_ts = ts
                max_ts_offset = last
            facts += pack(pos, sz, offset, last, magic, attrs, ts, first_ts, ple, pid, epoch, seq,
                          count, 1 if verify_crc else -1, max_ts, max_ts_offset)
            n += 1
            pos += sz
    finally:
        mv.release()
    return (facts, n, pos, stop, stop_pos, d1, d2, d3, max_ts, max_ts_offset, n_producer, n_legacy,
            epoch_starts)


def one_v2_data_batch(buf: Any, max_size: int) -> tuple[int, int, int, int] | None:
    """See ``_header_walk.one_v2_data_batch``."""
    from crc32c import crc32c
    n = len(buf)
    if n < 61 or n > max_size:
        return None
    _offset, length, ple, magic = _PREFIX.unpack_from(buf, 0)
    if magic != 2 or length + 12 != n:
        return None
    stored, attrs, lod, _bts, mts, pid, _epoch, _seq, count = _V2.unpack_from(buf, 17)
    if attrs & 0x28 or lod < 0 or count != lod + 1 or stored != crc32c(memoryview(buf)[21:]):
        return None
    return lod, mts, pid, ple
