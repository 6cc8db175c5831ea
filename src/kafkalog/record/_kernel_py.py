"""Pure-Python reference of the record kernel: the per-record loops of v2 records (spec §1.6).

Same API and behaviour as the compiled ``_kernel.pyx`` (docs/design.md "Record kernel API");
:mod:`kafkalog.record.kernel` picks one of the two. Written for clarity first, with a fast path for
the common one-byte varints.
"""
from __future__ import annotations

from typing import Iterable, Optional, Sequence

from kafkalog.errors import InvalidRecordError
from kafkalog.record.varint import (read_unsigned_varint, read_varint, read_varlong,
                                    write_varint, write_varlong)

__all__ = ["IMPLEMENTATION", "Record", "RecordsEncoder", "encode_records_v2", "decode_records_v2",
           "read_varint", "read_varlong", "write_varint", "write_varlong"]

IMPLEMENTATION = "python"

_INT32_MAX = 2**31 - 1
_M64 = 0xFFFFFFFFFFFFFFFF


def _to_int64(v: int) -> int:
    v &= _M64
    return v - (1 << 64) if v >= (1 << 63) else v


class Record:
    """One record of a batch (v2; the legacy layer fills the same attributes for v0/v1).

    ``offset``, ``timestamp``, ``key`` (bytes or None), ``value`` (bytes or None), ``headers``
    (list of ``(str, bytes | None)``), ``sequence`` (-1 without producer sequence), ``size_in_bytes``
    (encoded size incl. the length varint for v2; message size for v0/v1).
    """

    __slots__ = ("offset", "timestamp", "key", "value", "_headers", "sequence", "size_in_bytes")

    def __init__(self, offset: int, timestamp: int, key: Optional[bytes], value: Optional[bytes],
                 headers: Optional[list] = None, sequence: int = -1, size_in_bytes: int = 0) -> None:
        self.offset = offset
        self.timestamp = timestamp
        self.key = key
        self.value = value
        self._headers = headers
        self.sequence = sequence
        self.size_in_bytes = size_in_bytes

    @property
    def headers(self) -> list:
        if self._headers is None:
            self._headers = []
        return self._headers

    @headers.setter
    def headers(self, value: list) -> None:
        self._headers = value

    @property
    def has_key(self) -> bool:
        return self.key is not None

    @property
    def has_value(self) -> bool:
        return self.value is not None

    def __repr__(self) -> str:
        return (f"Record(offset={self.offset!r}, timestamp={self.timestamp!r}, key={self.key!r}, "
                f"value={self.value!r}, headers={self.headers!r}, sequence={self.sequence!r}, "
                f"size_in_bytes={self.size_in_bytes!r})")

    def __eq__(self, other: object):
        try:
            return (self.offset == other.offset and self.timestamp == other.timestamp
                    and self.key == other.key and self.value == other.value
                    and list(self.headers) == list(other.headers)
                    and self.sequence == other.sequence
                    and self.size_in_bytes == other.size_in_bytes)
        except AttributeError:
            return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self):
        return (Record, (self.offset, self.timestamp, self.key, self.value, self.headers,
                         self.sequence, self.size_in_bytes))


def _next_sequence(base: int, delta: int) -> int:
    if base == -1:
        return -1
    if base > _INT32_MAX - delta:
        return delta - (_INT32_MAX - base) - 1
    return base + delta


def _int32(v, what: str) -> int:
    v = int(v)
    if not -2**31 <= v <= _INT32_MAX:
        raise InvalidRecordError(f"{what} {v} does not fit in a 32-bit varint")
    return v


def _int64(v, what: str) -> int:
    v = int(v)
    if not -2**63 <= v < 2**63:
        raise InvalidRecordError(f"{what} {v} does not fit in a 64-bit varlong")
    return v


