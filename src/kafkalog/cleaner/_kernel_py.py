"""Pure-Python twin of the cleaner kernel (kafkalog.cleaner; spec §4.11): the per-record loops of
log compaction over an offset map laid out like Kafka's SkimpyOffsetMap - a flat table of ``slots``
24-byte entries (16-byte MD5 of the key + big-endian int64 offset; an all-zero entry is empty).

Same API and results as the compiled ``_kernel.pyx`` (tests/cleaner/test_kernel_parity.py);
:mod:`kafkalog.cleaner.kernel` selects one of the two.
"""
from __future__ import annotations

import hashlib as _hashlib
import struct as _struct

from kafkalog.errors import InvalidRecordError
from kafkalog.record._kernel_py import _record_head, _to_int64
from kafkalog.record.varint import (
    write_varint,
    write_varlong,
)

__all__ = [
    "CLEANER_MD5",
    "CLEANER_MD5_X4",
    "IMPLEMENTATION",
    "offset_map_build_v2",
    "offset_map_clean_v2",
    "offset_map_filter_v2",
    "offset_map_get_hash",
    "offset_map_put_hash",
    "offset_map_put_v2",
]

IMPLEMENTATION = "python"
#: how keys are hashed (the compiled kernel says "openssl" or "hashlib")
CLEANER_MD5 = "hashlib"
#: whether the 4-lane MD5 of the compiled kernel is in use (never here)
CLEANER_MD5_X4 = False

_OM_ENTRY = 24
_OM_HASH = 16
_OM_EMPTY = bytes(_OM_ENTRY)
_OM_I32 = _struct.Struct(">i")
_OM_Q = _struct.Struct(">q")


def _om_position(h: bytes, attempt: int, slots: int) -> int:
    """Byte position of probe ``attempt`` for hash ``h`` (Kafka's SkimpyOffsetMap.positionOf)."""
    off = min(_OM_HASH - 4, attempt)
    probe = _OM_I32.unpack_from(h, off)[0] + (attempt - (_OM_HASH - 4) if attempt > _OM_HASH - 4 else 0)
    probe = ((probe + 2**31) & 0xFFFFFFFF) - 2**31          # Java int arithmetic
    if probe == -2**31:
        probe = 0
    return (abs(probe) % slots) * _OM_ENTRY


def offset_map_put_hash(table, slots: int, h: bytes, offset: int) -> int:
    """Put ``h -> offset`` into the table; returns 1 when a new entry was added, else 0. The caller
    enforces capacity (``entries < slots``)."""
    attempt = 0
    pos = _om_position(h, 0, slots)
    while table[pos:pos + _OM_ENTRY] != _OM_EMPTY:
        if table[pos:pos + _OM_HASH] == h:
            _OM_Q.pack_into(table, pos + _OM_HASH, offset)
            return 0
        attempt += 1
        pos = _om_position(h, attempt, slots)
    table[pos:pos + _OM_HASH] = h
    _OM_Q.pack_into(table, pos + _OM_HASH, offset)
    return 1


def offset_map_get_hash(table, slots: int, h: bytes) -> int:
    """The offset stored for hash ``h``, or -1 (empty slot reached or ``slots + 12`` attempts)."""
    max_attempts = slots + _OM_HASH - 4
    attempt = 0
    while attempt < max_attempts:
        pos = _om_position(h, attempt, slots)
        if table[pos:pos + _OM_ENTRY] == _OM_EMPTY:
            return -1
        if table[pos:pos + _OM_HASH] == h:
            return _OM_Q.unpack_from(table, pos + _OM_HASH)[0]
        attempt += 1
    return -1


def _cl_records(body, count: int):
    """Yield ``(buf, rstart, rend, ts_pos, ts_delta, after_ts, offset_delta, key_start, klen,
    vlen)`` per record (headers are not parsed: the record end comes from its length)."""
    buf = body if isinstance(body, bytes) else bytes(body)
    n = len(buf)
    pos = 0
    for i in range(count):
        rstart = pos
        if pos >= n:
            raise InvalidRecordError(f"Found invalid record structure: expected {count} records "
                                     f"but found only {i}", position=pos)
        rend, _len, ts_pos, ts_delta, after_ts, od, kstart, klen, _vs, vlen, _hp = _record_head(
            buf, pos, n)
        yield buf, rstart, rend, ts_pos, ts_delta, after_ts, od, kstart, klen, vlen
        pos = rend
    if pos != n:
        raise InvalidRecordError(f"Incorrect declared batch size, records still remaining in file "
                                 f"({n - pos} bytes after {count} records)", position=pos)


def _kept_records(kept, nbase: int) -> bytes:
    """The retained records ``[(record tuple of _cl_records, timestamp, ...)]`` rewritten with
    timestamp deltas from ``nbase`` (attributes and everything after the timestamp delta copied as
    they are; the twin of ``_kept_write``)."""
    out = bytearray()
    for rec, ts, *_ in kept:
        buf, _rs, re_, tp, _tsd, at, _od, _ks, _klen, _vlen = rec
        delta = write_varlong(_to_int64(ts - nbase))
        out += write_varint((re_ - at) + 1 + len(delta))
        out += buf[tp - 1:tp]
        out += delta
        out += buf[at:re_]
    return bytes(out)


def _cl_keep(rec, off: int, latest: int, table, slots: int, superseded, superseded_base: int,
             retain_deletes: bool) -> bool:
    """Whether the record ``rec`` (of :func:`_cl_records`) at offset ``off`` is retained (Kafka's
    ``shouldRetainRecord``; the twin of ``_cl_keep``): past ``latest`` always; keyless never;
    superseded in the bitmap ``superseded`` (or None) never; else the latest of its key, a
    tombstone only while ``retain_deletes``. Keyless records are counted by the caller."""
    buf, _rs, _re, _tp, _tsd, _at, _od, ks, klen, vlen = rec
    if off > latest:
        return True
    if klen < 0:
        return False
    rel = off - superseded_base
    if superseded is not None and 0 <= rel < len(superseded) * 8 \
            and (superseded[rel >> 3] >> (rel & 7)) & 1:
        return False
    if vlen < 0 and not retain_deletes:
        return False
    return off >= offset_map_get_hash(table, slots, _hashlib.md5(buf[ks:ks + klen]).digest())


def offset_map_put_v2(table, slots: int, entries: int, max_entries: int, body, count: int,
                      base_offset: int, start_offset: int) -> tuple:
    """Map building for one v2 batch body: ``put(md5(key), offset)`` for every keyed record with
    offset >= ``start_offset``; stops (``full``) at the first such record met while ``entries >=
    max_entries``. Returns ``(entries, last_put_offset or -1, records_read, full)``."""
    last = -1
    read = 0
    md5 = _hashlib.md5
    for buf, _rs, _re, _tp, _tsd, _at, od, ks, klen, _vlen in _cl_records(body, count):
        off = base_offset + od
        if klen >= 0 and off >= start_offset:
            if entries >= max_entries:
                return entries, last, read, True
            entries += offset_map_put_hash(table, slots, md5(buf[ks:ks + klen]).digest(), off)
            last = off
        read += 1
    return entries, last, read, False


def offset_map_filter_v2(table, slots: int, body, count: int, base_offset: int, base_timestamp: int,
                         log_append_time: int, latest_offset: int, retain_deletes: bool,
                         new_base_timestamp, always_encode: bool) -> tuple:
    """The record filter of one v2 data batch (Kafka's ``Cleaner.shouldRetainRecord``): a record is
    kept if its offset > ``latest_offset``, or it has a key, its offset >= ``get(md5(key))`` and it
    has a value or ``retain_deletes``. Keyless records within the cleaned range are dropped.

    Kept records are re-encoded with timestamp deltas relative to ``new_base_timestamp`` (None =
    the first kept record's timestamp); ``log_append_time >= 0`` is every record's timestamp.
    Returns ``(out, kept, keyless, tombstones_dropped, base_ts, max_ts, offset_of_max_ts,
    tombstone_kept)``; ``out`` is None when every record is kept and not ``always_encode``.
    """
    kept = []
    keyless = 0
    tomb_dropped = 0
    tomb_kept = False
    for rec in _cl_records(body, count):
        _buf, _rs, _re, _tp, tsd, _at, od, _ks, klen, vlen = rec
        off = base_offset + od
        keep = _cl_keep(rec, off, latest_offset, table, slots, None, 0, retain_deletes)
        if klen < 0 and off <= latest_offset:
            keyless += 1
        if keep:
            ts = log_append_time if log_append_time >= 0 else _to_int64(base_timestamp + tsd)
            kept.append((rec, ts, off))
            if vlen < 0:
                tomb_kept = True
        elif vlen < 0:
            tomb_dropped += 1
    if not kept:
        return None, 0, keyless, tomb_dropped, -1, -1, -1, False
    nbase = kept[0][1] if new_base_timestamp is None else new_base_timestamp
    max_ts = -1
    max_off = -1
    for _rec, ts, off in kept:
        if ts > max_ts:
            max_ts, max_off = ts, off
    if len(kept) == count and not always_encode:
        return None, count, keyless, tomb_dropped, nbase, max_ts, max_off, tomb_kept
    return (_kept_records(kept, nbase), len(kept), keyless, tomb_dropped, nbase, max_ts, max_off,
            tomb_kept)