def decode_records_v2(body, count: int, base_offset: int, base_timestamp: int,
                      base_sequence: int, log_append_time: int) -> list:
    """Decode ``count`` v2 records from ``body`` (the uncompressed records of one batch).

    ``log_append_time >= 0`` replaces every record's timestamp. Raises :class:`InvalidRecordError`
    (``position`` relative to the start of ``body``) on any structural problem and when ``count``
    disagrees with the data.
    """
    base_offset = _int64(base_offset, "base_offset")
    base_timestamp = _int64(base_timestamp, "base_timestamp")
    log_append_time = _int64(log_append_time, "log_append_time")
    base_sequence = _int32(base_sequence, "base_sequence")
    if count < 0:
        raise InvalidRecordError(f"Invalid negative record count {count}", position=0)
    if not isinstance(body, bytes):
        body = bytes(body)
    buf = body
    n = len(buf)
    if count > n // 7:
        raise InvalidRecordError(
            f"Found invalid record structure: expected {count} records in {n} bytes", position=n)
    out = []
    append = out.append
    pos = 0
    for i in range(count):
        rstart = pos
        if pos >= n:
            raise InvalidRecordError(
                f"Found invalid record structure: expected {count} records but found only {i}",
                position=pos)
        b = buf[pos]
        if b < 0x80:
            length = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            length, pos = read_varint(buf, pos, n, "record length")
        if length < 0 or length > n - pos:
            raise InvalidRecordError(
                f"Invalid record size: expected {length} bytes in record payload, but instead "
                f"the buffer has only {n - pos} remaining bytes.", position=rstart)
        rend = pos + length
        if pos >= rend:
            raise InvalidRecordError("Found invalid record structure: buffer underflow reading "
                                     "attributes", position=pos)
        pos += 1
        # timestamp delta
        if pos < rend and buf[pos] < 0x80:
            b = buf[pos]
            ts_delta = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            ts_delta, pos = read_varlong(buf, pos, rend, "timestamp delta")
        if pos < rend and buf[pos] < 0x80:
            b = buf[pos]
            offset_delta = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            offset_delta, pos = read_varint(buf, pos, rend, "offset delta")
        if pos < rend and buf[pos] < 0x80:
            b = buf[pos]
            klen = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            klen, pos = read_varint(buf, pos, rend, "key length")
        if klen >= 0:
            if klen > rend - pos:
                raise InvalidRecordError(
                    f"Found invalid record structure: key length {klen} exceeds the "
                    f"{rend - pos} bytes left in the record", position=pos)
            key = buf[pos:pos + klen]
            pos += klen
        else:
            key = None
        if pos < rend and buf[pos] < 0x80:
            b = buf[pos]
            vlen = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            vlen, pos = read_varint(buf, pos, rend, "value length")
        if vlen >= 0:
            if vlen > rend - pos:
                raise InvalidRecordError(
                    f"Found invalid record structure: value length {vlen} exceeds the "
                    f"{rend - pos} bytes left in the record", position=pos)
            value = buf[pos:pos + vlen]
            pos += vlen
        else:
            value = None
        if pos < rend and buf[pos] == 0:
            nheaders = 0
            pos += 1
        else:
            nheaders, pos = read_varint(buf, pos, rend, "header count")
        headers = None
        if nheaders:
            if nheaders < 0:
                raise InvalidRecordError(f"Found invalid number of record headers {nheaders}",
                                         position=pos)
            if nheaders > rend - pos:
                raise InvalidRecordError(
                    f"Found invalid number of record headers. {nheaders} is larger than the "
                    f"remaining size of the buffer", position=pos)
            headers = []
            for _ in range(nheaders):
                hklen, pos = read_varint(buf, pos, rend, "header key length")
                if hklen < 0:
                    raise InvalidRecordError(f"Invalid negative header key size {hklen}",
                                             position=pos)
                if hklen > rend - pos:
                    raise InvalidRecordError(
                        f"Found invalid record structure: header key length {hklen} exceeds the "
                        f"{rend - pos} bytes left in the record", position=pos)
                hkey = buf[pos:pos + hklen].decode("utf-8", "replace")
                pos += hklen
                hvlen, pos = read_varint(buf, pos, rend, "header value length")
                if hvlen >= 0:
                    if hvlen > rend - pos:
                        raise InvalidRecordError(
                            f"Found invalid record structure: header value length {hvlen} exceeds "
                            f"the {rend - pos} bytes left in the record", position=pos)
                    hvalue = buf[pos:pos + hvlen]
                    pos += hvlen
                else:
                    hvalue = None
                headers.append((hkey, hvalue))
        if pos != rend:
            raise InvalidRecordError(
                f"Invalid record size: expected to read {length} bytes in record payload, but "
                f"instead read {pos - (rend - length)}", position=pos)
        if log_append_time >= 0:
            ts = log_append_time
        else:
            ts = base_timestamp + ts_delta
            if not -2**63 <= ts < 2**63:
                ts = _to_int64(ts)
        if base_sequence == -1:
            seq = -1
        else:
            seq = _next_sequence(base_sequence, offset_delta)
        append(Record(base_offset + offset_delta, ts, key, value, headers, seq, rend - rstart))
    if pos != n:
        raise InvalidRecordError(
            f"Incorrect declared batch size, records still remaining in file "
            f"({n - pos} bytes after {count} records)", position=pos)
    return out