def offset_map_build_v2(table, slots: int, entries: int, max_entries: int, body, count: int,
                        base_offset: int, start_offset: int, superseded, superseded_base: int) -> tuple:
    """:func:`offset_map_put_v2` that also records superseded offsets: when a put replaces the
    entry of an equal hash whose offset ``o`` satisfies ``0 <= o - superseded_base <
    8 * len(superseded)``, bit ``o - superseded_base`` of ``superseded`` (a bytearray, LSB first;
    or None) is set - the record at ``o`` is not the latest of its key. Same return value."""
    last = -1
    read = 0
    md5 = _hashlib.md5
    nbits = len(superseded) * 8 if superseded is not None else 0
    for buf, _rs, _re, _tp, _tsd, _at, od, ks, klen, _vlen in _cl_records(body, count):
        off = base_offset + od
        if klen >= 0 and off >= start_offset:
            if entries >= max_entries:
                return entries, last, read, True
            h = md5(buf[ks:ks + klen]).digest()
            old = offset_map_get_hash(table, slots, h)
            entries += offset_map_put_hash(table, slots, h, off)
            rel = old - superseded_base
            if old >= 0 and superseded is not None and 0 <= rel < nbits:
                superseded[rel >> 3] |= 1 << (rel & 7)
            last = off
        read += 1
    return entries, last, read, False


_CL_HDR = _struct.Struct(">qiibIhiqqqhii")


def _cl_header(hdr: bytes, *, length: int, attrs: int, base_ts: int, max_ts: int, count: int,
               body: bytes, crc32c) -> bytes:
    f = list(_CL_HDR.unpack(hdr))
    f[1], f[5], f[7], f[8], f[12] = length, attrs, base_ts, max_ts, count
    f[4] = 0
    head = bytearray(_CL_HDR.pack(*f))
    crc = crc32c(bytes(head[21:]) + body)
    _struct.pack_into(">I", head, 17, crc)
    return bytes(head) + body


def offset_map_clean_v2(table, slots: int, superseded, superseded_base: int, buf, position: int,
                        size: int, body, latest_offset: int, current_time: int,
                        delete_retention_ms: int, retain_empty: bool, discard_records: bool,
                        marker_for_empty_txn: bool, crc32c) -> tuple:
    """The cleaner's decision and rewrite of one v2 batch (``buf[position:position + size]``, CRC
    already verified) after the batch-level checks (Kafka's ``MemoryRecords.filterTo`` with the
    cleaner's ``RecordFilter``; spec §4.11 "Record/batch retention rules").

    ``body`` is None for an uncompressed batch, else its decompressed records. ``retain_empty``:
    keep the batch as an empty header when nothing survives (last batch of an active producer or
    of the round); ``discard_records``: the batch's records are all discarded (aborted data, or a
    marker past its delete horizon); ``marker_for_empty_txn``: a discardable control batch that
    needs a delete horizon. Record filter: records of control batches are kept; others are kept
    if their offset > ``latest_offset``, or they have a key that is the latest for its key (the
    ``superseded`` bitmap of :func:`offset_map_build_v2` answers for offsets it covers, else
    ``offset >= get(md5(key))``) and a value, or the batch has no delete horizon yet or
    ``current_time`` is before it. A retained tombstone (or ``marker_for_empty_txn``) without a
    horizon stamps ``current_time + delete_retention_ms`` as the new base timestamp.

    Returns ``(kind, data, kept, keyless, tombstones_dropped, max_timestamp,
    offset_of_max_timestamp, base_timestamp, attributes)`` with ``kind``: 0 delete (data None),
    1 copy the batch verbatim (data None; the header's max timestamp), 2 rewritten batch (data:
    complete batch bytes; uncompressed input only), 3 empty 61-byte batch (data), 4 re-encoded
    records of a compressed batch (data: uncompressed records; the caller compresses and writes
    the header with ``attributes``, ``base_timestamp``, ``max_timestamp`` and ``kept``). Error
    positions are relative to ``buf`` (records as if uncompressed).
    """
    if slots <= 0 or len(table) < slots * 24:
        raise ValueError("bad offset map arguments")
    n_all = len(buf)
    if position < 0 or size < 61 or size > n_all - position:
        raise InvalidRecordError(f"Record batch is corrupt (size {size} at position {position} in "
                                 f"a buffer of {n_all} bytes)", position=position)
    hdr = bytes(buf[position:position + 61])
    (base_offset, _len, _ple, _magic, _crc, attrs16, last_delta, base_ts, hdr_max_ts, _pid, _ep,
     _seq, count) = _CL_HDR.unpack(hdr)
    attrs = attrs16 & 0xFF
    is_control = bool(attrs & 0x20)
    has_horizon = bool(attrs & 0x40)
    if attrs & 0x07 and body is None:
        raise ValueError("a compressed batch needs its decompressed records")

    def empty(keyless, dropped):
        if not retain_empty:
            return 0, None, 0, keyless, dropped, -1, -1, -1, 0
        data = _cl_header(hdr, length=49, attrs=attrs & 0x38, base_ts=-1, max_ts=hdr_max_ts,
                          count=0, body=b"", crc32c=crc32c)
        return 3, data, 0, keyless, dropped, hdr_max_ts, base_offset + last_delta, -1, attrs & 0x38

    if count == 0 or discard_records:
        return empty(0, 0)
    if count < 0:
        raise InvalidRecordError(f"Invalid negative record count {count}", position=position + 57)
    lat = hdr_max_ts if attrs & 0x08 else -1
    if is_control:
        latest, retain_deletes = -1, True
    else:
        latest = latest_offset
        retain_deletes = not has_horizon or current_time < base_ts
    recs_buf = bytes(buf[position + 61:position + size]) if body is None else bytes(body)
    kept = []
    keyless = tomb_dropped = 0
    tomb_kept = False
    max_ts = max_off = -1
    try:
        if count > len(recs_buf) // 7 + 1:
            raise InvalidRecordError(f"Found invalid record structure: expected {count} records "
                                     f"in {len(recs_buf)} bytes", position=len(recs_buf))
        for rec in _cl_records(recs_buf, count):
            _b, _rs, _re, _tp, tsd, _at, od, _ks, klen, vlen = rec
            off = base_offset + od
            keep = _cl_keep(rec, off, latest, table, slots, superseded, superseded_base,
                            retain_deletes)
            if klen < 0 and off <= latest:
                keyless += 1
            if keep:
                ts = lat if lat >= 0 else _to_int64(base_ts + tsd)
                kept.append((rec, ts))
                if ts > max_ts:
                    max_ts, max_off = ts, off
                if vlen < 0:
                    tomb_kept = True
            elif vlen < 0:
                tomb_dropped += 1
    except InvalidRecordError as e:
        if e.position is not None:
            e.position += position + 61
        raise
    if not kept:
        return empty(keyless, tomb_dropped)
    need_horizon = (tomb_kept or marker_for_empty_txn) and not has_horizon
    if len(kept) == count and not need_horizon:
        return (1, None, count, keyless, tomb_dropped, hdr_max_ts,
                max_off if lat < 0 else base_offset, base_ts, attrs)
    if need_horizon:
        nbase = current_time + delete_retention_ms
    elif has_horizon:
        nbase = base_ts
    else:
        nbase = kept[0][1]
    new_attrs = (attrs & 0x3F) | (0x40 if (need_horizon or has_horizon) else 0)
    if lat >= 0:
        max_ts = lat
    out = _kept_records(kept, nbase)
    if body is not None:
        return 4, out, len(kept), keyless, tomb_dropped, max_ts, max_off, nbase, new_attrs
    data = _cl_header(hdr, length=49 + len(out), attrs=new_attrs, base_ts=nbase, max_ts=max_ts,
                      count=len(kept), body=out, crc32c=crc32c)
    return 2, data, len(kept), keyless, tomb_dropped, max_ts, max_off, nbase, new_attrs