def _as_bytes_like(x):
    if x is None or type(x) is bytes:
        return x
    if isinstance(x, str):
        raise TypeError("record keys and values must be bytes-like or None, not str")
    return bytes(memoryview(x))


def _normalise_headers(headers) -> Optional[list]:
    if not headers:
        return None
    out = []
    for hk, hv in headers:
        if hk is None:
            raise InvalidRecordError("Invalid null header key found in headers")
        hk = hk.encode("utf-8") if isinstance(hk, str) else _as_bytes_like(hk)
        out.append((hk, _as_bytes_like(hv)))
    return out


def _encode_one(out: bytearray, key, value, ts_delta: int, offset_delta: int, headers) -> int:
    """Append one encoded record to ``out``; returns its encoded size."""
    key = _as_bytes_like(key)
    value = _as_bytes_like(value)
    hlist = _normalise_headers(headers)
    parts = [b"\x00", write_varlong(ts_delta), write_varint(offset_delta)]
    if key is None:
        parts.append(b"\x01")
    else:
        parts.append(write_varint(len(key)))
        parts.append(key)
    if value is None:
        parts.append(b"\x01")
    else:
        parts.append(write_varint(len(value)))
        parts.append(value)
    if hlist is None:
        parts.append(b"\x00")
    else:
        parts.append(write_varint(len(hlist)))
        for hk, hv in hlist:
            parts.append(write_varint(len(hk)))
            parts.append(hk)
            if hv is None:
                parts.append(b"\x01")
            else:
                parts.append(write_varint(len(hv)))
                parts.append(hv)
    body = b"".join(parts)
    if len(body) > _INT32_MAX:
        raise InvalidRecordError(f"record is too large to encode ({len(body)} bytes)")
    head = write_varint(len(body))
    out += head
    out += body
    return len(head) + len(body)


def encode_records_v2(records: Iterable, base_timestamp: int,
                      offset_deltas: Optional[Sequence[int]] = None) -> bytes:
    """Encode ``records`` (sequence of ``(key, value, timestamp, headers)``) as v2 record bodies.

    Offset delta ``i`` (or ``offset_deltas[i]``); timestamp deltas relative to ``base_timestamp``.
    Returns the concatenated, uncompressed record bytes.
    """
    base_timestamp = _int64(base_timestamp, "base_timestamp")
    if not isinstance(records, (list, tuple)):
        records = list(records)
    n = len(records)
    if offset_deltas is not None and len(offset_deltas) != n:
        raise InvalidRecordError(f"{len(offset_deltas)} offset deltas for {n} records")
    out = bytearray()
    for i, (key, value, ts, headers) in enumerate(records):
        ts_delta = _to_int64(_int64(ts, "timestamp") - base_timestamp)
        od = i if offset_deltas is None else _int32(offset_deltas[i], "offset delta")
        _encode_one(out, key, value, ts_delta, od, headers)
    return bytes(out)


class RecordsEncoder:
    """Appends v2 records one at a time (the batch builder's hot path).

    ``RecordsEncoder(base_timestamp=None)``: timestamp deltas are relative to ``base_timestamp``,
    or to the first appended record's timestamp when None (Kafka's MemoryRecordsBuilder).
    ``append(key, value, timestamp, headers=None, offset_delta=None) -> int`` encodes one record
    and returns its encoded size; ``finish() -> bytes`` returns the concatenated bodies.
    """

    def __init__(self, base_timestamp: Optional[int] = None, base_offset: int = 0) -> None:
        self._buf = bytearray()
        self._count = 0
        self._max_ts = -1
        self._last_delta = -1
        self._base_ts = None if base_timestamp is None else _int64(base_timestamp, "base_timestamp")
        self._base_offset = _int64(base_offset, "base_offset")
        self._last_offset: Optional[int] = None
        self._offset_of_max = -1

    def append_record(self, key, value, timestamp: Optional[int] = -1, headers=None,
                      offset: Optional[int] = None) -> None:
        """``BatchBuilder.append`` for v2 data batches, with Kafka's MemoryRecordsBuilder checks
        (offsets increase and are >= ``base_offset``; timestamp None/-1 = none, other negatives
        refused). Tracks ``last_offset`` and ``offset_of_max_timestamp``."""
        from kafkalog.record.batch import InvalidArgumentError
        if offset is None:
            off = self._base_offset if self._last_offset is None else self._last_offset + 1
        else:
            off = _int64(offset, "offset")
            if self._last_offset is not None and off <= self._last_offset:
                raise InvalidArgumentError(
                    f"Illegal offset {off} following previous offset {self._last_offset} "
                    f"(Offsets must increase monotonically).")
            if off < self._base_offset:
                raise InvalidArgumentError(
                    f"Illegal offset {off}: below the base offset {self._base_offset}")
        ts = -1 if timestamp is None else _int64(timestamp, "timestamp")
        if ts < -1:
            raise InvalidArgumentError(f"Invalid negative timestamp {ts}")
        delta = off - self._base_offset
        if delta > _INT32_MAX:
            raise InvalidArgumentError(
                f"Offset {off} is too far from the base offset {self._base_offset}")
        if ts > self._max_ts:
            self._offset_of_max = off
        self.append(key, value, ts, headers, delta)
        self._last_offset = off

    @property
    def base_offset(self) -> int:
        return self._base_offset

    @property
    def last_offset(self) -> Optional[int]:
        """The last offset appended with ``append_record`` (None before the first)."""
        return self._last_offset

    @property
    def offset_of_max_timestamp(self) -> int:
        """The offset of the first record with the max timestamp (``append_record``; -1 if none)."""
        return self._offset_of_max

    def append(self, key, value, timestamp: int, headers=None, offset_delta: Optional[int] = None) -> int:
        ts = _int64(timestamp, "timestamp")
        if offset_delta is None:
            if self._count > _INT32_MAX:
                raise InvalidRecordError("too many records for one batch")
            od = self._count
        else:
            od = _int32(offset_delta, "offset delta")
        if self._base_ts is None:
            self._base_ts = ts
        size = _encode_one(self._buf, key, value, _to_int64(ts - self._base_ts), od, headers)
        self._count += 1
        if ts > self._max_ts:
            self._max_ts = ts
        if od > self._last_delta:
            self._last_delta = od
        return size

    def finish(self) -> bytes:
        return bytes(self._buf)

    @property
    def count(self) -> int:
        return self._count

    @property
    def size_in_bytes(self) -> int:
        return len(self._buf)

    @property
    def base_timestamp(self) -> Optional[int]:
        return self._base_ts

    @property
    def max_timestamp(self) -> int:
        return self._max_ts

    @property
    def last_offset_delta(self) -> int:
        return self._last_delta


# --------------------------------------------------------------------------------------------------
# Cleaner kernel (kafkalog.cleaner; spec §4.11): the per-record loops of log compaction over an
# offset map laid out like Kafka's SkimpyOffsetMap - a flat table of ``slots`` 24-byte entries
# (16-byte MD5 of the key + big-endian int64 offset; an all-zero entry is empty). Same API and
# results in ``_kernel.pyx`` (tests/cleaner/test_kernel_parity.py).

import hashlib as _hashlib
import struct as _struct

_OM_ENTRY = 24
_OM_HASH = 16
_OM_EMPTY = bytes(_OM_ENTRY)
_OM_I32 = _struct.Struct(">i")
_OM_Q = _struct.Struct(">q")


def _om_position(h: bytes, attempt: int, slots: int) -> int:
    """Byte position of probe ``attempt`` for hash ``h`` (Kafka's SkimpyOffsetMap.positionOf)."""
    off = attempt if attempt < _OM_HASH - 4 else _OM_HASH - 4
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
    """Yield ``(rstart, rend, ts_pos, ts_delta, after_ts, offset_delta, key_start, klen, vlen)`` per
    record (headers are not parsed: the record end comes from its length)."""
    buf = body if isinstance(body, bytes) else bytes(body)
    n = len(buf)
    pos = 0
    for i in range(count):
        rstart = pos
        if pos >= n:
            raise InvalidRecordError(f"Found invalid record structure: expected {count} records "
                                     f"but found only {i}", position=pos)
        length, pos = read_varint(buf, pos, n, "record length")
        if length < 1 or length > n - pos:
            raise InvalidRecordError(f"Invalid record size: expected {length} bytes in record "
                                     f"payload, but the buffer has only {n - pos} remaining bytes.",
                                     position=rstart)
        rend = pos + length
        ts_pos = pos + 1
        ts_delta, p = read_varlong(buf, ts_pos, rend, "timestamp delta")
        after_ts = p
        od, p = read_varint(buf, p, rend, "offset delta")
        klen, p = read_varint(buf, p, rend, "key length")
        kstart = p
        if klen >= 0:
            if klen > rend - p:
                raise InvalidRecordError(f"Found invalid record structure: key length {klen} "
                                         f"exceeds the {rend - p} bytes left in the record",
                                         position=p)
            p += klen
        vlen, p = read_varint(buf, p, rend, "value length")
        if vlen >= 0 and vlen > rend - p:
            raise InvalidRecordError(f"Found invalid record structure: value length {vlen} exceeds "
                                     f"the {rend - p} bytes left in the record", position=p)
        yield buf, rstart, rend, ts_pos, ts_delta, after_ts, od, kstart, klen, vlen
        pos = rend
    if pos != n:
        raise InvalidRecordError(f"Incorrect declared batch size, records still remaining in file "
                                 f"({n - pos} bytes after {count} records)", position=pos)


def offset_map_put_v2(table, slots: int, entries: int, max_entries: int, body, count: int,
                      base_offset: int, start_offset: int) -> tuple:
    """Map building for one v2 batch body: ``put(md5(key), offset)`` for every keyed record with
    offset >= ``start_offset``; stops (``full``) at the first such record met while ``entries >=
    max_entries``. Returns ``(entries, last_put_offset or -1, records_read, full)``."""
    last = -1
    read = 0
    md5 = _hashlib.md5
    for buf, rs, re_, tp, tsd, at, od, ks, klen, vlen in _cl_records(body, count):
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
    md5 = _hashlib.md5
    for rec in _cl_records(body, count):
        buf, rs, re_, tp, tsd, at, od, ks, klen, vlen = rec
        off = base_offset + od
        if off > latest_offset:
            keep = True
        elif klen < 0:
            keyless += 1
            keep = False
        else:
            found = offset_map_get_hash(table, slots, md5(buf[ks:ks + klen]).digest())
            keep = off >= found and (vlen >= 0 or retain_deletes)
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
    out = bytearray()
    for rec, ts, _off in kept:
        buf, rs, re_, tp, tsd, at, od, ks, klen, vlen = rec
        delta = write_varlong(_to_int64(ts - nbase))
        length = (re_ - at) + 1 + len(delta)
        out += write_varint(length)
        out += buf[tp - 1:tp]
        out += delta
        out += buf[at:re_]
    return bytes(out), len(kept), keyless, tomb_dropped, nbase, max_ts, max_off, tomb_kept


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
    for buf, rs, re_, tp, tsd, at, od, ks, klen, vlen in _cl_records(body, count):
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
    nbits = len(superseded) * 8 if superseded is not None else 0
    md5 = _hashlib.md5
    kept = []
    keyless = tomb_dropped = 0
    tomb_kept = False
    max_ts = max_off = -1
    try:
        if count > len(recs_buf) // 7 + 1:
            raise InvalidRecordError(f"Found invalid record structure: expected {count} records "
                                     f"in {len(recs_buf)} bytes", position=len(recs_buf))
        for rec in _cl_records(recs_buf, count):
            b_, rs, re_, tp, tsd, at, od, ks, klen, vlen = rec
            off = base_offset + od
            if off > latest:
                keep = True
            elif klen < 0:
                keyless += 1
                keep = False
            else:
                rel = off - superseded_base
                if superseded is not None and 0 <= rel < nbits and (superseded[rel >> 3] >> (rel & 7)) & 1:
                    keep = False
                else:
                    keep = off >= offset_map_get_hash(table, slots, md5(b_[ks:ks + klen]).digest())
                keep = keep and (vlen >= 0 or retain_deletes)
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
    out = bytearray()
    for rec, ts in kept:
        b_, rs, re_, tp, tsd, at, od, ks, klen, vlen = rec
        delta = write_varlong(_to_int64(ts - nbase))
        out += write_varint((re_ - at) + 1 + len(delta))
        out += b_[tp - 1:tp]
        out += delta
        out += b_[at:re_]
    out = bytes(out)
    if body is not None:
        return 4, out, len(kept), keyless, tomb_dropped, max_ts, max_off, nbase, new_attrs
    data = _cl_header(hdr, length=49 + len(out), attrs=new_attrs, base_ts=nbase, max_ts=max_ts,
                      count=len(kept), body=out, crc32c=crc32c)
    return 2, data, len(kept), keyless, tomb_dropped, max_ts, max_off, nbase, new_attrs


# --------------------------------------------------------------------------------------------------
# Columnar (Arrow) kernels for kafkalog.spark: decode v2 record bodies into column buffers, encode
# Arrow columns into v2 record bodies, and Kafka's murmur2 partitioner over a whole binary column.

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
        start = pos
        length, pos = read_varint(buf, pos)
        rec_end = pos + length
        if length < 0 or rec_end > end:
            raise InvalidRecordError(f"Invalid record size: expected {length} bytes in record "
                                     f"payload, but instead the buffer has only {end - pos} "
                                     "remaining bytes.", position=start)
        if pos >= rec_end:
            raise InvalidRecordError("Found invalid record structure: buffer underflow reading "
                                     "attributes", position=pos)
        pos += 1
        ts_delta, pos = read_varlong(buf, pos)
        off_delta, pos = read_varint(buf, pos)
        klen, pos = read_varint(buf, pos)
        kpos = pos
        if klen >= 0:
            if klen > rec_end - pos:
                raise InvalidRecordError(f"Found invalid record structure: key length {klen} "
                                         f"exceeds the {rec_end - pos} bytes left in the record",
                                         position=pos)
            pos += klen
        vlen, pos = read_varint(buf, pos)
        vpos = pos
        if vlen >= 0:
            if vlen > rec_end - pos:
                raise InvalidRecordError(f"Found invalid record structure: value length {vlen} "
                                         f"exceeds the {rec_end - pos} bytes left in the record",
                                         position=pos)
            pos += vlen
        nh, pos = read_varint(buf, pos)
        if nh < 0 or nh > rec_end - pos:
            raise InvalidRecordError(f"Invalid number of headers {nh}", position=pos)
        hdrs = None
        if nh:
            hdrs = []
            for _h in range(nh):
                hk, pos = read_varint(buf, pos)
                if hk < 0 or hk > rec_end - pos:
                    raise InvalidRecordError(f"Invalid header key length {hk}", position=pos)
                hkey = bytes(buf[pos:pos + hk]).decode("utf-8", "replace")
                pos += hk
                hv, pos = read_varint(buf, pos)
                hval = None
                if hv >= 0:
                    if hv > rec_end - pos:
                        raise InvalidRecordError(f"Invalid header value length {hv}", position=pos)
                    hval = bytes(buf[pos:pos + hv])
                    pos += hv
                hdrs.append((hkey, hval))
        if pos != rec_end:
            raise InvalidRecordError(f"Invalid record size: expected to read {length} bytes in "
                                     f"record payload, but instead read {pos - (rec_end - length)}",
                                     position=start)
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
                      max_batch_bytes: int, out: Optional[bytearray] = None) -> list:
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
        if ts > max_ts:
            max_ts = ts
    if count:
        chunks.append((bytes(body), count, base_ts, max_ts))
    if out is None:
        return chunks
    total = sum(len(c[0]) for c in chunks)
    if len(out) < total:
        out.extend(bytes(total - len(out)))
    view = memoryview(out)
    result, pos = [], 0
    for body, count, base_ts, max_ts in chunks:
        view[pos:pos + len(body)] = body
        result.append((view[pos:pos + len(body)], count, base_ts, max_ts))
        pos += len(body)
    return result


def _murmur2(data) -> int:
    length = len(data)
    m = 0x5BD1E995
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    for i in range(length // 4):
        k = int.from_bytes(data[4 * i:4 * i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> 24
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    rem, tail = length % 4, length & ~3
    if rem == 3:
        h ^= data[tail + 2] << 16
    if rem >= 2:
        h ^= data[tail + 1] << 8
    if rem >= 1:
        h ^= data[tail]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h


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
    groups = [[] for _ in range(num_partitions)]
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
        out += _COL_I.pack(-1 if k is None else (_murmur2(k) & 0x7FFFFFFF) % num_partitions)
    return bytes(out)


def murmur2(data) -> int:
    """Kafka's ``Utils.murmur2`` (seed ``0x9747b28c``) of a bytes-like ``data`` as a signed Java
    int. The reference is :func:`kafkalog.log.partitioner.murmur2_py`; this is the per-key kernel
    entry point (``TypeError`` for anything that is not bytes-like)."""
    h = _murmur2(memoryview(data).cast("B"))
    return h - 0x100000000 if h & 0x80000000 else h


def partition_for_key(key, num_partitions: int) -> int:
    """Kafka's default partitioner for a non-null key: ``toPositive(murmur2(key)) %
    num_partitions`` (``ValueError`` when ``num_partitions <= 0``)."""
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, got {num_partitions}")
    return (_murmur2(memoryview(key).cast("B")) & 0x7FFFFFFF) % num_partitions


# --- the producer's per-record path (kafkalog.client.producer): see _kernel.pyx ------------------

_future_methods = None


def bind_record_future(methods) -> None:
    """Give :class:`RecordFuture` its Python-level attributes (see ``_kernel.pyx``)."""
    global _future_methods
    _future_methods = methods


class RecordFuture:
    """The producer's per-record future (reference of the compiled ``RecordFuture``)."""

    __slots__ = ("produce_result", "index", "timestamp", "key_size", "value_size")

    def __getattr__(self, name):
        return _future_methods.lookup(self, name)

    def __repr__(self) -> str:
        return _future_methods.lookup(self, "_repr")()


class ProducerBatch:
    """One open producer batch (reference of the compiled ``ProducerBatch``)."""

    def __init__(self, result, cap: int, full: int) -> None:
        self.encoder = RecordsEncoder()
        self.result = result
        self.cap = cap
        self.full_at = full
        self.sealed = False
        self.full = False

    def append(self, key, value, timestamp, headers):
        if self.sealed:
            return None
        e = self.encoder
        if timestamp is None:
            import time
            ts = time.time_ns() // 1_000_000
        else:
            ts = _int64(timestamp, "timestamp")
            if ts < -1:
                raise InvalidRecordError(f"Invalid negative timestamp {ts}")
        saved = (len(e._buf), e._count, e._max_ts, e._last_delta, e._base_ts)
        e.append(key, value, ts, headers)
        if len(e._buf) > self.cap:
            del e._buf[saved[0]:]
            e._count, e._max_ts, e._last_delta, e._base_ts = saved[1:]
            return False
        if len(e._buf) >= self.full_at:
            self.full = True
        f = RecordFuture()
        f.produce_result = self.result
        f.index = saved[1]
        f.timestamp = ts
        f.key_size = -1 if key is None else len(key)
        f.value_size = -1 if value is None else len(value)
        return f

    def seal(self) -> bytes:
        self.sealed = True
        return self.encoder.finish()

    @property
    def count(self) -> int:
        return self.encoder.count

    @property
    def size_in_bytes(self) -> int:
        return self.encoder.size_in_bytes


class ProducerTopic:
    """A producer's open batches of one topic (reference of the compiled ``ProducerTopic``)."""

    __slots__ = ("batches", "sticky", "num_partitions", "keyed")

    def __init__(self, num_partitions: int, keyed: bool) -> None:
        self.batches = [None] * num_partitions
        self.sticky = 0
        self.num_partitions = num_partitions
        self.keyed = keyed


class ProducerSendPath:
    """``Producer.send``'s common case (reference of the compiled ``ProducerSendPath``)."""

    def __init__(self, topics: dict, slow, full) -> None:
        self._topics = topics
        self._slow = slow
        self._full = full

    def send(self, topic, value=None, key=None, *, partition=None, timestamp_ms=None, headers=None,
             on_delivery=None):
        st = self._topics.get(topic)
        if (st is not None and partition is None and headers is None and on_delivery is None
                and (value is None or type(value) is bytes)):
            if key is None:
                p = st.sticky
            elif st.keyed and type(key) is bytes:
                p = (murmur2(key) & 0x7FFFFFFF) % st.num_partitions
            else:
                p = -1
            if 0 <= p < len(st.batches):
                b = st.batches[p]
                if b is not None:
                    fut = b.append(key, value, timestamp_ms, None)
                    if fut:
                        if b.full:
                            self._full(b)
                        return fut
        return self._slow(topic, value, key, partition, timestamp_ms, headers, on_delivery)
